"""EventBridge Scheduler's schedule expressions: ``at(...)``, ``rate(...)`` and ``cron(...)``.

Plain Python, no dependencies: the local scheduler fires schedules with it, and anything that
creates a schedule can validate one before AWS refuses it.

- ``at(yyyy-mm-ddThh:mm:ss)``: once, at that wall-clock time of the schedule's time zone;
- ``rate(N unit)``: every N minutes/hours/days (``unit`` singular when N is 1, plural otherwise),
  counted from an anchor (the schedule's StartDate, else its creation);
- ``cron(minutes hours day-of-month month day-of-week year)``: AWS's six fields, in the
  schedule's time zone. ``, - * /`` everywhere; ``?`` in exactly one of day-of-month and
  day-of-week; ``L`` (last day), ``W`` (nearest weekday), ``LW`` in day-of-month; ``L`` (last
  Saturday, or ``5L``: last Thursday) and ``#`` (``3#2``: second Tuesday) in day-of-week, where
  1 is Sunday; month and weekday names (JAN-DEC, SUN-SAT).

``next_fire(expression, after, timezone)`` is the first firing strictly after ``after``.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


class ScheduleExpressionError(ValueError):
    """Not an expression EventBridge Scheduler accepts; the message says why."""


_MONTHS = {name: i for i, name in enumerate(calendar.month_abbr) if name} | {"SEPT": 9}
_MONTHS = {k.upper(): v for k, v in _MONTHS.items()}
_WEEKDAYS = {"SUN": 1, "MON": 2, "TUE": 3, "WED": 4, "THU": 5, "FRI": 6, "SAT": 7}
_RATE = re.compile(r"^(\d+)\s+(minute|minutes|hour|hours|day|days)$")
_AT = re.compile(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})$")
_RATE_SECONDS = {"minute": 60, "hour": 3600, "day": 86400}
#: how far ahead a cron expression is searched for its next firing
_SEARCH_YEARS = 30


@dataclass(frozen=True)
class At:
    when: datetime  # naive: wall-clock time in the schedule's time zone


@dataclass(frozen=True)
class Rate:
    seconds: int


@dataclass(frozen=True)
class Cron:
    minutes: frozenset[int]
    hours: frozenset[int]
    months: frozenset[int]
    years: frozenset[int]
    #: day-of-month: a set of days, or "L", "LW", ("W", n); None when day-of-week decides
    day_of_month: frozenset[int] | str | tuple[str, int] | None
    #: day-of-week (1 = Sunday): a set, ("L", weekday) or ("#", weekday, k); None when day-of-month decides
    day_of_week: frozenset[int] | tuple[str, int] | tuple[str, int, int] | None

    def matches_day(self, day: date) -> bool:
        if day.year not in self.years or day.month not in self.months:
            return False
        last = calendar.monthrange(day.year, day.month)[1]
        if self.day_of_month is not None:
            return _dom_matches(self.day_of_month, day, last)
        assert self.day_of_week is not None
        weekday = (day.isoweekday() % 7) + 1  # Sunday = 1 ... Saturday = 7
        rule = self.day_of_week
        if isinstance(rule, frozenset):
            return weekday in rule
        if rule[0] == "L":
            return weekday == rule[1] and day.day + 7 > last
        _, wanted, nth = rule  # type: ignore[misc]
        return weekday == wanted and (day.day - 1) // 7 + 1 == nth


Expression = At | Rate | Cron


def _dom_matches(rule: frozenset[int] | str | tuple[str, int], day: date, last: int) -> bool:
    if isinstance(rule, frozenset):
        return day.day in rule
    if rule == "L":
        return day.day == last
    if rule == "LW":
        target = last
    else:
        assert isinstance(rule, tuple)
        target = min(rule[1], last)
    return day.day == _nearest_weekday(day.year, day.month, target, last)


def _nearest_weekday(year: int, month: int, target: int, last: int) -> int:
    """The weekday nearest to ``target`` in the same month (AWS's ``W``)."""
    weekday = date(year, month, target).weekday()  # Monday = 0
    if weekday == 5:  # Saturday: the Friday before, unless that is in the previous month
        return target - 1 if target > 1 else target + 2
    if weekday == 6:  # Sunday: the Monday after, unless that is in the next month
        return target + 1 if target < last else target - 2
    return target


def _number(text: str, names: dict[str, int], low: int, high: int, field: str) -> int:
    value = names.get(text.upper()) if not text.isdigit() else int(text)
    if value is None or not low <= value <= high:
        raise ScheduleExpressionError(f"{field}: {text!r} is not in {low}-{high}")
    return value


def _set_field(text: str, field: str, low: int, high: int, names: dict[str, int] | None = None) -> frozenset[int]:
    names = names or {}
    values: set[int] = set()
    for part in text.split(","):
        if not part:
            raise ScheduleExpressionError(f"{field}: empty item in {text!r}")
        base, slash, step_text = part.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or int(step_text) < 1:
                raise ScheduleExpressionError(f"{field}: bad increment in {part!r}")
            step = int(step_text)
        if base == "*":
            start, end = low, high
        elif "-" in base:
            first, _, second = base.partition("-")
            start, end = _number(first, names, low, high, field), _number(second, names, low, high, field)
            if start > end:
                raise ScheduleExpressionError(f"{field}: range {base!r} goes backwards")
        else:
            start = _number(base, names, low, high, field)
            end = high if slash else start
        values.update(range(start, end + 1, step))
    return frozenset(values)


def _parse_cron(body: str) -> Cron:
    fields = body.split()
    if len(fields) != 6:
        raise ScheduleExpressionError(
            f"cron(...) needs six fields (minutes hours day-of-month month day-of-week year), got {len(fields)}"
        )
    minutes, hours, dom, month, dow, year = fields
    if (dom == "?") == (dow == "?"):
        raise ScheduleExpressionError("cron(...): exactly one of day-of-month and day-of-week must be '?'")
    day_of_month: frozenset[int] | str | tuple[str, int] | None = None
    day_of_week: frozenset[int] | tuple[str, int] | tuple[str, int, int] | None = None
    if dom != "?":
        if dom.upper() in ("L", "LW"):
            day_of_month = dom.upper()
        elif dom.upper().endswith("W"):
            day_of_month = ("W", _number(dom[:-1], {}, 1, 31, "day-of-month"))
        else:
            day_of_month = _set_field(dom, "day-of-month", 1, 31)
    else:
        upper = dow.upper()
        if upper == "L":
            day_of_week = ("L", 7)
        elif upper.endswith("L"):
            day_of_week = ("L", _number(upper[:-1], _WEEKDAYS, 1, 7, "day-of-week"))
        elif "#" in upper:
            weekday, _, nth = upper.partition("#")
            if not nth.isdigit() or not 1 <= int(nth) <= 5:
                raise ScheduleExpressionError(f"day-of-week: {dow!r} needs #1 to #5")
            day_of_week = ("#", _number(weekday, _WEEKDAYS, 1, 7, "day-of-week"), int(nth))
        else:
            day_of_week = _set_field(dow, "day-of-week", 1, 7, _WEEKDAYS)
    return Cron(
        minutes=_set_field(minutes, "minutes", 0, 59),
        hours=_set_field(hours, "hours", 0, 23),
        months=_set_field(month, "month", 1, 12, _MONTHS),
        years=_set_field(year, "year", 1970, 2199),
        day_of_month=day_of_month,
        day_of_week=day_of_week,
    )


def parse(expression: str) -> Expression:
    """Parse a schedule expression; raises ``ScheduleExpressionError`` saying what is wrong."""
    text = (expression or "").strip()
    kind, paren, rest = text.partition("(")
    if not paren or not rest.endswith(")") or kind not in ("at", "rate", "cron"):
        raise ScheduleExpressionError(f"expected at(...), rate(...) or cron(...), got {expression!r}")
    body = rest[:-1].strip()
    if kind == "at":
        match = _AT.match(body)
        if not match:
            raise ScheduleExpressionError(f"at(...) takes yyyy-mm-ddThh:mm:ss, got {body!r}")
        try:
            year, month, day, hour, minute, second = (int(g) for g in match.groups())
            return At(datetime(year, month, day, hour, minute, second))
        except ValueError as exc:
            raise ScheduleExpressionError(f"at({body}): {exc}") from exc
    if kind == "rate":
        match = _RATE.match(body)
        if not match:
            raise ScheduleExpressionError(f"rate(...) takes 'N minutes|hours|days', got {body!r}")
        value, unit = int(match.group(1)), match.group(2)
        if value < 1:
            raise ScheduleExpressionError("rate(...) needs a value of at least 1")
        if (value == 1) == unit.endswith("s"):
            raise ScheduleExpressionError(f"rate({body}): the unit is singular for 1 and plural otherwise")
        return Rate(value * _RATE_SECONDS[unit.rstrip("s")])
    return _parse_cron(body)


def zone(name: str | None) -> ZoneInfo:
    try:
        return ZoneInfo(name or "UTC")
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ScheduleExpressionError(f"unknown time zone {name!r}") from exc


def next_fire(
    expression: str | Expression,
    after: datetime,
    timezone: str | None = "UTC",
    *,
    anchor: datetime | None = None,
) -> datetime | None:
    """The first firing strictly after ``after`` (aware, UTC), or None if there is none.

    ``anchor``: where a rate counts from (StartDate or creation); defaults to ``after``.
    """
    parsed = parse(expression) if isinstance(expression, str) else expression
    after = after.astimezone(UTC)
    tz = zone(timezone)
    if isinstance(parsed, At):
        when = parsed.when.replace(tzinfo=tz).astimezone(UTC)
        return when if when > after else None
    if isinstance(parsed, Rate):
        start = (anchor or after).astimezone(UTC)
        if start > after:
            return start
        periods = int((after - start).total_seconds() // parsed.seconds) + 1
        return start + timedelta(seconds=periods * parsed.seconds)
    return _next_cron(parsed, after, tz)


def _next_cron(cron: Cron, after: datetime, tz: ZoneInfo) -> datetime | None:
    local_after = after.astimezone(tz)
    day = local_after.date()
    limit = date(min(day.year + _SEARCH_YEARS, 2199), 12, 31)
    hours, minutes = sorted(cron.hours), sorted(cron.minutes)
    while day <= limit:
        if day.year not in cron.years:
            day = date(day.year + 1, 1, 1)
            continue
        if day.month not in cron.months:
            day = date(day.year + (day.month == 12), day.month % 12 + 1, 1)
            continue
        if cron.matches_day(day):
            for hour in hours:
                for minute in minutes:
                    candidate = datetime(day.year, day.month, day.day, hour, minute, tzinfo=tz).astimezone(UTC)
                    if candidate > after:
                        return candidate
        day += timedelta(days=1)
    return None


def validate(expression: str, timezone: str | None = "UTC") -> None:
    """Raise ``ScheduleExpressionError`` unless the expression and time zone are valid."""
    parse(expression)
    zone(timezone)


def refuse_past_at(expression: str, timezone: str | None = "UTC", *, now: datetime | None = None) -> None:
    """Raise ``ScheduleExpressionError`` for an ``at(...)`` whose time (in ``timezone``) is not in
    the future: such a schedule never fires. Other expressions pass."""
    parsed = parse(expression)
    if not isinstance(parsed, At):
        return
    moment = (now or datetime.now(UTC)).astimezone(UTC)
    if next_fire(parsed, moment, timezone) is None:
        when = parsed.when.replace(tzinfo=zone(timezone))
        raise ScheduleExpressionError(
            f"{expression} ({timezone or 'UTC'}) is in the past: it would never fire "
            f"(now is {moment.astimezone(when.tzinfo).strftime('%Y-%m-%dT%H:%M:%S')} there); give a future time"
        )
