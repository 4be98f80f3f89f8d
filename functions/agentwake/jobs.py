"""Jobs API (plain Python): create / list / delete / run-now cron jobs.

Each job is a Job item plus one EventBridge Scheduler schedule in the stack's schedule group,
targeting the cron function's alias with ``{"job_id", "scheduled_time": <aws.scheduler.scheduled-time>}``.
Used by the operator CLI and by anything that schedules work for the agent.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from agentwake.store.dynamo import DynamoStore
from agentwake.store.models import Job, cron_run_id
from agentwake.store.schedules import Schedules

_AT = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}$")


class JobError(ValueError):
    """A job request that cannot be carried out, with a message saying why."""


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
    EventBridge Scheduler's rules (``agentwake.schedule_expressions``) before AWS sees it."""
    expression, run_once = _schedule_expression(cron, at)
    from agentwake.schedule_expressions import ScheduleExpressionError, parse

    try:
        parse(expression)
    except ScheduleExpressionError as exc:
        raise JobError(f"invalid schedule {expression}: {exc}") from exc
    return expression, run_once


def _refuse_past(expression: str, timezone: str) -> None:
    """A one-time job whose time has passed would never fire: refused (JobError)."""
    from agentwake.schedule_expressions import ScheduleExpressionError, refuse_past_at

    try:
        refuse_past_at(expression, timezone)
    except ScheduleExpressionError as exc:
        raise JobError(f"invalid schedule {exc}") from exc


def next_fire_times(job: Job, count: int = 3, *, now: datetime | None = None) -> list[datetime]:
    """The job's next ``count`` firings, in its time zone (none for a disabled job or a past at())."""
    from agentwake.schedule_expressions import ScheduleExpressionError, next_fire, zone

    if not job.enabled:
        return []
    moment = now or datetime.now(UTC)
    anchor = datetime.fromisoformat(job.created_at.replace("Z", "+00:00"))
    out: list[datetime] = []
    try:
        tz = zone(job.timezone)
        while len(out) < count:
            fire = next_fire(job.schedule_expression, moment, job.timezone, anchor=anchor)
            if fire is None:
                break
            out.append(fire.astimezone(tz))
            moment = fire
    except ScheduleExpressionError:
        return out
    return out


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
    ) -> None:
        self.store = store
        self.schedules = schedules
        self.targets = targets
        self.invoker = invoker or _default_invoker

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
    ) -> Job:
        expression, run_once = schedule_expression(cron, at)
        try:
            ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise JobError(f"unknown timezone {timezone!r}") from exc
        _refuse_past(expression, timezone)
        if self.store.get_session(session_id) is None:
            raise JobError(f"no session {session_id!r} (create it with: agentwake sessions put {session_id})")
        job_id = job_id or f"job-{uuid.uuid4().hex[:12]}"
        if self.store.get_job(job_id) is not None:
            raise JobError(f"job {job_id!r} already exists")
        targets = self._targets()
        job = Job(
            job_id=job_id,
            session_id=session_id,
            name=name,
            description=description,
            schedule_expression=expression,
            timezone=timezone,
            run_once=run_once,
            schedule_name=f"agentwake-{job_id}"[:64],
        )
        self.store.put_job(job)
        try:
            self.schedules.create(
                name=job.schedule_name or job_id,
                expression=expression,
                timezone=timezone,
                target_arn=targets.cron_function_arn,
                role_arn=targets.scheduler_role_arn,
                job_id=job_id,
                dlq_arn=targets.scheduler_dlq_arn,
                max_retries=targets.max_retries,
                run_once=run_once,
                session_id=session_id,
            )
        except Exception:
            self.store.delete_job(job_id)  # no job without its schedule
            raise
        return job

    def list(self) -> list[Job]:
        return sorted(self.store.list_jobs(), key=lambda j: j.created_at)

    def get(self, job_id: str) -> Job:
        job = self.store.get_job(job_id)
        if job is None:
            raise JobError(f"no job {job_id!r} (list the jobs with: agentwake jobs list)")
        return job

    def delete(self, job_id: str) -> Job:
        job = self.get(job_id)
        if job.schedule_name:
            self.schedules.delete(job.schedule_name)
        self.store.delete_job(job_id)
        return job

    def run_now(self, job_id: str, *, now: datetime | None = None) -> str:
        """Invoke the cron function asynchronously, as the schedule would. Returns the run id."""
        job = self.get(job_id)
        stamp = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
        scheduled_time = f"manual-{stamp}"
        payload = {"job_id": job_id, "scheduled_time": scheduled_time, "session_id": job.session_id}
        self.invoker(self._targets().cron_function_arn, payload)
        return cron_run_id(job_id, scheduled_time)
