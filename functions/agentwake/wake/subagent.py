"""A background subagent's run, ``sub:{task}``: one ``subagent`` record of the background-work queue
(``wake.work`` routes it here). docs/subagents.md.

It is a run like any other: a run record (kind ``subagent``) counting its attempts, a journal (a
retry or a redrive resumes from it: completed model calls are not billed again), a failure record
for each failed attempt (error type, detail, per-provider errors), retried by raising, dead-lettered
with its reason. It writes no history, holds no session lease (the main agent may run meanwhile)
and has no delivery tool: the only thing it says is its task's completion.

- DONE → the task completes ``succeeded`` with the final answer (``TasksService.finish_task``),
  then the run is marked succeeded. A redriven run that ends DONE after its task was completed
  ``failed`` completes it again: that is the task's second outcome (``bg:{task}:2``).
- ERROR (max steps, a malformed final call, every provider failing, a crash) → the failure is
  recorded and the run raises: SQS retries the record. On its last attempt (``receive_count`` ≥
  ``settings.max_receive_count``), or for an error no retry can help, the task is first completed
  ``failed`` with the reason — the main agent is woken and told — and then the run raises, so the
  record is dead-lettered (by the queue's redrive policy, or at once for a permanent error).

The completion goes first and the run's success after it: a crash between them replays the whole
journal on the retry (no model call) and completes again, which the task's claimed outcome absorbs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from agentwake.agent.runner import AgentState
from agentwake.deadline import deadline_after, run_deadline
from agentwake.domain.models import subagent_run_id, task_token_hash
from agentwake.domain.run_models import FailureRecord
from agentwake.errors import (
    AgentwakeError,
    ConfigError,
    InvalidMessage,
    LeaseHeld,
    RunAlreadySucceeded,
    RunDeferred,
    SessionMismatch,
    UnknownTask,
    run_failed,
)
from agentwake.observability import add_metric, logger
from agentwake.trust.redact import redact

if TYPE_CHECKING:
    from agentwake.agent.journal import StepJournal
    from agentwake.agent.subagents import SubagentSpec
    from agentwake.agent.woken import RunResult, WokenAgent
    from agentwake.domain.models import SessionConfig, Task
    from agentwake.wake.messages import WorkMessage
    from agentwake.wake.spec import WakeDeps


def subagent_wake(task: Task) -> dict[str, Any]:
    """What the run is for, as kept for ``runs replay``: the task and what was handed over."""
    return {
        "trigger": "subagent",
        "task_id": task.task_id,
        "subagent": task.subagent or task.tool_name,
        "task": str(task.tool_args.get("task", "")),
        "started_by": task.started_by,
    }


def find_subagent(session: SessionConfig, name: str) -> SubagentSpec:
    """The session's subagent ``name`` as its config declares it now; ConfigError if it has none."""
    from agentwake.agent.subagents import parse_subagents

    for spec in parse_subagents(session.subagents, session.tools, session_id=session.session_id):
        if spec.name == name:
            return spec
    raise ConfigError(
        f"session {session.session_id} has no subagent {name!r} any more (agentwake sessions put "
        f"{session.session_id} with it, then redrive)"
    )


def subagent_attempt(
    session: SessionConfig,
    wake: dict[str, Any],
    deps: WakeDeps,
    *,
    run_id: str,
    journal: StepJournal,
    deadline: float | None,
    dry_run: bool = False,
) -> WokenAgent:
    """The subagent's agent for one attempt of ``run_id`` (the wake's and ``runs replay``'s one way
    to build it): its spec from the session's config, the task text the task registered."""
    from agentwake.wake.agent_factory import subagent_agent

    spec = find_subagent(session, str(wake.get("subagent")))
    return subagent_agent(
        session=session,
        spec=spec,
        run_id=run_id,
        task=str(wake.get("task", "")),
        journal=journal,
        clock=deps.clock,
        deadline=deadline,
        settings=deps.settings,
        provider_factory=deps.provider_factory,
        retry=deps.retry,
        on_event=deps.on_event,
        dry_run=dry_run,
    )


