"""Wake for a cron job that came due: one invocation's event in, its result out.

``run_cron_event`` runs one event (``wake.invocation.on_cron_event``, the use case the handler
calls, then runs the waiters its release hands the session to). A busy session puts the wake on the
session's wait list, like a background result, with a one-time schedule of the same wake as its
fallback (the wait machinery loads only then, or when the event is such a copy).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from agentwake.domain.run_models import Job
from agentwake.errors import InvalidMessage, RunDeferred, SessionBusy
from agentwake.observability import add_metric, logger
from agentwake.session.copies import CRON_WAIT_FIELD
from agentwake.session.lease import Waiter
from agentwake.wake.job_policies import count_failed_run, record_missed_while_paused, skip_overlapping
from agentwake.wake.messages import CronWakeInput
from agentwake.wake.run import decline_handed, execute_run
from agentwake.wake.spec import RunSpec, WakeDeps, WakeOutcome, waited_of

if TYPE_CHECKING:
    from agentwake.session.waiting import WaitState


@dataclass(frozen=True)
class CronResult:
    """What became of one cron invocation's event: the handler's answer, and the waiter its run
    handed the session to (for the invocation to run next, ``wake.invocation``)."""

    response: dict[str, Any]
    next_waiter: Waiter | None = None


def run_cron_event(
    event: object,
    deps: WakeDeps,
    *,
    remaining_ms: int | None = None,
    target_arn: str | None = None,
    run_next: Callable[[], bool] | None = None,
) -> CronResult:
    """Run the wake, or put it on its session's wait list while the session is busy (``target_arn``:
    the function its fallback schedule invokes). Raises InvalidMessage (permanent), RunFailed,
    SessionBusy past its limit."""
    try:
        wake = CronWakeInput.model_validate(event)
    except ValidationError as exc:
        raise InvalidMessage(f"not a cron wake (expected job_id and scheduled_time): {exc}") from exc
    waited = event.get(CRON_WAIT_FIELD) if isinstance(event, dict) else None
    # a copy that waited for its session carries its wait state (the machinery loads only then)
    waiting = _wait_state(waited) if waited is not None else None
    try:
        outcome = wake_for_cron_job(wake, deps, remaining_ms=remaining_ms, waiting=waiting, run_next=run_next)
    except SessionBusy as busy:
        from agentwake.session.waiting import WaitState, wait_cron

        try:
            status = wait_cron(
                busy,
                {"job_id": wake.job_id, "scheduled_time": wake.scheduled_time},
                waiting or WaitState(),
                store=deps.store,
                settings=deps.settings,
                schedules=deps.schedules,
                target_arn=target_arn,
                job_id=wake.job_id,
                now=deps.clock.wall,
            )
        except SessionBusy:  # gave up waiting: a buffered fire frees its place (overlap buffer_one)
            deps.store.jobs.release_job_buffer(wake.job_id, wake.run_id)
            raise
        return CronResult({"run_id": wake.run_id, "status": status})
    if waiting is not None and (outcome is None or outcome.status != "superseded"):
        from agentwake.session.waiting import ran_after_waiting

        ran_after_waiting(waiting, deps.clock.wall())
    if outcome is None:
        return CronResult({"run_id": wake.run_id, "status": "skipped"})
    return CronResult({"run_id": outcome.run_id, "status": outcome.status, "steps": outcome.steps}, outcome.next_waiter)


def _wait_state(value: object) -> WaitState:
    from agentwake.session.waiting import WaitState

    return WaitState.from_payload(value)


def cron_note_head(job: Job, scheduled_time: str) -> str:
    """The history note of a DONE cron run, before its final answer."""
    return (
        f"[CronJob] {job.name}{': ' + job.description if job.description else ''} triggered at {scheduled_time}, "
        f"I finished this job, here is the result: "
    )


def cron_wake_of(job: Job, scheduled_time: str) -> dict[str, Any]:
    """What woke the agent, as its prompt shows it: the job, and the note it left itself when it
    scheduled this wake (``wake.prompt`` puts that note in words)."""
    wake: dict[str, Any] = {
        "trigger": "cron_job_due",
        "job_id": job.job_id,
        "name": job.name,
        "description": job.description,
        "schedule": job.schedule_expression,
        "timezone": job.timezone,
        "scheduled_time": scheduled_time,
    }
    if job.origin == "agent":
        wake["scheduled_by"] = "you (a wake you scheduled for yourself)"
        if job.max_fires is not None:
            wake["fire"] = f"{job.fires + 1} of at most {job.max_fires}"
    if job.note:
        wake["note"] = job.note
    return wake


def last_fire_reason(job: Job) -> str | None:
    """Why the job stops after this fire when it is its last one (``max_fires`` reached), else None."""
    if job.max_fires is None or job.fires + 1 < job.max_fires:
        return None
    return f"stopped after {job.max_fires} fires (its max_fires)"


def wake_for_cron_job(
    wake: CronWakeInput,
    deps: WakeDeps,
    *,
    remaining_ms: int | None = None,
    waiting: WaitState | None = None,
    run_next: Callable[[], bool] | None = None,
) -> WakeOutcome | None:
    """None when the job is missing or disabled (logged, nothing written). Raises RunFailed on ERROR.

    ``waiting``: the event is a copy that waited for its session (a handed copy, or the fallback
    schedule); an older copy than the wait list's retires. ``run_next``: as ``execute_run``'s."""
    logger.thread_safe_append_keys(job_id=wake.job_id, run_id=wake.run_id)
    # one batch read: the job, the run, and the session config when the schedule names the session
    # and, for a waiting copy, the run's entry on the session's wait list
    read = deps.store.runs.read_wake(
        run_id=wake.run_id, job_id=wake.job_id, session_id=wake.session_id, waiter=waiting is not None
    )
    if waiting is not None and read.waiter_gen is not None and read.waiter_gen > waiting.gen:
        # a release handed the session to a newer copy of this wake: that one carries the run
        logger.info("a newer copy of this waiting cron wake was handed the session; this one retires")
        return WakeOutcome(run_id=wake.run_id, status="superseded")
    job = read.job
    if job is None or not job.enabled:
        logger.warning(
            "cron wake for a job that does not exist; nothing to do"
            if job is None
            else "cron wake for a disabled job; nothing to do"
        )
        add_metric(name="WakeSkipped", unit="Count", value=1)
        if job is not None:
            record_missed_while_paused(job, wake, deps)
            if job.disabled_reason and job.schedule_name and deps.schedules is not None:
                _delete_schedule(deps, job.schedule_name)  # stopped for good (cancelled over the API): no more fires
        if waiting is not None and wake.session_id is not None:
            # a wake that will never run is nobody's to hand the session to: off the wait list
            deps.store.leases.drop_waiter(wake.session_id, wake.run_id)
            if waiting.handed_at is not None:
                # handed the session, which this wake will not take: give it on to the next waiter
                decline_handed(deps, wake.session_id, wake.run_id)
        return None
    logger.thread_safe_append_keys(session_id=job.session_id)
    if read.session is None or read.session.session_id != job.session_id:
        # the job is the authority on its session: a schedule that named none (or another) costs a read
        read.session = deps.store.records.get_session(job.session_id)
    last_fire = last_fire_reason(job)
    spec = RunSpec(
        run_id=wake.run_id,
        kind="cron",
        session_id=job.session_id,
        wake=cron_wake_of(job, wake.scheduled_time),
        note_head=cron_note_head(job, wake.scheduled_time),
        job_id=job.job_id,
        disable_job_on_success=job.run_once or last_fire is not None,
        job_disabled_reason=last_fire,
        waited=waited_of(waiting, deps.clock.wall(), read.waiter_arrived),
        resume={
            "kind": "cron",
            "body": json.dumps(
                {"job_id": wake.job_id, "scheduled_time": wake.scheduled_time, "session_id": job.session_id}
            ),
            "attributes": {},
            "target": deps.cron_target_arn or deps.settings.cron_function_arn or "",
        },
    )
    ran = False
    try:
        outcome = execute_run(spec, deps, remaining_ms=remaining_ms, read=read, run_next=run_next)
        ran = True
    except SessionBusy as busy:
        if skip_overlapping(job, wake, busy, deps):
            return None
        raise
    except RunDeferred:
        raise
    except Exception as exc:  # a failed run (RunFailed) or a crash: one more failure in a row
        ran = True
        count_failed_run(job, wake, deps, exc)
        raise
    finally:
        if ran and job.buffered_run_id == wake.run_id:  # the buffered fire ran: its place is free
            deps.store.jobs.release_job_buffer(job.job_id, wake.run_id)
    last = job.run_once or last_fire is not None
    if last and outcome.status == "succeeded" and deps.schedules is not None and job.schedule_name:
        # the job is already disabled by the commit; a schedule that fires again finds it disabled
        _delete_schedule(deps, job.schedule_name)
    return outcome


def _delete_schedule(deps: WakeDeps, name: str) -> None:
    """The schedule of a job that will not run again (its job is disabled already: a fire finds that)."""
    assert deps.schedules is not None
    try:
        deps.schedules.delete(name)
    except Exception:
        logger.exception("could not delete the schedule of a job that stopped; the job is disabled anyway")
