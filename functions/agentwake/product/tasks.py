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

from agentwake.domain.models import DEFAULT_TASK_DEADLINE_S, Task, TaskKind, task_token_hash, truncate
from agentwake.domain.task_outcome import Again, Late, judge
from agentwake.errors import ForgedCompletion, TaskAlreadyEnded, TaskClaimContended, UnknownTask
from agentwake.observability import logger
from agentwake.wake.messages import MAX_RESULT_CHARS, BackgroundResultMessage

if TYPE_CHECKING:
    from agentwake.store.port import Store
    from agentwake.store.port_queues import WorkQueuePort


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
        self, store: Store, queue_url: str | None, *, sqs: Any = None, work_queue: WorkQueuePort | None = None
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
        deadline_s: int | None = None,
    ) -> RegisteredTask:
        """Register a task; returns its id and its token (stored only as a hash: keep it).

        ``kind``, ``started_by``, ``started_by_call``, ``subagent``: a task agentwake runs itself
        (``wake.start_task``); a producer's task leaves them out. Every task ends: it is completed
        ``failed`` (timed out) if no completion came by ``deadline_at``, or ``deadline_s`` from now
        (default: the session's ``task_deadline_s``). Its deadline check is sent to the work queue
        before the task is written, so that no task exists without one (``wake.task_deadline``)."""
        import re

        from agentwake.errors import InvalidMessage
        from agentwake.wake.messages import ID_PATTERN

        for what, value in (("session id", session_id), ("task id", task_id)):
            # the completion message would be refused: the task could only get stuck in `running`
            if value is not None and not re.fullmatch(ID_PATTERN, value):
                raise InvalidMessage(f"invalid {what} {value!r}: the completion message requires {ID_PATTERN}")
        if deadline_s is not None and not MIN_DEADLINE_S <= deadline_s <= MAX_DEADLINE_S:
            raise InvalidMessage(f"deadline must be {MIN_DEADLINE_S}-{MAX_DEADLINE_S} seconds, not {deadline_s}")
        token = new_task_token()
        now = datetime.now(UTC)
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
            created_at=_iso(now),
            deadline_at=deadline_at or _deadline_at(deadline_s or self._session_deadline_s(session_id), now=now),
        )
        if self.work_queue is not None and self.work_queue.url:
            self.send_deadline_check(task, token)
        else:
            logger.warning("no work queue (AGENTWAKE_WORK_QUEUE_URL): this task's deadline is not enforced")
        self.store.records.put_task(task)
        return RegisteredTask(task_id=task.task_id, task_token=token, task=task)

    def send_deadline_check(self, task: Task, token: str, *, now: float | None = None, after: str | None = None) -> str:
        """Send the task's deadline check to the work queue (``wake.task_deadline.check_deadline``),
        visible after min(900 s, the time left); returns the check's id. It carries the task token the
        timed-out completion needs (the work queue is agentwake's own), and ``after``, the check that
        sent it (None: the first of the chain). A start that gives its task a new token (a retried
        start, ``wake.start_task``) sends a new first check with it: one carrying an older token retires."""
        from agentwake.wake.messages import WorkMessage

        if self.work_queue is None or task.deadline_at is None:
            raise ValueError(f"task {task.task_id}: no work queue, or no deadline to check")
        check_id = f"chk-{uuid.uuid4().hex[:16]}"
        msg = WorkMessage(
            kind="deadline",
            task_id=task.task_id,
            session_id=task.session_id,
            task_token=token,
            started_by=task.started_by,
            deadline_at=task.deadline_at,
            check_id=check_id,
            after_check=after,
        )
        self.work_queue.send(msg.model_dump_json(), delay_s=deadline_delay_s(task.deadline_at, now))
        return check_id

    def _session_deadline_s(self, session_id: str) -> int:
        config = self.store.records.get_session(session_id)
        return config.task_deadline_s if config is not None else DEFAULT_TASK_DEADLINE_S

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
        """Claim the task's outcome, then send the completion message carrying ``task_token``; returns
        the SQS message id. A task that already ended otherwise (cancelled, timed out, the other
        outcome) raises TaskAlreadyEnded: nothing sent, the completion counted as late."""
        task = self.store.records.get_task(task_id)
        if task is None:
            raise UnknownTask(f"no task is registered with id {task_id!r}")
        if not task.token_matches(task_token):
            raise ForgedCompletion(f"that is not the task token of {task_id}: nothing was sent")
        return self.complete(
            task,
            status,
            result_text,
            task_token=task_token,
            by="completion",
            summary_name=summary_name,
            note=note,
            subagent_name=subagent_name,
        )

    def complete(
        self,
        task: Task,
        status: Literal["succeeded", "failed"],
        result_text: str,
        *,
        task_token: str,
        by: Literal["completion", "deadline"],
        summary_name: str | None = None,
        note: str = "",
        subagent_name: str | None = None,
    ) -> str:
        """The one finish path (a completion, the deadline): claim the outcome with a conditional write
        (domain.task_outcome), then send; the token is checked by the caller."""
        if not self.queue_url:
            raise ValueError("the background-result queue URL is unknown (AGENTWAKE_RESULT_QUEUE_URL)")
        finished_at = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        # the message is built, and fitted to SQS's 256 KiB, before the outcome is claimed: a claim
        # whose message could never be sent would leave the task with an outcome and no wake
        msg = _fitted(
            BackgroundResultMessage(
                task_id=task.task_id,
                session_id=task.session_id,
                task_token=task_token,
                status=status,
                result_text=truncate(result_text, MAX_RESULT_CHARS - 100),  # room for the cut's marker
                note=note,
                summary_name=summary_name or task.tool_name,
                finished_at=finished_at,
                subagent_name=subagent_name,
            )
        )
        for _ in range(3):  # a lost claim is judged again on the task as it is now
            verdict = judge(task, status, by=by)
            if isinstance(verdict, Late):
                if by == "completion":
                    self.store.records.count_late_completion(task.task_id)
                    logger.info("a late completion changed nothing", extra={"task_id": task.task_id})
                raise TaskAlreadyEnded(f"{verdict.reason}: this completion changed nothing and nothing was sent")
            if isinstance(verdict, Again) or self.store.records.claim_task_outcome(
                task.task_id,
                number=verdict.number,
                outcome=status,
                reason=None if status == "succeeded" else truncate(result_text, 2000),
                at=finished_at,
                by=by,
            ):
                break
            again = self.store.records.get_task(task.task_id)
            if again is None:
                raise UnknownTask(f"no task is registered with id {task.task_id!r}")
            task = again
        else:  # pragma: no cover - three claims lost in a row: let the caller retry
            raise TaskClaimContended(f"the outcome of task {task.task_id} is contended; try again")
        msg = msg.model_copy(update={"outcome": verdict.number})
        resp = self.sqs.send_message(QueueUrl=self.queue_url, MessageBody=msg.model_dump_json())
        # after the send: the wake may already have moved the task on, which this must not undo
        self.store.records.mark_task_finished(task.task_id, finished_at)
        return str(resp["MessageId"])

    def get_task(self, task_id: str) -> Task | None:
        return self.store.records.get_task(task_id)

    def cancel_task(self, task_id: str, *, by: str) -> Task:
        """Cancel a task that has no outcome yet: its outcome is ``failed`` (cancelled by ``by``), its
        status ``cancelled``, and it never wakes the agent (docs/durability.md). Idempotent: a task
        already cancelled is returned as it is. A task that already completed (or timed out) raises
        TaskAlreadyEnded, nothing changed. A completion that arrives later is counted as late."""
        task = self.store.records.get_task(task_id)
        for _ in range(3):
            if task is None:
                raise UnknownTask(f"no task is registered with id {task_id!r}")
            verdict = judge(task, "failed", by="cancel")
            if isinstance(verdict, Late):
                raise TaskAlreadyEnded(f"{verdict.reason}: it cannot be cancelled; nothing changed")
            if isinstance(verdict, Again):
                return task
            at = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
            reason = f"cancelled by {truncate(by, 200)}"
            if self.store.records.claim_task_outcome(
                task_id, number=1, outcome="failed", reason=reason, at=at, by="cancel"
            ):
                logger.info("task cancelled", extra={"task_id": task_id})
                return task.model_copy(
                    update={
                        "status": "cancelled",
                        "outcome": "failed",
                        "outcome_reason": reason,
                        "outcomes": 1,
                        "cancelled_at": at,
                        "finished_at": at,
                    }
                )
            task = self.store.records.get_task(task_id)
        raise TaskClaimContended(f"the outcome of task {task_id} is contended; try again")  # pragma: no cover


