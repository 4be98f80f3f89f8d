"""What the wake use cases and the services need from the table: one port per aggregate, and the
value types they speak.

``agentwake.store.dynamo.DynamoStore`` implements ``Store``: one narrow port per aggregate, held as
its attributes. Tests may hand a wake any object with them (``tests/support/faults.py`` wraps the
real aggregates to crash at chosen boundaries). The round-trip budget of a wake
(docs/table-design.md) is the cost of these calls.

The approvals' port is in ``store/port_approvals.py`` (as their table code is in ``store/approvals.py``);
the queues' and the scheduler's in ``store/port_queues.py`` (``store/queues.py``, ``store/schedules.py``).

Plain Python only: no boto3, no DynamoDB attribute shapes. The DynamoDB modules import these types
from here, never the other way round.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from agentwake.session.lease import Lease, Waited, Waiter

if TYPE_CHECKING:
    from agentwake.domain.models import HistoryEntry, SessionConfig, Task
    from agentwake.domain.run_models import FailureRecord, Job, JobFire, RunRecord
    from agentwake.store.port_approvals import ApprovalsPort


@dataclass
class WakeRead:
    """What a wake reads before it starts, in one batch read: the run, the task or job, the
    session config (a session's daily counters are read by its run, under its lease)."""

    run: RunRecord | None = None
    task: Task | None = None
    job: Job | None = None
    session: SessionConfig | None = None
    #: the current copy (``gen``) of the run's entry on its session's wait list, read when the
    #: record was a waiting copy; None when it has none
    waiter_gen: int | None = None
    #: when that entry's run first waited (where its place on the list is); None when it has none
    waiter_arrived: float | None = None


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


class Recorder(Protocol):
    """What records a run's deliveries (the journal, or a replay's stand-in): whether one was made,
    and recording one once it was sent."""

    def has_delivery(self, run_id: str, delivery_id: str) -> bool: ...

    def record_delivery(
        self,
        *,
        run_id: str,
        delivery_id: str,
        session_id: str,
        text: str,
        also: Sequence[dict[str, Any]] = (),
        receipts: Sequence[dict[str, Any]] = (),
    ) -> bool: ...


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

    # the run's intents (the IntentLog port of delivery/intents.py; an intent is its
    # ``agentwake.delivery.intents.Intent``): loaded with the journal, no read of their own
    def intents(self, delivery_id: str) -> dict[str, Any]: ...

    def intend(self, intent: Any) -> None: ...

    def settle_intent(self, intent: Any) -> None: ...

    def record_delivery(
        self,
        *,
        run_id: str,
        delivery_id: str,
        session_id: str,
        text: str,
        also: Sequence[dict[str, Any]] = (),
        receipts: Sequence[dict[str, Any]] = (),
    ) -> bool: ...


class RecordsPort(Protocol):
    """Session configs, tasks, jobs and run records (``store.records``)."""

    def put_session(self, config: SessionConfig, rules: Any = None) -> None: ...

    def get_session(self, session_id: str) -> SessionConfig | None: ...

    def put_task(self, task: Task) -> None: ...

    def get_task(self, task_id: str) -> Task | None: ...

    def mark_task_finished(self, task_id: str, finished_at: str) -> None: ...

    def claim_task_work(self, task_id: str, token_sha256: str) -> bool: ...

    def rotate_task_token(self, task_id: str, token_sha256: str) -> bool: ...

    def claim_deadline_check(self, task_id: str, *, token_sha256: str, after: str | None, check: str) -> bool: ...
    def claim_task_outcome(
        self,
        task_id: str,
        *,
        number: int,
        outcome: Literal["succeeded", "failed"],
        reason: str | None,
        at: str,
        by: Literal["completion", "deadline", "cancel"] = "completion",
    ) -> bool: ...

    def count_late_completion(self, task_id: str) -> None: ...

    def session_tasks(
        self, session_id: str, *, limit: int, before: str | None = None
    ) -> tuple[list[Task], str | None]: ...

    def put_job(self, job: Job) -> None: ...

    def get_job(self, job_id: str) -> Job | None: ...

    def list_jobs(self) -> list[Job]: ...

    def delete_job(self, job_id: str) -> None: ...

    def get_run(self, run_id: str) -> RunRecord | None: ...


class HistoryPort(Protocol):
    """The conversation's entries and the deliveries recorded into them (``store.history``)."""

    def history_window(self, session_id: str, limit: int) -> list[HistoryEntry]: ...

    def conversation_page(
        self, session_id: str, *, limit: int, before: str | None = None
    ) -> tuple[list[HistoryEntry], str | None]: ...

    def has_delivery(self, run_id: str, delivery_id: str) -> bool: ...

    def record_delivery(
        self,
        *,
        run_id: str,
        delivery_id: str,
        session_id: str,
        text: str,
        also: Sequence[dict[str, Any]] = (),
        receipts: Sequence[dict[str, Any]] = (),
    ) -> bool: ...


class DailyPort(Protocol):
    """Where a session's daily counters are built (``store.daily``)."""

    def counters(self, session_id: str, *, day: str | None = None) -> Counters:
        """The session's counters of ``day`` (today when None); building them reads nothing."""
        ...


class JournalsPort(Protocol):
    """The runs' journals (``store.journals``)."""

    def journal(
        self, run_id: str, *, fresh: bool = False, counters: Counters | None = None, attempt: int | None = None
    ) -> Journal:
        """The run's journal. ``fresh``: a first attempt, nothing to read. ``counters``: each new
        model reply's tokens are added to them in the same write as the reply. ``attempt``: the
        run's attempt number, recorded in each step it journals."""
        ...


class RunsPort(Protocol):
    """A run's batch read and its start (``store.runs``), in the order a wake makes them."""

    def read_wake(
        self,
        *,
        run_id: str,
        session_id: str | None = None,
        task_id: str | None = None,
        job_id: str | None = None,
        waiter: bool = False,
    ) -> WakeRead:
        """The run, the task or job and the session config (and, with ``waiter``, the run's entry on
        the session's wait list): one batch read."""
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
        wake: tuple[str, dict[str, Any]] | None = None,
        waited: Waited | None = None,
        message_id: str | None = None,
        resuming: str | None = None,
    ) -> Lease:
        """The session's lease (one plain conditional write), then the attempt counted under it
        (raises LeaseHeld before anything is written; StartRefused, carrying the lease to give back,
        when the attempt is refused)."""
        ...

    def begin_unleased(
        self, *, run_id: str, kind: str, session_id: str, previous: RunRecord | None, wake: dict[str, Any]
    ) -> int:
        """The attempt count of a run that holds no lease (a subagent's), and on a first attempt what
        woke it, in one conditional write; the attempt number (raises LeaseHeld, RunAlreadySucceeded)."""
        ...


