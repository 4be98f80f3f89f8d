"""A job's fire times in a range, the missed ones a catch-up picks, and the bounds on both."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from agentwake.domain.run_models import Job
from agentwake.jobs.fires import catch_up_choice, fire_times_between, parse_time, scheduled_time_text

NOW = datetime(2026, 12, 2, 12, 0, 30, tzinfo=UTC)


def job(expression: str, timezone: str = "UTC") -> Job:
    return Job(
        job_id="j1",
        session_id="s1",
        name="n",
        schedule_expression=expression,
        timezone=timezone,
        created_at="2026-01-01T00:00:00Z",
    )


def test_fire_times_are_those_after_the_start_up_to_the_end_in_the_jobs_time_zone() -> None:
    found = fire_times_between(job("cron(0 6 * * ? *)", "Europe/Berlin"), NOW - timedelta(days=3), NOW)
    assert [scheduled_time_text(t) for t in found.times] == [
        "2026-11-30T05:00:00Z",
        "2026-12-01T05:00:00Z",
        "2026-12-02T05:00:00Z",
    ]
    assert found.total == 3 and not found.truncated


def test_past_its_bound_the_newest_fires_are_kept_so_latest_is_the_latest() -> None:
    # GIVEN a job every minute, paused for three days (4320 fire times)
    started = time.monotonic()
    found = fire_times_between(job("rate(1 minute)"), NOW - timedelta(days=3), NOW)
    # THEN the count is bounded, the newest 500 are kept, and the last one is the latest fire
    assert found.truncated and len(found.times) == 500
    assert found.times[-1] == datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
    assert time.monotonic() - started < 30  # bounded work, even on a busy machine


def test_catch_up_runs_none_the_latest_or_all_within_the_window() -> None:
    missed = [NOW - timedelta(hours=h) for h in (30, 3, 2, 1)]
    day = 86_400
    assert catch_up_choice("none", day, missed, NOW) == []
    assert catch_up_choice("latest", day, missed, NOW) == [NOW - timedelta(hours=1)]
    assert catch_up_choice("all", day, missed, NOW) == [NOW - timedelta(hours=h) for h in (3, 2, 1)]
    assert catch_up_choice("all", 0, missed, NOW) == []  # a zero window catches up nothing
    assert catch_up_choice("latest", day, [], NOW) == []


def test_scheduled_times_are_written_as_the_scheduler_writes_them() -> None:
    assert scheduled_time_text(parse_time("2026-11-03T07:00:00+01:00")) == "2026-11-03T06:00:00Z"
    assert scheduled_time_text(parse_time("2026-11-03T06:00:00")) == "2026-11-03T06:00:00Z"  # naive is UTC
