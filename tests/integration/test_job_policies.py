"""A job's policies on moto, with the local stack's scheduler ticked by an injected clock:
overlap (skip / buffer_one), missed fires caught up on resume (none / latest / all), pause after
failed runs in a row, update in place, backfill and trigger (docs/operations.md, "Job policies")."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from agentwake.bootstrap import reset_caches
from agentwake.domain.run_models import Job
from agentwake.handlers import cron_wake
from agentwake.jobs.service import JobError, JobsService, JobTargets
from agentwake.store.dynamo import DynamoStore
from agentwake.store.schedules import Schedules
from agentwake_local import timing
from agentwake_local.scheduler import LocalScheduler
from tests.support.aws import REGION, FakeLambdaContext, Resources
from tests.support.builders import FAILING_PROVIDERS, seed_session

ALIAS_ARN = "arn:aws:lambda:us-east-1:123456789012:function:agentwake-CronWakeFunction:live"
ROLE_ARN = "arn:aws:iam::123456789012:role/agentwake-SchedulerRole"
SESSION = "session-jobs"


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Harness:
    """The jobs API and the local scheduler on one injected clock; every invocation of the cron
    function (by a fire or the API) runs the real handler here, like Lambda's async invoke."""

    store: DynamoStore
    jobs: JobsService
    scheduler: LocalScheduler
    start: datetime
    now: datetime
    outcomes: list[dict[str, Any]] = field(default_factory=list)
    #: the Lambda async retries each failed invocation gets (CronMaximumRetryAttempts)
    retries: int = 1
    metrics: list[tuple[str, int]] = field(default_factory=list)
    #: scheduled times whose run takes longer than a minute: the fire starts it and it holds the session
    long_runs: dict[str, Any] = field(default_factory=dict)

    def invoke(self, _arn: str, event: dict[str, Any]) -> None:
        if event.get("scheduled_time") in self.long_runs and self.long_runs[event["scheduled_time"]] is None:
            run_id = f"cron:{event['job_id']}:{event['scheduled_time']}"
            self.long_runs[event["scheduled_time"]] = self.store.runs.begin_run(
                run_id=run_id, kind="cron", session_id=SESSION, seconds=900, previous=None, job_id=event["job_id"]
            )
            self.outcomes.append({"status": "running", "event": event})
            return
        for _ in range(1 + self.retries):
            try:
                self.outcomes.append({**cron_wake.handler(event, FakeLambdaContext()), "event": event})
                return
            except Exception as exc:  # Lambda would retry, then send it to the on-failure destination
                self.outcomes.append({"status": "raised", "error": f"{type(exc).__name__}: {exc}", "event": event})

    def tick(self, moment: datetime) -> list[str]:
        self.now = moment
        return [iso(f.scheduled_time) for f in self.scheduler.tick(moment) if f.outcome == "invoked"]

    def job_runs(self, job_id: str) -> list[str]:
        return sorted(r.run_id for r in self.jobs.show(job_id, runs=100).runs)

    def notes(self) -> list[Any]:
        return [e for e in self.store.history.history(SESSION) if e.kind == "note"]


@pytest.fixture
def h(store: DynamoStore, resources: Resources, monkeypatch: pytest.MonkeyPatch) -> Harness:
    # a busy session's wake comes back through a one-time schedule (the stack's role passes it)
    monkeypatch.setenv("AGENTWAKE_SCHEDULER_ROLE_ARN", ROLE_ARN)
    reset_caches()
    # the minute the test starts in: moto stamps a schedule's creation with the wall clock, and the
    # scheduler counts a job created after its first tick from that tick
    start = datetime.now(UTC).replace(second=0, microsecond=0)
    schedules = Schedules(resources.schedule_group, client=boto3.client("scheduler", region_name=REGION))
    holder: dict[str, Harness] = {}
    jobs = JobsService(
        store,
        schedules,
        JobTargets(cron_function_arn=ALIAS_ARN, scheduler_role_arn=ROLE_ARN),
        invoker=lambda arn, payload: holder["h"].invoke(arn, payload),
        clock=lambda: holder["h"].now,
        metric=lambda name, value: holder["h"].metrics.append((name, value)),
    )
    scheduler = LocalScheduler(
        boto3.client("scheduler", region_name=REGION),
        boto3.client("sqs", region_name=REGION),
        lambda arn, event: holder["h"].invoke(arn, event),
        timing=timing.local(),
    )
    holder["h"] = Harness(store, jobs, scheduler, start, start)
    seed_session(store, SESSION)
    return holder["h"]


