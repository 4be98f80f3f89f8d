"""Processes a test starts (the chat app, ``agentwake local up``, the console, chromedriver): each
in its own process group, and always ended with everything it started.

``start`` is ``subprocess.Popen`` in a new session (its own process group, so a signal reaches the
process and its children, and a Ctrl-C at the terminal does not reach it before the test's own
``finally``). ``stop`` ends the group, escalating: the first signal (SIGINT, as Ctrl-C; or SIGTERM),
then SIGTERM, then SIGKILL, waiting a generous while after each, so a busy machine gets time for a
clean exit and a stuck process never outlives its test. Call it in a ``finally`` (``running`` does).
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: seconds a process may take to end after its first signal: a busy 2-core machine stops a local
#: stack (its HTTP servers, pollers, scheduler) in well under this
FIRST_WAIT_S = 120.0
#: seconds after SIGTERM, then after SIGKILL
LATER_WAIT_S = 30.0


def start(args: list[str], **popen: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen(args, **popen)`` with the process leading its own process group."""
    return subprocess.Popen(args, start_new_session=True, **popen)  # noqa: S603 - the tests' own commands


def _signal_group(process: subprocess.Popen[Any], signum: int) -> None:
    try:
        os.killpg(process.pid, signum)  # its group's id is its pid (start_new_session)
    except (ProcessLookupError, PermissionError):
        pass


def stop(process: subprocess.Popen[Any], first: int = signal.SIGINT, within: float = FIRST_WAIT_S) -> int:
    """End ``process`` (started by ``start``) and its group: ``first``, then SIGTERM, then SIGKILL,
    waiting ``within`` s after the first and ``LATER_WAIT_S`` after each other; its exit code (the
    first signal's exit when it ended on that, e.g. 0 after a clean Ctrl-C)."""
    for signum, wait_s in ((first, within), (signal.SIGTERM, LATER_WAIT_S), (signal.SIGKILL, LATER_WAIT_S)):
        if process.poll() is not None:
            break
        _signal_group(process, signum)
        try:
            process.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
    # whatever the process started and left behind in its group goes too
    _signal_group(process, signal.SIGKILL)
    return process.wait(timeout=LATER_WAIT_S)


@contextmanager
def running(
    args: list[str], first: int = signal.SIGINT, within: float = FIRST_WAIT_S, **popen: Any
) -> Iterator[subprocess.Popen[Any]]:
    """``start(args, **popen)``, ended by ``stop(process, first, within)`` however the block ends."""
    process = start(args, **popen)
    try:
        yield process
    finally:
        stop(process, first, within)
