"""One record of the background-work queue: parse the ``WorkMessage``, run it by its kind.

- ``tool``: ``wake.work_tool.run_tool_work`` calls a background tool and completes its task.
- ``subagent``: ``wake.subagent.run_background_subagent`` runs the subagent's ``sub:{task}`` run.
- ``deadline``: ``wake.task_deadline.check_deadline`` completes a task with no outcome by its deadline.

Each is imported when a record of its kind comes (a deadline check loads no agent). What becomes of
the record: ``Done`` (the work ran, or had run), a retryable AgentwakeError or a crash raised (the
record alone is a batch item failure: SQS retries it, and after maxReceiveCount moves it to
BackgroundWorkDLQ), or ``DeadLetter`` (no retry can help: a malformed message, a kind this
deployment cannot run) — the handler sends it to BackgroundWorkDLQ at once with its reason, through
the same ``DeadLetter`` as the result function's.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Protocol

from agentwake.errors import AgentwakeError, PermanentInputError
from agentwake.observability import logger
from agentwake.wake.background import DeadLetter, Done
from agentwake.wake.messages import WorkMessage

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

    from agentwake.wake.spec import WakeDeps


class WorkRunner(Protocol):
    """What each kind's module offers: run ``msg``; raise a retryable AgentwakeError to have the
    record retried, a PermanentInputError (or another non-retryable one) to dead-letter it now."""

    def __call__(self, msg: WorkMessage, deps: WakeDeps, *, remaining_ms: int | None, receive_count: int) -> None: ...


#: kind -> (module, function): imported lazily, when a record of that kind comes
ROUTES: dict[str, tuple[str, str]] = {
    "tool": ("agentwake.wake.work_tool", "run_tool_work"),
    "subagent": ("agentwake.wake.subagent", "run_background_subagent"),
    "deadline": ("agentwake.wake.task_deadline", "check_deadline"),
    "approval": ("agentwake.wake.approval_check", "check_approval"),
}


class WorkNotRunnable(PermanentInputError):
    """This deployment has no code for the message's kind of work: no retry of it can help."""


def runner_for(kind: str) -> WorkRunner:
    """The function that runs ``kind`` of work; WorkNotRunnable if this deployment has none."""
    module_name, function = ROUTES[kind]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise  # the module is there but one of its imports is not: a crash, retried
        raise WorkNotRunnable(f"this deployment cannot run {kind!r} work ({module_name} is not installed)") from exc
    runner = getattr(module, function, None)
    if runner is None:
        raise WorkNotRunnable(f"this deployment cannot run {kind!r} work ({module_name}.{function} is missing)")
    return runner  # type: ignore[no-any-return]


def session_of(record: SQSRecord) -> str:
    """The session a work record is for, read by its own parser: its lane in the batch
    (``wake.lanes``). Raises InvalidMessage for a body that does not parse (a lane of its own)."""
    return WorkMessage.parse_body(record.body).session_id


def on_work_record(record: SQSRecord, deps: WakeDeps, *, remaining_ms: int | None) -> Done | DeadLetter:
    """Run one work record. Raises a retryable AgentwakeError or a crash (the record is retried)."""
    receive_count = int(record.attributes.approximate_receive_count or 1)
    try:
        msg = WorkMessage.parse_body(record.body)
        logger.thread_safe_append_keys(task_id=msg.task_id, session_id=msg.session_id, work=msg.kind)
        runner_for(msg.kind)(msg, deps, remaining_ms=remaining_ms, receive_count=receive_count)
    except AgentwakeError as exc:
        if exc.retryable:
            raise
        return DeadLetter(
            body=record.body,
            message_id=record.message_id,
            source=record.event_source_arn,
            receive_count=str(receive_count),
            error_type=exc.error_type,
            reason=str(exc),
            error=exc,
        )
    return Done("succeeded")
