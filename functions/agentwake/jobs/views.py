"""What the jobs API (``agentwake.jobs.service``) answers: a job's view, a resume's result, a backfill's plan."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from agentwake.domain.models import Job, JobFire, RunRecord, cron_run_id


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