def every_minute(h: Harness, **policies: Any) -> Job:
    job = h.jobs.create(session_id=SESSION, name="Minutely", cron="* * * * ? *", **policies)
    assert h.tick(h.now) == []  # the scheduler sees it: its first fire is the next minute
    return job


def minute(h: Harness, n: int) -> datetime:
    return h.start + timedelta(minutes=n)


def statuses(h: Harness, moment: datetime) -> list[str]:
    return [o["status"] for o in h.outcomes if o["event"]["scheduled_time"] == iso(moment)]


# ------------------------------------------------------------------ overlap


def test_skip_records_a_fire_that_comes_while_the_previous_run_is_going(h: Harness) -> None:
    # GIVEN a job with overlap skip whose run of minute 1 takes longer than a minute
    job = every_minute(h, overlap="skip")
    h.long_runs[iso(minute(h, 1))] = None
    assert h.tick(minute(h, 1) + timedelta(seconds=1)) == [iso(minute(h, 1))]
    # WHEN minute 2 fires while it is still going
    assert h.tick(minute(h, 2) + timedelta(seconds=1)) == [iso(minute(h, 2))]
    # THEN minute 2 is skipped, recorded with its run id and the reason, and counted; one run
    assert statuses(h, minute(h, 2)) == ["skipped"]
    view = h.jobs.show(job.job_id)
    [skipped] = view.skipped
    assert skipped.scheduled_time == iso(minute(h, 2))
    assert skipped.run_id == f"cron:{job.job_id}:{iso(minute(h, 2))}"
    assert f"cron:{job.job_id}:{iso(minute(h, 1))}" in skipped.reason and "still running" in skipped.reason
    assert view.job.skipped_fires == 1
    assert h.job_runs(job.job_id) == [f"cron:{job.job_id}:{iso(minute(h, 1))}"]
    assert h.notes() == []


def test_buffer_one_queues_exactly_one_fire_behind_the_running_run(h: Harness) -> None:
    # GIVEN a job with overlap buffer_one whose run of minute 1 is still going
    job = every_minute(h, overlap="buffer_one")
    h.long_runs[iso(minute(h, 1))] = None
    h.tick(minute(h, 1) + timedelta(seconds=1))
    # WHEN minutes 2, 3 and 4 fire meanwhile
    for n in (2, 3, 4):
        h.tick(minute(h, n) + timedelta(seconds=1))
    # THEN minute 2 waits for the session (the one buffered fire); 3 and 4 are skipped and recorded
    assert statuses(h, minute(h, 2))[0] == "waiting", h.outcomes
    assert set(statuses(h, minute(h, 2))) == {"waiting"}
    assert statuses(h, minute(h, 3)) == ["skipped"] and statuses(h, minute(h, 4)) == ["skipped"]
    view = h.jobs.show(job.job_id)
    assert view.job.buffered_run_id == f"cron:{job.job_id}:{iso(minute(h, 2))}"
    assert sorted(f.scheduled_time for f in view.skipped) == [iso(minute(h, 3)), iso(minute(h, 4))]
    assert all("already waiting" in f.reason for f in view.skipped)
    # WHEN minute 1's run ends and the buffered fire comes back
    lease = h.long_runs[iso(minute(h, 1))]
    h.store.leases.release(SESSION, lease.token)
    h.scheduler.firings.clear()
    later = minute(h, 4) + timedelta(seconds=50)  # before minute 5: only the waiting fire is due
    h.tick(later)
    # THEN it runs (one note) and the buffered place is free again
    assert statuses(h, minute(h, 2))[-1] == "succeeded"
    assert len(h.notes()) == 1
    assert h.jobs.get(job.job_id).buffered_run_id is None


# ------------------------------------------------------------------ missed fires and catch-up


