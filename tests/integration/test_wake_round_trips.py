"""DynamoDB round trips per wake, counted at the client (botocore ``before-call`` events).

Budgets (docs/table-design.md#round-trips): a one-step wake makes at most 7 DynamoDB calls (one of
them the read of the session's wait list before the commit, for the hand-off; one the lease's
release after the commit, a plain conditional write), background or cron; a session with daily
limits adds the one read of its counters, under the lease; each further model step adds at most 1
and each delivery at most 1 (the final answer deliver_final sends included); a retry adds the one
read of its journal; and the count does not depend on the conversation's length.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from agentwake.domain.run_models import Job
from agentwake.errors import RunFailed
from agentwake.settings import Settings
from agentwake.store.dynamo import DynamoStore
from agentwake.store.queues import ResultQueue
from agentwake.wake.background import wake_for_background_result
from agentwake.wake.cron import wake_for_cron_job
from agentwake.wake.messages import CronWakeInput
from agentwake.wake.spec import WakeDeps
from agentwake_ops.runs import run_summary
from tests.support.builders import OK_SCRIPT, message, seed_session, seed_task
from tests.support.probes import DynamoCalls, count_history_reads, seed_history
from tests.support.store_writes import lease_holder

ONE_STEP = [{"text": "Nothing to tell the user."}]
#: a one-step wake's calls; ``make bench`` prints the same (tests/e2e/test_bench_scripts.py)
ONE_STEP_CALLS = ["BatchGetItem", "PutItem", "UpdateItem", "Query", "Query", "TransactWriteItems", "DeleteItem"]
#: ... of a session with daily limits: today's counters read after the start, under the lease (GetItem)
DAILY_LIMITS_CALLS = [
    "BatchGetItem",
    "PutItem",
    "UpdateItem",
    "Query",
    "GetItem",
    "Query",
    "TransactWriteItems",
    "DeleteItem",
]
#: ... of a cron wake: the attempt is one transaction with the job marked running
CRON_CALLS = [
    "BatchGetItem",
    "PutItem",
    "TransactWriteItems",
    "Query",
    "Query",
    "TransactWriteItems",
    "DeleteItem",
]
#: a one-step wake whose final answer deliver_final sends: its reply journaled (PutItem) before it is sent
FINAL_ANSWER_CALLS = [
    "BatchGetItem",
    "PutItem",
    "UpdateItem",
    "Query",
    "PutItem",
    "Query",
    "TransactWriteItems",
    "DeleteItem",
]
#: the history length the "long" case seeds (AGENTWAKE_LONG_HISTORY=100000 in `make bench`-sized runs)
LONG_HISTORY = int(os.environ.get("AGENTWAKE_LONG_HISTORY", "5000"))


@pytest.fixture
def counted(store: DynamoStore) -> Iterator[tuple[DynamoStore, DynamoCalls]]:
    checks: list[str] = []

    def condition_checks(params: dict[str, Any], **_: Any) -> None:
        checks.extend(
            str(item["ConditionCheck"]["Key"]) for item in params["TransactItems"] if "ConditionCheck" in item
        )

    store.table.db.meta.events.register("provide-client-params.dynamodb.TransactWriteItems", condition_checks)
    yield store, DynamoCalls(store.table.db)
    # AND no wake's transaction checks an item it does not write: the functions that run the agent
    # may not dynamodb:ConditionCheckItem (template.yaml; moto does not check IAM, AWS would refuse)
    assert not checks, checks


def deps(store: DynamoStore) -> WakeDeps:
    """As deployed: with the result queue, so every release reads the wait list (the hand-off)."""
    settings = Settings.from_env()
    return WakeDeps(store=store, settings=settings, result_queue=ResultQueue(settings.result_queue_url))


def test_a_one_step_background_wake_makes_seven_calls(counted: tuple[DynamoStore, DynamoCalls]) -> None:
    # GIVEN a session whose agent answers in one step, and its finished task
    store, counter = counted
    seed_session(store, "s1", providers=[{"type": "scripted", "id": "p", "script": ONE_STEP}], deliver_final="never")
    seed_task(store, "t1", "s1")
    # WHEN the task's result wakes the agent
    calls = counter.during(lambda: wake_for_background_result(message("t1", "s1"), deps(store)))
    # THEN one batch read (run, task, session config), two plain conditional writes (the lease,
    # then the attempt), one history query (under the lease, so it sees the previous wake's note), one query of the
    # session's wait list (before the commit, for the hand-off), one commit, one release of the lease
    assert calls == ONE_STEP_CALLS, calls
    assert len(calls) <= 7
    # AND the run really succeeded, with its note; its only step, the last reply, is not journaled
    # (the note keeps its text: runs show reads it there)
    assert store.records.get_run("bg:t1").status == "succeeded"  # type: ignore[union-attr]
    assert [e.kind for e in store.history.history("s1")] == ["marker", "note"]
    summary = run_summary(store, "bg:t1", with_note=True)
    assert summary.steps == []
    assert "Nothing to tell the user." in (summary.note or {}).get("text", "")
    assert lease_holder(store, "s1") is None


def test_deliver_final_costs_one_call_like_any_delivery(counted: tuple[DynamoStore, DynamoCalls]) -> None:
    # GIVEN a one-step agent whose session sends the final answer when nothing else was sent (default)
    store, counter = counted
    seed_session(store, "s1", providers=[{"type": "scripted", "id": "p", "script": ONE_STEP}])
    seed_task(store, "t1", "s1")
    # WHEN it is woken
    calls = counter.during(lambda: wake_for_background_result(message("t1", "s1"), deps(store)))
    # THEN it costs a one-step wake plus one delivery: the final reply is journaled before it is
    # sent (so a retry resends the same answer), and the delivery's record rides on the commit
    assert calls == FINAL_ANSWER_CALLS, calls
    assert len(calls) <= 7 + 1
    # AND the delivery is in history before the marker and the note, and journaled
    assert [e.kind for e in store.history.history("s1")] == ["delivery", "marker", "note"]
    assert [s["key"] for s in run_summary(store, "bg:t1").steps] == ["000.reply", "final.delivery"]
    assert [d["delivery_id"] for d in run_summary(store, "bg:t1").deliveries] == ["bg:t1#final"]


def test_daily_limits_cost_one_read_under_the_lease(counted: tuple[DynamoStore, DynamoCalls]) -> None:
    # GIVEN a one-step agent of a session with a daily token budget and a daily delivery cap
    store, counter = counted
    limits = {"max_tokens_per_day": 100_000, "max_deliveries_per_day": 5}
    seed_session(
        store, "s1", providers=[{"type": "scripted", "id": "p", "script": ONE_STEP}], deliver_final="never", **limits
    )
    seed_task(store, "t1", "s1")
    # WHEN it is woken
    calls = counter.during(lambda: wake_for_background_result(message("t1", "s1"), deps(store)))
    # THEN one call more than a session without limits: today's counters are read after the start,
    # under the lease (no other run of the session can move them then), the attempt's write stays a
    # plain update, and the tokens are counted by the commit
    assert calls == DAILY_LIMITS_CALLS, calls
    from agentwake.store.daily import DailyCounters

    tokens, _ = DailyCounters(store.table, "s1").read()
    assert tokens == store.records.get_run("bg:t1").usage["total_tokens"] > 0  # type: ignore[union-attr]
    # AND a cron wake of that session, whose final answer is sent, costs one delivery more (and its
    # counters' read)
    seed_session(store, "s1", providers=[{"type": "scripted", "id": "p", "script": ONE_STEP}], **limits)
    store.records.put_job(Job(job_id="j1", session_id="s1", name="Nightly", schedule_expression="cron(0 6 * * ? *)"))
    wake = CronWakeInput(job_id="j1", scheduled_time="2026-11-30T06:00:00Z", session_id="s1")
    cron = counter.during(lambda: wake_for_cron_job(wake, deps(store)))
    assert len(cron) <= 7 + 1 + 1, cron
    assert DailyCounters(store.table, "s1").read()[1] == 1


def test_a_two_step_wake_with_a_delivery_adds_one_call_per_step_and_per_delivery(
    counted: tuple[DynamoStore, DynamoCalls],
) -> None:
    # GIVEN an agent that messages the user (step 0), then answers (step 1)
    store, counter = counted
    seed_session(store, "s1")  # OK_SCRIPT
    seed_task(store, "t1", "s1")
    # WHEN it is woken
    calls = counter.during(lambda: wake_for_background_result(message("t1", "s1"), deps(store)))
    # THEN 7 + 1 (the second step) + 1 (the delivery) calls at most
    assert len(calls) <= 7 + 1 + 1, calls
    # AND everything a durable run needs is written: the delivery in history before the note, the
    # first reply and the tool result journaled (the last reply is the note's: a succeeded run's
    # commit leaves it out)
    assert [e.kind for e in store.history.history("s1")] == ["delivery", "marker", "note"]
    assert [s["key"] for s in run_summary(store, "bg:t1").steps] == ["000.reply", "000.tool.00"]
    assert len(OK_SCRIPT) == 2


def test_a_cron_wake_makes_seven_calls(counted: tuple[DynamoStore, DynamoCalls]) -> None:
    # GIVEN a job of a session whose agent answers in one step
    store, counter = counted
    seed_session(store, "s1", providers=[{"type": "scripted", "id": "p", "script": ONE_STEP}], deliver_final="never")
    store.records.put_job(Job(job_id="j1", session_id="s1", name="Nightly", schedule_expression="cron(0 6 * * ? *)"))
    wake = CronWakeInput(job_id="j1", scheduled_time="2026-11-30T06:00:00Z", session_id="s1")
    # WHEN the schedule fires (its input names the session, as JobsService schedules it)
    calls = counter.during(lambda: wake_for_cron_job(wake, deps(store)))
    # THEN as many calls as a background wake (the job marked running with the attempt: one transaction)
    assert calls == CRON_CALLS, calls
    job = store.records.get_job("j1")
    assert job is not None and job.status == "completed" and job.last_run_at
    # AND a schedule that does not name the session (made before it did) costs one read more
    legacy = CronWakeInput(job_id="j1", scheduled_time="2026-11-30T07:00:00Z")
    assert len(counter.during(lambda: wake_for_cron_job(legacy, deps(store)))) <= 8


def test_a_retry_after_a_failure_at_step_two_reads_its_journal_once(
    counted: tuple[DynamoStore, DynamoCalls],
) -> None:
    # GIVEN an agent that messages the user, then every provider fails at the second step
    store, counter = counted
    broken = [{"type": "scripted", "id": "p", "script": [OK_SCRIPT[0], {"error": "auth"}]}]
    seed_session(store, "s1", providers=broken)
    seed_task(store, "t1", "s1")

    def failing() -> None:
        with pytest.raises(RunFailed):
            wake_for_background_result(message("t1", "s1"), deps(store))

    # WHEN the first attempt fails: 7 calls, with the failure transaction in place of the commit
    # (the release after it, as after a commit), plus one for the first step and one for its delivery
    first = counter.during(failing)
    assert len(first) <= 7 + 1 + 1, first
    # AND after the provider is fixed, the retry replays step 0 and runs step 1
    fixed = [{"type": "scripted", "id": "p", "script": [{"text": "unused: replayed"}, {"text": "done"}]}]
    seed_session(store, "s1", providers=fixed)
    retry = counter.during(lambda: wake_for_background_result(message("t1", "s1"), deps(store)))
    # THEN the retry costs a one-step wake plus the one read of its journal
    assert retry.count("Query") == 3 and len(retry) <= 7 + 1, retry
    assert store.records.get_run("bg:t1").status == "succeeded"  # type: ignore[union-attr]
    assert [e.kind for e in store.history.history("s1")] == ["delivery", "marker", "note"]


def test_calls_do_not_depend_on_the_conversation_length(counted: tuple[DynamoStore, DynamoCalls]) -> None:
    # GIVEN two sessions with the same agent, one with 10 history entries and one with many
    store, counter = counted
    for session_id, length in (("short", 10), ("long", LONG_HISTORY)):
        seed_session(store, session_id, history_window=20)
        seed_history(store, session_id, length)
        seed_task(store, f"t-{session_id}", session_id)
    # WHEN each is woken
    short = counter.during(lambda: wake_for_background_result(message("t-short", "short"), deps(store)))
    long = counter.during(lambda: wake_for_background_result(message("t-long", "long"), deps(store)))
    # THEN they make the same calls, and the window read touched at most the window
    assert short == long, (short, long)
    assert count_history_reads(store, "long", 20) == 20
