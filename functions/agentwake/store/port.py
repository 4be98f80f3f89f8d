"""What the wake use cases need from the table: the ``RunStore`` port and the value types it speaks.

``agentwake.store.dynamo.DynamoStore`` implements it; tests may hand a wake any object with these
methods (``tests/support/faults.py`` wraps the real store to crash at chosen boundaries). The
round-trip budget of a wake (docs/table-design.md) is the cost of these calls.

Plain Python only: no boto3, no DynamoDB attribute shapes. The DynamoDB modules import these types
from here, never the other way round.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from agentwake.store.models import FailureRecord, HistoryEntry, Job, JobFire, RunRecord, SessionConfig, Task


@dataclass(frozen=True)
class DailyUsage:
    """A session's counters for one UTC day as read; 0 for an item not there yet."""

    session_id: str
    day: str
    tokens: int = 0
    deliveries: int = 0


@dataclass
class WakeRead:
    """What a wake reads before it starts, in one batch read: the run, the task or job, the
    session config and the session's daily counters of today (read whether or not the session has
    daily limits: the config that says so comes in the same read)."""

    run: RunRecord | None = None
    task: Task | None = None
    job: Job | None = None
    session: SessionConfig | None = None
    usage: DailyUsage | None = None
    #: the run's entry on its session's wait list, read when the record was a waiting copy:
    #: its current copy (``gen``); None when it has none
    waiter_gen: int | None = None


@dataclass(frozen=True)
class Waited:
    """A run that waited for its session: for how long, and how long the session was idle between
    the release that handed it over and this start (None: it was not handed over)."""

    waited_s: float
    idle_s: float | None = None


@dataclass
class Lease:
    """A held session lease and the attempt it was taken for (one conditional write took both)."""

    session_id: str
    token: str
    attempt: int
    #: set once a commit/failure transaction (or release_lease) deleted it, or it is known lost
    released: bool = False
    #: today's counters, checked unchanged by the write that took the lease (sessions with daily limits)
    usage: DailyUsage | None = None
    #: the write that took it had an unknown outcome (its answer was lost) and was read back as landed
    adopted: bool = False
    #: the run waiting longest for the session, named before the release: the release then reserves
    #: the session for it instead of freeing it (agentwake.wake.handoff)
    hand_to: Waiter | None = None
    #: the release landed with that reservation: the waiter is to be re-sent now
    handed: bool = False
    #: the run holding the lease is on the wait list itself (it ran from a record that did not carry
    #: its wait, e.g. an SQS duplicate of the producer's): its commit takes it off
    listed: bool = False


@dataclass(frozen=True)
class Waiter:
    """One run waiting for its session, as the session's wait list holds it."""

    session_id: str
    run_id: str
    arrived: float
    state: str
    gen: int
    body: str = ""
    #: the producer's message attributes, as stored (agentwake.store.waitlist.sqs_attributes)
    attributes: dict[str, Any] | None = None
    #: the wait state of the copy that parked it (``agentwake-wait-count`` / ``-waiting-since``)
    wait: dict[str, str] | None = None


@dataclass
class Unwritten:
    """Journal steps and deliveries not yet written: they ride on the next write (commit or failure)."""

    steps: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: record_delivery keyword arguments (``also``: items counted with that delivery)
    deliveries: list[dict[str, Any]] = field(default_factory=list)
    #: more transaction items that go with the steps (the session's daily token counter)
    also: list[dict[str, Any]] = field(default_factory=list)
    #: deliveries whose record was built when they were sent (``DynamoStore.delivery_record``):
    #: tagged transaction items, written as they are
    records: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.steps or self.deliveries or self.also or self.records)

    def __add__(self, other: Unwritten) -> Unwritten:
        return Unwritten(
            steps={**self.steps, **other.steps},
            deliveries=[*self.deliveries, *other.deliveries],
            also=[*self.also, *other.also],
            records=[*self.records, *other.records],
        )


class Counters(Protocol):
    """A session's daily counters (tokens spent, messages delivered) for one UTC day."""

    session_id: str
    day: str

    def read(self) -> tuple[int, int]:
        """(tokens, deliveries) of the session that day."""
        ...

    def add(self, *, tokens: int = 0, deliveries: int = 0) -> dict[str, Any]:
        """A write item adding to the day's counters, to ride on a write the run makes anyway."""
        ...


