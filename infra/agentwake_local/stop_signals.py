"""Ctrl-C (SIGINT) and SIGTERM for a process that serves on threads until it is told to stop
(``agentwake local up``, the moto server alone, the chat app).

Python runs a signal's handler in the main thread, but the kernel may hand the signal to any
thread: the main thread, blocked in a lock with no timeout (``threading.Event().wait()``), then
never wakes to run it, and the process ignores Ctrl-C until another signal reaches the main thread
(seen under load: the chat app kept running after SIGINT). A handler that sets an ``Event`` can also
block for good when it runs inside that Event's own ``wait`` (the Event's lock is not reentrant).
So the handler here only records the signal (no lock), and ``wait`` naps in short steps: a signal
is acted on within a step whichever thread the kernel chose.
"""

from __future__ import annotations

import signal
import time
from types import FrameType

#: seconds between two looks at the signals received
STEP_S = 0.25


class StopSignals:
    """SIGINT and SIGTERM recorded from its creation on (in the main thread)."""

    def __init__(self) -> None:
        self.received: list[int] = []
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._record)

    def _record(self, signum: int, _frame: FrameType | None) -> None:
        self.received.append(signum)

    def __bool__(self) -> bool:
        return bool(self.received)

    def wait(self, timeout: float | None = None) -> bool:
        """Until a signal came (True) or ``timeout`` s passed (False; None: no timeout)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.received:
            left = STEP_S if deadline is None else min(STEP_S, deadline - time.monotonic())
            if left <= 0:
                return False
            time.sleep(left)
        return True
