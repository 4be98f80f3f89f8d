"""A result that waited for its session gets exactly maxReceiveCount attempts (issue 36): SQS counts
each copy's receives from 1, so the copy re-sent while the result waited carries the receives its
run already spent, and the run is dead-lettered — as the producer's message, with its reason — when
they are spent. Driven as Lambda's SQS event source mapping drives the handler, on moto's queue with
the template's redrive policy (maxReceiveCount 5)."""

from __future__ import annotations

import json
import time
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError

from agentwake.store.queues import ATTR_ERROR_TYPE, ATTR_ORIGINAL_ID, ATTR_REASON, ATTR_RECEIVE_COUNT
from agentwake_local.poller import batch_item_failures, lambda_sqs_record
from agentwake_ops.sqs_scan import queue_counts
from tests.integration.test_wake_handlers import invoke_background, result_body
from tests.support.aws import REGION, Resources
from tests.support.builders import FAILING_PROVIDERS, seed_session, seed_task
from tests.support.store_writes import acquire_lease

QUEUE_ARN = "arn:aws:sqs:us-east-1:123456789012:results"
MAX_RECEIVE_COUNT = 5  # the template's default, which the stack under test was made with


def receive(sqs: Any, url: str, *, within_s: float = 60.0, until_in: str | None = None) -> dict[str, Any] | None:
    """The next visible message (a delayed copy becomes visible within ``within_s``), or None: at
    once when the queue ``until_in`` holds a message (the run is dead-lettered, nothing comes back)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        got = sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=1, AttributeNames=["All"], MessageAttributeNames=["All"]
        ).get("Messages", [])
        if got:
            return dict(got[0])
        if until_in is not None and sum(queue_counts(sqs, until_in)):
            return None
        time.sleep(0.2)
    return None


@pytest.mark.parametrize("busy_on_receive", [2, 4])
def test_a_failing_result_that_waited_for_its_session_gets_exactly_max_receive_count_attempts(
    resources: Resources, store: Any, monkeypatch: pytest.MonkeyPatch, busy_on_receive: int
) -> None:
    monkeypatch.setenv("AGENTWAKE_SESSION_WAIT_MAX_DELAY_S", "1")  # its copy comes back within a second
    sqs = boto3.client("sqs", region_name=REGION)
    # GIVEN a result whose every model fails, sent by the producer
    seed_session(store, "s-fail", providers=FAILING_PROVIDERS)
    seed_task(store, "t-fail", "s-fail")
    first_id = sqs.send_message(QueueUrl=resources.queue_url, MessageBody=result_body("t-fail", "s-fail"))["MessageId"]
    # WHEN the event source mapping delivers it until nothing is left, the session held by another
    # writer on one receive (the result waits and is re-sent as a copy)
    receives = 0
    while (message := receive(sqs, resources.queue_url, within_s=30, until_in=resources.dlq_url)) is not None:
        receives += 1
        assert receives <= 3 * MAX_RECEIVE_COUNT, "the result keeps coming back"
        token = acquire_lease(store, "s-fail", "bg:intruder", 600) if receives == busy_on_receive else None
        try:
            response = invoke_background({"Records": [lambda_sqs_record(message, QUEUE_ARN, REGION)]})
            failed = bool(batch_item_failures(response, [message["MessageId"]]))
        except BatchProcessingError:  # the whole batch (this one record) failed: Lambda retries it
            failed = True
        finally:
            if token is not None:
                store.leases.release("s-fail", token)
        if failed:
            sqs.change_message_visibility(
                QueueUrl=resources.queue_url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
            )
        else:
            sqs.delete_message(QueueUrl=resources.queue_url, ReceiptHandle=message["ReceiptHandle"])
    # THEN the run made exactly maxReceiveCount attempts (plus the receive that found the session busy)
    run = store.records.get_run("bg:t-fail")
    assert run is not None and run.status == "failed" and run.attempts == MAX_RECEIVE_COUNT, run
    assert receives == MAX_RECEIVE_COUNT + 1
    # AND nothing of it is left to come back (visible, in flight or delayed)
    assert queue_counts(sqs, resources.queue_url) == (0, 0, 0)
    # AND the DLQ holds it once, as the producer's message, with the receives that counted and why
    assert queue_counts(sqs, resources.dlq_url) == (1, 0, 0)
    dead = receive(sqs, resources.dlq_url, within_s=2)
    assert dead is not None
    attributes = {k: v["StringValue"] for k, v in dead["MessageAttributes"].items()}
    assert attributes[ATTR_ORIGINAL_ID] == first_id
    assert attributes[ATTR_RECEIVE_COUNT] == str(MAX_RECEIVE_COUNT)
    assert attributes[ATTR_ERROR_TYPE] == "AllProvidersFailed", attributes
    assert f"the last of its {MAX_RECEIVE_COUNT} attempts" in attributes[ATTR_REASON]
    assert json.loads(dead["Body"])["task_id"] == "t-fail"
