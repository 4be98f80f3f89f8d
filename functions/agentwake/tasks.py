"""Tasks API (plain Python) for producers: register a background task when it starts, and send
its completion message when it finishes. The message wakes the agent (run ``bg:{task_id}``)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, Literal

from agentwake.errors import UnknownTask
from agentwake.store.dynamo import DynamoStore
from agentwake.store.models import Task
from agentwake.wake.messages import BackgroundResultMessage


class TasksService:
    def __init__(self, store: DynamoStore, queue_url: str | None, *, sqs: Any = None) -> None:
        if sqs is None:
            from agentwake.store.aws import client

            sqs = client("sqs")
        self.store = store
        self.queue_url = queue_url
        self.sqs = sqs

    def register_task(
        self, session_id: str, tool_name: str, args: dict[str, Any] | None = None, *, task_id: str | None = None
    ) -> str:
        import re

        from agentwake.errors import InvalidMessage
        from agentwake.wake.messages import ID_PATTERN

        for what, value in (("session id", session_id), ("task id", task_id)):
            # the completion message would be refused: the task could only get stuck in `running`
            if value is not None and not re.fullmatch(ID_PATTERN, value):
                raise InvalidMessage(f"invalid {what} {value!r}: the completion message requires {ID_PATTERN}")
        task = Task(
            task_id=task_id or f"task-{uuid.uuid4().hex[:16]}",
            session_id=session_id,
            tool_name=tool_name,
            tool_args=args or {},
        )
        self.store.put_task(task)
        return task.task_id

    def finish_task(
        self,
        task_id: str,
        status: Literal["succeeded", "failed"],
        result_text: str,
        *,
        summary_name: str | None = None,
        note: str = "",
        subagent_name: str | None = None,
    ) -> str:
        """Send the completion message; returns the SQS message id."""
        if not self.queue_url:
            raise ValueError("the background-result queue URL is unknown (AGENTWAKE_RESULT_QUEUE_URL)")
        task = self.store.get_task(task_id)
        if task is None:
            raise UnknownTask(f"no task is registered with id {task_id!r}")
        finished_at = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        msg = BackgroundResultMessage(
            task_id=task.task_id,
            session_id=task.session_id,
            tool_name=task.tool_name,
            tool_args=task.tool_args,
            status=status,
            result_text=result_text,
            note=note,
            summary_name=summary_name or task.tool_name,
            finished_at=finished_at,
            subagent_name=subagent_name,
        )
        resp = self.sqs.send_message(QueueUrl=self.queue_url, MessageBody=msg.model_dump_json())
        # after the send: the wake may already have moved the task on, which this must not undo
        self.store.mark_task_finished(task_id, finished_at)
        return str(resp["MessageId"])
