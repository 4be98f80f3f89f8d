"""A session's counters for one UTC day: tokens spent and messages delivered, all runs together.

One item per session per day (``SESSION#{id}`` / ``USAGE#{yyyy-mm-dd}``), read by a run of a
session with daily limits after its start, under its lease (one GetItem, ``wake/attempt.py``), and
updated inside writes the run makes anyway: the delivery counter in the transaction that records
the delivery (for deliver_final's answer, the commit), the token counter in the model step's
journal write. A session without daily limits never reads or writes it. The item expires after a
few days (TTL). One wake per session at a time (the lease) means the count read under the lease
stays exact for the run (but for an operator's ``agentwake dlq settle``, which records a delivery
made by a run that failed: it may add one meanwhile).

``DynamoStore.daily.counters(session_id)`` builds them (reading nothing);
``DynamoStore.journals.journal(run_id, counters=...)`` adds each new reply's tokens in the reply's own write.
"""

from __future__ import annotations

from typing import Any

from agentwake.store.codec import key
from agentwake.store.keys import usage_day, usage_key
from agentwake.store.table import Table

#: counter items outlive their day by this much, then DynamoDB's TTL removes them
COUNTER_TTL_S = 3 * 86400


class DailyCounters:
    """The ``Counters`` of agentwake.store.port on the table (``Daily.counters``)."""

    def __init__(self, table: Table, session_id: str, day: str | None = None) -> None:
        self.table = table
        self.session_id = session_id
        self.day = day or usage_day(table.now())

    def read(self) -> tuple[int, int]:
        """(tokens, deliveries) of the session today: one consistent GetItem (a wake's, under its
        lease; an operator's replay)."""
        item = self.table.read_item(*usage_key(self.session_id, self.day))
        if not item:
            return 0, 0
        return int(item.get("tokens", {}).get("N", "0")), int(item.get("deliveries", {}).get("N", "0"))

    def add(self, *, tokens: int = 0, deliveries: int = 0) -> dict[str, Any]:
        """A transaction item adding to today's counters (created on first use)."""
        return {
            "Update": {
                "TableName": self.table.name,
                "Key": key(*usage_key(self.session_id, self.day)),
                "UpdateExpression": "ADD tokens :t, deliveries :d SET expires_at = if_not_exists(expires_at, :x)",
                "ExpressionAttributeValues": {
                    ":t": {"N": str(tokens)},
                    ":d": {"N": str(deliveries)},
                    ":x": {"N": str(int(self.table.now()) + COUNTER_TTL_S)},
                },
            }
        }


class Daily:
    """Where a session's daily counters are built (``counters``)."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def counters(self, session_id: str, *, day: str | None = None) -> DailyCounters:
        """The session's counters of ``day`` (today when None): builds them, reads nothing (here,
        beside them, not in the journal: a wake asks for them, then for its journal)."""
        return DailyCounters(self.table, session_id, day=day)
