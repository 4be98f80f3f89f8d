"""One run, whatever woke it: lease the session, build and run the attempt, then
**DONE → commit the note in one transaction; ERROR → record the failure and raise**.

Both wake paths (cron and background result) go through ``execute_run``, so the ERROR guard
exists exactly once: the reference bug was two twin paths of which only one checked the state.
The attempt is built by ``wake/attempt.py`` and its agent runs once, returning a plain
``RunResult`` (with its usage, priced); its metrics and note come from ``wake/usage.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from agentwake.agent.runner import AgentState
from agentwake.deadline import deadline_after, run_deadline
from agentwake.domain.models import truncate
from agentwake.errors import (
    ConfigError,
    DeliveryError,
    LeaseHeld,
    RunAlreadySucceeded,
    RunDeferred,
    RunFailed,
    SessionBusy,
    StartRefused,
    StepInterrupted,
    run_failed,
)
from agentwake.observability import add_metric, logger
from agentwake.session import handoff
from agentwake.wake.attempt import Attempt, build_attempt
from agentwake.wake.spec import RunSpec, WakeDeps, WakeOutcome
from agentwake.wake.usage import settle

if TYPE_CHECKING:
    from agentwake.agent.woken import RunResult
    from agentwake.domain.run_models import RunRecord
    from agentwake.session.lease import Lease
    from agentwake.store.port import WakeRead

#: a lease outlives the Lambda that holds it by this much, then anyone may take it
LEASE_GRACE_S = 30.0
#: lease length when the caller gives no remaining time (local runs, tests)
DEFAULT_LEASE_S = 900.0


def execute_run(
    spec: RunSpec,
    deps: WakeDeps,
    *,
    remaining_ms: int | None = None,
    read: WakeRead | None = None,
    run_next: Callable[[], bool] | None = None,
) -> WakeOutcome:
    """Run once per run id. Exactly one outcome comes from the run record (a succeeded run is not
    run again), the session lease (taken with the attempt count in one conditional write: two
    copies never run at once) and the conditional commit (a second note cannot land).

    ``read`` is what the wake use case read in its one batch read (run, task/job, session config).
    ``run_next``: asked after a success whose commit handed the session to a waiter; True means
    the caller runs that waiter itself (``WakeOutcome.next_waiter``) instead of re-sending it.
    """
    store = deps.store
    if read is None:
        read = store.runs.read_wake(run_id=spec.run_id, session_id=spec.session_id)
    existing = read.run
    if existing is not None and existing.status == "succeeded":
        return _already_succeeded(spec, existing.attempts, deps)
    if existing is not None and existing.status == "parked" and existing.decided != existing.waiting_for:
        # a copy of a run that waits for a person (an SQS duplicate, an old fallback copy): nothing
        # to do until the decision re-queues it (wake/approval_check.py)
        _decline_if_handed(spec, deps)
        logger.info("run is parked, waiting for a decision; this copy does nothing", extra={"run_id": spec.run_id})
        return WakeOutcome(
            run_id=spec.run_id, status="parked", attempt=existing.attempts, waiting_for=existing.waiting_for
        )

    if remaining_ms is not None and remaining_ms < deps.settings.min_run_budget_ms:
        # late in a batch: starting now would end in a deadline ERROR that burns a retry and
        # records a misleading failure; hand the record back untouched instead
        _decline_if_handed(spec, deps)
        raise RunDeferred(
            f"only {remaining_ms} ms of the invocation left (< {deps.settings.min_run_budget_ms}); "
            f"{spec.run_id} will run on a later receive"
        )
    lease_s = DEFAULT_LEASE_S if remaining_ms is None else remaining_ms / 1000 + LEASE_GRACE_S
    try:
        lease = _begin(spec, deps, existing, lease_s)
    except LeaseHeld as exc:
        raise SessionBusy(
            f"session {spec.session_id} is busy with run {exc.holder or '?'}; {spec.run_id} will retry",
            run_id=spec.run_id,
            session_id=spec.session_id,
            holder=exc.holder,
        ) from exc
    except RunAlreadySucceeded:
        return _already_succeeded(spec, existing.attempts if existing else 0, deps)
    if lease.adopted:
        # a start write's answer was lost; read back, the lease and the attempt are ours
        logger.info("start write read back: lease adopted", extra={"run_id": spec.run_id})
    if spec.waited is not None and spec.waited.idle_s is not None:
        add_metric(name="SessionIdle", unit="Seconds", value=spec.waited.idle_s)
    held = _Held(lease)
    try:
        outcome = _run_leased(spec, deps, remaining_ms, held, read, first_attempt=existing is None)
    except BaseException:
        _release(spec, deps, held)
        handoff.complete(store.leases, deps.result_queue, held.lease, now=deps.clock.wall, cron=_cron(deps))
        raise
    # a parked run's own place on the list is its re-queue after a decision (the park took the
    # waiting one off): its release may hand the session to it, as to any waiter
    _release(spec, deps, held, parked=outcome.status == "parked")
    # released: the run that waited longest for the session gets it now, not at its next try —
    # here, when the caller has the time for it (whatever its kind); else its copy is sent on
    if held.lease.handed and run_next is not None and run_next():
        return replace(outcome, next_waiter=handoff.take(store.leases, held.lease))
    handoff.complete(store.leases, deps.result_queue, held.lease, now=deps.clock.wall, cron=_cron(deps))
    return outcome


def _begin(spec: RunSpec, deps: WakeDeps, existing: RunRecord | None, lease_s: float) -> Lease:
    """The run's start (``Runs.begin_run``): the lease, then the attempt counted. An attempt refused
    after the lease was taken (the run succeeded, another copy started, the table) gives the lease
    back through the one release path, handing the session to the next waiter, then raises why."""
    try:
        return deps.store.runs.begin_run(
            run_id=spec.run_id,
            kind=spec.kind,
            session_id=spec.session_id,
            seconds=lease_s,
            previous=existing,
            job_id=spec.job_id,
            wake=(spec.kind, spec.wake),  # kept by a retry's start, for `runs replay`
            waited=spec.waited,
            message_id=spec.message_id,
            # a parked run whose request was decided: its resume is marked with its attempt
            resuming=existing.waiting_for if existing is not None and existing.status == "parked" else None,
        )
    except StartRefused as refused:
        held, error = _Held(refused.lease), refused.error
    _release(spec, deps, held)
    handoff.complete(deps.store.leases, deps.result_queue, held.lease, now=deps.clock.wall, cron=_cron(deps))
    raise error


@dataclass
class _Held:
    """The run's lease as it stands: each step that moves it (the hand-off named, the commit or the
    failure record, the release) returns the next value, kept here."""

    lease: Lease


#: tries of the release after a run's end when the table does not answer (throttled, a 500, a
#: timeout): a lost answer's second try finds its first one landed (``SessionLeases.release``)
RELEASE_TRIES = 2


def _release(spec: RunSpec, deps: WakeDeps, held: _Held, *, parked: bool = False) -> None:
    """Release the lease after the run's end (commit, failure record, park; or a crash), handing the
    session on: one plain conditional write, tried again once when the table does not answer. A
    process that dies before it leaves the session held until the lease expires (docs/durability.md).
    ``parked``: the run parked; a decision that re-queued it before this release (its place on the
    wait list, the lease marked) makes it a waiter like any other, not the releasing run to skip."""
    skip = None if parked else spec.run_id
    for tries in range(1, RELEASE_TRIES + 1):
        try:
            held.lease = handoff.release(deps.store.leases, deps.result_queue, held.lease, skip)
            return
        except Exception:  # the run's own outcome (or error) stands; an unreleased lease expires
            if tries == RELEASE_TRIES:
                logger.exception("could not release the session's lease")


def _cron(deps: WakeDeps) -> handoff.CronRoute | None:
    """Where a cron waiter's copy goes when this invocation cannot run it: its one-time schedule."""
    return handoff.cron_route(deps.schedules, deps.settings)


