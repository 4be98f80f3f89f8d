"""The agent schedules its own wakes (issue 33, item 1; docs/self-scheduling.md), on moto with the
scripted provider calling the tools: a wake scheduled "in 2m" is one job that fires once with its
note in the prompt; a crash or an AWS fault at every call of the creation leaves one job after the
retry; each guardrail is a tool result and the run ends DONE; a cancelled wake never wakes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest

from agentwake import bootstrap
from agentwake.agent.tools.self_wakes import ScheduleWake
from agentwake.domain.models import SelfWakePolicy
from agentwake.domain.run_models import Job
from agentwake.handlers import cron_wake
from agentwake.jobs.self_wakes import wake_job_id
from agentwake.store.dynamo import DynamoStore
from agentwake.wake.background import wake_for_background_result
from tests.support.aws import REGION, FakeLambdaContext, Resources
from tests.support.builders import message, seed_session, seed_task
from tests.support.faults import CallFaults, around
from tests.support.model_calls import record_model_requests

CRON_ARN = "arn:aws:lambda:us-east-1:123456789012:function:agentwake-CronWakeFunction:live"
ROLE_ARN = "arn:aws:iam::123456789012:role/agentwake-SchedulerRole"
SESSION = "s-wakes"
RUN = "bg:t1"
NOTE = "check whether the deploy of build 42 finished; tell the user if it failed"


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def done(text: str = "Scheduled.") -> dict[str, Any]:
    return {"text": text}


@pytest.fixture
def env(resources: Resources, monkeypatch: pytest.MonkeyPatch) -> Iterator[Resources]:
    # the background-result function's environment: its schedules invoke the cron alias
    monkeypatch.setenv("AGENTWAKE_SCHEDULER_ROLE_ARN", ROLE_ARN)
    monkeypatch.setenv("AGENTWAKE_CRON_FUNCTION_ARN", CRON_ARN)
    bootstrap.reset_caches()
    yield resources
    bootstrap.reset_caches()


def seed(store: DynamoStore, script: list[dict[str, Any]], policy: SelfWakePolicy | None = None) -> None:
    seed_session(
        store,
        SESSION,
        providers=[{"type": "scripted", "id": "p", "script": script}],
        self_wakes=policy or SelfWakePolicy(),
    )


def wake_once(store: DynamoStore) -> Any:
    """The background wake of task t1 (the run that schedules), as the deployed function builds it."""
    return wake_for_background_result(message("t1", SESSION), bootstrap.wake_deps())


def agent_jobs(store: DynamoStore) -> list[Job]:
    return [j for j in store.records.list_jobs() if j.origin == "agent"]


def schedules(env: Resources) -> list[dict[str, Any]]:
    client = boto3.client("scheduler", region_name=REGION)
    names = [s["Name"] for s in client.list_schedules(GroupName=env.schedule_group)["Schedules"]]
    return [client.get_schedule(Name=n, GroupName=env.schedule_group) for n in names]


def tool_results(store: DynamoStore, run_id: str) -> list[str]:
    entries = store.journals.journal_entries(run_id)
    return [str(v.get("content")) for k, v in sorted(entries.items()) if ".tool." in k]


def fire(job: Job) -> dict[str, Any]:
    """The job's schedule firing: the cron function invoked with the input the Scheduler sends."""
    at = job.schedule_expression.removeprefix("at(").removesuffix(")")
    event = {"job_id": job.job_id, "scheduled_time": at + "Z", "session_id": job.session_id}
    return cron_wake.handler(event, FakeLambdaContext())


# ------------------------------------------------------------------ schedule, fire once, note in the prompt


