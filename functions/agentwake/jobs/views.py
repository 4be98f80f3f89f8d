"""What the jobs API (``agentwake.jobs.service``) answers: a job's view, a resume's result, a backfill's plan."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from agentwake.domain.models import cron_run_id
from agentwake.domain.run_models import Job, JobFire, RunRecord

#: what the job's last run did, from the stored ``Job.status`` (the status of its last run)
_LAST_RUN = {
    "scheduled": "no run yet",
    "running": "a run is running",
    "completed": "last run succeeded",
    "failed": "last run failed",
}


def job_state(job: Job) -> str:
    """A job's status in words: whether it fires (active, paused and why, or done for a one-time
    job that ran) and what its last run did, e.g. ``active; last run succeeded`` or
    ``paused: <why>; last run failed``. The stored
    ``Job.status`` is only the last run's; this is the one place it becomes the job's status."""
    last = _LAST_RUN.get(job.status, f"last run {job.status}")
    if job.paused_at:
        return f"paused: {job.pause_reason or 'no reason recorded'}; {last}"
    if not job.enabled and job.disabled_reason:
        return f"stopped: {job.disabled_reason}; {last}"
    if not job.enabled:
        return f"done (one-time job); {last}" if job.run_once else f"disabled; {last}"
    return f"active; {last}"


@dataclass
class JobView:
    """What ``jobs show`` shows: the job, its next fires, its last runs, its skipped and missed fires.
    ``missing_now``: the fire times missed so far while paused (recorded on resume)."""

    job: Job
    next_fires: list[datetime]
    runs: list[RunRecord]
    skipped: list[JobFire]
    missed: list[JobFire]
    missing_now: list[str] = field(default_factory=list)
    missing_total: int = 0
    #: more fire times were missed than were worked out (``missing_total`` is then a lower bound)
    missing_truncated: bool = False


@dataclass
class ResumeResult:
    job: Job
    #: every fire time missed while paused (newest MAX_MISSED_RECORDED), and the run ids caught up
    missed: list[str]
    caught_up: list[str]


@dataclass
class BackfillPlan:
    """The fire times of a range: which already have a run, which a backfill runs (or ran)."""

    job_id: str
    times: list[str]
    existing: list[str]
    to_run: list[str]
    dry_run: bool

    @property
    def run_ids(self) -> list[str]:
        return [cron_run_id(self.job_id, t) for t in self.to_run]