def _decline_if_handed(spec: RunSpec, deps: WakeDeps) -> None:
    """This copy was handed the session and will not take it: give it on to the next waiter."""
    if spec.waited is not None and spec.waited.idle_s is not None:
        decline_handed(deps, spec.session_id, spec.run_id)


def decline_handed(deps: WakeDeps, session_id: str, run_id: str) -> None:
    """Run ``run_id``, handed ``session_id``, will not take it: the reservation goes to the next waiter."""
    handoff.decline(deps.store.leases, deps.result_queue, session_id, run_id, now=deps.clock.wall, cron=_cron(deps))


def _already_succeeded(spec: RunSpec, attempt: int, deps: WakeDeps | None = None) -> WakeOutcome:
    if deps is not None:
        _decline_if_handed(spec, deps)
    logger.info("run already succeeded; nothing to do", extra={"run_id": spec.run_id})
    add_metric(name="DuplicateIgnored", unit="Count", value=1)
    return WakeOutcome(run_id=spec.run_id, status="already_succeeded", attempt=attempt)


def _run_leased(
    spec: RunSpec, deps: WakeDeps, remaining_ms: int | None, held: _Held, read: WakeRead, *, first_attempt: bool
) -> WakeOutcome:
    lease = held.lease
    logger.thread_safe_append_keys(run_id=spec.run_id, session_id=spec.session_id, attempt=lease.attempt)
    attempt: Attempt | None = None
    try:
        session = read.session
        if session is None:
            raise ConfigError(f"session {spec.session_id} has no config (agentwake sessions put {spec.session_id})")
        # every HTTP exchange of the run ends by this (taken first: never later than the chain's)
        http_deadline = deadline_after(remaining_ms, deps.settings.run_timeout_margin_ms)
        deadline = None
        if remaining_ms is not None:
            deadline = deps.clock.now() + (remaining_ms - deps.settings.run_timeout_margin_ms) / 1000
        attempt = build_attempt(spec, session, deps, fresh=first_attempt, deadline=deadline, number=lease.attempt)
        with run_deadline(http_deadline):
            result = attempt.agent.run()
            while result.state is AgentState.PARKED:
                parked = _park(spec, deps, held, attempt, result)
                if isinstance(parked, WakeOutcome):
                    return parked
                result = parked  # decided before the park landed: the run went on in place
    except RunFailed:
        raise  # its failure is recorded (an approval request that could not be delivered)
    except ConfigError as exc:  # incl. OutboundRefused, SecretRefRefused: the type says which
        _record_failure(spec, deps, held, attempt, exc.error_type, str(exc))
        raise RunFailed(spec.run_id, str(exc), failure_type=exc.error_type) from exc
    except Exception as exc:
        # a crash (store outage, bug): record it for the operator, then let the trigger retry
        _record_failure(spec, deps, held, attempt, type(exc).__name__, f"{type(exc).__name__}: {exc}", best_effort=True)
        raise

    note = settle(spec, result)  # the metrics, and a DONE run's note
    if result.state is not AgentState.DONE or note is None:
        error_type = result.error_type or "RunFailed"
        _record_failure(spec, deps, held, attempt, error_type, result.completion_text, result=result)
        raise run_failed(spec.run_id, result.completion_text, error_type)
    return _commit(spec, deps, held, attempt, result, note)


