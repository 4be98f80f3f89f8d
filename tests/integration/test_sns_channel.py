"""The ``sns`` channel against moto's SNS, read where a product reads it: an SQS queue subscribed to
the topic (docs/channels.md "SNS")."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from moto import mock_aws

from agentwake.delivery import Delivery, Receipt
from agentwake.delivery.factory import build_channel
from agentwake.delivery.kit import ChannelKit
from agentwake.errors import ChannelRefused, ConfigError
from agentwake.store.aws import reset_clients
from tests.support.aws import REGION
from tests.support.clock import FakeClock

ACCOUNT = "123456789012"
PREFIX = f"arn:aws:sns:{REGION}:{ACCOUNT}:agentwake-notify-"
DELIVERY = Delivery(delivery_id="bg:t-1#2#0", run_id="bg:t-1", session_id="sess-A", text="Der Export ist fertig.")


@pytest.fixture
def aws(aws_credentials: None) -> Iterator[Any]:
    with mock_aws():
        reset_clients()  # the channel's client is the store's shared one: made inside the mock
        yield boto3.session.Session(region_name=REGION)
        reset_clients()


def kit(prefix: str | None = PREFIX) -> ChannelKit:
    # the store's client (ChannelKit's default): the one a wake uses
    return ChannelKit(settings=SimpleNamespace(notify_topic_prefix=prefix), clock=FakeClock(start=1_764_000_000.0))


def subscribed_queue(aws: Any, topic_arn: str, *, fifo: bool = False) -> str:
    sqs = aws.client("sqs")
    name = "subscriber.fifo" if fifo else "subscriber"
    attributes = {"FifoQueue": "true"} if fifo else {}
    url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    aws.client("sns").subscribe(TopicArn=topic_arn, Protocol="sqs", Endpoint=arn)
    return url


def drain(aws: Any, url: str) -> list[dict[str, Any]]:
    sqs = aws.client("sqs")
    out: list[dict[str, Any]] = []
    for _ in range(5):  # bounded: moto delivers synchronously, a few empty receives end it
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0).get("Messages", [])
        if not got:
            break
        out += [json.loads(m["Body"]) for m in got]
        for m in got:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    return out


def test_a_subscriber_receives_the_webhook_body_with_its_delivery_id(aws: Any) -> None:
    # GIVEN a topic under the stack's prefix with an SQS queue subscribed
    topic = aws.client("sns").create_topic(Name="agentwake-notify-alerts")["TopicArn"]
    queue = subscribed_queue(aws, topic)
    channel = build_channel({"type": "sns", "topic_arn": topic}, kit())

    # WHEN a delivery is published
    receipt = channel.send(DELIVERY)

    # THEN the subscriber gets the webhook's JSON body and the delivery_id attribute
    (notification,) = drain(aws, queue)
    body = json.loads(notification["Message"])
    assert {k: body[k] for k in ("delivery_id", "run_id", "session_id", "text")} == DELIVERY.to_dict()
    assert body["sent_at"].endswith("Z")
    assert notification["MessageAttributes"]["delivery_id"] == {"Type": "String", "Value": DELIVERY.delivery_id}
    # AND the receipt is SNS's MessageId for that topic
    assert receipt == Receipt(channel="sns", target="sns", where=topic, ids=(notification["MessageId"],))
    assert receipt.describe() == f"sns message {notification['MessageId']} in {topic}"


def test_a_fifo_topic_groups_by_session_and_drops_a_republished_delivery(aws: Any) -> None:
    # GIVEN a FIFO topic with a FIFO queue subscribed
    topic = aws.client("sns").create_topic(Name="agentwake-notify-ordered.fifo", Attributes={"FifoTopic": "true"})[
        "TopicArn"
    ]
    queue = subscribed_queue(aws, topic, fifo=True)
    channel = build_channel({"type": "sns", "topic_arn": topic, "name": "ordered"}, kit())

    # WHEN the same delivery is published twice (a retry after a crash before the journal write)
    first = channel.send(DELIVERY)
    channel.send(DELIVERY)

    # THEN the request groups by session and deduplicates by sha256(delivery_id)
    request = channel.request(DELIVERY)  # type: ignore[attr-defined]
    assert request["MessageGroupId"] == "sess-A"
    assert request["MessageDeduplicationId"] == hashlib.sha256(DELIVERY.delivery_id.encode()).hexdigest()
    # AND the subscriber receives it once
    received = drain(aws, queue)
    assert [json.loads(n["Message"])["delivery_id"] for n in received] == [DELIVERY.delivery_id]
    assert first.target == "ordered" and first.ids and first.where == topic


def test_a_deleted_topic_refuses_the_delivery_with_not_found(aws: Any) -> None:
    # GIVEN a session's topic that was deleted
    sns = aws.client("sns")
    topic = sns.create_topic(Name="agentwake-notify-gone")["TopicArn"]
    sns.delete_topic(TopicArn=topic)
    channel = build_channel({"type": "sns", "topic_arn": topic}, kit())

    # WHEN a delivery is published THEN the channel refuses for good, naming SNS's code and what to do
    with pytest.raises(ChannelRefused, match="NotFound") as refused:
        channel.send(DELIVERY)
    assert topic in str(refused.value)
    assert "agentwake sessions put sess-A --delivery" in str(refused.value)
    assert refused.value.retryable is False


def test_a_topic_outside_the_stack_prefix_is_a_config_error_naming_the_parameter(aws: Any) -> None:
    other = f"arn:aws:sns:{REGION}:{ACCOUNT}:someone-elses-topic"
    with pytest.raises(ConfigError, match="NotifyTopicPrefix"):
        build_channel({"type": "sns", "topic_arn": other}, kit())
    # AND a stack without the parameter has no sns channel at all
    with pytest.raises(ConfigError, match="NotifyTopicPrefix"):
        build_channel({"type": "sns", "topic_arn": PREFIX + "alerts"}, kit(prefix=None))
