"""One waiting mechanism (docs/durability.md, "Waiting for the session"): a cron wake that finds its
session busy joins the same wait list as a background result and is handed the session on release,
in arrival order, like any waiter — not at its next poll. Its one-time schedule stays only as the
fallback for a hand-off that is lost; past SessionWaitLimit it still gives up with a SessionBusy
failure record and raises (Lambda's retries, then CronFailureQueue).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest

from agentwake.domain.run_models import Job
from agentwake.errors import SessionBusy
from agentwake.session.copies import ATTR_WAIT_GEN, CRON_WAIT_FIELD
from agentwake.settings import Settings
from agentwake.store.dynamo import DynamoStore
from agentwake.store.keys import wait_key
from agentwake.store.schedules import Schedules
from agentwake.wake.background import Done
from agentwake.wake.invocation import CHAIN_RESERVE_RUNS, on_background_record, on_cron_event
from agentwake.wake.spec import WakeDeps
from tests.integration.test_handoff_here import PLENTY_MS, plain_record, run_status
from tests.integration.test_handoff_waiters import park, seed
from tests.support.aws import REGION, Resources
from tests.support.faults import around
from tests.support.receiver import CountingReceiver
from tests.support.store_writes import acquire_lease, lease_holder

ALIAS_ARN = "arn:aws:lambda:us-east-1:123456789012:function:agentwake-CronWakeFunction:live"
ROLE_ARN = "arn:aws:iam::123456789012:role/agentwake-SchedulerRole"
SCHEDULED = "2026-11-30T06:00:00Z"
CRON_RUN = f"cron:j:{SCHEDULED}"
EVENT = {"job_id": "j", "scheduled_time": SCHEDULED}


def cron_deps(resources: Resources, store: DynamoStore, receiver: CountingReceiver, tasks: tuple[str, ...]) -> WakeDeps:
    """Session ``s`` with the tasks ``tasks`` and a cron job ``j``; the wake's ports with the
    stack's scheduler (moto's: it stores schedules and never fires them)."""
    base = seed(resources, store, receiver, tasks)
    store.records.put_job(Job(job_id="j", session_id="s", name="Report", schedule_expression="cron(0 6 * * ? *)"))
    settings = Settings(
        table_name=resources.table, schedule_group=resources.schedule_group, scheduler_role_arn=ROLE_ARN
    )
    schedules = Schedules(resources.schedule_group, client=boto3.client("scheduler", region_name=REGION))
    return WakeDeps(store=store, settings=settings, result_queue=base.result_queue, schedules=schedules)


def schedules_of(resources: Resources) -> dict[str, dict[str, Any]]:
    client = boto3.client("scheduler", region_name=REGION)
    names = [s["Name"] for s in client.list_schedules(GroupName=resources.schedule_group)["Schedules"]]
    return {n: client.get_schedule(Name=n, GroupName=resources.schedule_group) for n in names}


def fallback_due(schedule: dict[str, Any]) -> datetime:
    """When a one-time schedule (``at(yyyy-mm-ddThh:mm:ss)``, in its timezone, UTC) is due."""
    expression = schedule["ScheduleExpression"]
    assert expression.startswith("at(") and schedule.get("ScheduleExpressionTimezone", "UTC") == "UTC", schedule
    return datetime.fromisoformat(expression[3:-1]).replace(tzinfo=UTC)


def started(store: DynamoStore, run_id: str) -> datetime:
    run = store.records.get_run(run_id)
    assert run is not None and run.started_at is not None, run
    return datetime.fromisoformat(run.started_at.replace("Z", "+00:00"))


def ended(store: DynamoStore, run_id: str) -> datetime:
    run = store.records.get_run(run_id)
    assert run is not None and run.ended_at is not None, run
    return datetime.fromisoformat(run.ended_at.replace("Z", "+00:00"))


def test_a_cron_wake_that_arrives_while_a_run_holds_the_session_starts_at_its_release_not_its_fallback(
    resources: Resources, store: DynamoStore
) -> None:
    with CountingReceiver() as receiver:
        deps = cron_deps(resources, store, receiver, ("a",))
        answers: list[dict[str, Any]] = []

        def begin_then_cron_fires(begin: Any, **kw: Any) -> Any:
            lease = begin(**kw)
            if kw["run_id"] == "bg:a":  # a holds the session now: the job's schedule fires
                answers.append(on_cron_event(dict(EVENT), deps, target_arn=ALIAS_ARN, time_left=lambda: PLENTY_MS))
            return lease

        around(store.runs, "begin_run", begin_then_cron_fires)
        # GIVEN a background run a holding session s, and the cron wake of job j arriving meanwhile
        # WHEN a's record runs with the invocation's time left
        result = on_background_record(plain_record("a"), deps, time_left=lambda: PLENTY_MS)
        # THEN the cron wake did not run then: it joined the wait list, with a fallback schedule
        assert answers == [{"run_id": CRON_RUN, "status": "waiting"}]
        fallbacks = schedules_of(resources)
        assert len(fallbacks) == 1 and next(iter(fallbacks)).startswith("wait-"), list(fallbacks)
        # AND a's release handed the session to it, and this invocation ran it: no poll, no sleep
        assert result == Done("succeeded", ran_after=1)
        assert [run_status(store, r) for r in ("bg:a", CRON_RUN)] == ["succeeded", "succeeded"]
        # (ran_after=1 above says the release ran it; it started after a ended and before its fallback
        # schedule was due: how soon after is this machine's speed, not a pause, so it is printed)
        [fallback] = fallbacks.values()
        due = fallback_due(fallback)
        gap = (started(store, CRON_RUN) - ended(store, "bg:a")).total_seconds()
        print(f"gap between a's release and the cron run's start: {gap * 1000:.1f} ms")
        assert ended(store, "bg:a") <= started(store, CRON_RUN) < due, (gap, due)
        run = store.records.get_run(CRON_RUN)
        pause = (due - ended(store, "bg:a")).total_seconds()
        assert run is not None and run.idle_before_s is not None and 0 <= run.idle_before_s < pause
        # AND one note each, in that order; the session is free and the wait list empty
        assert [e.run_id for e in store.history.history("s") if e.kind == "note"] == ["bg:a", CRON_RUN]
        assert lease_holder(store, "s") is None and store.leases.waiters("s") == []
        # WHEN the fallback schedule fires later (its input is the wake plus its wait state)
        again = on_cron_event(json.loads(fallback["Target"]["Input"]), deps, target_arn=ALIAS_ARN)
        # THEN it finds its run done: nothing runs or is sent again
        assert again["status"] == "already_succeeded", again
        assert all(count == 1 for count in receiver.by_delivery_id().values()), receiver.by_delivery_id()


def test_cron_and_background_waiters_are_handed_the_session_in_the_order_they_came(
    resources: Resources, store: DynamoStore
) -> None:
    with CountingReceiver() as receiver:
        deps = cron_deps(resources, store, receiver, ("a", "x", "y"))
        # GIVEN another writer holding s, and x (a result), the cron wake, then y (a result) waiting
        token = acquire_lease(store, "s", "bg:intruder", 600)
        assert token is not None
        park(deps, "x")
        assert on_cron_event(dict(EVENT), deps, target_arn=ALIAS_ARN)["status"] == "waiting"
        park(deps, "y")
        waiters = store.leases.waiters("s")
        assert [(w.run_id, w.kind) for w in waiters] == [
            ("bg:x", "background"),
            (CRON_RUN, "cron"),
            ("bg:y", "background"),
        ]
        cron_waiter = waiters[1]
        assert json.loads(cron_waiter.body) == {**EVENT, "session_id": "s"} and cron_waiter.target == ALIAS_ARN
        store.leases.release("s", token)  # a release that hands nothing over: they all still wait
        # WHEN a's record runs with the invocation's time left
        result = on_background_record(plain_record("a"), deps, time_left=lambda: PLENTY_MS)
        # THEN x, the cron wake and y ran after a, here, in the order they came
        assert result == Done("succeeded", ran_after=3)
        order = ["bg:a", "bg:x", CRON_RUN, "bg:y"]
        assert [run_status(store, r) for r in order] == ["succeeded"] * 4
        starts = [started(store, r) for r in order]
        assert starts == sorted(starts), starts
        assert [e.run_id for e in store.history.history("s") if e.kind == "note"] == order
        assert store.leases.waiters("s") == [] and lease_holder(store, "s") is None


def test_without_time_to_run_it_here_a_cron_waiter_is_handed_a_newer_copy_and_its_fallback_retires(
    resources: Resources, store: DynamoStore
) -> None:
    with CountingReceiver() as receiver:
        deps = cron_deps(resources, store, receiver, ("a",))
        token = acquire_lease(store, "s", "bg:intruder", 600)
        assert token is not None
        assert on_cron_event(dict(EVENT), deps, target_arn=ALIAS_ARN)["status"] == "waiting"
        [fallback] = schedules_of(resources).values()
        store.leases.release("s", token)
        # GIVEN the cron wake waiting for a session another writer held and released to nobody
        # WHEN a runs with too little of the invocation left to run the cron wake here
        short = CHAIN_RESERVE_RUNS * deps.settings.min_run_budget_ms - 1
        assert on_background_record(plain_record("a"), deps, time_left=lambda: short) == Done("succeeded")
        # THEN the session is reserved for the cron wake, and a one-time schedule at(now) invokes
        # the function it came through with a newer copy (gen 1) of its wake
        held = lease_holder(store, "s")
        assert held is not None and held[0] == CRON_RUN
        handed = {n: s for n, s in schedules_of(resources).items() if n.startswith("handed-")}
        [copy] = handed.values()
        assert copy["Target"]["Arn"] == ALIAS_ARN and copy["ActionAfterCompletion"] == "DELETE"
        payload = json.loads(copy["Target"]["Input"])
        assert payload[CRON_WAIT_FIELD][ATTR_WAIT_GEN] == "1"
        # WHEN the fallback (gen 0) fires first THEN it retires: the newer copy carries the run
        assert on_cron_event(json.loads(fallback["Target"]["Input"]), deps, target_arn=ALIAS_ARN)["status"] == (
            "superseded"
        )
        assert run_status(store, CRON_RUN) is None
        # WHEN the handed copy fires THEN the run takes its reservation and succeeds, once
        assert on_cron_event(payload, deps, target_arn=ALIAS_ARN)["status"] == "succeeded"
        assert store.table.read_item(*wait_key("s", CRON_RUN)) is None and lease_holder(store, "s") is None
        assert all(count == 1 for count in receiver.by_delivery_id().values()), receiver.by_delivery_id()


def test_a_cron_waiter_past_the_limit_gives_up_with_a_session_busy_failure_and_raises(
    resources: Resources, store: DynamoStore
) -> None:
    with CountingReceiver() as receiver:
        deps = cron_deps(resources, store, receiver, ())
        token = acquire_lease(store, "s", "bg:intruder", 600)
        assert token is not None
        # GIVEN a cron wake on the wait list of a session another run still holds
        first = on_cron_event(dict(EVENT), deps, target_arn=ALIAS_ARN)
        assert first["status"] == "waiting" and [w.run_id for w in store.leases.waiters("s")] == [CRON_RUN]
        [fallback] = schedules_of(resources).values()
        payload = json.loads(fallback["Target"]["Input"])
        # WHEN its fallback comes back after it has waited past SessionWaitLimit
        since = float(payload[CRON_WAIT_FIELD]["agentwake-waiting-since"]) / 1000
        deps.settings = Settings(
            table_name=resources.table,
            schedule_group=resources.schedule_group,
            scheduler_role_arn=ROLE_ARN,
            session_wait_limit_s=60,
        )
        payload[CRON_WAIT_FIELD]["agentwake-waiting-since"] = str(int((since - 61) * 1000))
        # THEN it raises SessionBusy naming the holder (Lambda's retries, then CronFailureQueue)
        with pytest.raises(SessionBusy, match="never ran: session s was still busy with run bg:intruder") as raised:
            on_cron_event(payload, deps, target_arn=ALIAS_ARN)
        assert raised.value.holder == "bg:intruder"
        # AND a SessionBusy failure is recorded for the run, and it is off the wait list
        [failure] = store.ends.failures(CRON_RUN)
        assert failure.error_type == "SessionBusy"
        assert store.leases.waiters("s") == []
        assert receiver.by_delivery_id() == {}


def test_a_waiting_cron_wake_whose_job_was_paused_leaves_the_wait_list(
    resources: Resources, store: DynamoStore
) -> None:
    with CountingReceiver() as receiver:
        deps = cron_deps(resources, store, receiver, ())
        # GIVEN session s held by another run, and job j's wake waiting for it on the wait list
        token = acquire_lease(store, "s", "bg:other", 60)
        assert token is not None
        assert on_cron_event(dict(EVENT), deps, target_arn=ALIAS_ARN)["status"] == "waiting"
        assert [w.run_id for w in store.leases.waiters("s")] == [CRON_RUN]
        # WHEN the job is paused meanwhile, the session freed, and the wake's fallback schedule fires
        store.jobs.update_job("j", enabled=False)
        assert store.leases.release("s", token)
        [fallback] = schedules_of(resources).values()
        again = on_cron_event(json.loads(fallback["Target"]["Input"]), deps, target_arn=ALIAS_ARN)
        # THEN it does not run, and it is nobody's to hand the session to any more
        assert again["status"] == "skipped", again
        assert store.leases.waiters("s") == []
        assert store.records.get_run(CRON_RUN) is None


def test_a_live_turns_end_passes_a_cron_waiter_it_cannot_send_and_hands_the_session_to_the_result_behind_it(
    resources: Resources, store: DynamoStore
) -> None:
    from agentwake.product.sessions import SessionsService

    with CountingReceiver() as receiver:
        deps = cron_deps(resources, store, receiver, ("a", "x"))
        live = SessionsService(store, deps.result_queue)
        # GIVEN a live turn holding s, the cron wake waiting first and x (a result) behind it
        with live.live_turn("s") as turn:
            assert on_cron_event(dict(EVENT), deps, target_arn=ALIAS_ARN)["status"] == "waiting"
            park(deps, "x")
            assert [w.run_id for w in store.leases.waiters("s")] == [CRON_RUN, "bg:x"]
            sent_before = len(deps.result_queue.sent)  # type: ignore[union-attr]
        # WHEN the turn ends (the product API has no route to send a cron wake's copy on)
        # THEN the session is not given back to nobody: x, behind the cron wake, is handed it
        assert lease_holder(store, "s") is not None and lease_holder(store, "s")[0] == "bg:x"  # type: ignore[index]
        [copy] = deps.result_queue.sent[sent_before:]  # type: ignore[union-attr]
        assert json.loads(copy["body"])["task_id"] == "x"
        # and the cron wake keeps its place: its fallback schedule still carries it
        assert [w.run_id for w in store.leases.waiters("s")][0] == CRON_RUN
        assert any(not n.startswith("handed-") for n in schedules_of(resources)), turn
