"""Wake for a cron job that came due."""

from __future__ import annotations

from agentwake.observability import logger, metrics
from agentwake.store.models import Job
from agentwake.wake.messages import CronWakeInput
from agentwake.wake.run import RunSpec, WakeDeps, WakeOutcome, execute_run


def cron_note(job: Job, scheduled_time: str, final_answer: str) -> str:
    return (
        f"[CronJob] {job.name}: {job.description} triggered at {scheduled_time}, "
        f"I finished this job, here is the result: {final_answer}"
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
    read = deps.store.read_wake(run_id=wake.run_id, job_id=wake.job_id, session_id=wake.session_id)
    job = read.job
    if job is None or not job.enabled:
        logger.warning(
            "cron wake for a job that does not exist; nothing to do"
            if job is None
            else "cron wake for a disabled job; nothing to do"
        )
        metrics.add_metric(name="WakeSkipped", unit="Count", value=1)
        return None
    logger.append_keys(session_id=job.session_id)
    if read.session is None or read.session.session_id != job.session_id:
        # the job is the authority on its session: a schedule that named none (or another) costs a read
        read.session = deps.store.get_session(job.session_id)
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
        note=lambda final: cron_note(job, wake.scheduled_time, final),
        job_id=job.job_id,
        disable_job_on_success=job.run_once,
    )
    outcome = execute_run(spec, deps, remaining_ms=remaining_ms, read=read)
    if job.run_once and outcome.status == "succeeded" and deps.schedules is not None and job.schedule_name:
        # the job is already disabled by the commit; a schedule that fires again finds it disabled
        try:
            deps.schedules.delete(job.schedule_name)
        except Exception:
            logger.exception("could not delete the run-once schedule; the job is disabled anyway")
    return outcome
