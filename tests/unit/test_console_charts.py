"""The console's charts page between the two deploys of an upgrade: the by-day index it counts from
(``gsi4``) is not there yet, so its counts miss the runs this version started, and it says so."""

from __future__ import annotations

import html
from types import SimpleNamespace
from typing import Any

import pytest

from agentwake.store.operator import RunsPage
from agentwake_ops.console.charts import charts
from agentwake_ops.console.html import Markup


def _charts(monkeypatch: pytest.MonkeyPatch, missing: tuple[str, ...]) -> str:
    pages = [RunsPage(runs=[], next_before=None, method="by-day", missing_indexes=missing)]
    monkeypatch.setattr("agentwake_ops.runs.list_runs", lambda *_a, **_k: pages[0])
    ctx: Any = SimpleNamespace(store=None, has_queue=lambda _role: False)
    page = charts(ctx, {}, "csrf")
    assert isinstance(page, Markup)
    return str(page)


def test_charts_read_while_the_by_day_index_is_missing_say_their_counts_miss_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a table without gsi4 yet (UpgradeStep=gsi3-only) WHEN the charts page is drawn
    page = _charts(monkeypatch, ("gsi4",))
    # THEN it names the missing index and what to do, in the console's words (no CLI flag)
    note = page.split("<p class='note'>", 1)[1].split("</p>", 1)[0]
    assert "gsi4" in note and "UpgradeStep=all" in note and "missing here" in note
    assert "--" not in note and "session=ID and scan=1" in note
    # AND a table that has its indexes gets no such note
    assert "<p class='note'>" not in _charts(monkeypatch, ())


def test_the_console_names_its_own_pages_where_the_cli_names_its_flags() -> None:
    # GIVEN the pages of runs the CLI would annotate with a flag or a command
    from agentwake_ops.console.pages import runs_note

    scan = RunsPage(runs=[], next_before=None, method="scan", missing_indexes=("gsi3",))
    session = RunsPage(runs=[], next_before=None, method="session", missing_indexes=("gsi3",))
    # WHEN the console words them THEN the run page and the runs page's query, no CLI command
    scan_note, session_note = (html.unescape(str(runs_note(p))) for p in (scan, session))
    assert "the run page, /run?id=RUN_ID, reads each" in scan_note and "runs show" not in scan_note
    assert "the runs page's scan=1 lists them" in session_note and "--" not in session_note
