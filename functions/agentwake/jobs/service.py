"""Jobs API (plain Python): create / list / show / update / pause / resume / backfill / trigger /
delete / run-now cron jobs.

Each job is a Job item plus one EventBridge Scheduler schedule in the stack's schedule group,
targeting the cron function's alias with ``{"job_id", "scheduled_time": <aws.scheduler.scheduled-time>}``.
Used by the operator CLI and by anything that schedules work for the agent. A job's policies
(overlap, catch-up, pause after failures) are described in docs/operations.md, "Job policies".
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, get_args
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from agentwake.domain.models import cron_run_id, utcnow_iso
from agentwake.domain.run_models import (
    DEFAULT_CATCH_UP,
    DEFAULT_CATCH_UP_WINDOW_S,
    DEFAULT_OVERLAP,
    DEFAULT_PAUSE_AFTER_FAILURES,
    CatchUpPolicy,
    Job,
    JobFire,
    JobOrigin,
    OverlapPolicy,
)
from agentwake.jobs.fires import (  # next_fire_times: re-exported, callers import it from here
    MISSED_LOOKBACK,
    catch_up_choice,
    fire_times_between,
    next_fire_times,
    parse_time,
    pause_job,
    scheduled_time_text,
)
from agentwake.jobs.views import BackfillPlan, JobView, ResumeResult
from agentwake.store.dynamo import DynamoStore
from agentwake.store.schedules import Schedules

_AT = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}$")


#: a backfill runs at most this many fire times unless told a higher cap (at most MAX_BACKFILL_CAP)
DEFAULT_BACKFILL_CAP = 50
MAX_BACKFILL_CAP = 1000


class JobError(ValueError):
    """A job request that cannot be carried out, with a message saying why."""


def check_policies(
    overlap: str | None, catch_up: str | None, catch_up_window_s: int | None, pause_after_failures: int | None
) -> None:
    """Refuse a policy value that is not one (JobError naming the choices)."""
    if overlap is not None and overlap not in get_args(OverlapPolicy):
        raise JobError(f"overlap must be one of {', '.join(get_args(OverlapPolicy))}, got {overlap!r}")
    if catch_up is not None and catch_up not in get_args(CatchUpPolicy):
        raise JobError(f"catch-up must be one of {', '.join(get_args(CatchUpPolicy))}, got {catch_up!r}")
    if catch_up_window_s is not None and catch_up_window_s < 0:
        raise JobError(f"the catch-up window must be 0 seconds or more, got {catch_up_window_s}")
    if pause_after_failures is not None and pause_after_failures < 0:
        raise JobError(f"pause-after-failures must be 0 (never) or more, got {pause_after_failures}")


@dataclass(frozen=True)
class JobTargets:
    """Where schedules point: from the stack outputs (CronWakeFunctionAliasArn, SchedulerRoleArn, SchedulerDLQArn)."""

    cron_function_arn: str
    scheduler_role_arn: str
    scheduler_dlq_arn: str | None = None
    max_retries: int = 2


def schedule_expression(cron: str | None, at: str | None) -> tuple[str, bool]:
    """Return (expression, run_once). ``cron`` takes ``cron(...)``, ``rate(...)`` or the six cron
    fields; ``at`` takes ``yyyy-mm-ddThh:mm:ss`` (local to the job's timezone). Validated with
    EventBridge Scheduler's rules (``agentwake.domain.schedule_expressions``) before AWS sees it."""
    expression, run_once = _schedule_expression(cron, at)
    from agentwake.domain.schedule_expressions import ScheduleExpressionError, parse

    try:
        parse(expression)
    except ScheduleExpressionError as exc:
        raise JobError(f"invalid schedule {expression}: {exc}") from exc
    return expression, run_once


def _refuse_past(expression: str, timezone: str) -> None:
    """A one-time job whose time has passed would never fire: refused (JobError)."""
    from agentwake.domain.schedule_expressions import ScheduleExpressionError, refuse_past_at

    try:
        refuse_past_at(expression, timezone)
    except ScheduleExpressionError as exc:
        raise JobError(f"invalid schedule {exc}") from exc


def _schedule_expression(cron: str | None, at: str | None) -> tuple[str, bool]:
    if (cron is None) == (at is None):
        raise JobError("give exactly one of a cron expression or a one-time 'at' time")
    if at is not None:
        at = at.strip().removeprefix("at(").removesuffix(")")
        if not _AT.match(at):
            raise JobError(f"'at' must look like 2026-12-01T09:00:00, got {at!r}")
        return f"at({at})", True
    assert cron is not None
    cron = cron.strip()
    if cron.startswith(("cron(", "rate(")) and cron.endswith(")"):
        return cron, False
    fields = cron.split()
    if len(fields) != 6:
        raise JobError(
            f"a cron expression needs six fields (minutes hours day-of-month month day-of-week year), got {cron!r}"
        )
    return f"cron({cron})", False


def _default_metric(name: str, value: int) -> None:
    """A count on the runtime's metrics (flushed where the caller's handler flushes them)."""
    from agentwake.observability import add_metric

    add_metric(name=name, unit="Count", value=value)


def _default_invoker(function_arn: str, payload: dict[str, Any]) -> None:
    from agentwake.store.aws import client

    client("lambda").invoke(FunctionName=function_arn, InvocationType="Event", Payload=json.dumps(payload).encode())


class JobsService:
    def __init__(
        self,
        store: DynamoStore,
        schedules: Schedules,
        targets: JobTargets | None,
        *,
        invoker: Callable[[str, dict[str, Any]], None] | None = None,
        clock: Callable[[], datetime] | None = None,
        metric: Callable[[str, int], None] | None = None,
    ) -> None:
        self.store = store
        self.schedules = schedules
        self.targets = targets
        self.invoker = invoker or _default_invoker
        self.clock = clock or (lambda: datetime.now(UTC))
        self.metric = metric or _default_metric

    def _targets(self) -> JobTargets:
        if self.targets is None:
            raise JobError("the cron function and scheduler role are unknown (stack outputs not found)")
        return self.targets

    def create(
        self,
        *,
        session_id: str,
        name: str,
        cron: str | None = None,
        at: str | None = None,
        timezone: str = "UTC",
        description: str = "",
        job_id: str | None = None,
        overlap: OverlapPolicy = DEFAULT_OVERLAP,
        catch_up: CatchUpPolicy = DEFAULT_CATCH_UP,
        catch_up_window_s: int = DEFAULT_CATCH_UP_WINDOW_S,
        pause_after_failures: int = DEFAULT_PAUSE_AFTER_FAILURES,
        origin: JobOrigin = "operator",
        created_by_run: str | None = None,
        created_by_call: str | None = None,
        note: str = "",
        max_fires: int | None = None,
    ) -> Job:
        """Create the job and its schedule. ``created_by_call`` (a tool call's idempotency key) makes it
        idempotent: the job that call made is returned (its schedule made if a crash left none)."""
        check_policies(overlap, catch_up, catch_up_window_s, pause_after_failures)
        expression, run_once = schedule_expression(cron, at)
        try:
            ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise JobError(f"unknown timezone {timezone!r}") from exc
        job_id = job_id or f"job-{uuid.uuid4().hex[:12]}"
        existing = self.store.records.get_job(job_id)
        if existing is not None:
            if created_by_call is None or existing.created_by_call != created_by_call:
                raise JobError(f"job {job_id!r} already exists")
            if existing.enabled and existing.schedule_name:
                self._create_schedule(existing)  # a crashed attempt may have written the job only
            return existing
        _refuse_past(expression, timezone)
        if self.store.records.get_session(session_id) is None:
            raise JobError(f"no session {session_id!r} (create it with: agentwake sessions put {session_id})")
        self._targets()
        job = Job(
            job_id=job_id,
            session_id=session_id,
            name=name,
            description=description,
            schedule_expression=expression,
            timezone=timezone,
            run_once=run_once,
            schedule_name=f"agentwake-{job_id}"[:64],
            overlap=overlap,
            catch_up=catch_up,
            catch_up_window_s=catch_up_window_s,
            pause_after_failures=pause_after_failures,
            origin=origin,
            created_by_run=created_by_run,
            created_by_call=created_by_call,
            note=note,
            max_fires=max_fires,
        )
        self.store.records.put_job(job)
        try:
            self._create_schedule(job)
        except Exception:
            if created_by_call is None:
                self.store.records.delete_job(job_id)  # no job without its schedule
            raise  # a tool call's job stays: its retry makes the schedule, at the time the job says
        return job

    def _create_schedule(self, job: Job) -> None:
        """The job's schedule. One that exists already under the job's name is the one a crashed
        attempt of the same create made (the name comes from the job id): kept, not an error."""
        targets = self._targets()
        try:
            self.schedules.create(
                name=job.schedule_name or job.job_id,
                expression=job.schedule_expression,
                timezone=job.timezone,
                target_arn=targets.cron_function_arn,
                role_arn=targets.scheduler_role_arn,
                job_id=job.job_id,
                dlq_arn=targets.scheduler_dlq_arn,
                max_retries=targets.max_retries,
                run_once=job.run_once,
                session_id=job.session_id,
            )
        except self.schedules.client.exceptions.ConflictException:
            if job.created_by_call is None:
                raise

    def list(self) -> list[Job]:
        return sorted(self.store.records.list_jobs(), key=lambda j: j.created_at)

    def get(self, job_id: str) -> Job:
        job = self.store.records.get_job(job_id)
        if job is None:
            raise JobError(f"no job {job_id!r} (list the jobs with: agentwake jobs list)")
        return job

    def delete(self, job_id: str) -> Job:
        job = self.get(job_id)
        if job.schedule_name:
            self.schedules.delete(job.schedule_name)
        self.store.records.delete_job(job_id)
        self.store.jobs.delete_job_fires(job_id)
        return job

    def run_now(self, job_id: str, *, now: datetime | None = None) -> str:
        """Invoke the cron function asynchronously, as the schedule would. Returns the run id."""
        job = self.get(job_id)
        stamp = (now or self.clock()).strftime("%Y-%m-%dT%H:%M:%SZ")
        return self._invoke(job, f"manual-{stamp}")

    def _invoke(self, job: Job, scheduled_time: str) -> str:
        payload = {"job_id": job.job_id, "scheduled_time": scheduled_time, "session_id": job.session_id}
        self.invoker(self._targets().cron_function_arn, payload)
        return cron_run_id(job.job_id, scheduled_time)

    # --- operating a job --------------------------------------------------------------------

    def show(self, job_id: str, *, runs: int = 10, fires: int = 3) -> JobView:
        """The job, its next ``fires`` fire times, its last ``runs`` runs (newest first, those in
        the job's current session) and its recorded skipped and missed fires (newest first)."""
        from agentwake.store.operator import OperatorStore

        job = self.get(job_id)
        now = self.clock()
        recent = OperatorStore(self.store).runs(
            session_id=job.session_id, run_prefix=cron_run_id(job_id, ""), limit=runs
        )
        view = JobView(
            job=job,
            next_fires=next_fire_times(job, fires, now=now),
            runs=recent.runs,
            skipped=self.store.jobs.job_fires(job_id, "skipped", limit=50),
            missed=self.store.jobs.job_fires(job_id, "missed", limit=50),
        )
        if job.paused_at:
            missing = fire_times_between(job, self._missed_since(job, now), now)
            view.missing_now = [scheduled_time_text(t) for t in missing.times]
            view.missing_total = missing.total
            view.missing_truncated = missing.truncated
        return view

    def update(
        self,
        job_id: str,
        *,
        cron: str | None = None,
        at: str | None = None,
        timezone: str | None = None,
        name: str | None = None,
        description: str | None = None,
        session_id: str | None = None,
        overlap: OverlapPolicy | None = None,
        catch_up: CatchUpPolicy | None = None,
        catch_up_window_s: int | None = None,
        pause_after_failures: int | None = None,
    ) -> Job:
        """Change a job in place: same job id, same schedule (updated, not re-created), same run
        history and run ids. Only what is given changes."""
        check_policies(overlap, catch_up, catch_up_window_s, pause_after_failures)
        job = self.get(job_id)
        changes: dict[str, Any] = {}
        expression = None
        if cron is not None or at is not None:
            expression, run_once = schedule_expression(cron, at)
            changes.update(schedule_expression=expression, run_once=run_once)
        if timezone is not None:
            try:
                ZoneInfo(timezone)
            except (ZoneInfoNotFoundError, ValueError) as exc:
                raise JobError(f"unknown timezone {timezone!r}") from exc
            changes["timezone"] = timezone
        if session_id is not None and session_id != job.session_id:
            if self.store.records.get_session(session_id) is None:
                raise JobError(f"no session {session_id!r} (create it with: agentwake sessions put {session_id})")
            changes["session_id"] = session_id
        for key, value in (
            ("name", name),
            ("description", description),
            ("overlap", overlap),
            ("catch_up", catch_up),
            ("catch_up_window_s", catch_up_window_s),
            ("pause_after_failures", pause_after_failures),
        ):
            if value is not None:
                changes[key] = value
        if not changes:
            raise JobError("nothing to change: give at least one option (see agentwake jobs update --help)")
        if (expression or timezone or "session_id" in changes) and job.schedule_name:
            try:
                self.schedules.update(
                    job.schedule_name,
                    expression=expression,
                    timezone=timezone,
                    input_changes={"session_id": changes["session_id"]} if "session_id" in changes else None,
                )
            except self.schedules.client.exceptions.ResourceNotFoundException as exc:
                raise JobError(f"job {job_id!r} has no schedule {job.schedule_name!r} any more") from exc
        if expression or timezone:
            changes["schedule_updated_at"] = utcnow_iso()
        updated = self.store.jobs.update_job(job_id, **changes)
        if updated is None:
            raise JobError(f"no job {job_id!r} (deleted meanwhile)")
        return updated

    def pause(self, job_id: str, *, reason: str = "paused by an operator") -> Job:
        """Disable the job's schedule and mark it paused; its missed fires are counted from now."""
        job = self.get(job_id)
        if job.paused:
            raise JobError(f"job {job_id!r} is paused already ({job.pause_reason})")
        if not job.enabled:
            raise JobError(f"job {job_id!r} is disabled (a one-time job that ran); there is nothing to pause")
        paused = pause_job(self.store, self.schedules, job, reason=reason, now=self.clock())
        return paused or self.get(job_id)

    def _missed_since(self, job: Job, now: datetime) -> datetime:
        assert job.paused_at is not None
        return max(parse_time(job.paused_at), now - MISSED_LOOKBACK)

    def resume(self, job_id: str, *, undelivered: Iterable[str] = ()) -> ResumeResult:
        """Re-enable a paused job: every fire time it missed is recorded (``jobs show``, the
        ``MissedFires`` metric), and its catch-up policy picks which of them run now, with the run
        ids their own fires would have had (a late original and its catch-up write one note).

        ``undelivered``: scheduled times of fires the Scheduler could not deliver (their inputs in
        SchedulerDLQ): missed too, and caught up by the same policy. With them, a job that is not
        paused is caught up without a resume."""
        job = self.get(job_id)
        extra = {scheduled_time_text(parse_time(t)) for t in undelivered}
        if job.disabled_reason and job.disabled_reason.startswith("cancelled"):
            raise JobError(f"job {job_id!r} was {job.disabled_reason}: a cancelled wake is not resumed")
        if not job.paused and not extra:
            raise JobError(f"job {job_id!r} is not paused")
        now = self.clock()
        paused_missed = fire_times_between(job, self._missed_since(job, now), now).times if job.paused else []
        why: dict[datetime, str] = {t: f"missed while paused ({job.pause_reason})" for t in paused_missed}
        for text in extra:
            why.setdefault(parse_time(text), "the Scheduler could not deliver it (SchedulerDLQ)")
        missed = sorted(why)
        chosen = set(catch_up_choice(job.catch_up, job.catch_up_window_s, missed, now))
        resumed = job
        if job.paused:
            updated = self.store.jobs.update_job(
                job_id,
                enabled=True,
                paused_at=None,
                pause_reason=None,
                pause_run_id=None,
                consecutive_failures=0,
                last_failed_run_id=None,
            )
            if updated is None:
                raise JobError(f"no job {job_id!r} (deleted meanwhile)")
            resumed = updated
            if job.schedule_name:
                self.schedules.set_enabled(job.schedule_name, True)
        caught_up: list[str] = []
        newly = 0
        for moment in missed:
            text = scheduled_time_text(moment)
            run_id = cron_run_id(job_id, text)
            if moment in chosen:
                outcome = "caught up"
            elif job.catch_up == "none":
                outcome = "not caught up (catch-up none)"
            elif (now - moment).total_seconds() > job.catch_up_window_s:
                outcome = f"not caught up (older than the {job.catch_up_window_s}s catch-up window)"
            else:
                outcome = "not caught up (catch-up latest runs only the latest)"
            fire = JobFire(
                job_id=job_id, scheduled_time=text, run_id=run_id, kind="missed", reason=why[moment], outcome=outcome
            )
            if self.store.jobs.record_job_fire(fire):
                newly += 1
            else:  # recorded already, by a fire that reached the paused job
                self.store.jobs.set_fire_outcome(fire, outcome)
        for moment in sorted(chosen):
            caught_up.append(self._invoke(resumed, scheduled_time_text(moment)))
        if newly:
            self.metric("MissedFires", newly)
        return ResumeResult(job=resumed, missed=[scheduled_time_text(t) for t in missed], caught_up=caught_up)

    def backfill(
        self, job_id: str, start: str, end: str, *, dry_run: bool = True, cap: int = DEFAULT_BACKFILL_CAP
    ) -> BackfillPlan:
        """One run per fire time of the job in ``[start, end]``, with the fire's own run id; a time
        whose run exists already is left out (a backfill run twice starts nothing new). More than
        ``cap`` times is refused. ``dry_run`` (the default) only says what would run."""
        job = self.get(job_id)
        try:
            first, last = parse_time(start), parse_time(end)
        except ValueError as exc:
            raise JobError(f"--from and --to must be ISO-8601 times like 2026-12-01T06:00:00Z: {exc}") from exc
        if last < first:
            raise JobError(f"--to ({end}) is before --from ({start})")
        if last > self.clock():
            # a future time run now would take the run id its own fire will need: that fire would find it done
            raise JobError(
                f"--to ({end}) is in the future: a backfill runs past fire times only (jobs trigger runs one)"
            )
        if not 1 <= cap <= MAX_BACKFILL_CAP:
            raise JobError(f"the cap must be between 1 and {MAX_BACKFILL_CAP}, got {cap}")
        found = fire_times_between(job, first - timedelta(microseconds=1), last, keep=cap + 1)
        if found.total > cap or found.truncated:
            raise JobError(
                f"{found.total}{'+' if found.truncated else ''} fire times from {start} to {end}, more than the cap "
                f"of {cap}: narrow the range or raise the cap (at most {MAX_BACKFILL_CAP})"
            )
        times = [scheduled_time_text(t) for t in found.times]
        existing = [t for t in times if self.store.records.get_run(cron_run_id(job_id, t)) is not None]
        plan = BackfillPlan(
            job_id=job_id,
            times=times,
            existing=existing,
            to_run=[t for t in times if t not in existing],
            dry_run=dry_run,
        )
        if not dry_run:
            for text in plan.to_run:
                self._invoke(job, text)
        return plan

    def trigger(self, job_id: str, scheduled_time: str) -> str:
        """Run the job for one scheduled time now, with that fire's run id (a run that succeeded
        already is not run again). Returns the run id."""
        job = self.get(job_id)
        try:
            moment = parse_time(scheduled_time)
        except ValueError as exc:
            raise JobError(f"the scheduled time must be ISO-8601 like 2026-12-01T06:00:00Z: {exc}") from exc
        return self._invoke(job, scheduled_time_text(moment))
