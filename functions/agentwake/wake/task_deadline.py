"""Every task ends: a task with no outcome by its deadline is completed ``failed`` (timed out), once.

Registering a task sends a ``deadline`` WorkMessage to the background-work queue, visible after
min(900 s, the time left) (``TasksService.send_deadline_check``): SQS delays a message at most 15
minutes, so a check that comes before the deadline sends itself again with the next delay. Each check
first takes its place in the task's one chain (``Task.deadline_check``: a conditional write from the
check that sent it to itself), so when SQS delivers a check twice, or a check crashed after its send
and its retry sent another, one successor takes the place and the others retire. Once due,
``check_deadline`` completes the task through the one finish path (``TasksService.complete``): the
outcome is claimed with a conditional write first, so a real completion racing the deadline — in
either order — leaves one outcome and one wake. A task that already has its outcome (completed,
cancelled) is left as it is.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from agentwake.domain.models import Task, task_token_hash
from agentwake.domain.task_outcome import timed_out_reason
from agentwake.errors import ConfigError, TaskAlreadyEnded
from agentwake.observability import logger
from agentwake.wake.messages import WorkMessage

if TYPE_CHECKING:
    from agentwake.wake.spec import WakeDeps


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def deadline_seconds(task: Task) -> int:
    """The task's deadline as a duration from its registration (the timed-out reason names it)."""
    assert task.deadline_at is not None
    return max(0, round(_epoch(task.deadline_at) - _epoch(task.created_at)))


def check_deadline(msg: WorkMessage, deps: WakeDeps, *, remaining_ms: int | None, receive_count: int) -> None:
    """Check one task's deadline (a ``deadline`` WorkMessage): not yet due → the check is sent again
    with the next delay; due with no outcome → the task is completed ``failed`` "timed out: no
    completion within N s" (claimed first: exactly once, whoever races it); otherwise nothing.

    A failed send raises (retryable: the record is retried, and the claim, already made, is sent
    again); the check itself raises nothing permanent."""
    logger.thread_safe_append_keys(task_id=msg.task_id, session_id=msg.session_id)
    task = deps.store.records.get_task(msg.task_id)
    if task is None:
        logger.info("deadline check of a task that is not registered: nothing to do")
        return
    if not msg.task_token or not task.token_matches(msg.task_token):
        # the work queue is agentwake's own: a check with another token is one a retried start
        # superseded (it gave the task a new token and sent its own check), never a completion
        logger.info("a deadline check with an older token of its task retires; the newer check stands")
        return
    if task.deadline_at is None:  # the task's deadline, never the message's
        return
    tasks = deps.tasks
    if tasks is None:
        raise ConfigError("this function has no tasks service (AGENTWAKE_WORK_QUEUE_URL): cannot check a deadline")
    if task.outcome is not None:
        if task.timed_out_at is not None and task.status == "running":
            # this check claimed the timeout, then failed before its completion was sent: send it
            _time_out(tasks, task, msg.task_token)
        return
    now = deps.clock.wall()
    if _epoch(task.deadline_at) > now:
        if msg.check_id is not None and not _live(msg, task, deps):
            logger.info("a deadline check another check of its task took the place of retires (one chain)")
            return
        tasks.send_deadline_check(task, msg.task_token, now=now, after=msg.check_id)
        return
    # due: any check with the task's token may end it (the outcome's claim is the conditional write)
    _time_out(tasks, task, msg.task_token)


def _live(msg: WorkMessage, task: Task, deps: WakeDeps) -> bool:
    """The check takes its place in the task's one chain: it follows the check that sent it
    (``after``), or is this check already (a redelivered or retried copy, which sends its successor
    again if the first copy crashed before; the successors then race for the place the same way)."""
    assert msg.check_id is not None and msg.task_token is not None
    if task.deadline_check == msg.check_id:
        return True
    return deps.store.records.claim_deadline_check(
        task.task_id, token_sha256=task_token_hash(msg.task_token), after=msg.after_check, check=msg.check_id
    )


def _time_out(tasks: Any, task: Task, token: str) -> None:
    try:
        tasks.complete(task, "failed", timed_out_reason(deadline_seconds(task)), task_token=token, by="deadline")
    except TaskAlreadyEnded:
        logger.info("the task ended before its deadline was claimed: nothing to do")
        return
    logger.info("task timed out: completed failed", extra={"task_id": task.task_id})
