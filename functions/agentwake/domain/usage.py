"""A session's daily counters as read: the value the wake's batch read returns, the lease is taken
with, and the run starts from."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DailyUsage:
    """A session's counters for one UTC day as read; 0 for an item not there yet."""

    session_id: str
    day: str
    tokens: int = 0
    deliveries: int = 0
