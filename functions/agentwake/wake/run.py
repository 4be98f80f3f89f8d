"""One run, whatever woke it: lease the session, count the attempt, run the agent, then
**DONE → commit the note in one transaction; ERROR → record the failure and raise**.

Both wake paths (cron and background result) go through ``execute_run``, so the ERROR guard
exists exactly once: the reference bug was two twin paths of which only one checked the state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from agentwake.agent.chain import ProviderChain, RetryPolicy
from agentwake.agent.clock import Clock, SystemClock
from agentwake.agent.providers import build_provider
from agentwake.agent.runner import AgentState, RunEvent
from agentwake.deadline import deadline_after, run_deadline
from agentwake.errors import (
    ConfigError,
    LeaseHeld,
    RunAlreadySucceeded,
    RunDeferred,
    RunFailed,
    SessionBusy,
    run_failed,
)
from agentwake.observability import logger, metrics
from agentwake.settings import Settings
from agentwake.store.journal import DynamoJournal
from agentwake.store.models import FailureRecord, truncate
from agentwake.store.port import DailyUsage, Lease, RunStore, WakeRead
from agentwake.wake.agent_factory import has_daily_limits
from agentwake.wake.assemble import assemble_agent
from agentwake.wake.attention import emit_usage_metrics, note_with_final, run_usage
from agentwake.wake.prompt import WakeKind

#: a lease outlives the Lambda that holds it by this much, then anyone may take it
LEASE_GRACE_S = 30.0
#: lease length when the caller gives no remaining time (local runs, tests)
DEFAULT_LEASE_S = 900.0


def _default_channel_factory(spec: dict[str, Any]) -> Any:
    from agentwake.delivery.factory import build_channel

    return build_channel(spec)


@dataclass
class WakeDeps:
    """What a wake needs from the outside world (ports); tests swap any of them."""

    store: RunStore
    settings: Settings
    clock: Clock = field(default_factory=SystemClock)
    provider_factory: Callable[[dict[str, Any]], Any] = build_provider
    channel_factory: Callable[[dict[str, Any]], Any] = _default_channel_factory
    retry: RetryPolicy | None = None
    on_event: Callable[[RunEvent], None] | None = None
    #: deletes EventBridge Scheduler schedules (run-once jobs); None where there is no scheduler
    schedules: Any = None


@dataclass(frozen=True)
class RunSpec:
    run_id: str
    kind: WakeKind
    session_id: str
    #: what woke the agent, shown to it as JSON in the system prompt
    wake: dict[str, Any]
    #: builds the history note from the final answer
    note: Callable[[str], str]
    task_id: str | None = None
    job_id: str | None = None
    disable_job_on_success: bool = False


@dataclass(frozen=True)
class WakeOutcome:
    run_id: str
    status: Literal["succeeded", "already_succeeded"]
    attempt: int = 0
    steps: int = 0
    final_text: str = ""
    deliveries: int = 0
    #: the final answer was delivered to the user (deliver_final), by this attempt or an earlier one
    final_delivered: bool = False
    #: tokens, latency and estimated cost of the run (agentwake.agent.ledger.usage_totals)
    usage: dict[str, Any] = field(default_factory=dict)


def execute_run(
    spec: RunSpec, deps: WakeDeps, *, remaining_ms: int | None = None, read: WakeRead | None = None
) -> WakeOutcome:
    """Run once per run id. Exactly one outcome comes from the run record (a succeeded run is not
    run again), the session lease (taken with the attempt count in one conditional write: two
    copies never run at once) and the conditional commit (a second note cannot land).

    ``read`` is what the wake use case read in its one batch read (run, task/job, session config).
    """
    store = deps.store
    if read is None:
        read = store.read_wake(run_id=spec.run_id, session_id=spec.session_id)
    existing = read.run
    if existing is not None and existing.status == "succeeded":
        return _already_succeeded(spec, existing.attempts)

    if remaining_ms is not None and remaining_ms < deps.settings.min_run_budget_ms:
        # late in a batch: starting now would end in a deadline ERROR that burns a retry and
        # records a misleading failure; hand the record back untouched instead
        raise RunDeferred(
            f"only {remaining_ms} ms of the invocation left (< {deps.settings.min_run_budget_ms}); "
            f"{spec.run_id} will run on a later receive"
        )
    lease_s = DEFAULT_LEASE_S if remaining_ms is None else remaining_ms / 1000 + LEASE_GRACE_S
    try:
        lease = store.begin_run(
            run_id=spec.run_id,
            kind=spec.kind,
            session_id=spec.session_id,
            seconds=lease_s,
            previous=existing,
            job_id=spec.job_id,
            wake=spec.wake,
            usage=_daily_usage(read, spec.session_id),
        )
    except LeaseHeld as exc:
        raise SessionBusy(
            f"session {spec.session_id} is busy with run {exc.holder or '?'}; {spec.run_id} will retry",
            run_id=spec.run_id,
            session_id=spec.session_id,
            holder=exc.holder,
        ) from exc
    except RunAlreadySucceeded:
        return _already_succeeded(spec, existing.attempts if existing else 0)
    try:
        return _run_leased(spec, deps, remaining_ms, lease, read, first_attempt=existing is None)
    finally:
        if not lease.released:
            store.release_lease(spec.session_id, lease.token)


def _daily_usage(read: WakeRead, session_id: str) -> DailyUsage | None:
    """The counters of today the batch read found, when the session has daily limits (the lease's
    transaction then checks them unchanged, and the run starts from them: no read of its own)."""
    if read.session is None or not has_daily_limits(read.session):
        return None
    if read.usage is None or read.usage.session_id != session_id:
        return None  # a schedule that named no session (or another): the run reads them itself
    return read.usage


def _already_succeeded(spec: RunSpec, attempt: int) -> WakeOutcome:
    logger.info("run already succeeded; nothing to do", extra={"run_id": spec.run_id})
    metrics.add_metric(name="DuplicateIgnored", unit="Count", value=1)
    return WakeOutcome(run_id=spec.run_id, status="already_succeeded", attempt=attempt)


def _run_leased(
    spec: RunSpec,
    deps: WakeDeps,
    remaining_ms: int | None,
    lease: Lease,
    read: WakeRead,
    *,
    first_attempt: bool,
) -> WakeOutcome:
    store = deps.store
    attempt = lease.attempt
    logger.append_keys(run_id=spec.run_id, session_id=spec.session_id, attempt=attempt)

    runner = None
    failed = _Failer(spec, deps, lease)
    try:
        session = read.session
        if session is None:
            raise ConfigError(f"session {spec.session_id} has no config (agentwake sessions put {spec.session_id})")
        failed.session = session
        # every HTTP exchange of the run ends by this (taken first: never later than the chain's)
        http_deadline = deadline_after(remaining_ms, deps.settings.run_timeout_margin_ms)
        deadline = None
        if remaining_ms is not None:
            deadline = deps.clock.now() + (remaining_ms - deps.settings.run_timeout_margin_ms) / 1000
        agent = assemble_agent(
            spec,
            deps,
            session,
            first_attempt=first_attempt,
            deadline=deadline,
            on_journal=lambda j: setattr(failed, "journal", j),
            usage=lease.usage,
        )
        runner, journal, channel = agent.runner, agent.journal, agent.channel
        with run_deadline(http_deadline):
            runner.run()
    except ConfigError as exc:  # incl. OutboundRefused, SecretRefRefused: the type says which
        failed(attempt, exc.error_type, str(exc), runner)
        raise RunFailed(spec.run_id, str(exc), failure_type=exc.error_type) from exc
    except Exception as exc:
        # a crash (store outage, bug): record it for the operator, then let the trigger retry
        failed(attempt, type(exc).__name__, f"{type(exc).__name__}: {exc}", runner, best_effort=True)
        raise

    _emit_metrics(runner)
    if runner.state is not AgentState.DONE:
        error_type = runner.error_type or "RunFailed"
        failed(attempt, error_type, runner.completion_text, runner)
        raise run_failed(spec.run_id, runner.completion_text, error_type)

    try:
        store.commit_success(
            run_id=spec.run_id,
            session_id=spec.session_id,
            note=note_with_final(spec.note(runner.completion_text), runner),
            steps=runner.steps_done,
            task_id=spec.task_id,
            job_id=spec.job_id,
            disable_job=spec.disable_job_on_success,
            unwritten=journal.unwritten(for_commit=True),
            lease=lease,
            usage=run_usage(runner, session, deps.settings),
        )
    except RunAlreadySucceeded:
        logger.info("another copy committed this run first")
        return WakeOutcome(run_id=spec.run_id, status="already_succeeded", attempt=attempt)
    except Exception as exc:
        # throttled, conflicting or cancelled commit: the run is not a success; say why, then retry
        failed(attempt, type(exc).__name__, f"the commit failed: {type(exc).__name__}: {exc}", runner, best_effort=True)
        raise
    journal.mark_written()
    metrics.add_metric(name="RunSucceeded", unit="Count", value=1)
    logger.info("run succeeded", extra={"steps": runner.steps_done, "replayed_steps": runner.replayed_steps})
    return WakeOutcome(
        run_id=spec.run_id,
        status="succeeded",
        attempt=attempt,
        steps=runner.steps_done,
        # bounded: the outcome is returned to the handler and may be logged
        final_text=truncate(runner.completion_text, 2000),
        deliveries=len(channel.sent),
        final_delivered=runner.final_delivery_id is not None,
        usage=run_usage(runner, session, deps.settings) or {},
    )


def _emit_metrics(runner: Any) -> None:
    """The run's metrics. They never decide an outcome: this runs between a final answer's send and
    the commit that records it, so a metrics error is logged, not raised."""
    try:
        _emit_run_metrics(runner)
        emit_usage_metrics(runner)
    except Exception:
        logger.exception("could not emit the run's metrics; the run's outcome is unaffected")


def _emit_run_metrics(runner: Any) -> None:
    metrics.add_metric(name="Steps", unit="Count", value=runner.steps_done)
    chain = runner.model
    if isinstance(chain, ProviderChain) and chain.failovers:
        metrics.add_metric(name="ProviderFailover", unit="Count", value=chain.failovers)


class _Failer:
    """Records a failed attempt: the failure, the run/task/job status, the steps kept back (so a
    retry does not call the model again for them) and the lease release, in one transaction."""

    def __init__(self, spec: RunSpec, deps: WakeDeps, lease: Lease) -> None:
        self.spec = spec
        self.deps = deps
        self.lease = lease
        self.journal: DynamoJournal | None = None
        self.session: Any = None

    def __call__(self, attempt: int, error_type: str, detail: str, runner: Any, *, best_effort: bool = False) -> None:
        spec = self.spec
        failure = FailureRecord(
            run_id=spec.run_id,
            session_id=spec.session_id,
            attempt=attempt,
            error_type=error_type,
            detail=detail,
            provider_errors=dict(getattr(runner, "provider_errors", {}) or {}),
            steps_done=getattr(runner, "steps_done", 0),
        )
        metrics.add_metric(name="RunFailed", unit="Count", value=1)
        logger.error("run failed", extra={"error_type": error_type, "detail": detail[:2000]})
        try:
            self.deps.store.record_failure(
                failure,
                task_id=spec.task_id,
                job_id=spec.job_id,
                # the steps kept back, so a retry does not pay for them again; not the deliveries no
                # step reports yet: that step is redone and resends them under the same delivery id
                # (docs/durability.md, the at-least-once edge)
                unwritten=self.journal.unwritten() if self.journal is not None else None,
                lease=self.lease,
                usage=run_usage(runner, self.session, self.deps.settings) if getattr(runner, "ledger", None) else None,
            )
        except Exception:
            if not best_effort:
                raise
            logger.exception("could not record the failure")
        else:
            if self.journal is not None:
                self.journal.mark_written()
