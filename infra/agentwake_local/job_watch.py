"""What ``agentwake local up`` says about jobs: the paused ones (and why), their missed and skipped
fires, once at start and then each time it changes (the local scheduler honours a pause: a
disabled schedule does not fire)."""

from __future__ import annotations

from typing import Any

from agentwake.domain.run_models import Job
from agentwake_ops.terminal import inert


def _state(job: Job) -> tuple[Any, ...]:
    return (job.paused_at, job.missed_fires, job.skipped_fires)


class JobWatch:
    """Lines for the ``local up`` terminal about the jobs of ``store`` (an agentwake DynamoStore)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self._seen: dict[str, tuple[Any, ...]] = {}

    def summary(self) -> list[str]:
        """The paused jobs and the jobs with missed or skipped fires, now (and remembered)."""
        jobs = self.store.records.list_jobs()
        self._seen = {j.job_id: _state(j) for j in jobs}
        paused = [j for j in jobs if j.paused_at]
        lines = [f"jobs: {len(jobs)}, paused: {len(paused)}"]
        lines += [self._line(j) for j in jobs if j.paused_at or j.missed_fires or j.skipped_fires]
        return lines

    def changes(self) -> list[str]:
        """A line per job whose pause, missed or skipped fires changed since the last look."""
        lines = []
        for job in self.store.records.list_jobs():
            before = self._seen.get(job.job_id)
            now = _state(job)
            self._seen[job.job_id] = now
            if before is None:
                if job.paused_at or job.missed_fires or job.skipped_fires:
                    lines.append(self._line(job))
            elif before != now:
                lines.append(self._line(job, resumed=bool(before[0]) and not job.paused_at))
        return lines

    @staticmethod
    def _line(job: Job, *, resumed: bool = False) -> str:
        state = f"PAUSED since {job.paused_at}: {job.pause_reason}" if job.paused_at else "running on schedule"
        if resumed:
            state = "resumed"
        text = (
            f"  job {job.job_id} ({job.name}): {state}; missed fires: {job.missed_fires}, "
            f"skipped fires: {job.skipped_fires} (agentwake jobs show {job.job_id})"
        )
        return inert(text)[:600]
