"""What schedule_wake makes of the agent's request (agentwake.jobs.self_wakes): durations, times
with or without an offset in the wake's time zone, the job id one tool call names, and the words of
a wake the agent reads back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agentwake.domain.models import SelfWakePolicy
from agentwake.domain.run_models import Job
from agentwake.jobs.self_wakes import SelfWakes, WakeRefused, WakeRequest, describe, parse_duration, wake_job_id

NOW = datetime(2026, 12, 3, 4, 0, tzinfo=UTC)


class _Jobs:
    """Only the clock: these requests never reach the store."""

    clock = staticmethod(lambda: NOW)


def expression(request: WakeRequest, timezone: str = "UTC") -> tuple[str, bool]:
    wakes = SelfWakes(_Jobs(), SelfWakePolicy())  # type: ignore[arg-type]
    return wakes._expression(request, timezone, NOW)


@pytest.mark.parametrize(
    ("text", "seconds"), [("90m", 5400), ("2h", 7200), ("1h30m", 5400), ("3d", 259_200), ("2 h", 7200)]
)
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["soon", "2", "h2", "2h and 3m", "-2h", ""])
def test_a_malformed_duration_is_refused_saying_the_shape(text: str) -> None:
    with pytest.raises(WakeRefused, match="like 90m, 2h, 1h30m or 3d"):
        parse_duration(text)


def test_in_counts_from_now_in_the_wakes_time_zone() -> None:
    # 04:00 UTC is 05:00 in Paris: in 2 hours is 07:00 there
    assert expression(WakeRequest(in_="2h"), "Europe/Paris") == ("at(2026-12-03T07:00:00)", False)


def test_an_at_with_an_offset_is_moved_into_the_wakes_time_zone_and_one_without_is_taken_as_is() -> None:
    assert expression(WakeRequest(at="2026-12-04T09:00:00Z"), "Europe/Paris") == ("at(2026-12-04T10:00:00)", False)
    assert expression(WakeRequest(at="2026-12-04T09:00:00"), "Europe/Paris") == ("at(2026-12-04T09:00:00)", False)


def test_cron_and_rate_are_recurring_in_either_spelling() -> None:
    assert expression(WakeRequest(cron="0 9 * * ? *")) == ("cron(0 9 * * ? *)", True)
    assert expression(WakeRequest(rate="rate(2 hours)")) == ("rate(2 hours)", True)


def test_an_unknown_time_zone_is_refused() -> None:
    with pytest.raises(WakeRefused, match="IANA name"):
        expression(WakeRequest(in_="1h"), "Mars/Olympus")


def test_one_tool_call_names_one_job_whatever_the_attempt() -> None:
    assert wake_job_id("bg:t1#0#0") == wake_job_id("bg:t1#0#0") != wake_job_id("bg:t1#0#1")
    assert wake_job_id("bg:t1#0#0").startswith("wake-") and len(wake_job_id("bg:t1#0#0")) == 21


def test_a_wake_reads_back_with_its_next_fire_its_count_and_its_note() -> None:
    job = Job(
        job_id="wake-1",
        session_id="s",
        name="wake",
        schedule_expression="rate(2 hours)",
        max_fires=4,
        fires=1,
        note="poll",
        origin="agent",
    )
    line = describe(job, now=NOW)
    assert line.startswith("wake-1: next ") and "fired 1 of 4" in line and line.endswith("note: poll")
    stopped = job.model_copy(update={"enabled": False, "disabled_reason": "stopped after 4 fires (its max_fires)"})
    assert "not pending: stopped after 4 fires" in describe(stopped, now=NOW)
