"""Every task ends: a task with no outcome by its deadline is completed ``failed`` (timed out), once.

Registering a task sends a ``deadline`` WorkMessage to the background-work queue, visible after
min(900 s, the time left) (``send_deadline_check``): SQS delays a message at most 15 minutes, so a
check that comes before the deadline sends itself again with the next delay. Once due,
``check_deadline`` completes the task through the one finish path (``TasksService.complete``): the
outcome is claimed with a conditional write first, so a real completion racing the deadline — in
either order — leaves one outcome and one wake. A task that already has its outcome (completed,
cancelled) is left as it is.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from agentwake.domain.models import Task
from agentwake.domain.task_outcome import timed_out_reason
from agentwake.errors import ConfigError, ForgedCompletion, TaskAlreadyEnded
from agentwake.observability import logger
from agentwake.wake.messages import WorkMessage

if TYPE_CHECKING:
    from agentwake.wake.spec import WakeDeps

#: SQS's largest DelaySeconds
MAX_DELAY_S = 900


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def deadline_delay_s(deadline_at: str, now: float) -> int:
    """How long the next check waits: until the deadline, at most SQS's 900 s."""
    return max(0, min(MAX_DELAY_S, math.ceil(_epoch(deadline_at) - now)))


def send_deadline_check(sqs: Any, queue_url: str, task: Task, token: str, *, now: float | None = None) -> str:
    """Send the task's deadline check to the work queue (agentwake's own queue: it carries the task
    token the timed-out completion needs). Returns the SQS message id; raises if the send fails."""
    if task.deadline_at is None:
        raise ValueError(f"task {task.task_id} has no deadline to check")
    msg = WorkMessage(
        kind="deadline",
        task_id=task.task_id,
        session_id=task.session_id,
        task_token=token,
        started_by=task.started_by,
        deadline_at=task.deadline_at,
    )
    delay = deadline_delay_s(task.deadline_at, datetime.now(UTC).timestamp() if now is None else now)
    resp = sqs.send_message(QueueUrl=queue_url, MessageBody=msg.model_dump_json(), DelaySeconds=delay)
    return str(resp["MessageId"])


def deadline_seconds(task: Task) -> int:
    """The task's deadline as a duration from its registration (the timed-out reason names it)."""
    assert task.deadline_at is not None
    return max(0, round(_epoch(task.deadline_at) - _epoch(task.created_at)))


def check_deadline(msg: WorkMessage, deps: WakeDeps, *, remaining_ms: int | None, receive_count: int) -> None:
    """Check one task's deadline (a ``deadline`` WorkMessage): not yet due → the check is sent again
    with the next delay; due with no outcome → the task is completed ``failed`` "timed out: no
    completion within N s" (claimed first: exactly once, whoever races it); otherwise nothing.

    Raises ForgedCompletion (permanent: dead-lettered) for a token that is not the task's; a failed
    send raises (retryable: the record is retried, and the claim, already made, is sent again)."""
    from agentwake.product.tasks import TasksService

    logger.append_keys(task_id=msg.task_id, session_id=msg.session_id)
    task = deps.store.records.get_task(msg.task_id)
    if task is None:
        logger.info("deadline check of a task that is not registered: nothing to do")
        return
    if not msg.task_token or not task.token_matches(msg.task_token):
        raise ForgedCompletion(f"the deadline check of task {msg.task_id} does not carry its token; nothing changed")
    if task.deadline_at is None:  # the task's deadline, never the message's
        return
    settings = deps.settings
    tasks = TasksService(deps.store, settings.result_queue_url, work_queue_url=settings.work_queue_url)
    if task.outcome is not None:
        if task.timed_out_at is not None and task.status == "running":
            # this check claimed the timeout, then failed before its completion was sent: send it
            _time_out(tasks, task, msg.task_token)
        return
    now = deps.clock.wall()
    if _epoch(task.deadline_at) > now:
        if not settings.work_queue_url:
            raise ConfigError("AGENTWAKE_WORK_QUEUE_URL is not set: cannot check a task's deadline later")
        send_deadline_check(tasks.sqs, settings.work_queue_url, task, msg.task_token, now=now)
        return
    _time_out(tasks, task, msg.task_token)


def _time_out(tasks: Any, task: Task, token: str) -> None:
    try:
        tasks.complete(task, "failed", timed_out_reason(deadline_seconds(task)), task_token=token, by="deadline")
    except TaskAlreadyEnded:
        logger.info("the task ended before its deadline was claimed: nothing to do")
        return
    logger.info("task timed out: completed failed", extra={"task_id": task.task_id})
