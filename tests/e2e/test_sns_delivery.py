"""A woken agent's message reaches an SNS topic's subscriber (docs/channels.md "SNS"): the session is
written with ``agentwake sessions put``, a task completes, the stack's own SQS poller runs the
background-result handler, and an SQS queue subscribed to the topic receives the delivery once, its
receipt journaled on the delivery's marker. A deleted topic fails the run with SNS's reason."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from agentwake.delivery import Receipt
from agentwake.settings import get_settings
from agentwake.store.keys import delivery_sk, run_pk
from tests.e2e.conftest import Cli, Stack
from tests.support.aws import REGION

PREFIX = f"arn:aws:sns:{REGION}:123456789012:agentwake-notify-"
TELLS_THE_USER = {
    "type": "scripted",
    "id": "p",
    "script": [
        {"tool_calls": [{"name": "send_message_to_user", "arguments": {"text": "Your export is ready."}}]},
        {"text": "Told the user."},
    ],
}


@pytest.fixture
def notify_topics(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    # the stack deployed with NotifyTopicPrefix=agentwake-notify- (its functions' variable)
    monkeypatch.setenv("AGENTWAKE_NOTIFY_TOPIC_PREFIX", PREFIX)
    get_settings.cache_clear()


def topic_with_subscriber(name: str) -> tuple[str, str]:
    sns, sqs = boto3.client("sns", region_name=REGION), boto3.client("sqs", region_name=REGION)
    topic = sns.create_topic(Name=name)["TopicArn"]
    url = sqs.create_queue(QueueName=f"{name}-subscriber")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn)
    return topic, url


def received(url: str) -> list[dict[str, Any]]:
    sqs = boto3.client("sqs", region_name=REGION)
    out: list[dict[str, Any]] = []
    for _ in range(5):  # bounded: moto delivers as it publishes
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0).get("Messages", [])
        if not got:
            return out
        out += [json.loads(m["Body"]) for m in got]
        for m in got:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    return out


def complete_a_task(cli: Cli, session: str) -> str:
    registered = json.loads(cli("tasks", "register", "--session", session, "--tool", "export", "--json").stdout)
    token = registered["task_token"]
    cli("tasks", "finish", registered["task_id"], "--token", token, "--status", "succeeded", "--result", "ok")
    return str(registered["task_id"])


@pytest.mark.usefixtures("notify_topics")
def test_a_subscriber_receives_the_delivery_once_and_the_marker_keeps_its_message_id(cli: Cli, stack: Stack) -> None:
    # GIVEN a session delivering to a topic an SQS queue is subscribed to
    topic, queue = topic_with_subscriber("agentwake-notify-exports")
    delivery = json.dumps({"type": "sns", "topic_arn": topic})
    cli("sessions", "put", "s-sns", "--provider", json.dumps(TELLS_THE_USER), "--delivery", delivery)

    # WHEN a task completes and the stack's poller wakes the agent
    complete_a_task(cli, "s-sns")
    ok, failed = stack.poll()
    assert len(ok) == 1 and failed == []

    # THEN the subscriber got the message once, with its delivery id
    (notification,) = received(queue)
    body = json.loads(notification["Message"])
    assert body["text"] == "Your export is ready." and body["session_id"] == "s-sns"
    assert notification["MessageAttributes"]["delivery_id"]["Value"] == body["delivery_id"]
    # AND the delivery's marker holds SNS's MessageId as its receipt
    item = boto3.client("dynamodb", region_name=REGION).get_item(
        TableName=stack.res.table,
        Key={"pk": {"S": run_pk(body["run_id"])}, "sk": {"S": delivery_sk(body["delivery_id"])}},
    )["Item"]
    receipts = [Receipt.from_dict(r) for r in json.loads(item["receipts"]["S"])]
    assert receipts == [Receipt(channel="sns", target="sns", where=topic, ids=(notification["MessageId"],))]

    # WHEN the same completion's run is polled again (nothing left) THEN nothing more is published
    assert stack.poll() == ([], [])
    assert received(queue) == []


@pytest.mark.usefixtures("notify_topics")
def test_a_deleted_topic_fails_the_run_with_snss_reason_and_publishes_nothing(cli: Cli, stack: Stack) -> None:
    # GIVEN a session whose topic was deleted after the session was written
    topic, queue = topic_with_subscriber("agentwake-notify-gone")
    cli(
        "sessions",
        "put",
        "s-gone",
        "--provider",
        json.dumps(TELLS_THE_USER),
        "--delivery",
        json.dumps({"type": "sns", "topic_arn": topic}),
    )
    boto3.client("sns", region_name=REGION).delete_topic(TopicArn=topic)

    # WHEN the agent is woken
    complete_a_task(cli, "s-gone")
    ok, failed = stack.poll()

    # THEN no retry is spent on it: at its first receive the completion is handled by dead-lettering it
    assert len(ok) == 1 and failed == []
    assert stack.counts(stack.res.queue_url) == (0, 0)
    # AND the DLQ message says ChannelRefused, with SNS's NotFound and the topic
    dlq = boto3.client("sqs", region_name=REGION).receive_message(
        QueueUrl=stack.res.dlq_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]
    )["Messages"]
    (dead,) = dlq
    attributes = {k: v.get("StringValue") for k, v in dead.get("MessageAttributes", {}).items()}
    assert attributes.get("agentwake-error-type") == "ChannelRefused", attributes
    assert "NotFound" in attributes.get("agentwake-reason", "") and topic in attributes["agentwake-reason"]
    assert received(queue) == []
