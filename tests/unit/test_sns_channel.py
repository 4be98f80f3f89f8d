"""The ``sns`` channel's classification of what SNS answers (botocore's Stubber: no moto in unit
tests); the publish itself is in tests/integration/test_sns_channel.py against moto's SNS."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import botocore.session
import pytest
from botocore.config import Config
from botocore.stub import Stubber

from agentwake.delivery import Delivery
from agentwake.delivery.factory import SnsSpec
from agentwake.delivery.kit import ChannelKit
from agentwake.delivery.sns import SnsChannel
from agentwake.errors import ChannelRefused, ChannelUnavailable
from tests.support.clock import FakeClock

TOPIC = "arn:aws:sns:us-east-1:123456789012:agentwake-notify-alerts"
DELIVERY = Delivery(delivery_id="cron:j-1#1#0", run_id="cron:j-1", session_id="sess-B", text="Reminder: stand-up.")


@pytest.fixture
def sns() -> Iterator[tuple[Any, Stubber]]:
    client = botocore.session.get_session().create_client(
        "sns",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(retries={"max_attempts": 1}),
    )
    with Stubber(client) as stub:
        yield client, stub


def channel(client: Any) -> SnsChannel:
    settings = SimpleNamespace(notify_topic_prefix="arn:aws:sns:us-east-1:123456789012:agentwake-notify-")
    return SnsChannel(
        SnsSpec(topic_arn=TOPIC), ChannelKit(settings=settings, clock=FakeClock(), client=lambda _: client)
    )


@pytest.mark.parametrize(
    ("code", "status", "what_to_do"),
    [
        ("NotFound", 404, "create it, or change the session's delivery"),
        ("AuthorizationError", 403, "NotifyTopicPrefix"),
        ("InvalidParameter", 400, "check the topic"),
        ("KMSDisabled", 400, "kms:GenerateDataKey"),
        ("KMSAccessDenied", 400, "kms:GenerateDataKey"),
    ],
)
def test_a_permanent_answer_is_refused_with_the_code_and_what_to_do(
    sns: tuple[Any, Stubber], code: str, status: int, what_to_do: str
) -> None:
    client, stub = sns
    stub.add_client_error("publish", service_error_code=code, service_message="nope", http_status_code=status)
    with pytest.raises(ChannelRefused) as refused:
        channel(client).send(DELIVERY)
    text = str(refused.value)
    # THEN an operator reads the platform's code, the topic and what to do; no retry helps
    assert f"{code}: nope" in text and TOPIC in text and what_to_do in text
    assert "redrive" in text
    assert refused.value.retryable is False


@pytest.mark.parametrize(
    ("code", "status"), [("Throttled", 400), ("KMSThrottling", 400), ("InternalError", 500), ("Unheard", 400)]
)
def test_throttling_and_outages_are_transient(sns: tuple[Any, Stubber], code: str, status: int) -> None:
    client, stub = sns
    stub.add_client_error("publish", service_error_code=code, http_status_code=status)
    with pytest.raises(ChannelUnavailable, match=code) as failed:
        channel(client).send(DELIVERY)
    assert failed.value.retryable is True


def test_publish_names_the_delivery_id_and_answers_the_message_id(sns: tuple[Any, Stubber]) -> None:
    client, stub = sns
    ch = channel(client)
    stub.add_response("publish", {"MessageId": "m-1"}, ch.request(DELIVERY))
    receipt = ch.send(DELIVERY)
    assert receipt.ids == ("m-1",) and receipt.where == TOPIC and receipt.channel == "sns"
    # a standard topic: no FIFO parameters
    assert "MessageGroupId" not in ch.request(DELIVERY)


def test_an_answer_without_a_message_id_is_no_delivery(sns: tuple[Any, Stubber]) -> None:
    client, stub = sns
    ch = channel(client)
    stub.add_response("publish", {}, ch.request(DELIVERY))
    with pytest.raises(ChannelUnavailable, match="without a MessageId"):
        ch.send(DELIVERY)
