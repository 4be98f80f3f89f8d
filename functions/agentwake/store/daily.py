"""A session's counters for one UTC day: tokens spent and messages delivered, all runs together.

One item per session per day (``SESSION#{id}`` / ``USAGE#{yyyy-mm-dd}``), read in the wake's one
batch read (``DynamoStore.read_wake`` asks for today's item with the run, the task or job and the
session config: no round trip of its own), checked unchanged by the transaction that takes the
lease, and updated inside writes the run makes anyway: the delivery counter in the transaction
that records the delivery (for deliver_final's answer, the commit), the token counter in the model step's journal write. A session without daily limits
never writes it. The item expires after a few days (TTL). One wake per session at a time (the
lease) means the count checked when the lease is taken stays exact for the run.
"""

from __future__ import annotations

from typing import Any

from agentwake.store.keys import session_pk, usage_day, usage_key

#: counter items outlive their day by this much, then DynamoDB's TTL removes them
COUNTER_TTL_S = 3 * 86400


def utc_day(now: float) -> str:
    return usage_day(now)


def counter_sk(day: str) -> str:
    return usage_key("", day)[1]


class DailyCounters:
    def __init__(self, store: Any, session_id: str, day: str | None = None) -> None:
        #: agentwake.store.dynamo.DynamoStore (not imported: the store builds its counters)
        self.store = store
        self.session_id = session_id
        self.day = day or utc_day(store.now())

    def read(self) -> tuple[int, int]:
        """(tokens, deliveries) of the session today: one GetItem (a wake has them from its batch
        read; this is for the operator's replay and a schedule that does not name its session)."""
        item = self.store._get(session_pk(self.session_id), counter_sk(self.day))
        if not item:
            return 0, 0
        return int(item.get("tokens", {}).get("N", "0")), int(item.get("deliveries", {}).get("N", "0"))

    def add(self, *, tokens: int = 0, deliveries: int = 0) -> dict[str, Any]:
        """A transaction item adding to today's counters (created on first use)."""
        return {
            "Update": {
                "TableName": self.store.table,
                "Key": {"pk": {"S": session_pk(self.session_id)}, "sk": {"S": counter_sk(self.day)}},
                "UpdateExpression": "ADD tokens :t, deliveries :d SET expires_at = if_not_exists(expires_at, :x)",
                "ExpressionAttributeValues": {
                    ":t": {"N": str(tokens)},
                    ":d": {"N": str(deliveries)},
                    ":x": {"N": str(int(self.store.now()) + COUNTER_TTL_S)},
                },
            }
        }


class CountingJournal:
    """The run's journal, adding each new reply's tokens to the session's daily counter in the
    same write (a transaction instead of a put: still one round trip per step)."""

    def __init__(self, journal: Any, counters: DailyCounters) -> None:
        self.inner = journal
        self.counters = counters

    @property
    def entries(self) -> dict[str, dict[str, Any]]:
        return self.inner.entries  # type: ignore[no-any-return]

    def get(self, key: str) -> dict[str, Any] | None:
        return self.inner.get(key)  # type: ignore[no-any-return]

    # everything else the run's journal offers, unchanged (unwritten, mark_written, the recorder port)
    def unwritten(self, *, for_commit: bool = False) -> Any:
        return self.inner.unwritten(for_commit=for_commit)

    def mark_written(self) -> None:
        self.inner.mark_written()

    def has_delivery(self, run_id: str, delivery_id: str) -> bool:
        return bool(self.inner.has_delivery(run_id, delivery_id))

    def before_send(self) -> None:
        self.inner.before_send()

    def record_delivery(self, **kwargs: Any) -> bool:
        return bool(self.inner.record_delivery(**kwargs))

    def put(self, key: str, value: dict[str, Any]) -> None:
        usage = value.get("usage") if key.endswith(".reply") else None
        tokens = int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0)) if usage else 0
        if not tokens:
            self.inner.put(key, value)
            return
        self.inner.put(key, value, also=[self.counters.add(tokens=tokens)])
