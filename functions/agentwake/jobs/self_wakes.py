"""The wakes an agent schedules for itself (docs/self-scheduling.md): ordinary jobs with origin
``agent``, created, listed and cancelled within the session's ``SelfWakePolicy``.

Exactly once: the job id comes from the tool call that asks for it (``wake_job_id``), and
``JobsService.create`` returns the job that call made already (its schedule made again if a crash
left it without one), so a retried or redriven run never makes a second wake for one call. A
request over a limit raises ``WakeRefused``, whose text the model reads as the tool's result.

The product API (``product/api_wakes.py``) lists and cancels them through the same functions.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from agentwake.domain.models import SelfWakePolicy
from agentwake.domain.run_models import Job
from agentwake.jobs.service import JobError, JobsService, next_fire_times
from agentwake.observability import logger

if TYPE_CHECKING:
    from agentwake.domain.models import SessionConfig
    from agentwake.wake.spec import WakeDeps

#: a note for the agent's future self is shown in the wake's prompt: bounded
MAX_NOTE_CHARS = 2000
#: how many fires of a recurring wake are checked against ``min_interval_s``
_INTERVAL_SAMPLE = 24
_DURATION = re.compile(r"(\d+)\s*(d|h|m|s)", re.IGNORECASE)
_UNIT_S = {"d": 86_400, "h": 3600, "m": 60, "s": 1}


class WakeRefused(ValueError):
    """A self-wake request over a limit or malformed: the text says which and what to do instead."""


def wake_job_id(idempotency_key: str) -> str:
    """The job a tool call creates: the same on every retry and redrive of the run."""
    return "wake-" + hashlib.sha256(idempotency_key.encode()).hexdigest()[:16]


def parse_duration(text: str) -> timedelta:
    """``2h``, ``90m``, ``1h30m``, ``2d``: a duration (WakeRefused for anything else)."""
    compact = re.sub(r"\s+", "", text or "").lower()
    parts = _DURATION.findall(compact)
    if not parts or "".join(f"{n}{u}" for n, u in parts) != compact:
        raise WakeRefused(f"refused: 'in' must be a duration like 90m, 2h, 1h30m or 3d, got {text!r}")
    return timedelta(seconds=sum(int(n) * _UNIT_S[u] for n, u in parts))


@dataclass(frozen=True)
class WakeRequest:
    """What the agent asks for: exactly one of ``at``, ``in_``, ``cron``, ``rate``."""

    at: str | None = None
    in_: str | None = None
    cron: str | None = None
    rate: str | None = None
    timezone: str | None = None
    note: str = ""
    max_fires: int | None = None


def describe(job: Job, *, now: datetime | None = None) -> str:
    """One line the agent (and the API) reads about a wake: id, when next, how often, the note."""
    if job.paused:
        when = f"paused: {job.pause_reason}"
    elif not job.enabled:
        when = f"not pending: {job.disabled_reason or 'done (a one-time wake that fired)'}"
    else:
        nxt = next_fire_times(job, 1, now=now)
        when = f"next {nxt[0].isoformat()}" if nxt else "no fire left"
    kind = "once" if job.run_once else f"{job.schedule_expression}, fired {job.fires} of {job.max_fires or '∞'}"
    note = f"; note: {job.note}" if job.note else ""
    return f"{job.job_id}: {when} ({kind}, {job.timezone}){note}"


class SelfWakes:
    """The agent's own wakes in one session, within its policy."""

    def __init__(self, jobs: JobsService, policy: SelfWakePolicy) -> None:
        self.jobs = jobs
        self.policy = policy

    def pending(self, session_id: str) -> list[Job]:
        """The session's wakes the agent scheduled that may still fire (oldest first)."""
        return pending_wakes(self.jobs, session_id)

    def schedule(self, request: WakeRequest, *, session_id: str, run_id: str, call: str) -> tuple[Job, bool]:
        """Create the wake ``call`` asks for, or return the one it created already: (job, created
        now). Raises WakeRefused for a request over a limit or malformed."""
        job_id = wake_job_id(call)
        existing = self.jobs.store.records.get_job(job_id)
        if existing is not None and existing.created_by_call == call:
            return self._create(existing, session_id, run_id, call), False  # a retry: the same wake
        policy = self.policy
        pending = self.pending(session_id)
        if len(pending) >= policy.max_pending:
            raise WakeRefused(
                f"refused: you have {len(pending)} pending wakes, the most this conversation allows "
                f"(max_pending={policy.max_pending}). Cancel one you no longer need with cancel_wake "
                "(list_wakes shows them), or add this to the note of a wake you keep."
            )
        note = (request.note or "").strip()
        if len(note) > MAX_NOTE_CHARS:
            raise WakeRefused(f"refused: the note is {len(note)} characters, more than {MAX_NOTE_CHARS}; shorten it.")
        timezone = request.timezone or "UTC"
        now = self.jobs.clock()
        expression, recurring = self._expression(request, timezone, now)
        max_fires = None
        if recurring:
            max_fires = request.max_fires or policy.max_fires
            if max_fires > policy.max_fires:
                raise WakeRefused(
                    f"refused: a recurring wake fires at most {policy.max_fires} times here (max_fires); "
                    f"ask for {policy.max_fires} or fewer, and schedule a new one when it ends if still needed."
                )
        draft = Job(
            job_id=job_id,
            session_id=session_id,
            name=f"wake: {note.splitlines()[0][:48]}" if note else "agent wake",
            schedule_expression=expression,
            timezone=timezone,
            run_once=not recurring,
            note=note,
            max_fires=max_fires,
            origin="agent",
            created_by_run=run_id,
            created_by_call=call,
        )
        self._check_times(draft, now)
        job = self._create(draft, session_id, run_id, call)
        logger.info("the agent scheduled a wake", extra={"job_id": job.job_id, "schedule": job.schedule_expression})
        return job, True

    def _create(self, job: Job, session_id: str, run_id: str, call: str) -> Job:
        expression = job.schedule_expression
        cron = None if expression.startswith("at(") else expression
        at = expression if expression.startswith("at(") else None
        try:
            return self.jobs.create(
                session_id=session_id,
                name=job.name,
                cron=cron,
                at=at,
                timezone=job.timezone,
                description="a wake the agent scheduled for itself",
                job_id=job.job_id,
                origin="agent",
                created_by_run=run_id,
                created_by_call=call,
                note=job.note,
                max_fires=job.max_fires,
            )
        except JobError as exc:
            raise WakeRefused(f"refused: {exc}") from exc

    def _expression(self, request: WakeRequest, timezone: str, now: datetime) -> tuple[str, bool]:
        given = [
            k for k, v in (("at", request.at), ("in", request.in_), ("cron", request.cron), ("rate", request.rate)) if v
        ]
        if len(given) != 1:
            raise WakeRefused(
                "refused: give exactly one of 'at' (a time), 'in' (a duration like 2h), 'cron' or 'rate' "
                f"(got {', '.join(given) or 'none'})"
            )
        from agentwake.domain.schedule_expressions import ScheduleExpressionError, zone

        try:
            tz = zone(timezone)
        except ScheduleExpressionError as exc:
            raise WakeRefused(f"refused: {exc}; give an IANA name like Europe/Paris") from exc
        if request.in_:
            when = now.astimezone(tz) + parse_duration(request.in_)
            return f"at({when.strftime('%Y-%m-%dT%H:%M:%S')})", False
        if request.at:
            try:
                moment = datetime.fromisoformat(request.at.strip().replace("Z", "+00:00"))
            except ValueError as exc:
                raise WakeRefused(
                    f"refused: 'at' must be an ISO time like 2026-12-01T09:00:00, got {request.at!r}"
                ) from exc
            if moment.tzinfo is not None:
                moment = moment.astimezone(tz)
            return f"at({moment.strftime('%Y-%m-%dT%H:%M:%S')})", False
        if request.rate:
            text = request.rate.strip()
            return (text if text.startswith("rate(") else f"rate({text})"), True
        text = (request.cron or "").strip()
        return (text if text.startswith("cron(") else f"cron({text})"), True

    def _check_times(self, job: Job, now: datetime) -> None:
        from agentwake.domain.schedule_expressions import ScheduleExpressionError, parse

        try:
            parse(job.schedule_expression)
        except ScheduleExpressionError as exc:
            raise WakeRefused(f"refused: invalid schedule {job.schedule_expression}: {exc}") from exc
        policy = self.policy
        fires = next_fire_times(job, 1 if job.run_once else _INTERVAL_SAMPLE, now=now)
        if not fires:
            raise WakeRefused(
                f"refused: {job.schedule_expression} ({job.timezone}) never fires after now "
                f"({now.isoformat(timespec='seconds')}): give a future time"
            )
        horizon = now + timedelta(days=policy.max_days_ahead)
        if fires[0] > horizon:
            raise WakeRefused(
                f"refused: the first fire {fires[0].isoformat()} is more than {policy.max_days_ahead} days ahead "
                f"(max_days_ahead); schedule a wake within that horizon and, when it fires, schedule the next."
            )
        gaps = [(b - a).total_seconds() for a, b in zip(fires, fires[1:], strict=False)]
        if gaps and min(gaps) < policy.min_interval_s:
            raise WakeRefused(
                f"refused: {job.schedule_expression} fires every {int(min(gaps))} s at times, more often than "
                f"once every {policy.min_interval_s} s (min_interval_s); choose a slower cron or rate."
            )

    def cancel(self, job_id: str, *, session_id: str, by: str) -> str:
        """Cancel one of the session's agent wakes; the answer says what happened."""
        return cancel_wake(self.jobs, job_id, session_id=session_id, by=by)


