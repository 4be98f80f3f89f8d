"""A job's fire times, the ones it missed, which of them a catch-up runs, and pausing a job.

Shared by the jobs API (``agentwake.jobs.service``: pause, resume, backfill, show) and the cron wake
(``agentwake.wake.cron``: a job that pauses itself after failed runs in a row), so a pause is
the same write and the same schedule change whoever makes it. docs/operations.md, "Job policies".
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from agentwake.domain.run_models import CatchUpPolicy, Job

if TYPE_CHECKING:
    from agentwake.store.port import Store
    from agentwake.store.port_queues import SchedulesPort

#: at most this many missed fires are recorded per resume (the newest ones; the count is exact up to the look-back)
MAX_MISSED_RECORDED = 500
#: missed fires are looked for at most this far back from the resume
MISSED_LOOKBACK = timedelta(days=31)
#: at most this many fire times are worked out in one call (a rate(1 minute) over a month is 44,640)
MAX_FIRE_STEPS = 1_500
#: past MAX_FIRE_STEPS, the newest fires are looked for in this last stretch of the range instead
NEWEST_STRETCH = timedelta(days=1)


def next_fire_times(job: Job, count: int = 3, *, now: datetime | None = None) -> list[datetime]:
    """The job's next ``count`` firings, in its time zone (none for a disabled job or a past at())."""
    from agentwake.domain.schedule_expressions import ScheduleExpressionError, next_fire, zone

    if not job.enabled:
        return []
    moment = now or datetime.now(UTC)
    start = anchor(job)
    out: list[datetime] = []
    try:
        tz = zone(job.timezone)
        while len(out) < count:
            fire = next_fire(job.schedule_expression, moment, job.timezone, anchor=start)
            if fire is None:
                break
            out.append(fire.astimezone(tz))
            moment = fire
    except ScheduleExpressionError:
        return out
    return out


def scheduled_time_text(moment: datetime) -> str:
    """A fire time as EventBridge Scheduler writes ``<aws.scheduler.scheduled-time>`` (UTC, seconds):
    the same text, so the same run id ``cron:{job_id}:{scheduled_time}``, as the schedule's own fire."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> datetime:
    """An ISO-8601 time (``Z`` or an offset; a naive time is UTC). ValueError if it is not one."""
    moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def anchor(job: Job) -> datetime:
    """Where a rate(...) counts from: the last schedule change, else the job's creation."""
    return parse_time(job.schedule_updated_at or job.created_at)


@dataclass
class FireTimes:
    """Fire times in a range: the newest ``times`` (oldest first) and how many there were in all."""

    times: list[datetime]
    total: int
    truncated: bool = False


def fire_times_between(job: Job, after: datetime, until: datetime, *, keep: int = MAX_MISSED_RECORDED) -> FireTimes:
    """The job's fire times in ``(after, until]``, the newest ``keep`` of them kept. Past
    MAX_FIRE_STEPS (``truncated``; ``total`` then counts only what was worked out) the times
    kept are those of the range's last day, so a catch-up of the latest still finds the latest."""
    found = _fire_times(job, after, until, keep)
    if found.truncated and until - NEWEST_STRETCH > after:
        newest = _fire_times(job, until - NEWEST_STRETCH, until, keep)
        return FireTimes(newest.times, max(found.total, newest.total), truncated=True)
    return found


def _fire_times(job: Job, after: datetime, until: datetime, keep: int) -> FireTimes:
    from agentwake.domain.schedule_expressions import ScheduleExpressionError, next_fire, parse

    kept: deque[datetime] = deque(maxlen=keep)
    total, moment, steps = 0, after, 0
    try:
        parsed = parse(job.schedule_expression)
        start = anchor(job)
        while steps < MAX_FIRE_STEPS:
            steps += 1
            fire = next_fire(parsed, moment, job.timezone, anchor=start)
            if fire is None or fire > until:
                break
            kept.append(fire)
            total += 1
            moment = fire
        else:
            return FireTimes(list(kept), total, truncated=True)
    except ScheduleExpressionError:
        pass
    return FireTimes(list(kept), total)


def catch_up_choice(policy: CatchUpPolicy, window_s: int, missed: list[datetime], now: datetime) -> list[datetime]:
    """Which missed fires a catch-up runs: none, the latest, or all of them within the window."""
    recent = [t for t in missed if now - t <= timedelta(seconds=window_s)]
    if policy == "none" or not recent:
        return []
    if policy == "latest":
        return [max(recent)]
    return sorted(recent)


def pause_job(
    store: Store, schedules: SchedulesPort | None, job: Job, *, reason: str, now: datetime, run_id: str | None = None
) -> Job | None:
    """Pause ``job``: its item marked paused and disabled (a fire that still arrives finds it so and
    does nothing), then its EventBridge Scheduler schedule disabled (no more fires). None if it
    was paused already. The schedule's change raises if the Scheduler refuses it; the job stays paused."""
    paused = store.jobs.update_job(
        job.job_id,
        unless_paused=True,
        enabled=False,
        paused_at=now.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        pause_reason=reason[:1000],
        pause_run_id=run_id,
    )
    if paused is None:
        return None
    if schedules is not None and job.schedule_name:
        schedules.set_enabled(job.schedule_name, False)
    return paused
