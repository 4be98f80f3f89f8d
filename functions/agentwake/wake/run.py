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
from agentwake.errors import ConfigError, DeliveryError, RunDeferred, RunFailed, SessionBusy, run_failed
from agentwake.observability import logger, metrics
from agentwake.settings import Settings
from agentwake.store.dynamo import DynamoStore, RunAlreadySucceeded
from agentwake.store.models import FailureRecord, truncate
from agentwake.wake.agent_factory import RecordingChannel, build_runner
from agentwake.wake.attention import emit_usage_metrics, note_with_final, open_books, run_usage
from agentwake.wake.prompt import WakeKind, build_wake_messages

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

    store: DynamoStore
    settings: Settings
    clock: Clock = field(default_factory=SystemClock)
    provider_factory: Callable[[dict[str, Any]], Any] = build_provider
    channel_factory: Callable[[dict[str, Any]], Any] = _default_channel_factory
    retry: RetryPolicy | None = None
    on_event: Callable[[RunEvent], None] | None = None
    #: deletes EventBridge Scheduler schedules (run-once jobs); None where there is no scheduler
    schedules: Any = None
    #: Powertools idempotency on the run id (agentwake.store.idempotency); None runs without it
    idempotency: Any = None


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


def execute_run(spec: RunSpec, deps: WakeDeps, *, remaining_ms: int | None = None) -> WakeOutcome:
    """Run once per run id: through Powertools Idempotency when configured."""
    if deps.idempotency is None:
        return _execute(spec, deps, remaining_ms)
    from dataclasses import asdict

    from aws_lambda_powertools.utilities.idempotency import idempotent_function

    @idempotent_function(
        data_keyword_argument="run",
        config=deps.idempotency.config,
        persistence_store=deps.idempotency.persistence,
        key_prefix="agentwake-run",
    )
    def run_once(run: dict[str, str]) -> dict[str, Any]:
        return asdict(_execute(spec, deps, remaining_ms))

    from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyAlreadyInProgressError

    try:
        return WakeOutcome(**run_once(run={"run_id": spec.run_id}))
    except IdempotencyAlreadyInProgressError as exc:
        # another copy of this very run is in progress: wait for it like for any busy session
        raise SessionBusy(
            f"run {spec.run_id} is in progress in another invocation; this copy will retry",
            run_id=spec.run_id,
            session_id=spec.session_id,
            holder=spec.run_id,
        ) from exc


def _execute(spec: RunSpec, deps: WakeDeps, remaining_ms: int | None) -> WakeOutcome:
    store = deps.store
    existing = store.get_run(spec.run_id)
    if existing is not None and existing.status == "succeeded":
        logger.info("run already succeeded; nothing to do", extra={"run_id": spec.run_id})
        metrics.add_metric(name="DuplicateIgnored", unit="Count", value=1)
        return WakeOutcome(run_id=spec.run_id, status="already_succeeded", attempt=existing.attempts)

    if remaining_ms is not None and remaining_ms < deps.settings.min_run_budget_ms:
        # late in a batch: starting now would end in a deadline ERROR that burns a retry and
        # records a misleading failure; hand the record back untouched instead
        raise RunDeferred(
            f"only {remaining_ms} ms of the invocation left (< {deps.settings.min_run_budget_ms}); "
            f"{spec.run_id} will run on a later receive"
        )
    lease_s = DEFAULT_LEASE_S if remaining_ms is None else remaining_ms / 1000 + LEASE_GRACE_S
    token = store.acquire_lease(spec.session_id, spec.run_id, lease_s)
    if token is None:
        holder = store.lease_holder(spec.session_id)
        holder_id = holder[0] if holder else None
        raise SessionBusy(
            f"session {spec.session_id} is busy with run {holder_id or '?'}; {spec.run_id} will retry",
            run_id=spec.run_id,
            session_id=spec.session_id,
            holder=holder_id,
        )
    try:
        return _run_leased(spec, deps, remaining_ms)
    finally:
        store.release_lease(spec.session_id, token)


