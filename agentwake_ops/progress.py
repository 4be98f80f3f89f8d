"""Progress of long operator work (scans, joins, exports, claims, redrives).

The plain-Python operations report through a :class:`Progress`; the CLI passes a rich progress bar
on stderr when stderr is a terminal and ``--json`` is not given, and :data:`SILENT` otherwise, so
stdout stays exactly the command's output.
"""

from __future__ import annotations

import sys
from typing import Any


class Progress:
    """No-op base: ``phase`` starts a named step with an optional total, ``update`` sets where it is."""

    def phase(self, description: str, total: int | None = None) -> None:
        pass

    def update(self, completed: int, total: int | None = None) -> None:
        pass

    def advance(self, amount: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


SILENT = Progress()


class RichProgress(Progress):
    """One rich progress bar on stderr; each phase replaces the previous one's description."""

    def __init__(self, console: Any = None) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as Bar

        self._bar = Bar(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console or Console(stderr=True),
            transient=True,
        )
        self._task: Any = None
        self._bar.start()

    def phase(self, description: str, total: int | None = None) -> None:
        from rich.markup import escape

        from agentwake_ops.terminal import shown

        if self._task is not None:
            self._bar.remove_task(self._task)
        # the column renders markup: escaped, and inert like every text the CLI shows
        self._task = self._bar.add_task(escape(shown(description)), total=total)

    def update(self, completed: int, total: int | None = None) -> None:
        if self._task is None:
            return
        if total is None:
            self._bar.update(self._task, completed=completed)
        else:
            self._bar.update(self._task, completed=completed, total=total)

    def advance(self, amount: int = 1) -> None:
        if self._task is not None:
            self._bar.advance(self._task, amount)

    def close(self) -> None:
        self._bar.stop()


def for_cli(as_json: bool) -> Progress:
    """A bar on stderr when a person is watching it; silent with --json or when stderr is not a TTY."""
    if as_json or not sys.stderr.isatty():
        return SILENT
    return RichProgress()
