"""Waiting for a busy session: the backoff, the limit, and the wait state each copy carries."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from typing import Any

import pytest

from agentwake.errors import SessionBusy
from agentwake.session.copies import (
    ATTR_FIRST_MESSAGE_ID,
    ATTR_WAIT_COUNT,
    ATTR_WAIT_GEN,
    ATTR_WAITING_SINCE,
    MessageAttributes,
)
from agentwake.session.lease import ON_THE_LIST_DELAY_S
from agentwake.session.waiting import (
    GiveUp,
    ParkedRecord,
    Wait,
    WaitPolicy,
    WaitState,
    decide,
    schedule_name,
    wait_cron,
)
from agentwake.settings import Settings
from agentwake.wake.background import DeadLetter, Resend, wait_for_session

NOW = 1_800_000_000.0
BUSY = SessionBusy("busy", run_id="bg:t2", session_id="s1", holder="bg:t1")


def test_pauses_grow_with_jitter_up_to_the_max_delay() -> None:
    # GIVEN the default policy with a 300 s ceiling
    policy = WaitPolicy(limit_s=3600, max_delay_s=300)
    rng = random.Random(7)
    for count in range(12):
        # WHEN the n-th pause is drawn many times
        pauses = [policy.delay(count, rng) for _ in range(200)]
        # THEN it lies in [d/2, d], d = min(300, 2 * 2**n): never zero, never in lock-step
        ceiling = min(300.0, 2.0 * 2**count)
        assert all(ceiling / 2 <= p <= ceiling for p in pauses)
        assert len({round(p, 6) for p in pauses}) > 100


def test_a_first_busy_finding_waits_and_starts_the_clock() -> None:
    # GIVEN a wake that never waited
    policy = WaitPolicy(limit_s=3600, max_delay_s=300)
    # WHEN it finds its session busy
    decision = decide(BUSY, WaitState(), policy, now=NOW, rng=random.Random(1))
    # THEN it comes back later, counting one wait since now
    assert isinstance(decision, Wait)
    assert decision.state == WaitState(count=1, since=NOW)
    assert 1.0 <= decision.delay_s <= 2.0


def test_the_last_pause_ends_at_the_limit_and_past_it_the_wake_gives_up_naming_the_holder() -> None:
    policy = WaitPolicy(limit_s=100, max_delay_s=300)
    # GIVEN a wake that has waited 95 s (9 tries)
    state = WaitState(count=9, since=NOW - 95)
    # WHEN it finds the session busy again
    decision = decide(BUSY, state, policy, now=NOW, rng=random.Random(1))
    # THEN its pause ends at the limit, not 256 s later
    assert isinstance(decision, Wait) and decision.delay_s == pytest.approx(5.0)
    # WHEN it is still busy at the limit
    late = decide(BUSY, decision.state, policy, now=NOW + 5, rng=random.Random(1))
    # THEN it gives up: the detail says it never ran and names the run holding the session
    assert isinstance(late, GiveUp) and late.holder == "bg:t1" and late.waited_s == pytest.approx(100)
    assert late.detail.startswith("never ran: session s1 was still busy with run bg:t1 after 100 s")


def test_wait_state_round_trips_through_message_attributes_and_cron_input() -> None:
    state = WaitState(count=3, since=NOW)
    assert WaitState.from_attributes(state.to_attributes()) == state  # type: ignore[arg-type]
    assert WaitState.from_payload(state.to_payload()) == state
    # a garbled or missing value restarts the wait (nothing is lost, the wait is bounded again)
    assert WaitState.from_attributes({ATTR_WAIT_COUNT: "x", ATTR_WAITING_SINCE: "1"}) == WaitState()
    assert WaitState.from_attributes({}) == WaitState()
    assert WaitState.from_payload("nonsense") == WaitState()
    assert WaitState.from_payload({"count": 2, "since": "soon"}) == WaitState()


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        return lambda **kw: self.calls.append((name, kw)) or True


class FakeStore:
    """The records, lease and run-end ports the waiting logic uses, in memory (one object plays all three)."""

    def __init__(self) -> None:
        self.failures: list[Any] = []
        self.parked: list[dict[str, Any]] = []
        self.dropped: list[tuple[str, str]] = []
        #: the run ids on the session's wait list
        self.listed: list[str] = []
        self.records = self.leases = self.ends = self

    def park_waiter(self, **kw: Any) -> None:
        self.parked.append(kw)

    def drop_waiter(self, session_id: str, run_id: str) -> None:
        self.dropped.append((session_id, run_id))

    def first_places(self, session_id: str, *, limit: int) -> list[str]:
        return self.listed[:limit]

    def mark_parked(self, session_id: str) -> bool:
        return True  # the session is held: its holder will hand it over

    def get_run(self, run_id: str) -> None:
        return None

    def record_failure(self, failure: Any, **kw: Any) -> None:
        self.failures.append((failure, kw))


def parked(state: WaitState) -> ParkedRecord:
    return ParkedRecord(
        body='{"task_id": "t2"}',
        message_id="m-1",
        source="arn:aws:sqs:us-east-1:123456789012:results",
        receive_count="1",
        attributes=MessageAttributes.from_api({"trace": {"DataType": "String", "StringValue": "abc"}}),
        state=state,
    )


def test_a_waiting_result_is_re_sent_with_its_attributes_and_wait_state() -> None:
    # GIVEN a result whose session is busy
    queue, dlq, store = Recorder(), Recorder(), FakeStore()
    settings = Settings(table_name="t", session_wait_limit_s=3600, session_wait_max_delay_s=300)
    # WHEN the use case hands it to the waiting logic, and the handler sends what it answers
    result = wait_for_session(BUSY, parked(WaitState()), store=store, settings=settings, task_id="t2", now=lambda: NOW)
    assert isinstance(result, Resend)  # "waiting"
    result.send(queue)
    # THEN it is re-sent later with the producer's attributes and the wait state; nothing else
    [(name, sent)] = queue.calls
    assert name == "send_later" and sent["body"] == '{"task_id": "t2"}'
    assert sent["attributes"] == {"trace": {"DataType": "String", "StringValue": "abc"}}
    # (and the producer's message id: the copy is shown as that message; no receive was spent yet)
    assert sent["wait"] == {
        ATTR_WAIT_COUNT: "1",
        ATTR_WAITING_SINCE: str(int(NOW * 1000)),
        ATTR_WAIT_GEN: "0",
        ATTR_FIRST_MESSAGE_ID: "m-1",
    }
    assert dlq.calls == [] and store.failures == []
    # AND the run is on its session's wait list with what a hand-off re-sends
    [entry] = store.parked
    assert (entry["session_id"], entry["run_id"], entry["gen"]) == ("s1", "bg:t2", 0)
    assert entry["body"] == '{"task_id": "t2"}' and entry["wait"] == sent["wait"]


def test_a_result_past_the_limit_is_recorded_and_dead_lettered_as_session_busy() -> None:
    # GIVEN a result that has waited past the limit
    queue, dlq, store = Recorder(), Recorder(), FakeStore()
    settings = Settings(table_name="t", session_wait_limit_s=60)
    # WHEN it finds its session busy again
    result = wait_for_session(
        BUSY, parked(WaitState(count=6, since=NOW - 61)), store=store, settings=settings, task_id="t2", now=lambda: NOW
    )
    assert isinstance(result, DeadLetter)  # "dead-lettered"
    result.send(dlq)
    # THEN a SessionBusy failure is recorded for the run (created, kind background) and the task
    assert queue.calls == []
    [(failure, kw)] = store.failures
    assert (failure.run_id, failure.error_type, failure.attempt) == ("bg:t2", "SessionBusy", 0)
    assert kw == {"task_id": "t2", "job_id": None, "kind": "background", "usage": None}
    # AND the DLQ copy says why and who held the session
    [(name, sent)] = dlq.calls
    assert name == "send" and sent["error_type"] == "SessionBusy" and "bg:t1" in sent["reason"]
    assert sent["extra"]["agentwake-holder-run-id"] == "bg:t1" and sent["original_message_id"] == "m-1"
    # AND it is off the wait list: no release hands the session to a dead-lettered run
    assert store.dropped == [("s1", "bg:t2")] and store.parked == []


def test_a_busy_cron_wake_joins_the_wait_list_with_a_fallback_schedule() -> None:
    # GIVEN a cron wake whose session is busy, on a stack with a schedule group and role
    schedules, store = Recorder(), FakeStore()
    schedules.group = "stack-jobs"
    settings = Settings(
        table_name="t", schedule_group="stack-jobs", scheduler_role_arn="arn:role", scheduler_dlq_arn="arn:dlq"
    )
    busy = SessionBusy("busy", run_id="cron:j1:T", session_id="s1", holder="bg:t1")
    # WHEN it is handed to the waiting logic
    status = wait_cron(
        busy, {"job_id": "j1", "scheduled_time": "T"}, WaitState(), store=store, settings=settings,
        schedules=schedules, target_arn="arn:fn:live", job_id="j1", now=lambda: NOW, rng=random.Random(3),
    )  # fmt: skip
    # THEN it is on its session's wait list, as a cron waiter, with what a hand-off invokes it with
    assert status == "waiting"
    [entry] = store.parked
    assert (entry["session_id"], entry["run_id"], entry["gen"], entry["kind"]) == ("s1", "cron:j1:T", 0, "cron")
    assert json.loads(entry["body"]) == {"job_id": "j1", "scheduled_time": "T", "session_id": "s1"}
    assert entry["target"] == "arn:fn:live"
    wait = {ATTR_WAIT_COUNT: "1", ATTR_WAITING_SINCE: str(int(NOW * 1000)), ATTR_WAIT_GEN: "0"}
    assert entry["wait"] == wait
    # AND a one-time schedule invokes the same alias as the fallback, no sooner than a listed waiter's
    [(name, created)] = schedules.calls
    assert name == "create_once"
    assert created["name"] == schedule_name("cron:j1:T", 1) and len(created["name"]) <= 64
    assert created["target_arn"] == "arn:fn:live" and created["role_arn"] == "arn:role"
    assert created["dlq_arn"] == "arn:dlq"
    assert created["payload"] == {"job_id": "j1", "scheduled_time": "T", "session_id": "s1", "session_wait": wait}
    assert created["at"] == datetime.fromtimestamp(NOW + ON_THE_LIST_DELAY_S, UTC)


def test_a_cron_wake_past_the_limit_raises_session_busy_after_recording_it() -> None:
    store = FakeStore()
    settings = Settings(table_name="t", session_wait_limit_s=60, scheduler_role_arn="arn:role")
    busy = SessionBusy("busy", run_id="cron:j1:T", session_id="s1", holder="bg:t1")
    # WHEN a cron wake that waited past the limit finds the session busy
    with pytest.raises(SessionBusy, match="never ran: session s1 was still busy with run bg:t1") as raised:
        wait_cron(
            busy, {"job_id": "j1", "scheduled_time": "T"}, WaitState(count=5, since=NOW - 70), store=store,
            settings=settings, schedules=Recorder(), target_arn="arn:fn:live", job_id="j1", now=lambda: NOW,
        )  # fmt: skip
    # THEN it raises (Lambda's retries, then CronFailureQueue) with the holder, and the failure is recorded
    assert raised.value.holder == "bg:t1"
    assert store.dropped == [("s1", "cron:j1:T")]  # off the wait list: nobody hands it the session
    [(failure, kw)] = store.failures
    assert failure.error_type == "SessionBusy" and kw == {
        "task_id": None,
        "job_id": "j1",
        "kind": "cron",
        "usage": None,
    }


def test_a_wait_value_of_any_size_means_not_waiting_yet() -> None:
    # GIVEN wait attributes and a cron payload a producer filled with a 400-digit number
    huge = "9" * 400
    # WHEN they are read THEN the wait restarts (nothing is lost), instead of an OverflowError
    # failing a record whose run has already committed
    assert WaitState.from_attributes({ATTR_WAIT_COUNT: "2", ATTR_WAITING_SINCE: huge}) == WaitState()
    assert WaitState.from_payload({"count": 2, "since": int(huge)}) == WaitState()