def _park(spec: RunSpec, deps: WakeDeps, held: _Held, attempt: Attempt, result: RunResult) -> WakeOutcome | RunResult:
    """PARKED: the park (``wake/park.py``); its modules load only for a run that parks. A request
    certainly not delivered fails the attempt (retried: nobody was asked yet)."""
    from agentwake.wake.park import park_run

    try:
        return park_run(spec, deps, held, attempt, result)
    except StepInterrupted:
        raise  # an uncertain send, a deadline: a crash, recorded and retried by the caller
    except DeliveryError as exc:
        detail = f"the approval request could not be delivered: {exc}"
        _record_failure(spec, deps, held, attempt, "DeliveryFailed", detail, result=result)
        raise RunFailed(spec.run_id, detail, failure_type="DeliveryFailed") from exc


def _commit(spec: RunSpec, deps: WakeDeps, held: _Held, attempt: Attempt, result: RunResult, note: str) -> WakeOutcome:
    """DONE: the note, the run, the task/job and the last steps in one transaction (the lease is
    released after it, by ``_release``)."""
    # the wait list is read before the commit (the run's own entry leaves it with the commit), and
    # the release after it reserves the session for the oldest waiter
    lease = held.lease = handoff.prepare(deps.store.leases, deps.result_queue, held.lease, spec.run_id)
    try:
        deps.store.ends.commit_success(
            run_id=spec.run_id,
            session_id=spec.session_id,
            note=note,
            steps=result.steps_done,
            task_id=spec.task_id,
            job_id=spec.job_id,
            disable_job=spec.disable_job_on_success,
            disabled_reason=spec.job_disabled_reason,
            journal=attempt.journal,  # its last step, and what it has not written, land with the commit
            lease=lease,
            usage=result.usage,
            # off the wait list: a run that waited, or one on it that ran from a copy without its wait
            waited=spec.waited is not None or lease.listed,
            task_outcome=spec.wake.get("status") if spec.task_id is not None else None,
        )
    except RunAlreadySucceeded:
        logger.info("another copy committed this run first")
        return WakeOutcome(run_id=spec.run_id, status="already_succeeded", attempt=lease.attempt)
    except Exception as exc:
        # throttled, conflicting or cancelled commit: the run is not a success; say why, then retry
        detail = f"the commit failed: {type(exc).__name__}: {exc}"
        _record_failure(spec, deps, held, attempt, type(exc).__name__, detail, best_effort=True, result=result)
        raise
    add_metric(name="RunSucceeded", unit="Count", value=1)
    logger.info("run succeeded", extra={"steps": result.steps_done, "replayed_steps": result.replayed_steps})
    return WakeOutcome(
        run_id=spec.run_id,
        status="succeeded",
        attempt=lease.attempt,
        steps=result.steps_done,
        # bounded: the outcome is returned to the handler and may be logged
        final_text=truncate(result.completion_text, 2000),
        deliveries=len(attempt.channel.sent),
        final_delivered=result.final_delivery_id is not None,
        usage=result.usage or {},
    )


