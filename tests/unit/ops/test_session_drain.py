"""A session's drain from its run records (``agentwake_ops.runs.session_drain``): the idle time that
counts against the hand-off is the time with no run going while a later run had already found the
session busy and waited, not a gap in which nobody waited (issue 37)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from agentwake_ops.runs import session_drain


def at(seconds: float) -> str:
    return f"2026-12-03T12:00:{seconds:06.3f}Z"


def store_of(runs: dict[str, tuple[float, float, float | None]]) -> Any:
    """A store whose run records start and end at those seconds, each having waited ``waited_s``."""
    records = {
        run_id: SimpleNamespace(started_at=at(start), ended_at=at(end), waited_s=waited)
        for run_id, (start, end, waited) in runs.items()
    }
    return SimpleNamespace(records=SimpleNamespace(get_run=records.get))


def test_a_gap_while_a_later_run_waited_counts_from_its_first_busy_finding_or_the_last_end() -> None:
    # a: 0-2; b waited since 1 and started at 5 (idle 2..5 with b waiting: 3 s); c never waited,
    # started at 8 after a 2 s gap nobody waited in; d waited since 9.5, started at 10.5 (idle 1 s)
    drain = session_drain(
        store_of({"a": (0, 2, None), "b": (5, 6, 4), "c": (8, 9, None), "d": (10.5, 11, 1)}),
        ["a", "b", "c", "d"],
    )
    assert drain.longest_gap_s == 3.0
    assert drain.longest_ready_idle_s == 3.0
    assert (drain.runs, drain.busy_s, drain.span_s) == (4, 4.5, 11.0)


def test_a_gap_nobody_waited_in_is_no_idle_with_a_waiter() -> None:
    drain = session_drain(store_of({"a": (0, 1, None), "b": (9, 10, None), "c": (10.2, 11, 0.5)}), ["a", "b", "c"])
    assert drain.longest_gap_s == 8.0
    # c first found the session busy at 9.7, while b ran: only b's end to c's start counts
    assert round(drain.longest_ready_idle_s, 3) == 0.2
