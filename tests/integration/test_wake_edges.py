"""Edges of a wake found in review: late in a batch, an uncertain webhook, admin messages to
another session, a commit that fails, a reused task id, a job deleted mid-run, the lease."""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest

from agentwake.domain.models import Task
from agentwake.domain.run_models import FailureRecord
from agentwake.errors import DeliveryUncertain, RunDeferred, TaskExists
from agentwake.settings import Settings
from agentwake.store.dynamo import DynamoStore
from agentwake.wake.background import wake_for_background_result
from agentwake.wake.spec import WakeDeps
from agentwake_ops.runs import run_summary
from tests.support.aws import REGION, Resources
from tests.support.builders import message, seed_session, seed_task
from tests.support.faults import FaultyStore
from tests.support.receiver import CountingReceiver
from tests.support.store_writes import acquire_lease, begin_attempt, lease_holder


@pytest.fixture
def receiver() -> Iterator[CountingReceiver]:
    with CountingReceiver() as r:
        yield r


def deps_for(store: DynamoStore) -> WakeDeps:
    return WakeDeps(store=store, settings=Settings.from_env())


def send(text: str, session_id: str | None = None) -> dict:
    args = {"text": text} if session_id is None else {"text": text, "session_id": session_id}
    return {"tool_calls": [{"name": "send_message_to_user", "arguments": args}]}


def test_too_little_time_left_defers_the_run_without_writing_anything(store: DynamoStore) -> None:
    # GIVEN a record reached late in a batch, with less than the minimum budget left
    seed_session(store, "s1")
    seed_task(store, "t1", "s1")
    budget = Settings.from_env().min_run_budget_ms
    # WHEN it is handled
    with pytest.raises(RunDeferred):
        wake_for_background_result(message("t1", "s1"), deps_for(store), remaining_ms=budget - 1)
    # THEN nothing was written: no run, no failure, the task untouched, the session not leased
    assert store.records.get_run("bg:t1") is None and store.ends.failures("bg:t1") == []
    assert store.records.get_task("t1").status == "running"  # type: ignore[union-attr]
    assert lease_holder(store, "s1") is None
    # AND with enough time it runs
    out = wake_for_background_result(message("t1", "s1"), deps_for(store), remaining_ms=budget + 60_000)
    assert out.status == "succeeded"


def test_a_webhook_answer_that_comes_too_late_is_resent_with_the_same_delivery_id(
    store: DynamoStore, receiver: CountingReceiver
) -> None:
    # GIVEN a receiver that accepts the first delivery but answers after the channel's timeout
    seed_session(
        store,
        "s1",
        providers=[{"type": "scripted", "id": "p", "script": [send("hello"), {"text": "done"}]}],
        delivery={"type": "webhook", "url": receiver.url, "timeout": 0.3},
    )
    seed_task(store, "t1", "s1")
    receiver.slow_next, receiver.slow_seconds = 1, 1.0
    # WHEN the run sends: the outcome is uncertain, so the step is aborted (not an error: result)
    with pytest.raises(DeliveryUncertain):
        wake_for_background_result(message("t1", "s1"), deps_for(store))
    # the reply is journaled; the uncertain tool step is not
    assert [step["key"] for step in run_summary(store, "bg:t1").steps] == ["000.reply"]
    # AND the retry resends under the same delivery id (receivers drop it), then succeeds
    assert wake_for_background_result(message("t1", "s1"), deps_for(store)).status == "succeeded"
    assert receiver.by_delivery_id() == {"bg:t1#0#0": 2}
    assert [e.delivery_id for e in store.history.history("s1") if e.kind == "delivery"] == ["bg:t1#0#0"]


def test_an_admin_message_to_another_session_goes_through_that_sessions_channel(store: DynamoStore) -> None:
    # GIVEN an admin session A and a session B, each with its own webhook receiver
    with CountingReceiver() as rx_a, CountingReceiver() as rx_b:
        seed_session(
            store,
            "a",
            role="admin",
            providers=[
                {"type": "scripted", "id": "p", "script": [send("to b", "b"), send("x", "ghost"), {"text": "ok"}]}
            ],
            delivery={"type": "webhook", "url": rx_a.url},
        )
        seed_session(store, "b", delivery={"type": "webhook", "url": rx_b.url})
        seed_task(store, "t1", "a")
        # WHEN A's agent messages B, then a session that does not exist
        assert wake_for_background_result(message("t1", "a"), deps_for(store)).status == "succeeded"
        # THEN B's own receiver got it and it is in B's history; A's receiver got nothing
        assert rx_b.texts() == ["to b"] and rx_a.texts() == []
        assert [e.content for e in store.history.history("b") if e.kind == "delivery"] == ["to b"]
        # AND the unknown session was an error the model saw, with nothing written anywhere
        tool_results = [s for s in run_summary(store, "bg:t1").steps if ".tool." in s["key"]]
        assert tool_results[1]["content"].startswith("error:") and "ghost" in tool_results[1]["content"]
        assert store.history.history("ghost") == []


def test_a_commit_that_fails_records_why(store: DynamoStore, resources: Resources) -> None:
    # GIVEN a run whose commit transaction is failed by the service
    faulty = FaultyStore(resources.table, client=boto3.client("dynamodb", region_name=REGION))
    seed_session(faulty, "s1")
    seed_task(faulty, "t1", "s1")
    faulty.arm("inside_commit_not_landed")
    # WHEN it runs
    with pytest.raises(Exception, match="InternalServerError"):
        wake_for_background_result(message("t1", "s1"), deps_for(faulty))
    # THEN the failure is recorded for the operator, and there is no note
    [failure] = faulty.ends.failures("bg:t1")
    assert failure.error_type == "ClientError" and "the commit failed" in failure.detail
    assert [e for e in faulty.history.history("s1") if e.kind == "note"] == []


def test_a_task_id_cannot_be_registered_twice(store: DynamoStore) -> None:
    seed_task(store, "t1", "s1")
    with pytest.raises(TaskExists, match="t1"):
        store.records.put_task(Task(task_id="t1", session_id="s2", tool_name="other"))
    assert store.records.get_task("t1").session_id == "s1"  # type: ignore[union-attr]


def test_a_failure_is_recorded_even_when_its_job_was_deleted_mid_run(store: DynamoStore) -> None:
    # GIVEN a run whose job no longer exists
    begin_attempt(store, "cron:gone:t", kind="cron", session_id="s1")
    failure = FailureRecord(run_id="cron:gone:t", session_id="s1", attempt=1, error_type="RunFailed", detail="boom")
    # WHEN its failure is recorded
    store.ends.record_failure(failure, job_id="gone")
    # THEN the failure and the run are written, and no half job item appears
    assert [f.detail for f in store.ends.failures("cron:gone:t")] == ["boom"]
    assert store.records.get_run("cron:gone:t").status == "failed"  # type: ignore[union-attr]
    assert store.records.get_job("gone") is None


def test_a_held_lease_admits_not_even_the_same_run(store: DynamoStore) -> None:
    # GIVEN a lease held by a run
    token = acquire_lease(store, "s1", "bg:t1", 60)
    assert token
    # WHEN another copy of the same run asks THEN it is refused
    assert acquire_lease(store, "s1", "bg:t1", 60) is None
    # AND only the holder's token releases it
    store.leases.release("s1", "not-the-token")
    assert lease_holder(store, "s1") is not None
    store.leases.release("s1", token)
    assert lease_holder(store, "s1") is None