def _run_leased(spec: RunSpec, deps: WakeDeps, remaining_ms: int | None) -> WakeOutcome:
    store = deps.store
    try:
        attempt = store.begin_attempt(spec.run_id, kind=spec.kind, session_id=spec.session_id)
    except store.db.exceptions.ConditionalCheckFailedException:
        return WakeOutcome(run_id=spec.run_id, status="already_succeeded")
    logger.append_keys(run_id=spec.run_id, session_id=spec.session_id, attempt=attempt)
    if spec.job_id:
        store.set_job_running(spec.job_id)

    runner = None
    try:
        journal = store.journal(spec.run_id)
        if not journal.entries:  # no step yet: keep what woke the run (runs replay), even if it fails now
            store.put_wake(spec.run_id, kind=spec.kind, wake=spec.wake)
        session = store.get_session(spec.session_id)
        if session is None:
            raise ConfigError(f"session {spec.session_id} has no config (agentwake sessions put {spec.session_id})")
        history = [
            e.to_message()
            for e in store.history_window(spec.session_id, session.history_window)
            if e.run_id != spec.run_id  # this run's own deliveries come back through the journal
        ]
        books = open_books(store, session, spec.run_id, journal=journal)
        messages = build_wake_messages(
            persona=session.persona,
            kind=spec.kind,
            wake=spec.wake,
            history=history,
            deliver_final=session.deliver_final,
            deliveries_left=books.ledger.remaining_deliveries(),
            deliveries_made=len(books.ledger.deliveries),
        )
        # every HTTP exchange of the run ends by this (taken first: never later than the chain's)
        http_deadline = deadline_after(remaining_ms, deps.settings.run_timeout_margin_ms)
        deadline = None
        if remaining_ms is not None:
            deadline = deps.clock.now() + (remaining_ms - deps.settings.run_timeout_margin_ms) / 1000
        channel = RecordingChannel(_channels(session, deps), store, books.counters)
        runner = build_runner(
            session=session,
            run_id=spec.run_id,
            messages=messages,
            journal=books.journal,
            ledger=books.ledger,
            channel=channel,
            clock=deps.clock,
            deadline=deadline,
            settings=deps.settings,
            provider_factory=deps.provider_factory,
            retry=deps.retry,
            on_event=deps.on_event,
        )
        with run_deadline(http_deadline):
            runner.run()
    except ConfigError as exc:  # incl. OutboundRefused, SecretRefRefused: the type says which
        _fail(spec, deps, attempt, exc.error_type, str(exc), runner)
        raise RunFailed(spec.run_id, str(exc), failure_type=exc.error_type) from exc
    except Exception as exc:
        # a crash (store outage, bug): record it for the operator, then let the trigger retry
        _fail(spec, deps, attempt, type(exc).__name__, f"{type(exc).__name__}: {exc}", runner, best_effort=True)
        raise

    _emit_run_metrics(runner)
    emit_usage_metrics(runner)
    if runner.state is not AgentState.DONE:
        error_type = runner.error_type or "RunFailed"
        _fail(spec, deps, attempt, error_type, runner.completion_text, runner, session=session)
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
            usage=run_usage(runner, session, deps.settings),
        )
    except RunAlreadySucceeded:
        logger.info("another copy committed this run first")
        return WakeOutcome(run_id=spec.run_id, status="already_succeeded", attempt=attempt)
    except Exception as exc:
        # throttled, conflicting or cancelled commit: the run is not a success; say why, then retry
        _fail(
            spec,
            deps,
            attempt,
            type(exc).__name__,
            f"the commit failed: {type(exc).__name__}: {exc}",
            runner,
            best_effort=True,
        )
        raise
    metrics.add_metric(name="RunSucceeded", unit="Count", value=1)
    logger.info("run succeeded", extra={"steps": runner.steps_done, "replayed_steps": runner.replayed_steps})
    return WakeOutcome(
        run_id=spec.run_id,
        status="succeeded",
        attempt=attempt,
        steps=runner.steps_done,
        # bounded: the outcome is also the Powertools idempotency record (one DynamoDB item)
        final_text=truncate(runner.completion_text, 2000),
        deliveries=len(channel.sent),
        final_delivered=runner.final_delivery_id is not None,
        usage=run_usage(runner, session, deps.settings) or {},
    )


def _channels(session: Any, deps: WakeDeps) -> Callable[[str], Any]:
    """Each target session's own delivery channel (an admin run may message other sessions)."""
    built = {session.session_id: deps.channel_factory(session.delivery)}

    def channel_for(session_id: str) -> Any:
        if session_id not in built:
            target = deps.store.get_session(session_id)
            if target is None:
                raise DeliveryError(f"there is no session {session_id!r} to message")
            built[session_id] = deps.channel_factory(target.delivery)
        return built[session_id]

    return channel_for


def _emit_run_metrics(runner: Any) -> None:
    metrics.add_metric(name="Steps", unit="Count", value=runner.steps_done)
    chain = runner.model
    if isinstance(chain, ProviderChain) and chain.failovers:
        metrics.add_metric(name="ProviderFailover", unit="Count", value=chain.failovers)


def _fail(
    spec: RunSpec,
    deps: WakeDeps,
    attempt: int,
    error_type: str,
    detail: str,
    runner: Any,
    *,
    best_effort: bool = False,
    session: Any = None,
) -> None:
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
        deps.store.record_failure(
            failure,
            task_id=spec.task_id,
            job_id=spec.job_id,
            usage=run_usage(runner, session, deps.settings) if getattr(runner, "ledger", None) else None,
        )
    except Exception:
        if not best_effort:
            raise
        logger.exception("could not record the failure")
