"""Waiting for a busy session without spending the failure budget (docs/durability.md).

A wake that finds its session leased by another run (``SessionBusy``) does not fail: it comes
back later, with backoff and jitter, carrying how often and since when it waits.

- A background result re-sends itself to the result queue with ``DelaySeconds`` and the wait state
  as message attributes; the original record is reported as handled only once the re-send
  succeeded (a failed re-send is a batch item failure: the record comes back, nothing is lost).
  If both copies survive (the delete of the original failed), the run record, the lease and the
  conditional commit absorb the second one.
- A cron wake joins the same wait list (kind ``cron``, its body the invocation's payload, the
  function ARN it came through), and its holder's release hands the session to it in arrival order
  like any waiter (``agentwake.session.handoff``). Its fallback, for a hand-off that is lost, is a
  one-time EventBridge Scheduler schedule ``at(...)`` with its own input plus the wait state,
  targeting the function ARN it was invoked through, deleted after it fires: it comes back as the
  same kind of asynchronous invocation, with Lambda's retries and the on-failure destination
  unchanged. A copy older than the one the wait list knows (``agentwake-wait-gen``) retires.

Past ``SessionWaitLimit`` the wake gives up: a failure ``SessionBusy`` naming the holder is
recorded for the run (which never started), and the background result goes to the DLQ with
``agentwake-error-type: SessionBusy``; the cron wake raises, so it ends on CronFailureQueue. A wake
that finds the session's wait list full (``SessionWaitListMax`` waiting wakes) does not join it: it
is refused the same way at once, as ``WaitListFull``, with a reason naming the session and the cap.

Metrics: ``SessionBusy`` (count of busy findings), ``SessionWait`` (seconds waited, when the wake
finally runs or gives up), ``SessionWaitExceeded`` (wakes that gave up).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from agentwake.domain.run_models import FailureRecord
from agentwake.errors import SessionBusy, WaitListFull
from agentwake.observability import add_metric, logger
from agentwake.session.copies import (
    ATTR_FIRST_MESSAGE_ID,
    ATTR_HANDED_AT,
    ATTR_SPENT_RECEIVES,
    ATTR_WAIT_COUNT,
    ATTR_WAIT_GEN,
    ATTR_WAITING_SINCE,
    CRON_WAIT_FIELD,
    MessageAttributes,
    schedule_cron_copy,
)
from agentwake.session.lease import ON_THE_LIST_DELAY_S
from agentwake.settings import Settings

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

    from agentwake.store.port import Store
    from agentwake.store.port_queues import SchedulesPort

#: the longest first message id a copy carries (SQS's are 36 characters)
MAX_MESSAGE_ID_CHARS = 128

#: the first pause; each further busy finding doubles it, up to SessionWaitMaxDelay
BASE_DELAY_S = 2.0


class Jitter(Protocol):
    """Where a pause's jitter comes from (the ``random`` module; a seeded ``random.Random`` in tests)."""

    def uniform(self, a: float, b: float) -> float: ...


