"""A product sets its session's delivery over the product API (docs/channels.md): the OpenAPI
document shows every channel, a malformed spec is a 422 naming the field, and a spec the stack
cannot serve (a topic outside NotifyTopicPrefix, no bot token) is refused as ``sessions put`` refuses it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentwake.delivery.factory import CHANNEL_EXAMPLES
from agentwake.settings import get_settings
from agentwake.store.dynamo import DynamoStore
from tests.support.aws import Resources
from tests.support.builders import SCRIPTED
from tests.support.product_api import call, fresh_services

OPENAPI = Path(__file__).resolve().parents[2] / "schemas" / "product-api.openapi.json"
PREFIX = "arn:aws:sns:us-east-1:123456789012:agentwake-notify-"


@pytest.fixture(autouse=True)
def stack_with_channels(resources: Resources, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # a stack deployed with NotifyTopicPrefix and a Slack bot token, no Telegram token
    monkeypatch.setenv("AGENTWAKE_NOTIFY_TOPIC_PREFIX", PREFIX)
    monkeypatch.setenv("AGENTWAKE_SLACK_TOKEN_REF", "secretsmanager:agentwake/slack-bot")
    monkeypatch.setenv("AGENTWAKE_TELEGRAM_TOKEN_REF", "")
    get_settings.cache_clear()
    fresh_services()
    yield
    fresh_services()
    get_settings.cache_clear()


def test_the_openapi_document_shows_every_channel_with_examples() -> None:
    doc = json.loads(OPENAPI.read_text())
    delivery = doc["components"]["schemas"]["SessionBody"]["properties"]["delivery"]
    # THEN the body's delivery is one of the channel specs, chosen by "type"
    assert set(delivery["discriminator"]["mapping"]) == set(CHANNEL_EXAMPLES)
    assert delivery["examples"] == list(CHANNEL_EXAMPLES.values())
    slack = doc["components"]["schemas"]["SlackSpec"]
    assert slack["required"] == ["channel"] and slack["additionalProperties"] is False


@pytest.mark.parametrize(
    ("delivery", "said"),
    [
        ({"type": "slack", "channel": "general"}, "delivery.slack.channel: String should match pattern"),
        ({"type": "pager"}, "does not match any of the expected tags: 'log', 'webhook', 'websocket', 'slack'"),
        ({"type": "sns", "topic_arn": PREFIX + "a", "colour": "red"}, "delivery.sns.colour: Extra inputs"),
        ({"type": "first", "channels": []}, "delivery.first.channels: List should have at least 1 item"),
    ],
)
def test_a_malformed_delivery_is_a_422_naming_the_field(store: DynamoStore, delivery: dict, said: str) -> None:
    status, refused = call("PUT", "/sessions/c", {"providers": SCRIPTED, "delivery": delivery})
    assert status == 422 and said in refused["error"], refused
    assert store.records.get_session("c") is None


def test_a_delivery_the_stack_cannot_serve_is_refused_saying_what_to_set(store: DynamoStore) -> None:
    cases = [
        ({"type": "sns", "topic_arn": "arn:aws:sns:us-east-1:123456789012:billing"}, "NotifyTopicPrefix"),
        ({"type": "telegram", "chat_id": 42}, "TelegramBotTokenSecretArn"),
        # a token of another session's: over the API only the session's own secrets
        ({"type": "slack", "channel": "C0123ABCD", "token_ref": "secretsmanager:agentwake/x"}, "its own secrets"),
    ]
    for delivery, said in cases:
        status, refused = call("PUT", "/sessions/c", {"providers": SCRIPTED, "delivery": delivery})
        assert status == 400 and said in refused["error"], (delivery, refused)
    assert store.records.get_session("c") is None


def test_a_route_over_channels_the_stack_serves_is_stored_as_given(store: DynamoStore) -> None:
    route = {
        "type": "each",
        "channels": [
            {"type": "slack", "channel": "C0123ABCD", "name": "team"},
            {"type": "sns", "topic_arn": PREFIX + "alerts.fifo"},
        ],
    }
    status, created = call("PUT", "/sessions/c", {"providers": SCRIPTED, "delivery": route})
    assert status == 201, created
    # THEN the config holds exactly the spec given (no defaults filled in), as the wake reads it
    assert created["delivery"] == route
    stored = store.records.get_session("c")
    assert stored is not None and stored.delivery == route
