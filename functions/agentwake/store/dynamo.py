"""The single-table DynamoDB store, the one class callers construct. Table design:
docs/table-design.md.

Every write that must be all-or-nothing (a run's success, a failure, a delivery) is one
TransactWriteItems. History is append-only: each entry is its own item, never overwritten.

Built in layers, one job per module, each on the one before it:

- ``table``: the client, item access, the one pagination helper, transactions (``codec`` below it);
- ``records``: session configs, tasks, jobs, run records;
- ``history``: the conversation's entries and the deliveries recorded into them;
- ``daily``: the session's counters of one day;
- ``journal``: the run's steps (``DynamoJournal``);
- ``wake_read``: the wake's one batch read (run, task or job, session config, today's counters);
- ``wake_begin``: the write that takes the lease and counts the attempt;
- ``wake_end``: the commit or the failure record, in one transaction, releasing the lease;
- ``waitlist``: the runs waiting for a busy session, and the hand-off to the oldest on release;
- ``live_turns``: the product's live turns holding the session, their messages, the conversation read back.
- ``job_state`` (beside them): a job's skipped and missed fires, failures in a row, pause.

It implements ``agentwake.store.port.RunStore``, whose value types the layers use.
"""

from __future__ import annotations

from agentwake.store.job_state import JobState
from agentwake.store.live_turns import LiveTurns


class DynamoStore(LiveTurns, JobState):
    """Every store operation on the table ``table_name`` (``client``: a boto3 DynamoDB client,
    made from the environment when None; ``now``: the clock of leases and TTLs)."""