@dataclass(frozen=True)
class WaitState:
    """How often a wake found its session busy, and since when (epoch seconds) it waits."""

    count: int = 0
    since: float | None = None
    #: which copy of the waiting record this is (a hand-off re-sends a newer one)
    gen: int = 0
    #: when a release handed the session to this copy (epoch seconds); None if it was not handed
    handed_at: float | None = None
    #: a result's receives spent on attempts by its earlier copies (they count toward maxReceiveCount)
    spent: int = 0
    #: the message id of the producer's record, which this copy stands for ("": this is it)
    first_id: str = ""

    def attempts(self, receive_count: int) -> int:
        """The receives of a result's run that count toward maxReceiveCount, this copy's included."""
        return self.spent + receive_count

    def waited(self, now: float) -> float:
        return 0.0 if self.since is None else max(0.0, now - self.since)

    # -- on a background result: two message attributes ------------------------------------------

    @classmethod
    def from_attributes(cls, attributes: Mapping[str, str | None]) -> WaitState:
        """From the record's ``agentwake-wait-count`` / ``agentwake-waiting-since`` (epoch ms); a
        missing or garbled value means "not waiting yet" (the wait restarts, nothing is lost)."""
        try:
            count = max(0, int(attributes.get(ATTR_WAIT_COUNT) or 0))
            since_ms = attributes.get(ATTR_WAITING_SINCE)
            since = int(since_ms) / 1000 if since_ms else None
            gen = max(0, int(attributes.get(ATTR_WAIT_GEN) or 0))
            handed_ms = attributes.get(ATTR_HANDED_AT)
            handed_at = int(handed_ms) / 1000 if handed_ms else None
            spent = max(0, int(attributes.get(ATTR_SPENT_RECEIVES) or 0))
        except (ValueError, OverflowError):  # a producer-set value of any size ends here
            return cls()
        first_id = str(attributes.get(ATTR_FIRST_MESSAGE_ID) or "")[:MAX_MESSAGE_ID_CHARS]
        if not count:
            return cls()
        return cls(count=count, since=since, gen=gen, handed_at=handed_at, spent=spent, first_id=first_id)

    def to_attributes(self) -> dict[str, str]:
        """What a re-sent copy carries (not ``handed_at``: a re-sent copy was not handed anything)."""
        carried = {
            ATTR_WAIT_COUNT: str(self.count),
            ATTR_WAITING_SINCE: str(int((self.since or 0) * 1000)),
            ATTR_WAIT_GEN: str(self.gen),
        }
        if self.spent:
            carried[ATTR_SPENT_RECEIVES] = str(self.spent)
        if self.first_id:
            carried[ATTR_FIRST_MESSAGE_ID] = self.first_id
        return carried

    # -- on a cron wake: one field of the invocation's input, with the same names -------------------

    @classmethod
    def from_payload(cls, value: object) -> WaitState:
        """From a cron payload's ``session_wait``: the attributes' names and values; a missing or
        garbled value means "not waiting yet". (``{"count", "since"}``: a one-time schedule created
        before cron wakes joined the wait list.)"""
        if not isinstance(value, dict):
            return cls()
        if ATTR_WAIT_COUNT in value:
            return cls.from_attributes({k: None if v is None else str(v) for k, v in value.items()})
        try:
            count = max(0, int(value.get("count") or 0))
            since = float(value["since"]) if value.get("since") is not None else None
        except (TypeError, ValueError, OverflowError):
            return cls()
        return cls(count=count, since=since) if count else cls()

    def to_payload(self) -> dict[str, str]:
        return self.to_attributes()


@dataclass(frozen=True)
class WaitPolicy:
    """Backoff with equal jitter: pause ``n`` lies in [d/2, d], d = min(max_delay, base * 2**n)."""

    limit_s: float
    max_delay_s: float
    base_delay_s: float = BASE_DELAY_S

    @classmethod
    def from_settings(cls, settings: Settings) -> WaitPolicy:
        return cls(limit_s=settings.session_wait_limit_s, max_delay_s=settings.session_wait_max_delay_s)

    def delay(self, count: int, rng: Jitter = random) -> float:
        ceiling = min(self.max_delay_s, self.base_delay_s * 2 ** min(count, 30))
        return float(ceiling / 2 + rng.uniform(0, ceiling / 2))


@dataclass(frozen=True)
class Wait:
    """Come back after ``delay_s`` with ``state``."""

    delay_s: float
    state: WaitState


@dataclass(frozen=True)
class GiveUp:
    """Waited ``waited_s`` (past the limit) for a session that ``holder`` still holds."""

    waited_s: float
    holder: str | None
    detail: str
    state: WaitState = field(default_factory=WaitState)
    #: why: waited past the limit (``SessionBusy``), or no room on the wait list (``WaitListFull``)
    error_type: str = "SessionBusy"


def decide(
    busy: SessionBusy, state: WaitState, policy: WaitPolicy, *, now: float, rng: Jitter = random
) -> Wait | GiveUp:
    """What a wake that found its session busy does next."""
    add_metric(name="SessionBusy", unit="Count", value=1)
    since = state.since if state.since is not None else now
    waited = max(0.0, now - since)
    if waited >= policy.limit_s:
        add_metric(name="SessionWait", unit="Seconds", value=waited)
        add_metric(name="SessionWaitExceeded", unit="Count", value=1)
        detail = (
            f"never ran: session {busy.session_id} was still busy with run {busy.holder or '?'} after "
            f"{waited:.0f} s of waiting ({state.count} tries; SessionWaitLimit {policy.limit_s:.0f} s). "
            f"Redrive it once that run has finished."
        )
        return GiveUp(waited_s=waited, holder=busy.holder, detail=detail, state=state)
    # the last pause ends at the limit, so the final try happens when the limit is reached
    delay = min(policy.delay(state.count, rng), max(1.0, policy.limit_s - waited))
    return Wait(delay_s=delay, state=WaitState(count=state.count + 1, since=since, gen=state.gen))


