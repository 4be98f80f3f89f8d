"""Wake for a cron job that came due: one invocation's event in, its result out.

``on_cron_event`` is the use case the handler calls. A busy session schedules the same wake again
(a one-time schedule; the wait machinery loads only then, or when the event is such a return).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from agentwake.domain.models import Job
from agentwake.errors import InvalidMessage, RunDeferred, SessionBusy
from agentwake.observability import logger, metrics
from agentwake.wake.job_policies import count_failed_run, record_missed_while_paused, skip_overlapping
from agentwake.wake.messages import CronWakeInput
from agentwake.wake.run import execute_run
from agentwake.wake.spec import RunSpec, WakeDeps, WakeOutcome


def on_cron_event(
    event: Any, deps: WakeDeps, *, remaining_ms: int | None = None, target_arn: str | None = None
) -> dict[str, Any]:
    """Run the wake, or schedule it again while its session is busy (``target_arn``: the function
    to come back through). Raises InvalidMessage (permanent), RunFailed, SessionBusy past its limit."""
    try:
        wake = CronWakeInput.model_validate(event)
    except ValidationError as exc:
        raise InvalidMessage(f"not a cron wake (expected job_id and scheduled_time): {exc}") from exc
    waited = event.get("session_wait")
    try:
        outcome = wake_for_cron_job(wake, deps, remaining_ms=remaining_ms)
    except SessionBusy as busy:
        from agentwake.session.waiting import WaitState, wait_cron

        try:
            status = wait_cron(
                busy,
                {"job_id": wake.job_id, "scheduled_time": wake.scheduled_time},
                WaitState.from_payload(waited),
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
        return {"run_id": wake.run_id, "status": status}
    if waited is not None:
        from agentwake.session.waiting import WaitState, ran_after_waiting

        ran_after_waiting(WaitState.from_payload(waited), deps.clock.wall())
    if outcome is None:
        return {"run_id": wake.run_id, "status": "skipped"}
    return {"run_id": outcome.run_id, "status": outcome.status, "steps": outcome.steps}


def cron_note_head(job: Job, scheduled_time: str) -> str:
    """The history note of a DONE cron run, before its final answer."""
    return (
        f"[CronJob] {job.name}{': ' + job.description if job.description else ''} triggered at {scheduled_time}, "
        f"I finished this job, here is the result: "
    )


def wake_for_cron_job(
    wake: CronWakeInput,
    deps: WakeDeps,
    *,
    remaining_ms: int | None = None,
) -> WakeOutcome | None:
    """None when the job is missing or disabled (logged, nothing written). Raises RunFailed on ERROR."""
    logger.append_keys(job_id=wake.job_id, run_id=wake.run_id)
    # one batch read: the job, the run, and the session config when the schedule names the session
    read = deps.store.runs.read_wake(run_id=wake.run_id, job_id=wake.job_id, session_id=wake.session_id)
    job = read.job
    if job is None or not job.enabled:
        logger.warning(
            "cron wake for a job that does not exist; nothing to do"
            if job is None
            else "cron wake for a disabled job; nothing to do"
        )
        metrics.add_metric(name="WakeSkipped", unit="Count", value=1)
        if job is not None:
            record_missed_while_paused(job, wake, deps)
        return None
    logger.append_keys(session_id=job.session_id)
    if read.session is None or read.session.session_id != job.session_id:
        # the job is the authority on its session: a schedule that named none (or another) costs a read
        read.session = deps.store.records.get_session(job.session_id)
    spec = RunSpec(
        run_id=wake.run_id,
        kind="cron",
        session_id=job.session_id,
        wake={
            "trigger": "cron_job_due",
            "job_id": job.job_id,
            "name": job.name,
            "description": job.description,
            "schedule": job.schedule_expression,
            "timezone": job.timezone,
            "scheduled_time": wake.scheduled_time,
        },
        note_head=cron_note_head(job, wake.scheduled_time),
        job_id=job.job_id,
        disable_job_on_success=job.run_once,
    )
    ran = False
    try:
        outcome = execute_run(spec, deps, remaining_ms=remaining_ms, read=read)
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
    if job.run_once and outcome.status == "succeeded" and deps.schedules is not None and job.schedule_name:
        # the job is already disabled by the commit; a schedule that fires again finds it disabled
        try:
            deps.schedules.delete(job.schedule_name)
        except Exception:
            logger.exception("could not delete the run-once schedule; the job is disabled anyway")
    return outcome