def paused_for_five_fires(h: Harness, catch_up: str) -> Job:
    """A job that ran at minute 1, was paused, and missed minutes 2..6."""
    job = every_minute(h, catch_up=catch_up)
    assert h.tick(minute(h, 1) + timedelta(seconds=1)) == [iso(minute(h, 1))]
    h.now = minute(h, 1) + timedelta(seconds=30)
    h.jobs.pause(job.job_id)
    assert h.jobs.schedules.get(job.schedule_name or "")["State"] == "DISABLED"
    for n in range(2, 7):
        assert h.tick(minute(h, n) + timedelta(seconds=1)) == []  # a paused job's schedule does not fire
    h.now = minute(h, 6) + timedelta(seconds=30)
    return job


@pytest.mark.parametrize(("catch_up", "caught_up_minutes"), [("latest", [6]), ("all", [2, 3, 4, 5, 6]), ("none", [])])
def test_resume_catches_up_missed_fires_by_policy(h: Harness, catch_up: str, caught_up_minutes: list[int]) -> None:
    # GIVEN a job paused for 5 fire times
    job = paused_for_five_fires(h, catch_up)
    missed = [iso(minute(h, n)) for n in range(2, 7)]
    # THEN while paused, `jobs show` knows what it is missing
    assert h.jobs.show(job.job_id).missing_now == missed
    # WHEN it is resumed
    result = h.jobs.resume(job.job_id)
    # THEN the policy's runs ran, with the run ids their own fires would have had
    expected = [f"cron:{job.job_id}:{iso(minute(h, n))}" for n in caught_up_minutes]
    assert result.caught_up == expected
    assert result.missed == missed
    assert h.job_runs(job.job_id) == sorted([f"cron:{job.job_id}:{iso(minute(h, 1))}", *expected])
    assert len(h.notes()) == 1 + len(expected)
    # AND every missed time is listed, with what became of it; counted, and the metric says so
    view = h.jobs.show(job.job_id)
    assert sorted(f.scheduled_time for f in view.missed) == missed
    caught = sorted(f.scheduled_time for f in view.missed if f.outcome == "caught up")
    assert caught == [iso(minute(h, n)) for n in caught_up_minutes]
    assert view.job.missed_fires == 5 and not view.job.paused
    assert ("MissedFires", 5) in h.metrics
    assert h.jobs.schedules.get(job.schedule_name or "")["State"] == "ENABLED"


def test_a_fire_and_its_catch_up_for_the_same_time_write_one_note(h: Harness) -> None:
    # GIVEN a job resumed with catch-up latest: minute 6 ran as its catch-up
    job = paused_for_five_fires(h, "latest")
    h.jobs.resume(job.job_id)
    assert len(h.notes()) == 2
    # WHEN minute 6's own fire arrives late (the Scheduler's input, as it would send it)
    h.invoke(ALIAS_ARN, {"job_id": job.job_id, "scheduled_time": iso(minute(h, 6)), "session_id": SESSION})
    # THEN it is the same run: already succeeded, no second note
    assert statuses(h, minute(h, 6)) == ["succeeded", "already_succeeded"]
    assert len(h.notes()) == 2


# ------------------------------------------------------------------ pause after failures


def test_three_failed_runs_in_a_row_pause_the_job_until_it_is_resumed(h: Harness, resources: Resources) -> None:
    # GIVEN a job (pause after 3 failures, the default) whose every run fails
    seed_session(h.store, SESSION, providers=FAILING_PROVIDERS)
    job = every_minute(h)
    assert job.pause_after_failures == 3
    # WHEN minutes 1, 2 and 3 fire (each failed run retried once by Lambda)
    for n in (1, 2, 3):
        h.tick(minute(h, n) + timedelta(seconds=1))
    # THEN the job is paused, saying why and by which run
    paused = h.jobs.get(job.job_id)
    third = f"cron:{job.job_id}:{iso(minute(h, 3))}"
    assert paused.paused and paused.pause_run_id == third
    assert "3 failed runs in a row" in (paused.pause_reason or "") and third in (paused.pause_reason or "")
    # AND its schedule is disabled, as the Scheduler API reads it back
    schedule = boto3.client("scheduler", region_name=REGION).get_schedule(
        Name=job.schedule_name, GroupName=resources.schedule_group
    )
    assert schedule["State"] == "DISABLED"
    assert schedule["ScheduleExpression"] == "cron(* * * * ? *)"  # the rest of it unchanged
    # AND the retry of the third run does nothing; a run is counted once, however many attempts
    assert statuses(h, minute(h, 1)) == ["raised", "raised"]
    assert statuses(h, minute(h, 3)) == ["raised", "skipped"]
    # AND no fourth invocation: minutes 4 and 5 do not fire
    assert h.tick(minute(h, 4) + timedelta(seconds=1)) == []
    assert h.tick(minute(h, 5) + timedelta(seconds=1)) == []
    assert h.job_runs(job.job_id) == sorted(f"cron:{job.job_id}:{iso(minute(h, n))}" for n in (1, 2, 3))
    # WHEN the session is fixed and the job resumed (catch-up latest: minute 5)
    seed_session(h.store, SESSION)
    h.now = minute(h, 5) + timedelta(seconds=30)
    result = h.jobs.resume(job.job_id)
    assert result.missed == [iso(minute(h, 4)), iso(minute(h, 5))]  # the fires after the run that paused it
    assert result.caught_up == [f"cron:{job.job_id}:{iso(minute(h, 5))}"]
    resumed = h.jobs.get(job.job_id)
    assert not resumed.paused and resumed.consecutive_failures == 0
    # THEN it fires again
    assert h.tick(minute(h, 6) + timedelta(seconds=1)) == [iso(minute(h, 6))]
    assert statuses(h, minute(h, 6)) == ["succeeded"]


