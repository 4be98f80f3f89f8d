"""A cron job's policies at its wake (docs/operations.md, "Job policies"):

- overlap: a fire due while this job's previous run still holds the session is skipped
  (recorded, counted), waits (``queue``), or waits as the one buffered fire (``buffer_one``);
- pause after failures: a failed run counts once per run id; the Nth in a row pauses the job
  (its schedule disabled), with the reason and the run;
- a fire that still reaches a paused job is recorded as missed (caught up on resume).
"""

from __future__ import annotations

from datetime import UTC, datetime

from agentwake.domain.models import cron_run_id
from agentwake.domain.run_models import Job, JobFire
from agentwake.errors import SessionBusy
from agentwake.observability import add_metric, logger
from agentwake.wake.messages import CronWakeInput
from agentwake.wake.spec import WakeDeps


def skip_overlapping(job: Job, wake: CronWakeInput, busy: SessionBusy, deps: WakeDeps) -> bool:
    """True when this fire is skipped (and recorded so): its session is held by another run of
    this same job and the policy is ``skip``, or ``buffer_one`` with a fire waiting already."""
    holder = busy.holder or ""
    if job.overlap == "queue" or holder == wake.run_id or not holder.startswith(cron_run_id(job.job_id, "")):
        return False  # not an overlap of this job's runs: wait for the session as any wake does
    if job.overlap == "buffer_one":
        if deps.store.jobs.buffer_job_fire(job.job_id, wake.run_id):
            return False  # the one buffered fire: it waits
        reason = f"run {holder} of this job was still running and another fire was already waiting (buffer_one)"
    else:
        reason = f"run {holder} of this job was still running (overlap skip)"
    recorded = deps.store.jobs.record_job_fire(
        JobFire(
            job_id=job.job_id, scheduled_time=wake.scheduled_time, run_id=wake.run_id, kind="skipped", reason=reason
        )
    )
    if recorded:
        add_metric(name="SkippedFires", unit="Count", value=1)
    logger.warning("fire skipped", extra={"reason": reason, "recorded": recorded})
    return True


def count_failed_run(job: Job, wake: CronWakeInput, deps: WakeDeps, exc: BaseException) -> None:
    """One more failed run in a row; pause the job at its ``pause_after_failures`` (never when 0)."""
    from agentwake.jobs.fires import parse_time, pause_job
    from agentwake.store.itemsize import visible_controls
    from agentwake.trust.redact import redact

    run_id = wake.run_id

    try:
        counted = deps.store.jobs.count_job_failure(job.job_id, run_id)
        if counted is None or not counted.pause_after_failures:
            return
        if counted.consecutive_failures < counted.pause_after_failures:
            return
        detail = visible_controls(redact(f"{getattr(exc, 'error_type', type(exc).__name__)}: {exc}"))[:400]
        reason = (
            f"paused after {counted.consecutive_failures} failed runs in a row "
            f"(pause_after_failures {counted.pause_after_failures}); the last, {run_id}: {detail}"
        )
        # wall time, never before the fire that made it pause: the fires it misses are those
        # after this run's
        now = datetime.fromtimestamp(deps.clock.wall(), UTC)
        try:
            now = max(now, parse_time(wake.scheduled_time))
        except ValueError:
            pass  # a manual run's time
        if pause_job(deps.store, deps.schedules, counted, reason=reason, now=now, run_id=run_id) is not None:
            add_metric(name="JobPaused", unit="Count", value=1)
            logger.error("job paused after failed runs in a row", extra={"reason": reason})
    except Exception:  # the run's own failure stands and is raised; the count is best effort
        logger.exception("could not count the failed run against the job's pause-after-failures")


def record_missed_while_paused(job: Job, wake: CronWakeInput, deps: WakeDeps) -> None:
    """A fire that reaches a paused job (sent before the schedule was disabled, or a retry):
    recorded as missed when it is due after the pause, so the resume's catch-up knows it."""
    from agentwake.jobs.fires import parse_time

    if not job.paused_at:
        return
    try:
        if parse_time(wake.scheduled_time) <= parse_time(job.paused_at):
            return  # a retry of a run from before the pause (the run that paused it): not a missed fire
    except ValueError:
        return  # a manual run's time
    try:
        fire = JobFire(
            job_id=job.job_id,
            scheduled_time=wake.scheduled_time,
            run_id=wake.run_id,
            kind="missed",
            reason=f"fired while paused ({job.pause_reason})",
            outcome="pending",
        )
        if deps.store.jobs.record_job_fire(fire):
            add_metric(name="MissedFires", unit="Count", value=1)
    except Exception:
        logger.exception("could not record the missed fire")