def run_background_subagent(msg: WorkMessage, deps: WakeDeps, *, remaining_ms: int | None, receive_count: int) -> None:
    """Run ``sub:{task}`` once per record (module docstring). Raises UnknownTask / SessionMismatch /
    InvalidMessage (permanent: dead-lettered at once), RunFailed (retried; dead-lettered after the
    last attempt, the task completed ``failed`` first) or a crash (retried)."""
    run_id = subagent_run_id(msg.task_id)
    logger.thread_safe_append_keys(run_id=run_id, task_id=msg.task_id, session_id=msg.session_id)
    store = deps.store
    read = store.runs.read_wake(run_id=run_id, task_id=msg.task_id, session_id=msg.session_id)
    task = read.task
    if task is None:
        raise UnknownTask(f"no task is registered with id {msg.task_id!r}")
    if task.session_id != msg.session_id:
        raise SessionMismatch(
            f"task {msg.task_id} belongs to session {task.session_id!r}, but the message names {msg.session_id!r}"
        )
    if task.kind != "subagent" or not task.subagent:
        raise InvalidMessage(f"task {msg.task_id} is a {task.kind!r} task, not a subagent's: nothing to run")
    if read.run is not None and read.run.status == "succeeded":
        logger.info("the subagent's run already succeeded; nothing to do")
        return
    if task.cancelled_at is not None or task.timed_out_at is not None:
        # its outcome is claimed for good (a redrive of its own failure is not: outcome 2 may follow)
        logger.info("the task was cancelled or timed out: its subagent does not run")
        return
    if not msg.task_token or not store.records.claim_task_work(task.task_id, task_token_hash(msg.task_token)):
        # a retried start gave the task a new token and sent its work again: this copy is stale
        logger.info("a stale copy of the task's work message: the current one runs it")
        return
    if remaining_ms is not None and remaining_ms < deps.settings.min_run_budget_ms:
        raise RunDeferred(f"only {remaining_ms} ms of the invocation left; {run_id} will run on a later receive")
    last = receive_count >= deps.settings.max_receive_count
    wake = subagent_wake(task)
    try:
        attempt = store.runs.begin_unleased(
            run_id=run_id, kind="subagent", session_id=task.session_id, previous=read.run, wake=wake
        )
    except RunAlreadySucceeded:
        return
    except LeaseHeld as exc:  # another copy of this record is running it right now
        raise RunDeferred(f"another copy of {run_id} is running; this one will retry") from exc
    logger.thread_safe_append_keys(attempt=attempt)
    _Attempt(msg, deps, task, wake, run_id=run_id, attempt=attempt, first=read.run is None, last=last).run(
        read.session, remaining_ms
    )


