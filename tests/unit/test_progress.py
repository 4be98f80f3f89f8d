"""Progress of long operator work: a bar on stderr for a person watching, nothing otherwise."""

from __future__ import annotations

import io
import sys

import pytest

from agentwake_ops.progress import SILENT, RichProgress, for_cli


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_a_bar_naming_each_phase(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN stderr is a terminal
    monkeypatch.setattr(sys, "stderr", Terminal())
    # WHEN a command without --json reports a scan and then a redrive
    bar = for_cli(as_json=False)
    assert isinstance(bar, RichProgress)
    bar.phase("scanning the results DLQ")
    bar.update(40, 100)
    bar.phase("redriving", total=3)
    bar.advance()
    bar.close()
    # THEN both phases were drawn on stderr
    drawn = sys.stderr.getvalue()
    assert "scanning the results DLQ" in drawn and "redriving" in drawn


def test_json_or_no_terminal_gets_no_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stderr", Terminal())
    assert for_cli(as_json=True) is SILENT
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert for_cli(as_json=False) is SILENT