def test_a_wake_scheduled_in_2_minutes_is_one_job_that_fires_once_with_its_note(
    store: DynamoStore, env: Resources, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a session whose agent may schedule its own wakes, woken by a finished task; its model
    # schedules a wake in 2 minutes with a note, then ends
    seed(store, [call("schedule_wake", **{"in": "2m", "note": NOTE}), done()])
    seed_task(store, "t1", SESSION)
    before = datetime.now(UTC)

    # WHEN the task's wake runs
    outcome = wake_once(store)

    # THEN the run is DONE and made exactly one job: an agent wake, one-time, about 2 minutes ahead,
    # marked with the run and the tool call that created it, carrying the note
    assert outcome is not None and outcome.status == "succeeded"
    [job] = agent_jobs(store)
    assert job.job_id == wake_job_id(f"{RUN}#0#0")
    assert (job.created_by_run, job.created_by_call, job.note) == (RUN, f"{RUN}#0#0", NOTE)
    assert job.run_once and job.enabled and job.session_id == SESSION
    at = datetime.fromisoformat(job.schedule_expression.removeprefix("at(").removesuffix(")")).replace(tzinfo=UTC)
    assert 100 <= (at - before).total_seconds() <= 140
    # AND its one schedule invokes the cron alias with the job's input, once
    [schedule] = schedules(env)
    assert schedule["Target"]["Arn"] == CRON_ARN and schedule["ActionAfterCompletion"] == "DELETE"
    assert json.loads(schedule["Target"]["Input"])["job_id"] == job.job_id
    assert tool_results(store, RUN)[0].startswith(f"scheduled {job.job_id}: next ")

    # WHEN the schedule fires (its model now just answers)
    seed(store, [done("The deploy finished.")])
    requests = record_model_requests(monkeypatch)
    result = fire(job)

    # THEN that run ran once, with the note in its prompt, and the one-time wake is done
    assert result["status"] == "succeeded" and result["run_id"].startswith(f"cron:{job.job_id}:")
    system = requests[0][0][1]
    assert f"A note you left for yourself when you scheduled this wake: {NOTE}" in system
    after = store.records.get_job(job.job_id)
    assert after is not None and not after.enabled and after.fires == 1
    assert schedules(env) == []
    # AND the same fire delivered again (the Scheduler retries) runs nothing more
    assert fire(job)["status"] == "skipped"
    assert len(requests) == 1


# ------------------------------------------------------------------ exactly once across a crash


class Crash(Exception):
    pass


def test_a_run_that_crashes_after_the_wake_was_created_leaves_one_job_after_its_retry(
    store: DynamoStore, env: Resources, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the scheduling run, which dies right after schedule_wake returned (before its result is journaled)
    seed(store, [call("schedule_wake", **{"in": "2h", "note": NOTE}), done()])
    seed_task(store, "t1", SESSION)
    deps = bootstrap.wake_deps()
    crashes = [1]

    def put(original: Any, run_id: str, key: str, value: dict[str, Any], **kw: Any) -> None:
        if ".tool." in key and crashes:
            crashes.pop()
            raise Crash("the Lambda died before the tool result was journaled")
        original(run_id, key, value, **kw)

    around(deps.store.journals, "journal_put", put)
    with pytest.raises(Crash):
        wake_once(store)
    assert len(agent_jobs(store)) == 1  # it had been created

    # WHEN the record is received again and the run retried
    outcome = wake_once(store)

    # THEN the run is DONE with the one job and one schedule the first attempt made
    assert outcome is not None and outcome.status == "succeeded"
    assert len(agent_jobs(store)) == 1 and len(schedules(env)) == 1
    assert tool_results(store, RUN)[0].startswith("already scheduled wake-")


#: the AWS calls of one schedule_wake, in order (test_the_creation_makes_exactly_these_calls)
CREATION_CALLS = [
    "GetItem",  # the job this call would make: there already? (a retry)
    "Query",  # the session's pending wakes (max_pending)
    "GetItem",  # JobsService.create: the job again
    "GetItem",  # the session exists
    "PutItem",  # the job
    "CreateSchedule",  # its schedule
]
AWS_FAULTS = ("throttling", "server_error", "timeout_before", "timeout_after")


def _faults(deps: Any) -> CallFaults:
    faults = CallFaults(deps.store.table.db)
    faults.also(deps.schedules.client, "scheduler")
    return faults


def _creation_window(monkeypatch: pytest.MonkeyPatch, faults: CallFaults) -> list[tuple[int, int]]:
    """Where in ``faults.calls`` each schedule_wake call began and ended."""
    windows: list[tuple[int, int]] = []
    invoke = ScheduleWake.invoke

    def watched(self: ScheduleWake, args: Any, ctx: Any) -> str:
        start = len(faults.calls)
        try:
            return invoke(self, args, ctx)
        finally:
            windows.append((start, len(faults.calls)))

    monkeypatch.setattr(ScheduleWake, "invoke", watched)
    return windows


def test_the_creation_makes_exactly_these_calls(
    store: DynamoStore, env: Resources, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the scheduling run with every AWS call it makes counted
    seed(store, [call("schedule_wake", **{"in": "2h"}), done()])
    seed_task(store, "t1", SESSION)
    faults = _faults(bootstrap.wake_deps())
    windows = _creation_window(monkeypatch, faults)
    faults.arm(None)
    # WHEN it runs clean  THEN schedule_wake makes exactly the calls the fault matrix below faults
    assert wake_once(store) is not None
    [(start, end)] = windows
    assert faults.calls[start:end] == CREATION_CALLS


@pytest.mark.parametrize("kind", AWS_FAULTS)
@pytest.mark.parametrize("n", range(len(CREATION_CALLS)), ids=[f"{i + 1}-{c}" for i, c in enumerate(CREATION_CALLS)])
def test_a_fault_at_every_call_of_the_creation_leaves_one_job(
    n: int, kind: str, store: DynamoStore, env: Resources, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the scheduling run, and one fault at the n-th AWS call of its schedule_wake
    seed(store, [call("schedule_wake", **{"in": "2h", "note": NOTE}), done()])
    seed_task(store, "t1", SESSION)
    deps = bootstrap.wake_deps()
    faults = _faults(deps)
    faults.arm(None)
    attempts: list[int] = []
    invoke = ScheduleWake.invoke

    def armed(self: ScheduleWake, args: Any, ctx: Any) -> str:
        if not attempts:  # the first attempt's call: the fault at its n-th AWS call
            faults.at, faults.kind = len(faults.calls) + n + 1, kind
        attempts.append(len(faults.calls))
        return invoke(self, args, ctx)

    monkeypatch.setattr(ScheduleWake, "invoke", armed)

    # WHEN the record is received until it is handled (SQS's retries)
    outcome, errors = None, []
    for _ in range(5):
        try:
            outcome = wake_for_background_result(message("t1", SESSION), deps)
            break
        except Exception as exc:  # noqa: BLE001 -- a failed attempt: received again
            errors.append(exc)

    # THEN the fault fired at that call, and the run ended DONE with exactly one wake and one schedule
    assert faults.fired is not None and faults.fired[1] == CREATION_CALLS[n], faults.fired
    assert outcome is not None and outcome.status == "succeeded", errors
    [job] = agent_jobs(store)
    assert job.created_by_call == f"{RUN}#0#0" and job.note == NOTE
    [schedule] = schedules(env)
    assert json.loads(schedule["Target"]["Input"])["job_id"] == job.job_id
    # AND the schedule fires when the job says it does (a retry does not move the time)
    assert schedule["ScheduleExpression"] == job.schedule_expression
    # AND the model was told it is scheduled (never an "error:" about a wake that exists)
    assert "scheduled" in tool_results(store, RUN)[0] and "error" not in tool_results(store, RUN)[0]


# ------------------------------------------------------------------ guardrails are tool results


GUARDRAILS = {
    "max_pending": (
        SelfWakePolicy(max_pending=1),
        [call("schedule_wake", **{"in": "1h"}), call("schedule_wake", **{"in": "2h"}), done()],
        "max_pending=1",
    ),
    "max_days_ahead": (
        SelfWakePolicy(max_days_ahead=2),
        [call("schedule_wake", **{"in": "3d"}), done()],
        "more than 2 days ahead (max_days_ahead)",
    ),
    "max_fires": (
        SelfWakePolicy(max_fires=4),
        [call("schedule_wake", rate="2 hours", max_fires=10), done()],
        "at most 4 times here (max_fires)",
    ),
    "min_interval_s": (
        SelfWakePolicy(),
        [call("schedule_wake", rate="5 minutes"), done()],
        "more often than once every 3600 s (min_interval_s)",
    ),
    "min_interval_s_cron": (
        SelfWakePolicy(min_interval_s=7200),
        [call("schedule_wake", cron="0 9,10 * * ? *"), done()],
        "min_interval_s",
    ),
    "past": (SelfWakePolicy(), [call("schedule_wake", at="2020-01-01T09:00:00"), done()], "never fires after now"),
    "bad_duration": (SelfWakePolicy(), [call("schedule_wake", **{"in": "soon"}), done()], "'in' must be a duration"),
    "two_kinds": (
        SelfWakePolicy(),
        [call("schedule_wake", **{"in": "1h"}, rate="1 day"), done()],
        "exactly one of 'at'",
    ),
}


@pytest.mark.parametrize("case", list(GUARDRAILS))
def test_each_guardrail_refusal_is_a_tool_result_and_the_run_is_done(
    case: str, store: DynamoStore, env: Resources
) -> None:
    # GIVEN a session whose policy a schedule_wake call goes over
    policy, script, words = GUARDRAILS[case]
    seed(store, script, policy)
    seed_task(store, "t1", SESSION)

    # WHEN the wake runs
    outcome = wake_once(store)

    # THEN the run is DONE; the model read a refusal naming the limit; nothing over it was created
    assert outcome is not None and outcome.status == "succeeded"
    refused = [r for r in tool_results(store, RUN) if r.startswith("refused:")]
    assert len(refused) == 1 and words in refused[0], tool_results(store, RUN)
    assert len(agent_jobs(store)) == (1 if case == "max_pending" else 0)
    assert len(schedules(env)) == len(agent_jobs(store))


def test_a_recurring_wake_stops_after_its_max_fires_and_jobs_show_says_why(store: DynamoStore, env: Resources) -> None:
    # GIVEN a recurring wake of at most 2 fires
    seed(store, [call("schedule_wake", rate="2 hours", max_fires=2, note="poll"), done()])
    seed_task(store, "t1", SESSION)
    wake_once(store)
    [job] = agent_jobs(store)
    assert (job.max_fires, job.run_once) == (2, False)
    seed(store, [done("Polled.")])

    # WHEN it fires twice
    for hour in ("08", "10"):
        event = {"job_id": job.job_id, "scheduled_time": f"2026-12-03T{hour}:00:00Z", "session_id": SESSION}
        assert cron_wake.handler(event, FakeLambdaContext())["status"] == "succeeded"

    # THEN it counted both fires and disabled itself, saying why; its schedule is gone
    after = store.records.get_job(job.job_id)
    assert after is not None and after.fires == 2 and not after.enabled
    assert after.disabled_reason == "stopped after 2 fires (its max_fires)"
    assert schedules(env) == []
    # AND a third fire runs nothing
    event = {"job_id": job.job_id, "scheduled_time": "2026-12-03T12:00:00Z", "session_id": SESSION}
    assert cron_wake.handler(event, FakeLambdaContext())["status"] == "skipped"


# ------------------------------------------------------------------ cancel


def test_cancel_before_the_fire_means_no_wake(
    store: DynamoStore, env: Resources, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a run that schedules a wake, then cancels it, then cancels it again
    job_id = wake_job_id(f"{RUN}#0#0")
    seed(
        store,
        [
            call("schedule_wake", **{"in": "2m", "note": NOTE}),
            call("cancel_wake", wake_id=job_id),
            call("cancel_wake", wake_id=job_id),
            call("list_wakes"),
            done(),
        ],
    )
    seed_task(store, "t1", SESSION)

    # WHEN it runs
    outcome = wake_once(store)

    # THEN it is DONE; the first cancel cancelled, the second says so, and no wake is pending
    assert outcome is not None and outcome.status == "succeeded"
    results = tool_results(store, RUN)
    assert results[1] == f"cancelled {job_id}: it will not wake you"
    assert results[2].startswith(f"{job_id} is already cancelled (cancelled by the agent (run {RUN}))")
    assert results[3] == "you have no pending wakes"
    # AND the schedule is gone; the job is kept, disabled, saying who cancelled it
    assert schedules(env) == []
    job = store.records.get_job(job_id)
    assert job is not None and not job.enabled and job.disabled_reason == f"cancelled by the agent (run {RUN})"

    # WHEN the old schedule's input arrives anyway (sent before the delete)
    requests = record_model_requests(monkeypatch)
    result = fire(job)

    # THEN the cron wake skips it: no run, no model call, no note in the history
    assert result["status"] == "skipped"
    assert requests == []
    assert store.records.get_run(result["run_id"]) is None
    assert [e for e in store.history.history(SESSION) if e.run_id == result["run_id"]] == []
    # AND once an operator deleted the job too (jobs delete), that input is still skipped, harmlessly
    store.records.delete_job(job_id)
    assert fire(job)["status"] == "skipped" and requests == []
    assert store.records.get_run(result["run_id"]) is None


def test_cancel_refuses_a_job_that_is_not_this_agents_wake(store: DynamoStore, env: Resources) -> None:
    from tests.support.builders import seed_job

    # GIVEN an operator's job in this session and an agent wake of another session
    seed_job(store, "job-op", SESSION)
    seed_job(store, "wake-other", "s-other", origin="agent")
    seed(store, [call("cancel_wake", wake_id="job-op"), call("cancel_wake", wake_id="wake-other"), done()])
    seed_task(store, "t1", SESSION)

    # WHEN the agent tries to cancel both
    outcome = wake_once(store)

    # THEN both are refused as tool results, and both jobs stay enabled
    assert outcome is not None and outcome.status == "succeeded"
    first, second = tool_results(store, RUN)
    assert first.startswith("refused: 'job-op' is a job an operator or the product created")
    assert second.startswith("refused: there is no wake 'wake-other' in this conversation")
    assert all(j.enabled for j in store.records.list_jobs())


def test_the_tools_are_offered_only_when_the_session_allows_them(store: DynamoStore, env: Resources) -> None:
    # GIVEN a session without self_wakes whose model calls schedule_wake anyway
    seed_session(
        store,
        SESSION,
        providers=[{"type": "scripted", "id": "p", "script": [call("schedule_wake", **{"in": "1h"}), done()]}],
    )
    seed_task(store, "t1", SESSION)
    # WHEN it runs  THEN the tool is unknown to it and no job is made
    wake_once(store)
    assert tool_results(store, RUN)[0].startswith("error: unknown tool 'schedule_wake'")
    assert agent_jobs(store) == []


def test_a_what_if_replay_never_schedules_or_cancels(store: DynamoStore, env: Resources) -> None:
    from agentwake.errors import RunFailed
    from agentwake_ops.replay import replay
    from tests.support.builders import seed_job

    # GIVEN an agent wake of the session, and a run whose every provider failed at its first step
    seed_job(store, "wake-kept", SESSION, origin="agent", note=NOTE)
    seed(store, [{"error": "auth"}])
    seed_task(store, "t1", SESSION)
    with pytest.raises(RunFailed):
        wake_once(store)

    # WHEN it is replayed with a model that cancels that wake, schedules another and lists them
    what_if = [
        call("cancel_wake", wake_id="wake-kept"),
        call("schedule_wake", **{"in": "1h"}),
        call("list_wakes"),
        done(),
    ]
    outcome = replay(store, RUN, providers=[{"type": "scripted", "id": "w", "script": what_if}])

    # THEN the side-effecting calls were not made (the replay says so); the read ran; nothing changed
    assert outcome.state == "DONE", outcome.final_text
    assert [c["tool"] for c in outcome.not_called] == ["cancel_wake", "schedule_wake"]
    listed = [e for e in outcome.events if e.kind == "tool" and e.data.get("name") == "list_wakes"]
    assert listed and "wake-kept" in str(listed[0].data.get("result"))
    [job] = agent_jobs(store)
    assert job.job_id == "wake-kept" and job.enabled and schedules(env) == []


def test_a_cron_wake_schedules_wakes_that_invoke_the_cron_function_itself(
    store: DynamoStore, resources: Resources, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support.builders import seed_job

    # GIVEN the cron function's environment: no AGENTWAKE_CRON_FUNCTION_ARN (in Globals it would be a cycle)
    monkeypatch.setenv("AGENTWAKE_SCHEDULER_ROLE_ARN", ROLE_ARN)
    monkeypatch.delenv("AGENTWAKE_CRON_FUNCTION_ARN", raising=False)
    bootstrap.reset_caches()
    # AND an operator's daily job whose run schedules a follow-up
    seed(store, [call("schedule_wake", **{"in": "1h", "note": "look again"}), done()])
    seed_job(store, "job-daily", SESSION)
    event = {"job_id": "job-daily", "scheduled_time": "2026-12-03T06:00:00Z", "session_id": SESSION}

    # WHEN the schedule invokes the cron function
    assert cron_wake.handler(event, FakeLambdaContext())["status"] == "succeeded"

    # THEN the wake's schedule invokes the function that ran it (its invoked ARN)
    [job] = agent_jobs(store)
    [schedule] = schedules(resources)
    assert schedule["Target"]["Arn"] == FakeLambdaContext.invoked_function_arn
    assert job.created_by_run == "cron:job-daily:2026-12-03T06:00:00Z"