class RunEndsPort(Protocol):
    """How a run ends (``store.ends``): one transaction each; the lease is released after it
    (``session.handoff.release``)."""

    def commit_success(
        self,
        *,
        run_id: str,
        session_id: str,
        note: str | None,
        steps: int,
        task_id: str | None = None,
        job_id: str | None = None,
        disable_job: bool = False,
        disabled_reason: str | None = None,
        journal: Journal | None = None,
        lease: Lease | None = None,
        usage: dict[str, Any] | None = None,
        waited: bool = False,
        task_outcome: str | None = None,
    ) -> None:
        """DONE: the note carrying its marker (None: no history, a subagent's run), run, task/job and
        what ``journal`` has not written yet (its last step) in one transaction (raises
        RunAlreadySucceeded, CommitConflict); ``lease``: whose token a lost answer is read back by."""
        ...

    def record_failure(
        self,
        failure: FailureRecord,
        *,
        task_id: str | None = None,
        job_id: str | None = None,
        journal: Journal | None = None,
        usage: dict[str, Any] | None = None,
        kind: str | None = None,
        wake: tuple[str, dict[str, Any]] | None = None,
    ) -> None:
        """ERROR: the failure record, run, task/job, the steps ``journal`` kept back and what woke the
        run (``wake``: kind and wake JSON, for ``runs replay``) in one transaction."""
        ...

    def record_park(
        self,
        *,
        run_id: str,
        session_id: str,
        approval_id: str,
        asked: tuple[str, dict[str, Any]],
        steps: int,
        job_id: str | None = None,
        journal: Journal | None = None,
        lease: Lease | None = None,
        usage: dict[str, Any] | None = None,
        waited: bool = False,
    ) -> None:
        """PARKED (issue 35): run parked, job parked, what ``journal`` has not written (the request's
        ``asked`` step and delivery) and the request's ``asked`` mark in one transaction; no note, no failure (raises ApprovalAlreadyDecided, RunAlreadySucceeded)."""
        ...


