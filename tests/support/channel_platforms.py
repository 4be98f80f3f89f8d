"""Each delivery channel of a session against a stand-in for its platform that needs no network, as
``make bench`` (bench/bench_wake.py) and tests/integration/test_channel_round_trips.py count a wake's
DynamoDB round trips per channel:

- webhook: a :class:`~tests.support.receiver.CountingReceiver` on 127.0.0.1;
- slack, telegram: :class:`~tests.support.fake_slack.FakeSlack` and
  :class:`~tests.support.fake_telegram.FakeTelegram` on 127.0.0.1, reached through the stack's API-URL
  settings, their bot tokens through ``env:`` refs (``AGENTWAKE_SECRET_*``);
- sns: moto's SNS, a topic under the stack's notify prefix with an SQS queue subscribed;
- websocket: moto's API Gateway management API at the stack's push endpoint, and a page of the
  session connected through the store's connections (``store/push.py``, as ``$connect`` records it).

Use it inside ``mock_aws()``. The outbound policy allows loopback and plain http (the local stack's),
so the webhook and the fakes can be reached; everything it puts in the environment is restored.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any
from unittest import mock

from tests.support.aws import REGION
from tests.support.fake_slack import FakeSlack
from tests.support.fake_telegram import FakeTelegram
from tests.support.receiver import CountingReceiver

ACCOUNT = "123456789012"
NOTIFY_PREFIX = f"arn:aws:sns:{REGION}:{ACCOUNT}:agentwake-notify-"
#: the push API's management endpoint (moto answers any ``*.execute-api.{region}.amazonaws.com``)
PUSH_ENDPOINT = f"https://bench0push.execute-api.{REGION}.amazonaws.com/v1"
CHANNELS = ("webhook", "websocket", "slack", "telegram", "sns")


@dataclass
class ChannelPlatforms:
    receiver: CountingReceiver
    slack: FakeSlack
    telegram: FakeTelegram
    topic_arn: str
    queue_url: str
    sqs: Any

    def settings(self, base: Any) -> Any:
        """``base`` (the stack's Settings) with the platforms' API bases, token refs, notify prefix
        and push endpoint, and the local stack's outbound policy."""
        return base.model_copy(
            update={
                "slack_api_url": self.slack.url,
                "slack_token_ref": "env:AGENTWAKE_SECRET_SLACK_BOT",
                "telegram_api_url": self.telegram.url,
                "telegram_token_ref": "env:AGENTWAKE_SECRET_TELEGRAM_BOT",
                "notify_topic_prefix": NOTIFY_PREFIX,
                "push_endpoint": PUSH_ENDPOINT,
                "outbound_allow_loopback": True,
                "outbound_allow_http": True,
            }
        )

    def spec(self, channel: str) -> dict[str, Any]:
        """A session's ``delivery`` for ``channel`` (one of :data:`CHANNELS`)."""
        return {
            "webhook": {"type": "webhook", "url": self.receiver.url},
            "websocket": {"type": "websocket"},
            "slack": {"type": "slack", "channel": "C0BENCH01"},
            "telegram": {"type": "telegram", "chat_id": 4711},
            "sns": {"type": "sns", "topic_arn": self.topic_arn},
        }[channel]

    @staticmethod
    def open_page(store: Any, session_id: str, connection_id: str) -> None:
        """A page of ``session_id`` connected to the push API (what ``$connect`` records)."""
        store.connections.connect(session_id, connection_id, max_connections=5)

    def received(self, channel: str, connection_id: str = "") -> list[str]:
        """What the platform shows, one entry per message: delivery ids (webhook, slack, sns,
        websocket: the frames the page ``connection_id`` got), texts for Telegram (its messages
        carry no delivery id)."""
        if channel == "webhook":
            return [str(r["delivery_id"]) for r in self.receiver.received]
        if channel == "slack":
            return [str(m["metadata"]["event_payload"]["delivery_id"]) for m in self.slack.messages]
        if channel == "telegram":
            return [str(m.get("text", "")) for m in self.telegram.messages]
        if channel == "sns":
            return [json.loads(json.loads(body)["Message"])["delivery_id"] for body in self._drain()]
        if channel == "websocket":
            from moto.apigatewaymanagementapi.models import apigatewaymanagementapi_backends

            data = apigatewaymanagementapi_backends[ACCOUNT][REGION].connections[connection_id].data
            return _frames(data.decode("utf-8"))
        raise ValueError(channel)

    def _drain(self) -> list[str]:
        out: list[str] = []
        for _ in range(5):  # bounded: moto delivers synchronously, an empty receive ends it
            got = self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10).get("Messages", [])
            if not got:
                break
            for m in got:
                out.append(m["Body"])
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=m["ReceiptHandle"])
        return out


def _frames(data: str) -> list[str]:
    """Delivery ids of the frames moto's connection holds (it keeps them end to end)."""
    decoder, at, ids = json.JSONDecoder(), 0, []
    while at < len(data):
        frame, at = decoder.raw_decode(data, at)
        ids.append(str(frame["delivery_id"]))
    return ids


@contextmanager
def channel_platforms(table_name: str) -> Iterator[ChannelPlatforms]:
    """The platforms, started (inside ``mock_aws()``), and the stack's channel settings in the
    environment (the checks of ``put_session`` and the webhook's outbound policy read them there);
    ``table_name``: the stack's table, where the environment names none."""
    import boto3

    from agentwake.settings import get_settings
    from agentwake.store.aws import reset_clients

    with ExitStack() as stack:
        receiver = stack.enter_context(CountingReceiver())
        slack = stack.enter_context(FakeSlack())
        telegram = stack.enter_context(FakeTelegram())
        env = {
            "AGENTWAKE_TABLE": os.environ.get("AGENTWAKE_TABLE") or table_name,
            # the stack's channel settings: put_session checks a session's channel against them
            "AGENTWAKE_SLACK_API_URL": slack.url,
            "AGENTWAKE_SLACK_TOKEN_REF": "env:AGENTWAKE_SECRET_SLACK_BOT",
            "AGENTWAKE_TELEGRAM_API_URL": telegram.url,
            "AGENTWAKE_TELEGRAM_TOKEN_REF": "env:AGENTWAKE_SECRET_TELEGRAM_BOT",
            "AGENTWAKE_NOTIFY_TOPIC_PREFIX": NOTIFY_PREFIX,
            "AGENTWAKE_PUSH_ENDPOINT": PUSH_ENDPOINT,
            "AGENTWAKE_SECRET_SLACK_BOT": slack.token,
            "AGENTWAKE_SECRET_TELEGRAM_BOT": telegram.token,
            "AGENTWAKE_OUTBOUND_ALLOW_LOOPBACK": "1",
            "AGENTWAKE_OUTBOUND_ALLOW_HTTP": "1",
        }
        stack.enter_context(mock.patch.dict(os.environ, env))
        get_settings.cache_clear()
        stack.callback(get_settings.cache_clear)
        # the channels' SNS and management-API clients are the store's shared ones: made inside the mock
        reset_clients()
        stack.callback(reset_clients)
        sns = boto3.client("sns", region_name=REGION)
        sqs = boto3.client("sqs", region_name=REGION)
        topic_arn = sns.create_topic(Name="agentwake-notify-bench")["TopicArn"]
        queue_url = sqs.create_queue(QueueName="agentwake-notify-bench-subscriber")["QueueUrl"]
        queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        sns.subscribe(TopicArn=topic_arn, Protocol="sqs", Endpoint=queue_arn)
        yield ChannelPlatforms(receiver, slack, telegram, topic_arn, queue_url, sqs)
