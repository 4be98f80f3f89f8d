"""The run's deadline as an ambient value: every outbound exchange inside a run ends by it.

Light on purpose (it is on the cold-start path): agentwake.trust.outbound reads it, the wake sets it.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator

_RUN_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("agentwake_run_deadline", default=None)


@contextlib.contextmanager
def run_deadline(deadline: float | None) -> Iterator[None]:
    """Inside, every HTTP exchange ends by ``deadline`` (``time.monotonic()`` seconds; None: unbounded)."""
    token = _RUN_DEADLINE.set(deadline)
    try:
        yield
    finally:
        _RUN_DEADLINE.reset(token)


def deadline_after(remaining_ms: int | None, margin_ms: int) -> float | None:
    """The monotonic time ``margin_ms`` before the invocation's end (None when it has no end)."""
    if remaining_ms is None:
        return None
    return time.monotonic() + (remaining_ms - margin_ms) / 1000


def current() -> float | None:
    return _RUN_DEADLINE.get()


def passed() -> bool:
    deadline = _RUN_DEADLINE.get()
    return deadline is not None and time.monotonic() >= deadline