#: a task's own deadline (``deadline_s``) may be this short or this long
MIN_DEADLINE_S = 60
MAX_DEADLINE_S = 7 * 86_400


def _deadline_at(deadline_s: int, *, now: datetime | None = None) -> str:
    """The ISO UTC time ``deadline_s`` after ``now`` (a task's ``created_at``)."""
    from datetime import timedelta

    return _iso((now or datetime.now(UTC)) + timedelta(seconds=deadline_s))


def deadline_delay_s(deadline_at: str, now: float | None = None) -> int:
    """How long a deadline check waits: until the deadline, at most SQS's 900 s."""
    import math

    from agentwake.store.queues import MAX_DELAY_SECONDS

    due = datetime.fromisoformat(deadline_at.replace("Z", "+00:00")).timestamp()
    left = due - (datetime.now(UTC).timestamp() if now is None else now)
    return max(0, min(MAX_DELAY_SECONDS, math.ceil(left)))


def _iso(at: datetime) -> str:
    """As ``utcnow_iso`` writes times: microseconds, Z."""
    return at.isoformat(timespec="microseconds").replace("+00:00", "Z")


def _fitted(msg: BackgroundResultMessage) -> BackgroundResultMessage:
    """``msg`` with its result text cut (with the visible marker) until the message fits in one SQS
    message: 200,000 characters of text written as ``\\u`` escapes or 4-byte characters would not."""
    from agentwake.store.queues import SQS_MAX_MESSAGE_BYTES

    room = SQS_MAX_MESSAGE_BYTES - 16 * 1024  # the outcome number, the attributes SQS counts (moto: 248 KiB)
    size = len(msg.model_dump_json().encode())
    while size > room and msg.result_text:
        keep = max(1000, len(msg.result_text) * room // size - 200)
        if keep >= len(msg.result_text):
            break  # the text is not what makes it too large: the send says so
        msg = msg.model_copy(update={"result_text": truncate(msg.result_text, keep)})
        size = len(msg.model_dump_json().encode())
        logger.info("a completion's result text was cut to fit one SQS message", extra={"chars": keep})
    return msg