class SessionLeasePort(Protocol):
    """Who holds a session (``store.leases``): its lease, its wait list, the live turns."""

    def release(
        self, session_id: str, token: str, *, hand_to: str | None = None, unless_parked: bool = False
    ) -> bool: ...

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
        kind: str = "background",
        target: str = "",
    ) -> None: ...

    def waiters(self, session_id: str, *, first: int = 8, skip: str | None = None) -> list[Waiter]: ...

    def head(self, session_id: str, *, first: int = 1, skip: str | None = None) -> tuple[list[Waiter], bool]: ...

    def first_places(self, session_id: str, *, limit: int) -> list[str]: ...

    def drop_waiter(self, session_id: str, run_id: str) -> None: ...

    def mark_parked(self, session_id: str) -> bool: ...

    def reserve(self, session_id: str, run_id: str, seconds: float) -> bool: ...

    def release_reservation(self, session_id: str, run_id: str) -> bool: ...

    def mark_handed(self, session_id: str, run_id: str, gen: int, arrived: float | None = None) -> None: ...

    def take_live_turn(self, session_id: str, turn_id: str, seconds: float, *, hold_s: float) -> tuple[str, float]: ...

    def renew_live_turn(self, session_id: str, token: str, seconds: float) -> float: ...

    def append_live(
        self, session_id: str, token: str, messages: Sequence[tuple[str, str]], idempotency_key: str
    ) -> Any: ...


class JobStatePort(Protocol):
    """A cron job's operating state (``store.jobs``; the cron wake's policies, the jobs service)."""

    def record_job_fire(self, fire: JobFire) -> bool: ...

    def job_fires(self, job_id: str, kind: str | None = None, *, limit: int | None = None) -> list[JobFire]: ...

    def set_fire_outcome(self, fire: JobFire, outcome: str) -> None: ...

    def delete_job_fires(self, job_id: str) -> int: ...

    def count_job_failure(self, job_id: str, run_id: str) -> Job | None: ...

    def update_job(
        self, job_id: str, *, unless_paused: bool = False, buffer_free_for: str | None = None, **fields: Any
    ) -> Job | None: ...

    def buffer_job_fire(self, job_id: str, run_id: str) -> bool: ...

    def release_job_buffer(self, job_id: str, run_id: str) -> None: ...


class Store(Protocol):
    """The store the wake and the services are given: one port per aggregate."""

    @property
    def records(self) -> RecordsPort: ...

    @property
    def history(self) -> HistoryPort: ...

    @property
    def daily(self) -> DailyPort: ...

    @property
    def journals(self) -> JournalsPort: ...

    @property
    def leases(self) -> SessionLeasePort: ...

    @property
    def runs(self) -> RunsPort: ...

    @property
    def ends(self) -> RunEndsPort: ...

    @property
    def jobs(self) -> JobStatePort: ...

    @property
    def approvals(self) -> ApprovalsPort: ...
