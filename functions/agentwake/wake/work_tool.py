"""A background tool's work: call the tool, then complete its task truthfully, exactly once.

``run_tool_work`` (the background-work function, ``kind: "tool"``):

1. Reads the task; a message whose token is not the task's is a stale copy (a retried start sent a
   newer one): it does nothing. A task that already has its outcome (cancelled, timed out) is not run.
2. Claims the work with the message's token (``claim_task_work``): a retried start now sends nothing.
3. Calls the tool as the session declares it, through ``ToolRegistry.call``: the same arguments check,
   outbound policy, redaction and size bound as a foreground call, ending by the tool's own timeout
   and by the function's remaining time.
4. Keeps the result in the task's work journal (``work:{task}``, ``WORK_RESULT_KEY``) before the
   completion is sent: a crash after the work and before the completion, retried, sends the kept
   result instead of calling the tool again (exactly one completion).
5. Completes the task through ``TasksService.finish_task``: ``succeeded`` with the output, or
   ``failed`` with the reason (the tool raised, timed out, its URL was refused, its server answered
   non-2xx). Never ``succeeded`` with an error text: the registry says which results failed. Then
   ``WORK_SENT_KEY`` is journaled: a later copy sends nothing (a crash between the send and that
   write sends the completion twice; the wake's run id ``bg:{task}`` makes it one wake).

Retryable trouble (the store, an uncertain side-effecting call) raises, so SQS retries the record; on
the record's last receive the task is first completed ``failed`` with the reason, then it raises
and SQS dead-letters it (a redrive runs the tool again).
"""

from __future__ import annotations

import contextvars
import json
import threading
import time
from typing import TYPE_CHECKING, Literal

from agentwake.domain.models import MAX_TEXT_CHARS, task_token_hash, truncate
from agentwake.domain.steps import WORK_RESULT_KEY, WORK_SENT_KEY, work_journal_id
from agentwake.errors import (
    AgentwakeError,
    ConfigError,
    DeadlineExceeded,
    InvalidMessage,
    OutboundRefused,
    SecretRefRefused,
    SessionMismatch,
    UnknownTask,
)
from agentwake.observability import logger
from agentwake.trust.redact import redact

if TYPE_CHECKING:
    from collections.abc import Callable

    from agentwake.agent.tools import ToolContext, ToolOutcome
    from agentwake.domain.conversation import ToolCall
    from agentwake.domain.models import SessionConfig, Task
    from agentwake.product.tasks import TasksService
    from agentwake.wake.messages import WorkMessage
    from agentwake.wake.spec import WakeDeps

Status = Literal["succeeded", "failed"]


class ToolWorkUnfinished(AgentwakeError):
    """The tool's outcome is not known yet (its store write failed, or a side-effecting call may have
    acted): the record is retried, calling it again with the same idempotency key."""

    retryable = True


def run_tool_work(msg: WorkMessage, deps: WakeDeps, *, remaining_ms: int | None, receive_count: int) -> None:
    """Run background tool ``msg.name`` for task ``msg.task_id`` and complete the task (module docstring)."""
    tasks = deps.tasks
    if tasks is None:
        raise ConfigError("this function has no tasks service: it cannot complete a background task")
    store = deps.store
    task = store.records.get_task(msg.task_id)
    if task is None:
        raise UnknownTask(f"no task is registered with id {msg.task_id!r}")
    if task.session_id != msg.session_id:
        raise SessionMismatch(f"task {msg.task_id} belongs to another session than the message names")
    if task.kind != "tool" or not msg.name:
        raise InvalidMessage(f"task {msg.task_id} is a {task.kind!r} task, not a background tool's")
    if not msg.task_token:
        raise InvalidMessage(
            f"the work message of task {msg.task_id} carries no task_token: it cannot complete the task"
        )
    token = msg.task_token
    if not task.token_matches(token):
        logger.info("a stale work message (its start was retried and sent a newer one): nothing to do")
        return
    journal = store.journals.journal(work_journal_id(task.task_id))
    kept, sent = journal.get(WORK_RESULT_KEY), journal.get(WORK_SENT_KEY)
    if kept is None:
        # a task that ended (cancelled, timed out) is not run; one whose own work gave up is (a redrive)
        if (task.outcome is not None or task.status != "running") and not (sent and sent.get("gave_up")):
            logger.info("the task ended before its work began: the tool is not called", extra={"status": task.status})
            return
        if not store.records.claim_task_work(task.task_id, task_token_hash(token)):
            logger.info("another start of this task claimed the work: nothing to do")
            return
        try:
            status, text = call_tool(msg, task, deps, remaining_ms=remaining_ms)
        except AgentwakeError as exc:
            if not exc.retryable or receive_count < deps.settings.max_receive_count:
                raise
            # the last receive: the task ends truthfully before SQS dead-letters the record
            reason = f"{exc} (after {receive_count} attempts)"
            if _complete(tasks, task, "failed", redact(reason), token):
                journal.put(WORK_SENT_KEY, {"status": "failed", "gave_up": True})
            raise
        kept = {"status": status, "text": text}
        journal.put(WORK_RESULT_KEY, kept)  # before the completion: a retry sends this, never calls again
    elif sent is not None:
        logger.info("the task's completion was sent already: nothing to do")
        return
    status = "succeeded" if kept.get("status") == "succeeded" else "failed"
    if not _complete(tasks, task, status, str(kept.get("text", "")), token):
        journal.put(WORK_SENT_KEY, {"status": "late"})
        return
    journal.put(WORK_SENT_KEY, {"status": status})
    logger.info("background tool completed its task", extra={"status": status, "tool": task.tool_name})


