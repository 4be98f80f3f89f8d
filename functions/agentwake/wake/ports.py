"""What the wake use cases need from the table: the ``RunStore`` port.

``agentwake.store.dynamo.DynamoStore`` implements it; tests may hand a wake any object with these
methods (``tests/support/faults.py`` wraps the real store to crash at chosen boundaries). The
round-trip budget of a wake (docs/table-design.md) is the cost of these calls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from agentwake.store.daily import DailyCounters
    from agentwake.store.dynamo import DailyUsage, DynamoJournal, Lease, Unwritten, WakeRead
    from agentwake.store.models import FailureRecord, HistoryEntry, RunRecord, SessionConfig


class RunStore(Protocol):
    """The store calls a wake makes, in the order a wake makes them."""

    table: str

    def read_wake(
        self,
        *,
        run_id: str,
        session_id: str | None = None,
        task_id: str | None = None,
        job_id: str | None = None,
    ) -> WakeRead:
        """The run, the task or job, the session config and its counters of today: one batch read."""
        ...

    def begin_run(
        self,
        *,
        run_id: str,
        kind: str,
        session_id: str,
        seconds: float,
        previous: RunRecord | None,
        job_id: str | None = None,
        wake: dict[str, Any] | None = None,
        usage: DailyUsage | None = None,
    ) -> Lease:
        """The session's lease and the attempt count in one conditional write, checking the daily
        counters read are unchanged (raises LeaseHeld, RunAlreadySucceeded)."""
        ...

    def history_window(self, session_id: str, limit: int) -> list[HistoryEntry]: ...

    def journal(self, run_id: str, *, fresh: bool = False, counters: DailyCounters | None = None) -> DynamoJournal: ...

    def daily_counters(self, session_id: str, *, day: str | None = None) -> DailyCounters: ...

    def get_session(self, session_id: str) -> SessionConfig | None: ...

    def get_run(self, run_id: str) -> RunRecord | None: ...

    def commit_success(
        self,
        *,
        run_id: str,
        session_id: str,
        note: str,
        steps: int,
        task_id: str | None = None,
        job_id: str | None = None,
        disable_job: bool = False,
        unwritten: Unwritten | None = None,
        lease: Lease | None = None,
        usage: dict[str, Any] | None = None,
    ) -> None:
        """DONE: marker, note, run, task/job, last step and lease release in one transaction
        (raises RunAlreadySucceeded, CommitConflict)."""
        ...

    def record_failure(
        self,
        failure: FailureRecord,
        *,
        task_id: str | None = None,
        job_id: str | None = None,
        unwritten: Unwritten | None = None,
        lease: Lease | None = None,
        usage: dict[str, Any] | None = None,
        kind: str | None = None,
    ) -> None:
        """ERROR: the failure record, run, task/job, steps kept back and lease release in one transaction."""
        ...

    def release_lease(self, session_id: str, token: str) -> None: ...
