"""A clock for tests: the runtime's ``Clock`` port (agentwake/clock.py) that moves only when slept on."""

from __future__ import annotations


class FakeClock:
    """A clock that only moves when slept on. Records every sleep for assertions."""

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self._now

    def wall(self) -> float:
        return self._now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self._now += max(0.0, seconds)

    def advance(self, seconds: float) -> None:
        self._now += seconds