def _complete(tasks: TasksService, task: Task, status: Status, text: str, token: str) -> bool:
    """Complete the task through the one finish path; False when it had ended meanwhile (cancelled,
    timed out): the completion was counted as late and changes nothing, the record is done."""
    from agentwake.errors import TaskAlreadyEnded

    try:
        tasks.finish_task(task.task_id, status, text, task_token=token, summary_name=task.tool_name)
    except TaskAlreadyEnded as exc:
        logger.info(
            "the task ended while its work ran: the completion is late", extra={"reason": redact(str(exc))[:300]}
        )
        return False
    return True


def call_tool(msg: WorkMessage, task: Task, deps: WakeDeps, *, remaining_ms: int | None) -> tuple[Status, str]:
    """Call the session's tool ``msg.name`` with the message's arguments, by the function's deadline:
    ``(status, text)``, the text the output (``succeeded``) or the reason (``failed``). Raises a
    retryable AgentwakeError where the outcome is not known (the record is retried)."""
    from agentwake.agent.tools import ToolRegistry
    from agentwake.agent.tools.config import build_tools
    from agentwake.deadline import deadline_after, run_deadline
    from agentwake.domain.conversation import ToolCall
    from agentwake.errors import StepInterrupted

    session = deps.store.records.get_session(task.session_id)
    if session is None:
        return (
            "failed",
            f"session {task.session_id} has no config any more: background tool {msg.name!r} was not called",
        )
    specs = [s for s in session.tools if isinstance(s, dict) and s.get("name") == msg.name]
    if not specs:
        return "failed", f"session {task.session_id} no longer declares tool {msg.name!r}: it was not called"
    try:
        registry = ToolRegistry(build_tools(specs, session_id=session.session_id, run_background=True))
    except ConfigError as exc:
        return "failed", f"tool {msg.name!r} could not be built: {redact(str(exc))}"
    margin = deps.settings.run_timeout_margin_ms
    deadline = deadline_after(remaining_ms, margin)
    call = ToolCall(id=f"work-{task.task_id}", name=msg.name, arguments=json.dumps(msg.args, ensure_ascii=False))
    ctx = tool_context(task, session)
    started = time.monotonic()
    with run_deadline(deadline):
        try:
            outcome: ToolOutcome | None = _within(registry.call, call, ctx, deadline)
        except (OutboundRefused, SecretRefRefused) as exc:
            return "failed", f"refused: tool {msg.name!r} was not called: {redact(str(exc))}"
        except DeadlineExceeded as exc:
            outcome = None
            logger.info("a background tool ran out of the function's time", extra={"detail": redact(str(exc))[:200]})
        except StepInterrupted as exc:  # e.g. a side-effecting call that may have acted: same key again
            raise ToolWorkUnfinished(f"background tool {msg.name!r} did not finish: {exc}") from exc
    if outcome is None:
        took = round(time.monotonic() - started)
        return "failed", f"timed out: tool {msg.name!r} did not finish within the {took} s the function had left"
    if outcome.ok:
        return "succeeded", truncate(outcome.text, MAX_TEXT_CHARS)
    if isinstance(outcome.error, TimeoutError):
        return "failed", f"timed out: {redact(str(outcome.error))}"
    return "failed", truncate(outcome.text, MAX_TEXT_CHARS)


def tool_context(task: Task, session: SessionConfig) -> ToolContext:
    """The call's context: the run and call that started the task (a side-effecting tool is sent the
    idempotency key that call would have carried), or the task's work journal for the product's start."""
    from agentwake.agent.tools import ToolContext

    run_id, step, index = work_journal_id(task.task_id), 0, 0
    if task.started_by_call:
        head, _, rest = task.started_by_call.partition("#")
        parts = rest.split("#")
        if head and len(parts) == 2 and all(p.isdigit() for p in parts):
            run_id, step, index = head, int(parts[0]), int(parts[1])
    return ToolContext(run_id=run_id, session_id=task.session_id, role=session.role, step=step, call_index=index)


def _within(
    fn: Callable[[ToolCall, ToolContext], ToolOutcome], call: ToolCall, ctx: ToolContext, deadline: float | None
) -> ToolOutcome | None:
    """``fn(call, ctx)`` in a worker thread, waited for until ``deadline`` (``time.monotonic()``):
    None if it has not returned by then (a Python tool that ignores the deadline; the thread is left
    to the process). What it raises is raised here."""
    if deadline is None:
        return fn(call, ctx)
    box: list[ToolOutcome | BaseException] = []

    def target() -> None:
        try:
            box.append(fn(call, ctx))
        except BaseException as exc:  # noqa: BLE001 -- handed to the caller's thread as it was
            box.append(exc)

    worker = threading.Thread(target=contextvars.copy_context().run, args=(target,), daemon=True)
    worker.start()
    worker.join(max(0.0, deadline - time.monotonic()))
    if not box:
        return None
    value = box[0]
    if isinstance(value, BaseException):
        raise value
    return value
