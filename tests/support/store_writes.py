"""Store writes and reads that only tests make, built on the production item builders (so a test's
lease or attempt is exactly the one a wake writes, and cannot drift from it)."""

from __future__ import annotations

import uuid
from typing import Any

from agentwake.errors import LeaseHeld
from agentwake.store.dynamo import DynamoStore
from agentwake.store.keys import lease_key
from agentwake.store.session_lease import HOLDER, UNTIL


def acquire_lease(store: DynamoStore, session_id: str, run_id: str, seconds: float) -> str | None:
    """Take the session's lease as ``begin_run`` does (its first write): the token, or None
    when the lease is held and not expired."""
    token = uuid.uuid4().hex
    try:
        store.leases.take(session_id=session_id, holder=run_id, token=token, seconds=seconds)
    except LeaseHeld:
        return None
    return token


def lease_holder(store: DynamoStore, session_id: str) -> tuple[str, float] | None:
    """(holder run id, lease end as epoch seconds) of the session's lease, or None."""
    item = store.table.read_item(*lease_key(session_id))
    if not item:
        return None
    return item[HOLDER]["S"], float(item[UNTIL]["N"])


def begin_attempt(store: DynamoStore, run_id: str, *, kind: str, session_id: str) -> int:
    """Count one more attempt of the run as ``begin_run`` does (its run write alone, without the
    lease); returns the attempt number."""
    attempt, update = store.runs.attempt_update(
        run_id=run_id, kind=kind, session_id=session_id, previous=store.records.get_run(run_id)
    )
    store.table.db.update_item(**update["Update"])
    return attempt


def put_wake(store: DynamoStore, run_id: str, *, kind: str, wake: dict[str, Any]) -> None:
    """Keep what woke a run as a failed attempt's record does (its wake write alone)."""
    store.table.db.put_item(**store.runs.wake_put(run_id, kind=kind, wake=wake)["Put"])
