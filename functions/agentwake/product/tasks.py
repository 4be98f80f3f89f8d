"""Tasks API (plain Python) for producers: register a background task when it starts, and send
its completion message when it finishes. The message wakes the agent (run ``bg:{task_id}``).

The producer contract (a capability, like Step Functions task tokens):

1. ``register_task`` returns the task id **and a secret task token**. agentwake stores only the
   token's SHA-256; keep the token with the work (never log it), it is shown once.
2. The completion message must carry it as ``task_token``. A message without it, or with another
   task's, is a ``ForgedCompletion``: dead-lettered at once, the task untouched, so the genuine
   completion still wakes the agent. Anyone who can send to the queue but does not hold the
   token cannot complete (or pre-empt) a task.
3. The wake shows the agent the tool name and arguments that were *registered*; a message's own
   ``tool_name``/``tool_args`` are ignored.
"""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from agentwake.domain.models import Task, TaskKind, task_token_hash
from agentwake.errors import ForgedCompletion, UnknownTask
from agentwake.store.dynamo import DynamoStore
from agentwake.wake.messages import BackgroundResultMessage

if TYPE_CHECKING:
    from agentwake.store.port import WorkQueuePort


def new_task_token() -> str:
    """A fresh task token: 256 random bits, URL-safe."""
    return "awt_" + secrets.token_urlsafe(32)


@dataclass(frozen=True)
class RegisteredTask:
    """What ``register_task`` returns. ``task_token`` is shown once: keep it to finish the task."""

    task_id: str
    task_token: str
    #: the task as registered
    task: Task | None = field(default=None, compare=False)

    def __repr__(self) -> str:  # the token is a secret: never in a repr or a log line
        return f"RegisteredTask(task_id={self.task_id!r}, task_token='…')"


class TasksService:
    def __init__(
        self, store: DynamoStore, queue_url: str | None, *, sqs: Any = None, work_queue: WorkQueuePort | None = None
    ) -> None:
        self.store = store
        self.queue_url = queue_url
        self._sqs = sqs
        #: where agentwake's own work for a task is sent (``wake.start_task``); None: nowhere
        self.work_queue = work_queue

    @property
    def sqs(self) -> Any:
        """The result queue's SQS client, made on first use (a wake that only starts a task needs none)."""
        if self._sqs is None:
            from agentwake.store.aws import client

            self._sqs = client("sqs")
        return self._sqs

    def register_task(
        self,
        session_id: str,
        tool_name: str,
        args: dict[str, Any] | None = None,
        *,
        task_id: str | None = None,
        kind: TaskKind = "producer",
        started_by: str | None = None,
        started_by_call: str | None = None,
        subagent: str | None = None,
        deadline_at: str | None = None,
    ) -> RegisteredTask:
        """Register a task; returns its id and its token (stored only as a hash: keep it).

        ``kind``, ``started_by``, ``started_by_call``, ``subagent``, ``deadline_at``: a task agentwake
        runs itself (``wake.start_task``); a producer's task leaves them out."""
        import re

        from agentwake.errors import InvalidMessage
        from agentwake.wake.messages import ID_PATTERN

        for what, value in (("session id", session_id), ("task id", task_id)):
            # the completion message would be refused: the task could only get stuck in `running`
            if value is not None and not re.fullmatch(ID_PATTERN, value):
                raise InvalidMessage(f"invalid {what} {value!r}: the completion message requires {ID_PATTERN}")
        token = new_task_token()
        task = Task(
            task_id=task_id or f"task-{uuid.uuid4().hex[:16]}",
            session_id=session_id,
            tool_name=tool_name,
            tool_args=args or {},
            token_sha256=task_token_hash(token),
            kind=kind,
            started_by=started_by,
            started_by_call=started_by_call,
            subagent=subagent,
            deadline_at=deadline_at,
        )
        self.store.records.put_task(task)
        return RegisteredTask(task_id=task.task_id, task_token=token, task=task)

    def finish_task(
        self,
        task_id: str,
        status: Literal["succeeded", "failed"],
        result_text: str,
        *,
        task_token: str,
        summary_name: str | None = None,
        note: str = "",
        subagent_name: str | None = None,
    ) -> str:
        """Send the completion message carrying ``task_token``; returns the SQS message id."""
        if not self.queue_url:
            raise ValueError("the background-result queue URL is unknown (AGENTWAKE_RESULT_QUEUE_URL)")
        task = self.store.records.get_task(task_id)
        if task is None:
            raise UnknownTask(f"no task is registered with id {task_id!r}")
        if not task.token_matches(task_token):
            raise ForgedCompletion(f"that is not the task token of {task_id}: nothing was sent")
        finished_at = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        msg = BackgroundResultMessage(
            task_id=task.task_id,
            session_id=task.session_id,
            task_token=task_token,
            status=status,
            result_text=result_text,
            note=note,
            summary_name=summary_name or task.tool_name,
            finished_at=finished_at,
            subagent_name=subagent_name,
        )
        resp = self.sqs.send_message(QueueUrl=self.queue_url, MessageBody=msg.model_dump_json())
        # after the send: the wake may already have moved the task on, which this must not undo
        self.store.records.mark_task_finished(task_id, finished_at)
        return str(resp["MessageId"])