def _record_failure(
    spec: RunSpec,
    deps: WakeDeps,
    held: _Held,
    attempt: Attempt | None,
    error_type: str,
    detail: str,
    *,
    best_effort: bool = False,
    result: RunResult | None = None,
) -> None:
    """Record a failed attempt: the failure, the run/task/job status and the steps kept back (so a
    retry does not call the model again for them), in one transaction; the lease is released after
    it, as after a commit (``_release``).
    ``attempt`` is None when the attempt could not be built (no session config); ``result`` is how
    the run ended, None after a crash (then read from the agent: None if it never started)."""
    if result is None and attempt is not None:
        result = attempt.agent.result()
    from agentwake.domain.run_models import FailureRecord  # a failed attempt's (cold start)

    failure = FailureRecord(
        run_id=spec.run_id,
        session_id=spec.session_id,
        attempt=held.lease.attempt,
        error_type=error_type,
        detail=detail,
        provider_errors=dict(result.provider_errors) if result is not None else {},
        steps_done=result.steps_done if result is not None else 0,
    )
    add_metric(name="RunFailed", unit="Count", value=1)
    logger.error("run failed", extra={"error_type": error_type, "detail": detail[:2000]})
    # the release after the failure record reserves the session for the oldest waiter
    held.lease = handoff.prepare(deps.store.leases, deps.result_queue, held.lease, spec.run_id)
    try:
        deps.store.ends.record_failure(
            failure,
            task_id=spec.task_id,
            job_id=spec.job_id,
            # the steps kept back, so a retry does not pay for them again, and a step whose own
            # write failed with the deliveries it reports (marker, history entry, tool result):
            # the retry replays it and sends nothing again. Not a delivery no step reports yet (a
            # crash between the send and its step): that step is redone and resends it under the
            # same delivery id (docs/durability.md, the at-least-once edge)
            journal=attempt.journal if attempt is not None else None,
            usage=result.usage if result is not None else None,
            wake=(spec.kind, spec.wake),  # for `runs replay`: only a failed run is replayed
        )
    except Exception:
        if not best_effort:
            raise
        logger.exception("could not record the failure")