def test_pause_after_failures_zero_never_pauses(h: Harness) -> None:
    seed_session(h.store, SESSION, providers=FAILING_PROVIDERS)
    job = every_minute(h, pause_after_failures=0)
    for n in (1, 2, 3, 4):
        h.tick(minute(h, n) + timedelta(seconds=1))
    after = h.jobs.get(job.job_id)
    assert not after.paused and after.consecutive_failures == 4
    assert h.tick(minute(h, 5) + timedelta(seconds=1)) == [iso(minute(h, 5))]


# ------------------------------------------------------------------ update, backfill, trigger


def test_update_changes_the_next_fires_in_place_and_keeps_the_run_history(h: Harness) -> None:
    # GIVEN a job that ran once
    job = every_minute(h)
    h.tick(minute(h, 1) + timedelta(seconds=1))
    ran = f"cron:{job.job_id}:{iso(minute(h, 1))}"
    created = h.jobs.schedules.get(job.schedule_name or "")["CreationDate"]
    # WHEN its schedule, time zone and policies are updated
    updated = h.jobs.update(
        job.job_id, cron="0 9 * * ? *", timezone="Europe/Berlin", overlap="skip", description="new prompt"
    )
    # THEN the next fires follow the new schedule, the schedule was changed in place
    fires = h.jobs.show(job.job_id).next_fires
    assert fires and all(f.hour == 9 and f.minute == 0 and str(f.tzinfo) == "Europe/Berlin" for f in fires)
    schedule = h.jobs.schedules.get(job.schedule_name or "")
    assert schedule["ScheduleExpression"] == "cron(0 9 * * ? *)"
    assert schedule["ScheduleExpressionTimezone"] == "Europe/Berlin"
    assert schedule["CreationDate"] == created
    assert updated.job_id == job.job_id and updated.overlap == "skip" and updated.description == "new prompt"
    # AND its run history is kept
    assert h.job_runs(job.job_id) == [ran]
    assert h.jobs.show(job.job_id).runs[0].status == "succeeded"


def test_update_refuses_bad_values_and_changes_nothing(h: Harness) -> None:
    job = every_minute(h)
    with pytest.raises(JobError, match="overlap must be one of skip, queue, buffer_one"):
        h.jobs.update(job.job_id, overlap="parallel")  # type: ignore[arg-type]
    with pytest.raises(JobError, match="six fields"):
        h.jobs.update(job.job_id, cron="0 9 * *")
    with pytest.raises(JobError, match="nothing to change"):
        h.jobs.update(job.job_id)
    assert h.jobs.get(job.job_id).schedule_expression == "cron(* * * * ? *)"


