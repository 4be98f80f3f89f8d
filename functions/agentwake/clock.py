"""Time as a port, so backoff and deadlines are testable without sleeping (tests use
``tests/support/clock.py``): the wake takes its run's deadline on it (``WakeDeps.clock``), the
agent's provider chain backs off and stops by it."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Monotonic seconds."""

    def wall(self) -> float:
        """Epoch seconds (when a wait began, when a session was handed over)."""

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)
