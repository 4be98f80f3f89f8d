"""The wake's fault matrix with records side by side (issue 37, "the fault matrix passes with
concurrency on"; docs/durability.md, "Records side by side").

tests/integration/test_fault_matrix.py's points (the same ``_points``: 55 by default, 85 with
``AGENTWAKE_FAULT_MATRIX=full``), each now through the deployed handler with
``AGENTWAKE_RECORD_CONCURRENCY`` 5: the faulted wake's record (session s1) shares its batch with four
records of four other sessions, all five in their own lanes. The fault is aimed at the n-th DynamoDB
call of s1's record alone (the calls made on the thread whose record keys name s1: the other lanes'
calls do not move it). The trigger retries as SQS would: a batch item failure comes back in the next
batch, up to maxReceiveCount. s1 ends as the matrix says (the run succeeded after one failed receive at
most, each delivery once, one note, the session free), and the four others succeeded in the first
batch, each woken once, whatever happened beside them. moto answers one request at a time, as the
local stack's server does.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError

from agentwake import bootstrap
from agentwake.handlers import background_result
from agentwake.observability import logger
from agentwake.store.dynamo import DynamoStore
from tests.integration.test_fault_matrix import (
    CLEAN_CALLS,
    MAX_RECEIVES,
    SCRIPTS,
    _assert_delivered_once_with_one_note,
    _points,
)
from tests.integration.test_wake_handlers import result_body, sqs_record
from tests.support.aws import REGION, FakeLambdaContext, Resources, drain
from tests.support.builders import OK_SCRIPT, seed_session, seed_task
from tests.support.faults import CallFaults
from tests.support.receiver import CountingReceiver
from tests.support.store_writes import lease_holder

#: the other sessions of the batch
OTHERS = ["s2", "s3", "s4", "s5"]


class OneRecordsFaults(CallFaults):
    """``CallFaults`` counting only the calls of the record whose log keys name ``session_id`` (the
    calls a lane makes run on its thread, under its record's keys)."""

    def __init__(self, client: Any, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(client)

    def _mine(self) -> bool:
        return bool(logger.thread_safe_get_current_keys().get("session_id") == self.session_id)

    def _before(self, model: Any, params: dict[str, Any], **kw: Any) -> Any:
        return super()._before(model, params, **kw) if self._mine() else None

    def _after(self, **kw: Any) -> None:
        if self._mine():
            super()._after(**kw)


@pytest.fixture
def receivers() -> Iterator[tuple[CountingReceiver, CountingReceiver]]:
    with CountingReceiver() as faulted, CountingReceiver() as others:
        yield faulted, others


def _as_sqs_would(records: list[dict[str, Any]], queue_url: str) -> list[list[str]]:
    """Batches until nothing is left, at most MAX_RECEIVES: a batch item failure is received again
    (its receive count one higher), and so is a copy the handler re-sent to the result queue (a busy
    session's). Returns the failed message ids of each batch."""
    import boto3

    from agentwake_local.poller import lambda_sqs_record

    sqs = boto3.client("sqs", region_name=REGION)
    arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    failed_by_batch: list[list[str]] = []
    batch = records
    for _ in range(MAX_RECEIVES):
        if not batch:
            break
        try:
            answer = background_result.handler({"Records": batch}, FakeLambdaContext())
            failed = [f["itemIdentifier"] for f in answer["batchItemFailures"]]
        except BatchProcessingError:  # every record of the batch failed
            failed = [r["messageId"] for r in batch]
        failed_by_batch.append(failed)
        batch = [_received_again(r) for r in batch if r["messageId"] in failed]
        for message in drain(queue_url):
            batch.append(lambda_sqs_record(message, arn, REGION))
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
    return failed_by_batch


def _received_again(record: dict[str, Any]) -> dict[str, Any]:
    count = int(record["attributes"]["ApproximateReceiveCount"]) + 1
    return {**record, "attributes": {**record["attributes"], "ApproximateReceiveCount": str(count)}}


@pytest.mark.parametrize(("wake", "at", "kind"), list(_points()))
def test_a_fault_at_any_call_of_one_record_beside_four_others(
    wake: str,
    at: int,
    kind: str,
    side_by_side: None,
    resources: Resources,
    store: DynamoStore,
    receivers: tuple[CountingReceiver, CountingReceiver],
) -> None:
    # GIVEN the matrix's wake for s1 (one delivery) and four other sessions' wakes, in one batch
    faulted, others = receivers
    seed_session(
        store,
        "s1",
        providers=[{"type": "scripted", "id": "p", "script": SCRIPTS[wake]}],
        delivery={"type": "webhook", "url": faulted.url},
    )
    seed_task(store, "t1", "s1")
    for session in OTHERS:
        seed_session(
            store,
            session,
            providers=[{"type": "scripted", "id": "p", "script": OK_SCRIPT}],
            delivery={"type": "webhook", "url": others.url},
        )
        seed_task(store, f"t-{session}", session)
    records = [sqs_record(result_body("t1", "s1"), message_id="m-s1")] + [
        sqs_record(result_body(f"t-{s}", s), message_id=f"m-{s}") for s in OTHERS
    ]
    deps = bootstrap.wake_deps()
    assert deps.settings.record_concurrency == 5
    # AND one fault armed at the at-th DynamoDB call of s1's record
    faults = OneRecordsFaults(deps.store.table.db, "s1")  # type: ignore[attr-defined]
    faults.arm(at, kind)
    # WHEN the batch is received, and what failed is received again, as SQS would
    failed_by_batch = _as_sqs_would(records, resources.queue_url)
    # THEN the fault fired where it was aimed, in s1's record
    assert faults.fired is not None and faults.fired[1] == CLEAN_CALLS[wake][at - 1], faults.fired
    # AND only s1's record ever failed (the later batches hold only s1's record or its re-sent copy),
    # once at most, and it was handled in the end
    assert set(failed_by_batch[0]) <= {"m-s1"}, failed_by_batch
    assert sum(len(failed) for failed in failed_by_batch) <= 1, failed_by_batch
    assert failed_by_batch[-1] == [], failed_by_batch
    # AND s1 ends as the matrix says: succeeded, each delivery once, one note, the session free
    _assert_delivered_once_with_one_note(store, faulted, wake)
    # AND each of the others was woken once in the first batch: succeeded, one delivery, one note
    assert len(others.by_delivery_id()) == len(OTHERS) and set(others.by_delivery_id().values()) == {1}
    for session in OTHERS:
        run = store.records.get_run(f"bg:t-{session}")
        assert run is not None and run.status == "succeeded" and run.attempts == 1
        assert [e.kind for e in store.history.history(session)] == ["delivery", "marker", "note"]
        assert lease_holder(store, session) is None
