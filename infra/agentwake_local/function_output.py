"""What the functions print, kept apart from what a person reads.

A function run in this process (``lambda_runtime.invoke``) prints its Powertools JSON log and EMF
metric lines on stdout and Python's warnings on stderr, as on Lambda, where CloudWatch keeps them.
In a terminal they bury the lines meant for a person. ``to_log`` sends what is written *while a
function runs, in the thread that runs it* to a log file, and everything else where it went: the
CLI's own output, the chat app's lines, the wake lines (``activity.WakeLines``).

Used by ``agentwake invoke`` (unless ``--verbose``), the CLI's in-process runs on a local stack
(``jobs trigger``, ``jobs backfill --yes``, ``jobs run-now``, a cron redrive: ``cli_plugin.LocalInvoker``)
and ``make chat`` (``python -m agentwake_local.function_output LOG SCRIPT ARGS...``).
``agentwake local up`` sends all of its stdout to its log (``activity.quiet_output``).
"""

from __future__ import annotations

import contextlib
import io
import logging
import runpy
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from agentwake_local.lambda_runtime import running_function


class _Split(io.TextIOBase):
    """A stream that writes to ``log`` from a thread running a function, else to ``terminal``."""

    def __init__(self, terminal: IO[str], log: IO[str]) -> None:
        self.terminal = terminal
        self.log = log

    def write(self, text: str) -> int:
        return (self.log if running_function() else self.terminal).write(text)

    def flush(self) -> None:
        for stream in (self.log, self.terminal):
            with contextlib.suppress(ValueError, OSError):  # closed meanwhile: nothing left to flush
                stream.flush()

    def isatty(self) -> bool:
        return self.terminal.isatty()

    def fileno(self) -> int:
        return self.terminal.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.terminal, "encoding", None) or "utf-8"


def default_log() -> Path:
    """``$AGENTWAKE_HOME/functions.log``: where the CLI's in-process runs keep their functions' logs."""
    from agentwake_local.stack import agentwake_home

    return agentwake_home() / "functions.log"


@contextlib.contextmanager
def to_log(log_path: Path) -> Iterator[Path]:
    """While it lasts, what functions print goes to ``log_path`` (appended); yields the path.

    ``sys.stdout``/``sys.stderr`` are split by thread, and so are the logging handlers already
    bound to them (Powertools' Logger binds the stdout it found when it was created)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("a", encoding="utf-8", buffering=1) as log:
        out, err = sys.stdout, sys.stderr
        split = {id(out): _Split(out, log), id(err): _Split(err, log)}
        rebound = []
        for handler in _stream_handlers():
            target = split.get(id(handler.stream))
            if target is not None:
                rebound.append((handler, handler.stream))
                handler.setStream(target)  # type: ignore[arg-type]
        sys.stdout, sys.stderr = split[id(out)], split[id(err)]  # type: ignore[assignment]
        try:
            yield log_path
        finally:
            sys.stdout, sys.stderr = out, err
            for handler, stream in rebound:
                handler.setStream(stream)


def _stream_handlers() -> list[logging.StreamHandler[IO[str]]]:
    loggers = [
        logging.getLogger(),
        *(v for v in logging.Logger.manager.loggerDict.values() if isinstance(v, logging.Logger)),
    ]
    return [h for lg in loggers for h in lg.handlers if isinstance(h, logging.StreamHandler)]


def main(argv: list[str] | None = None) -> int:
    """``python -m agentwake_local.function_output LOG SCRIPT [ARGS...]``: run SCRIPT as ``__main__``
    with its functions' output in LOG (``make chat``; ``CHAT_VERBOSE=1`` there skips this)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2:
        print("usage: python -m agentwake_local.function_output LOG SCRIPT [ARGS...]", file=sys.stderr)
        return 2
    log, script = Path(args[0]).expanduser(), args[1]
    print(f"the functions' JSON logs: {log}", flush=True)
    sys.argv = [script, *args[2:]]
    with to_log(log):
        runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
