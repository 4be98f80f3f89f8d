"""EventBridge Scheduler's at/rate/cron expressions, as the local scheduler fires them."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agentwake.domain.schedule_expressions import ScheduleExpressionError, next_fire, parse


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("expression", "timezone", "after", "expected"),
    [
        # daily at 06:00 UTC
        ("cron(0 6 * * ? *)", "UTC", utc(2026, 11, 30, 5, 0), utc(2026, 11, 30, 6, 0)),
        ("cron(0 6 * * ? *)", "UTC", utc(2026, 11, 30, 6, 0), utc(2026, 12, 1, 6, 0)),  # strictly after
        # 09:00 in Paris: UTC+1 in winter, UTC+2 in summer
        ("cron(0 9 * * ? *)", "Europe/Paris", utc(2026, 11, 30, 0, 0), utc(2026, 11, 30, 8, 0)),
        ("cron(0 9 * * ? *)", "Europe/Paris", utc(2026, 7, 1, 0, 0), utc(2026, 7, 1, 7, 0)),
        # every 15 minutes
        ("cron(0/15 * * * ? *)", "UTC", utc(2026, 11, 30, 5, 1), utc(2026, 11, 30, 5, 15)),
        # weekdays at 18:00 (2026-11-28 is a Saturday)
        ("cron(0 18 ? * MON-FRI *)", "UTC", utc(2026, 11, 28, 0, 0), utc(2026, 11, 30, 18, 0)),
        # first Monday of the month (1 = Sunday, so 2 = Monday); 2026-12-01 is a Tuesday
        ("cron(0 10 ? * 2#1 *)", "UTC", utc(2026, 11, 30, 12, 0), utc(2026, 12, 7, 10, 0)),
        # last Friday of the month
        ("cron(0 10 ? * 6L *)", "UTC", utc(2026, 11, 1, 0, 0), utc(2026, 11, 27, 10, 0)),
        # last day of the month
        ("cron(30 23 L * ? *)", "UTC", utc(2026, 2, 1, 0, 0), utc(2026, 2, 28, 23, 30)),
        # nearest weekday to the 15th (2026-11-15 is a Sunday: Monday the 16th)
        ("cron(0 8 15W * ? *)", "UTC", utc(2026, 11, 1, 0, 0), utc(2026, 11, 16, 8, 0)),
        # named months, a single year
        ("cron(0 0 1 JAN,JUL ? 2027)", "UTC", utc(2026, 11, 30, 0, 0), utc(2027, 1, 1, 0, 0)),
        ("cron(0 0 1 1 ? 2025)", "UTC", utc(2026, 11, 30, 0, 0), None),  # only in the past
        # one-time, in the schedule's time zone
        ("at(2026-12-01T09:00:00)", "Europe/Paris", utc(2026, 11, 30, 0, 0), utc(2026, 12, 1, 8, 0)),
        ("at(2026-12-01T09:00:00)", "UTC", utc(2026, 12, 1, 9, 0), None),
    ],
)
def test_next_fire(expression: str, timezone: str, after: datetime, expected: datetime | None) -> None:
    assert next_fire(expression, after, timezone) == expected


def test_a_rate_counts_from_its_anchor() -> None:
    anchor = utc(2026, 11, 30, 5, 0, 7)
    # GIVEN rate(5 minutes) anchored at 05:00:07  THEN it fires at 05:05:07, 05:10:07, ...
    assert next_fire("rate(5 minutes)", utc(2026, 11, 30, 5, 0, 7), anchor=anchor) == utc(2026, 11, 30, 5, 5, 7)
    assert next_fire("rate(5 minutes)", utc(2026, 11, 30, 5, 7), anchor=anchor) == utc(2026, 11, 30, 5, 10, 7)
    assert next_fire("rate(1 day)", utc(2026, 11, 30), anchor=utc(2026, 12, 2)) == utc(2026, 12, 2)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("cron(0 6 * * * *)", "exactly one of day-of-month and day-of-week"),
        ("cron(0 6 ? * ? *)", "exactly one of day-of-month and day-of-week"),
        ("cron(0 6 * * ?)", "six fields"),
        ("cron(60 6 * * ? *)", "minutes"),
        ("cron(0 6 ? * 8 *)", "day-of-week"),
        ("cron(0 6 ? * 2#6 *)", "#1 to #5"),
        ("rate(1 minutes)", "singular"),
        ("rate(5 minute)", "singular"),
        ("rate(0 minutes)", "at least 1"),
        ("rate(5 weeks)", "minutes|hours|days"),
        ("at(2026-13-01T00:00:00)", "month"),
        ("at(tomorrow)", "yyyy-mm-dd"),
        ("every day", "expected at(...)"),
    ],
)
def test_invalid_expressions_say_why(expression: str, message: str) -> None:
    with pytest.raises(
        ScheduleExpressionError, match=message.replace("(", r"\(").replace(")", r"\)").replace("|", r"\|")
    ):
        parse(expression)


def test_an_unknown_time_zone_is_refused() -> None:
    with pytest.raises(ScheduleExpressionError, match="unknown time zone"):
        next_fire("cron(0 6 * * ? *)", utc(2026, 1, 1), "Mars/Olympus")