def room_on_the_list(
    busy: SessionBusy, decision: Wait, *, store: Store, settings: Settings, now: float
) -> GiveUp | None:
    """None when the run may join its session's wait list: it has fewer than
    ``SessionWaitListMax`` places, or this run has one already (a copy waiting again, or one handed
    the session before: ``gen``). Otherwise the refusal (one Query of at most that many places)."""
    assert busy.session_id is not None and busy.run_id is not None
    cap = settings.session_wait_list_max
    if decision.state.gen or busy.holder == busy.run_id:
        return None
    places = store.leases.first_places(busy.session_id, limit=cap)
    if len(places) < cap or busy.run_id in places:
        return None
    add_metric(name="SessionWaitListFull", unit="Count", value=1)
    detail = (
        f"never ran: session {busy.session_id} is busy (held by run {busy.holder or '?'}) and its wait list "
        f"already holds {cap} waiting wakes (SessionWaitListMax {cap}). Redrive it once the session's "
        f"backlog has drained."
    )
    return GiveUp(
        waited_s=decision.state.waited(now),
        holder=busy.holder,
        detail=detail,
        state=decision.state,
        error_type="WaitListFull",
    )


def ran_after_waiting(state: WaitState, now: float) -> None:
    """A wake that had waited got its session (or found its run done): record how long it waited."""
    if state.count:
        add_metric(name="SessionWait", unit="Seconds", value=state.waited(now))


def record_gave_up(
    store: Store,
    busy: SessionBusy,
    decision: GiveUp,
    *,
    kind: str,
    task_id: str | None = None,
    job_id: str | None = None,
) -> None:
    """The failure an operator reads at the DLQ: the run never started, the session was busy."""
    assert busy.run_id is not None and busy.session_id is not None
    run = store.records.get_run(busy.run_id)
    failure = FailureRecord(
        run_id=busy.run_id,
        session_id=busy.session_id,
        attempt=run.attempts if run is not None else 0,
        error_type=decision.error_type,
        detail=decision.detail,
    )
    logger.error(
        "gave up waiting for the session",
        extra={"holder": busy.holder, "waited_s": decision.waited_s, "error_type": decision.error_type},
    )
    usage = run.usage if run is not None else None  # what earlier attempts used, unchanged
    store.ends.record_failure(failure, task_id=task_id, job_id=job_id, kind=kind, usage=usage)


def join_wait_list(
    busy: SessionBusy,
    decision: Wait,
    *,
    store: Store,
    settings: Settings,
    kind: str,
    body: str,
    attributes: dict[str, Any],
    now: float,
    target: str = "",
) -> float:
    """Put the run on its session's wait list (the holder's release hands the session to the
    oldest waiter, whatever its kind) and return the pause of its fallback copy: not shorter than
    ``ON_THE_LIST_DELAY_S`` (the hand-off is what brings it back), 0 when the session was released
    before the run could mark it (nobody would hand it over). When the holder is another copy of
    this very run, the run is not listed: the plain backoff stands."""
    assert busy.session_id is not None and busy.run_id is not None
    if busy.holder == busy.run_id:
        return decision.delay_s
    waited = decision.state.waited(now)
    delay = min(
        max(decision.delay_s, ON_THE_LIST_DELAY_S),
        float(settings.session_wait_max_delay_s),
        max(1.0, settings.session_wait_limit_s - waited),
    )
    store.leases.park_waiter(
        session_id=busy.session_id,
        run_id=busy.run_id,
        gen=decision.state.gen,
        body=body,
        attributes=attributes,
        wait=decision.state.to_attributes(),
        ttl_s=settings.session_wait_limit_s,
        kind=kind,
        target=target,
    )
    if not store.leases.mark_parked(busy.session_id):
        # released between the busy finding and the registration, by a holder that saw nobody
        # waiting (or the lease could not be marked while a transaction wrote it): come straight
        # back instead of at the fallback's pace (a holder still there finds the mark, and reads
        # the wait list again before it releases)
        return 0.0
    return delay


# --------------------------------------------------------------------------------------------
# a background result


@dataclass(frozen=True)
class ParkedRecord:
    """What is needed to re-send (or dead-letter) one SQS record of the result queue."""

    body: str
    message_id: str
    source: str
    receive_count: str
    #: the producer's message attributes (re-sent as they were)
    attributes: MessageAttributes
    state: WaitState

    @property
    def receives(self) -> int:
        """This copy's own receive count (SQS's ApproximateReceiveCount; 1 if unreadable)."""
        try:
            return max(1, int(self.receive_count))
        except ValueError:
            return 1

    @property
    def first_id(self) -> str:
        """The message id of the producer's record this copy stands for."""
        return self.state.first_id or self.message_id

    @property
    def attempts(self) -> int:
        """The receives that count toward maxReceiveCount, this one's included."""
        return self.state.attempts(self.receives)

    @classmethod
    def from_sqs(cls, record: SQSRecord) -> ParkedRecord:
        """The record as it would be re-sent: body, the producer's attributes, the wait state."""
        attributes = MessageAttributes.from_event(record.raw_event.get("messageAttributes"))
        return cls(
            body=record.body,
            message_id=record.message_id,
            source=record.event_source_arn,
            receive_count=str(record.attributes.approximate_receive_count),
            attributes=attributes,
            state=WaitState.from_attributes(attributes.strings()),
        )