def pending_wakes(jobs: JobsService, session_id: str) -> list[Job]:
    """The session's agent wakes that may still fire (oldest first): a paused one too (it may resume)."""
    return [j for j in jobs.list() if j.session_id == session_id and j.origin == "agent" and (j.enabled or j.paused)]


def session_wakes(jobs: JobsService, session_id: str) -> list[Job]:
    """Every wake the session's agent scheduled, pending or not (oldest first)."""
    return [j for j in jobs.list() if j.session_id == session_id and j.origin == "agent"]


def cancel_wake(jobs: JobsService, job_id: str, *, session_id: str, by: str, delete_schedule: bool = True) -> str:
    """Cancel ``job_id`` if it is an agent wake of ``session_id``: the job disabled (kept, saying
    who cancelled it), its schedule deleted first — or, ``delete_schedule`` False (the product API,
    which manages no schedule), by its next fire (``wake.cron``). A second cancel changes nothing
    and says "already cancelled". Raises WakeRefused for a job that is not such a wake (another
    session's is "no wake")."""
    job = jobs.store.records.get_job(job_id)
    if job is None or job.session_id != session_id:
        raise WakeRefused(f"refused: there is no wake {job_id!r} in this conversation (list_wakes shows yours)")
    if job.origin != "agent":
        raise WakeRefused(
            f"refused: {job_id!r} is a job an operator or the product created, not a wake you scheduled; "
            "only your own wakes can be cancelled here"
        )
    if not job.enabled and not job.disabled_reason and not job.paused:
        return f"{job_id} already fired (a one-time wake); nothing to cancel"
    if job.schedule_name and delete_schedule:
        jobs.schedules.delete(job.schedule_name)  # first: a crash after it leaves no fire (deleted again on retry)
    if not job.enabled and job.disabled_reason:
        reason = job.disabled_reason
        if reason.startswith("cancelled"):
            return f"{job_id} is already cancelled ({reason})"
        return f"{job_id} is not pending any more ({reason}); nothing to cancel"
    logger.info("a wake is cancelled", extra={"job_id": job_id})
    # a paused wake is cancelled too: no longer paused (a resume must not bring it back, jobs.service)
    cancelled = jobs.store.jobs.update_job(
        job_id,
        enabled=False,
        disabled_reason=f"cancelled by {by}",
        paused_at=None,
        pause_reason=None,
        pause_run_id=None,
    )
    if cancelled is None:
        raise WakeRefused(f"refused: there is no wake {job_id!r} in this conversation (deleted meanwhile)")
    return f"cancelled {job_id}: it will not wake you"


def for_session(session: SessionConfig, deps: WakeDeps) -> SelfWakes | None:
    """The session's self-wakes over the wake's store and scheduler, or None when its config does
    not allow them. The schedules invoke the cron function: its ARN from the settings (the
    background-result function) or from the cron function's own invocation (``deps.cron_target_arn``)."""
    policy = session.self_wakes
    if policy is None or not policy.enabled:
        return None
    from agentwake.jobs.service import JobTargets

    settings = deps.settings
    target = deps.cron_target_arn or settings.cron_function_arn
    targets = None
    if target and settings.scheduler_role_arn:
        targets = JobTargets(
            cron_function_arn=target,
            scheduler_role_arn=settings.scheduler_role_arn,
            scheduler_dlq_arn=settings.scheduler_dlq_arn,
        )
    jobs = JobsService(
        deps.store,  # type: ignore[arg-type]
        # the root's Scheduler adapter; a replay has none, and never creates or cancels (side effects)
        deps.schedules,  # type: ignore[arg-type]
        targets,
        clock=lambda: datetime.fromtimestamp(deps.clock.wall(), UTC),
    )
    return SelfWakes(jobs, policy)
