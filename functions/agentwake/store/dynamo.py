"""The single-table DynamoDB store, the one object callers construct. Table design:
docs/table-design.md.

It *holds* one object per aggregate, each built on the one shared ``Table`` (none inherits another):

- ``records``: session configs, tasks, jobs, run records;
- ``history``: the conversation's entries and the deliveries recorded into them;
- ``daily``: the session's counters of one day;
- ``journals``: the runs' steps (``DynamoJournal``);
- ``leases``: who holds a session — the lease, its wait list, the live turns (``session_lease``);
- ``runs``: a run's batch read and its start (lease and attempt in one transaction);
- ``ends``: a run's commit or failure record, in one transaction, releasing the lease;
- ``jobs``: a job's skipped and missed fires, failures in a row, pause;
- ``approvals``: the requests to approve a gated tool call, their one decision, their expiry chain;
- ``connections``: the WebSocket API's tickets, open pages and unread mark (``store/push.py``,
  built on first use: a wake that delivers elsewhere never loads it).

Every write that must be all-or-nothing (a run's success, a failure, a delivery) is one
TransactWriteItems. History is append-only: each entry is its own item, never overwritten. The
ports the wake and the services use are in ``agentwake.store.port``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, Any, cast

from agentwake.store.daily import Daily
from agentwake.store.history import History
from agentwake.store.job_state import JobStates
from agentwake.store.journal import Journals
from agentwake.store.records import Records
from agentwake.store.run_end import RunEnds
from agentwake.store.runs import Runs
from agentwake.store.session_lease import SessionLeases
from agentwake.store.table import Table

if TYPE_CHECKING:
    from agentwake.store.approvals import Approvals
    from agentwake.store.push import PushStore


class DynamoStore:
    """Every store aggregate on the table ``table_name`` (``client``: a boto3 DynamoDB client, made
    from the environment when None; ``now``: the clock of leases and TTLs)."""

    def __init__(
        self,
        table_name: str,
        *,
        client: Any = None,
        now: Callable[[], float] = time.time,
        journal_ttl_days: int = 22,
    ) -> None:
        self.table = Table(table_name, client=client, now=now, journal_ttl_days=journal_ttl_days)
        self.records = Records(self.table)
        self.history = History(self.table)
        self.daily = Daily(self.table)
        self.journals = Journals(self.table, self.history)
        self.leases = SessionLeases(self.table, self.history)
        self.runs = Runs(self.table, self.leases)
        self.ends = RunEnds(
            self.table, records=self.records, history=self.history, journals=self.journals, leases=self.leases
        )
        self.jobs = JobStates(self.table)

    @cached_property
    def approvals(self) -> Approvals:
        """Approval requests (``store/approvals.py``, loaded on first use: a wake that parks no run,
        most of them, does not build its models at a cold start)."""
        from agentwake.store.approvals import Approvals

        return Approvals(self.table, self.journals)

    @cached_property
    def connections(self) -> PushStore:
        """The delivery kit's ``Connections`` port (``agentwake.delivery.kit``) and the push tickets;
        ``store/push.py`` is imported on its first use, not when a wake composes its channel kit."""
        from agentwake.on_first_use import OnFirstUse

        return cast("PushStore", OnFirstUse(lambda: _push_store(self.table)))


def _push_store(table: Table) -> PushStore:
    from agentwake.store.push import PushStore

    return PushStore(table)