def wait_background(
    busy: SessionBusy,
    record: ParkedRecord,
    *,
    store: Store,
    settings: Settings,
    task_id: str,
    now: Callable[[], float],
    rng: Jitter = random,
) -> Wait | GiveUp:
    """Come back later (``Wait``: the caller re-sends the record with its delay), or give up
    (``GiveUp``: the failure is recorded here; the caller dead-letters the record as SessionBusy, or
    as WaitListFull when the session's wait list had no room for it)."""
    decision: Wait | GiveUp = decide(busy, record.state, WaitPolicy.from_settings(settings), now=now(), rng=rng)
    if isinstance(decision, Wait):
        decision = room_on_the_list(busy, decision, store=store, settings=settings, now=now()) or decision
    if isinstance(decision, GiveUp):
        record_gave_up(store, busy, decision, kind="background", task_id=task_id)
        return decision
    # the copy carries the receives this one spent before it found the session busy (each was an
    # attempt: a busy finding always ends a copy), and the producer's message id
    return replace(
        decision,
        state=replace(
            decision.state,
            spent=record.state.attempts(max(0, record.receives - 1)),
            first_id=record.first_id,
        ),
    )


# --------------------------------------------------------------------------------------------
# a cron wake


def schedule_name(run_id: str, count: int) -> str:
    """A Scheduler name (<= 64 of [0-9A-Za-z_.-]) unique per run and try: a copy creating the
    same wait finds it exists instead of creating a second one."""
    return f"wait-{hashlib.sha256(run_id.encode()).hexdigest()[:32]}-{count}"


def wait_cron(
    busy: SessionBusy,
    payload: dict[str, Any],
    state: WaitState,
    *,
    store: Store,
    settings: Settings,
    schedules: SchedulesPort | None,
    target_arn: str | None,
    job_id: str,
    now: Callable[[], float],
    rng: Jitter = random,
) -> str:
    """Join the session's wait list ("waiting": the holder's release hands the session over) with a
    one-time schedule of the same wake as the fallback; or, past SessionWaitLimit, take the run off
    the list, record the failure and raise ``SessionBusy`` (``WaitListFull``, a permanent error, when
    the list had no room for it)."""
    decision: Wait | GiveUp = decide(busy, state, WaitPolicy.from_settings(settings), now=now(), rng=rng)
    assert busy.run_id is not None and busy.session_id is not None
    if isinstance(decision, Wait):
        decision = room_on_the_list(busy, decision, store=store, settings=settings, now=now()) or decision
    if isinstance(decision, GiveUp):
        store.leases.drop_waiter(busy.session_id, busy.run_id)  # nobody's to hand the session to
        record_gave_up(store, busy, decision, kind="cron", job_id=job_id)
        error = WaitListFull if decision.error_type == "WaitListFull" else SessionBusy
        raise error(decision.detail, run_id=busy.run_id, session_id=busy.session_id, holder=busy.holder)
    if schedules is None or not schedules.group or not target_arn or not settings.scheduler_role_arn:
        # no scheduler to come back through (a bare test setup): Lambda's async retries it is
        logger.warning("session busy and no scheduler configured: raising for Lambda's async retry")
        raise busy
    # the payload names the session: a copy reads its entry on the wait list in its first read
    payload = {**payload, "session_id": busy.session_id}
    delay = join_wait_list(
        busy,
        decision,
        store=store,
        settings=settings,
        kind="cron",
        body=json.dumps(payload),
        attributes={},
        now=now(),
        target=target_arn,
    )
    at = schedule_cron_copy(
        schedules,
        name=schedule_name(busy.run_id, decision.state.count),
        at=now() + delay,
        target=target_arn,
        role_arn=settings.scheduler_role_arn,
        dlq_arn=settings.scheduler_dlq_arn,
        payload={**payload, CRON_WAIT_FIELD: decision.state.to_payload()},
    )
    logger.info(
        "session busy: the cron wake waits on the session's wait list",
        extra={"holder": busy.holder, "fallback_at": at.isoformat(), "wait_count": decision.state.count},
    )
    return "waiting"