class Journal(Protocol):
    """The run's journal as the wake uses it: the agent's step journal, the recorder of its
    deliveries, and what the run's last write (commit or failure) must carry."""

    entries: dict[str, dict[str, Any]]

    def get(self, key: str) -> dict[str, Any] | None: ...

    def put(self, key: str, value: dict[str, Any]) -> None: ...

    def unwritten(self, *, for_commit: bool = False) -> Unwritten: ...

    def mark_written(self) -> None: ...

    def has_delivery(self, run_id: str, delivery_id: str) -> bool: ...

    def before_send(self) -> None: ...

    def record_delivery(
        self, *, run_id: str, delivery_id: str, session_id: str, text: str, also: Sequence[dict[str, Any]] = ()
    ) -> bool: ...


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
        waiter: bool = False,
    ) -> WakeRead:
        """The run, the task or job, the session config and its counters of today (and, with
        ``waiter``, the run's entry on the session's wait list): one batch read."""
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
        waited: Waited | None = None,
    ) -> Lease:
        """The session's lease and the attempt count in one conditional write, checking the daily
        counters read are unchanged (raises LeaseHeld, RunAlreadySucceeded)."""
        ...

    def history_window(self, session_id: str, limit: int) -> list[HistoryEntry]: ...

    def daily_counters(self, session_id: str, *, day: str | None = None) -> Counters:
        """The session's counters of ``day`` (today when None); building them reads nothing."""
        ...

    def journal(self, run_id: str, *, fresh: bool = False, counters: Counters | None = None) -> Journal:
        """The run's journal. ``fresh``: a first attempt, nothing to read. ``counters``: each new
        model reply's tokens are added to them in the same write as the reply."""
        ...

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
        journal: Journal | None = None,
        lease: Lease | None = None,
        usage: dict[str, Any] | None = None,
        waited: bool = False,
    ) -> None:
        """DONE: marker, note, run, task/job, what ``journal`` has not written yet (its last step)
        and lease release in one transaction (raises RunAlreadySucceeded, CommitConflict)."""
        ...

    def record_failure(
        self,
        failure: FailureRecord,
        *,
        task_id: str | None = None,
        job_id: str | None = None,
        journal: Journal | None = None,
        lease: Lease | None = None,
        usage: dict[str, Any] | None = None,
        kind: str | None = None,
    ) -> None:
        """ERROR: the failure record, run, task/job, the steps ``journal`` kept back and lease release in
        one transaction."""
        ...

    def release_lease(
        self, session_id: str, token: str, *, hand_to: str | None = None, unless_parked: bool = False
    ) -> bool: ...

    # -- the session's wait list and its hand-off (agentwake.wake.handoff) ----------------------

    def park_waiter(
        self,
        *,
        session_id: str,
        run_id: str,
        gen: int,
        body: str,
        attributes: dict[str, Any],
        wait: dict[str, str],
        ttl_s: float,
    ) -> None: ...

    def waiters(self, session_id: str) -> list[Waiter]: ...

    def drop_waiter(self, session_id: str, run_id: str) -> None: ...

    def mark_parked(self, session_id: str) -> bool: ...

    def reserve_session(self, session_id: str, run_id: str, seconds: float) -> bool: ...

    def release_reservation(self, session_id: str, run_id: str) -> bool: ...

    def mark_handed(self, session_id: str, run_id: str, gen: int) -> None: ...

    # a cron job's operating state (agentwake.store.job_state; the cron wake's policies)

    def record_job_fire(self, fire: JobFire) -> bool: ...

    def count_job_failure(self, job_id: str, run_id: str) -> Job | None: ...

    def update_job(
        self,
        job_id: str,
        *,
        condition: str | None = None,
        condition_values: dict[str, Any] | None = None,
        **fields: Any,
    ) -> Job | None: ...

    def buffer_job_fire(self, job_id: str, run_id: str) -> bool: ...

    def release_job_buffer(self, job_id: str, run_id: str) -> None: ...
