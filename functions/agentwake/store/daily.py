"""A session's counters for one UTC day: tokens spent and messages delivered, all runs together.

One item per session per day (``SESSION#{id}`` / ``USAGE#{yyyy-mm-dd}``), read in the wake's one
batch read (``Runs.read_wake`` asks for today's item with the run, the task or job and the
session config: no round trip of its own), checked unchanged by the transaction that counts the
run's attempt under its lease, and updated inside writes the run makes anyway: the delivery counter in the transaction
that records the delivery (for deliver_final's answer, the commit), the token counter in the model
step's journal write. A session without daily limits never writes it. The item expires after a few days (TTL). One wake per session at a time (the
lease) means the count checked when the lease is taken stays exact for the run.

``DynamoStore.daily.counters(session_id)`` builds them (reading nothing);
``DynamoStore.journals.journal(run_id, counters=...)`` adds each new reply's tokens in the reply's own write.
"""

from __future__ import annotations

from typing import Any

from agentwake.domain.usage import DailyUsage
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
        """(tokens, deliveries) of the session today: one GetItem (a wake has them from its batch
        read; this is for the operator's replay and a schedule that does not name its session)."""
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


def usage_from_item(session_id: str, day: str, item: dict[str, Any] | None) -> DailyUsage:
    """The day's counters as stored (``USAGE#{day}``); 0 for an item not there yet."""
    item = item or {}
    return DailyUsage(
        session_id=session_id,
        day=day,
        tokens=int(item.get("tokens", {}).get("N", "0")),
        deliveries=int(item.get("deliveries", {}).get("N", "0")),
    )


def unchanged_check(table: Table, usage: DailyUsage) -> dict[str, Any]:
    """A ConditionCheck that the day's counters are still what was read (the start's attempt
    transaction, ``Runs.begin_run``)."""
    conditions, values = [], {}
    for name, value in (("tokens", usage.tokens), ("deliveries", usage.deliveries)):
        values[f":{name}"] = {"N": str(value)}
        same = f"{name} = :{name}"
        conditions.append(f"(attribute_not_exists({name}) OR {same})" if value == 0 else same)
    return {
        "ConditionCheck": {
            "TableName": table.name,
            "Key": key(*usage_key(usage.session_id, usage.day)),
            "ConditionExpression": " AND ".join(conditions),
            "ExpressionAttributeValues": values,
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
    }