class _Attempt:
    """One attempt of a ``sub:`` run, from its agent to its end (the completion, the failure record)."""

    def __init__(
        self,
        msg: WorkMessage,
        deps: WakeDeps,
        task: Task,
        wake: dict[str, Any],
        *,
        run_id: str,
        attempt: int,
        first: bool,
        last: bool,
    ) -> None:
        self.msg, self.deps, self.task, self.wake = msg, deps, task, wake
        self.run_id, self.attempt, self.last = run_id, attempt, last
        self.journal = deps.store.journals.journal(run_id, fresh=first, attempt=attempt)
        self.agent: WokenAgent | None = None

    def run(self, session: SessionConfig | None, remaining_ms: int | None) -> None:
        deps = self.deps
        try:
            if session is None:
                raise ConfigError(f"session {self.task.session_id} has no config")
            budget = find_subagent(session, str(self.wake["subagent"])).time_budget_s
            margin = deps.settings.run_timeout_margin_ms
            http_deadline = deadline_after(remaining_ms, margin)
            lambda_left = None if remaining_ms is None else (remaining_ms - margin) / 1000
            seconds = budget if lambda_left is None else min(budget, lambda_left)
            self.agent = subagent_attempt(
                session, self.wake, deps, run_id=self.run_id, journal=self.journal, deadline=deps.clock.now() + seconds
            )
            own = deadline_after(int(seconds * 1000), 0)
            with run_deadline(own if http_deadline is None or own is None else min(own, http_deadline)):
                result = self.agent.run()
        except AgentwakeError as exc:  # a config that cannot run it, its time budget spent mid-step
            detail = f"{exc.error_type}: {exc}"
            self._failed(exc.error_type, detail, final=self.last or not exc.retryable)
            raise
        except Exception as exc:  # a crash (store outage, bug): recorded, retried
            self._failed(type(exc).__name__, f"{type(exc).__name__}: {exc}", final=self.last, best_effort=True)
            raise
        if result.state is AgentState.DONE:
            self._succeeded(result)
            return
        error_type = result.error_type or "RunFailed"
        error = run_failed(self.run_id, result.completion_text, error_type)
        self._failed(error_type, result.completion_text, final=self.last or not error.retryable, result=result)
        raise error

    def _complete(self, status: Literal["succeeded", "failed"], text: str) -> None:
        """The task's completion (the one finish path); one that comes too late changes nothing."""
        tasks = self.deps.tasks
        if tasks is None:
            raise ConfigError("no tasks service: the subagent's task cannot be completed here")
        name = str(self.wake["subagent"])
        try:
            tasks.finish_task(
                self.task.task_id,
                status,
                text,
                task_token=str(self.msg.task_token),
                summary_name=f"subagent {name}",
                subagent_name=name,
            )
        except AgentwakeError as exc:
            if exc.retryable:
                raise
            # the task already has its outcome (cancelled, timed out): this one is late
            logger.info(
                "the task had already ended: its completion changed nothing", extra={"why": redact(str(exc))[:500]}
            )

    def _succeeded(self, result: RunResult) -> None:
        self._complete("succeeded", result.completion_text)
        try:
            self.deps.store.ends.commit_success(
                run_id=self.run_id,
                session_id=self.task.session_id,
                note=None,  # a subagent writes no history: its answer is the task's result
                steps=result.steps_done,
                journal=self.journal,
                usage=result.usage,
            )
        except RunAlreadySucceeded:
            return
        except Exception as exc:
            # the task is completed: the run is retried for its own record, and the failure record
            # writes the final reply kept back for this commit, so the retry asks no model again
            detail = f"the run's success could not be recorded: {type(exc).__name__}: {exc}"
            self._failed(type(exc).__name__, detail, final=False, best_effort=True, result=result)
            raise
        add_metric(name="RunSucceeded", unit="Count", value=1)
        logger.info("subagent run succeeded", extra={"steps": result.steps_done, "replayed": result.replayed_steps})

    def _failed(
        self,
        error_type: str,
        detail: str,
        *,
        final: bool,
        best_effort: bool = False,
        result: RunResult | None = None,
    ) -> None:
        """Record the failed attempt (and the steps kept back); on the last attempt, complete the task
        ``failed`` with the reason first, so the main agent is told before the record is dead-lettered."""
        if result is None and self.agent is not None:
            result = self.agent.result()
        failure = FailureRecord(
            run_id=self.run_id,
            session_id=self.task.session_id,
            attempt=self.attempt,
            error_type=error_type,
            detail=detail,
            provider_errors=dict(result.provider_errors) if result is not None else {},
            steps_done=result.steps_done if result is not None else 0,
        )
        add_metric(name="RunFailed", unit="Count", value=1)
        logger.error(
            "subagent run failed", extra={"error_type": error_type, "detail": redact(detail)[:2000], "final": final}
        )
        if final:
            name = str(self.wake["subagent"])
            self._complete("failed", f"the subagent {name} failed ({error_type}): {failure.detail}")
        try:
            self.deps.store.ends.record_failure(
                failure, journal=self.journal, usage=result.usage if result is not None else None
            )
        except Exception:
            if not best_effort:
                raise
            logger.exception("could not record the failure")