def test_backfill_runs_each_time_once_and_again_starts_nothing(h: Harness) -> None:
    # GIVEN a daily job
    job = h.jobs.create(session_id=SESSION, name="Daily", cron="0 6 * * ? *")
    days = [f"2026-11-0{d}T06:00:00Z" for d in range(1, 6)]
    # WHEN a backfill over 5 fire times is planned (a dry run, the default)
    plan = h.jobs.backfill(job.job_id, "2026-11-01T00:00:00Z", "2026-11-05T12:00:00Z")
    # THEN it lists them and runs nothing
    assert plan.dry_run and plan.to_run == days and h.outcomes == []
    assert plan.run_ids == [f"cron:{job.job_id}:{d}" for d in days]
    # WHEN it is carried out  THEN 5 runs, with the fires' own run ids
    done = h.jobs.backfill(job.job_id, "2026-11-01T00:00:00Z", "2026-11-05T12:00:00Z", dry_run=False)
    assert done.to_run == days
    assert h.job_runs(job.job_id) == sorted(plan.run_ids) and len(h.notes()) == 5
    # WHEN the same backfill runs again  THEN nothing new runs
    again = h.jobs.backfill(job.job_id, "2026-11-01T00:00:00Z", "2026-11-05T12:00:00Z", dry_run=False)
    assert again.to_run == [] and again.existing == days
    assert len(h.outcomes) == 5 and len(h.notes()) == 5


def test_backfill_over_its_cap_is_refused(h: Harness) -> None:
    job = h.jobs.create(session_id=SESSION, name="Daily", cron="0 6 * * ? *")
    with pytest.raises(JobError, match="10 fire times .* more than the cap of 5"):
        h.jobs.backfill(job.job_id, "2026-11-01T00:00:00Z", "2026-11-10T12:00:00Z", cap=5, dry_run=False)
    with pytest.raises(JobError, match="before --from"):
        h.jobs.backfill(job.job_id, "2026-11-05T00:00:00Z", "2026-11-01T00:00:00Z")
    with pytest.raises(JobError, match="in the future"):
        h.jobs.backfill(job.job_id, "2026-11-01T00:00:00Z", iso(h.now + timedelta(days=1)))
    assert h.outcomes == []


def test_trigger_runs_one_scheduled_time_with_its_run_id(h: Harness) -> None:
    job = h.jobs.create(session_id=SESSION, name="Daily", cron="0 6 * * ? *")
    run_id = h.jobs.trigger(job.job_id, "2026-11-03T07:00:00+01:00")
    assert run_id == f"cron:{job.job_id}:2026-11-03T06:00:00Z"
    assert h.jobs.trigger(job.job_id, "2026-11-03T06:00:00Z") == run_id
    assert [o["status"] for o in h.outcomes] == ["succeeded", "already_succeeded"]
    assert len(h.notes()) == 1


def test_local_up_lines_name_the_paused_job_and_its_missed_fires(h: Harness) -> None:
    from agentwake_local.job_watch import JobWatch

    # GIVEN `local up`'s watch over the jobs, and a job that runs on schedule
    watch = JobWatch(h.store)
    job = every_minute(h)
    assert watch.summary()[0] == "jobs: 1, paused: 0"
    # WHEN it is paused  THEN the next look says so, with why
    h.jobs.pause(job.job_id)
    [paused] = watch.changes()
    assert f"job {job.job_id} (Minutely): PAUSED since" in paused and "paused by an operator" in paused
    assert watch.changes() == []  # said once
    assert watch.summary()[0] == "jobs: 1, paused: 1"
    # WHEN it is resumed after missing 3 fires  THEN the line says resumed, with the missed fires
    h.now = minute(h, 3) + timedelta(seconds=30)
    h.jobs.resume(job.job_id)
    [resumed] = watch.changes()
    assert "resumed; missed fires: 3" in resumed


def test_update_to_another_session_rewrites_the_schedules_input_and_keeps_its_target(h: Harness) -> None:
    import json

    job = every_minute(h)
    before = h.jobs.schedules.get(job.schedule_name or "")["Target"]
    seed_session(h.store, "session-other")
    h.jobs.update(job.job_id, session_id="session-other")
    after = h.jobs.schedules.get(job.schedule_name or "")["Target"]
    assert json.loads(after["Input"]) == {**json.loads(before["Input"]), "session_id": "session-other"}
    assert (after["Arn"], after["RoleArn"], after["RetryPolicy"]) == (
        before["Arn"],
        before["RoleArn"],
        before["RetryPolicy"],
    )
    assert h.jobs.get(job.job_id).session_id == "session-other"
    with pytest.raises(JobError, match="no session 'ghost'"):
        h.jobs.update(job.job_id, session_id="ghost")
