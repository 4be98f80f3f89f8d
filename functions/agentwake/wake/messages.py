"""The inputs that wake the agent: a background task's completion message, a cron wake."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agentwake.domain.models import background_run_id, cron_run_id
from agentwake.errors import InvalidMessage, describe_validation_error

#: SQS allows 256 KiB per message; result text may use most of it
MAX_RESULT_CHARS = 200_000
#: deeper JSON than this is not a result message (and would exhaust the parser's recursion)
MAX_DEPTH = 32
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$"


class BackgroundResultMessage(BaseModel):
    """What a producer sends when a background task finishes (``finish_task`` builds it).

    ``task_token`` is the token ``register_task`` returned: without it (or with another task's)
    the message is a ``ForgedCompletion``. ``tool_name``/``tool_args`` are accepted for older
    producers but never used: the wake shows the agent what was registered.
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    task_id: str = Field(pattern=ID_PATTERN)
    session_id: str = Field(pattern=ID_PATTERN)
    task_token: str | None = Field(default=None, max_length=256)
    tool_name: str | None = Field(default=None, min_length=1, max_length=128)
    tool_args: dict[str, Any] = {}
    status: Literal["succeeded", "failed"]
    result_text: str = Field(max_length=MAX_RESULT_CHARS)
    note: str = Field(default="", max_length=4000)
    summary_name: str | None = Field(default=None, min_length=1, max_length=256)
    finished_at: str = Field(max_length=64)
    subagent_name: str | None = Field(default=None, max_length=128)
    #: which outcome of the task this is (2: its work failed, was redriven and then succeeded);
    #: each outcome wakes its own run (``background_run_id``)
    outcome: int = Field(default=1, ge=1, le=100)

    @property
    def run_id(self) -> str:
        return background_run_id(self.task_id, self.outcome)

    @classmethod
    def parse_body(cls, body: str | None) -> BackgroundResultMessage:
        """Parse an SQS body; anything wrong is an InvalidMessage saying what."""
        data = json_object(body)
        try:
            msg = cls.model_validate(data)
        except ValidationError as exc:
            problems = describe_validation_error(exc, whole="(body)")
            raise InvalidMessage(f"the message is not a valid background result: {problems}") from exc
        try:
            datetime.fromisoformat(msg.finished_at.replace("Z", "+00:00"))
        except ValueError as exc:
            raise InvalidMessage(f"finished_at is not an ISO-8601 time: {msg.finished_at!r}") from exc
        return msg


def json_object(body: str | None) -> dict[str, Any]:
    """The JSON object an SQS body holds, checked the one way every message of agentwake's queues is:
    not empty, valid UTF-8 and JSON, an object, at most MAX_DEPTH deep, no lone surrogate. Anything
    wrong is an InvalidMessage saying what."""
    if body is None or not body.strip():
        raise InvalidMessage("the message body is empty")
    try:
        body.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidMessage(f"the message body is not valid UTF-8 (at character {exc.start})") from exc
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        raise InvalidMessage(f"the message body is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise InvalidMessage(f"the message body nests deeper than {MAX_DEPTH} levels") from exc
    except ValueError as exc:  # e.g. an integer longer than Python's int_max_str_digits
        raise InvalidMessage(f"the message body is not acceptable JSON: {str(exc)[:200]}") from exc
    if not isinstance(data, dict):
        raise InvalidMessage(f"the message body must be a JSON object, got {type(data).__name__}")
    if _depth(data) > MAX_DEPTH:
        raise InvalidMessage(f"the message body nests deeper than {MAX_DEPTH} levels")
    try:
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidMessage("the message body contains a lone surrogate (\\ud800-\\udfff): not valid Unicode") from exc
    return data


def _depth(data: object) -> int:
    """How deeply ``data`` nests (iterative: no recursion to exhaust)."""
    deepest = 0
    stack: list[tuple[object, int]] = [(data, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > deepest:
            deepest = depth
            if deepest > MAX_DEPTH:
                return deepest
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return deepest


class CronWakeInput(BaseModel):
    """The EventBridge Scheduler input: ``{"job_id": ..., "scheduled_time": <aws.scheduler.scheduled-time>,
    "session_id": ...}``. ``session_id`` only lets the wake read the session config in its first
    batch read; the job item stays the authority on which session the job belongs to."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    job_id: str = Field(pattern=ID_PATTERN)
    scheduled_time: str = Field(min_length=1, max_length=64)
    session_id: str | None = Field(default=None, pattern=ID_PATTERN)

    @property
    def run_id(self) -> str:
        return cron_run_id(self.job_id, self.scheduled_time)


class WorkMessage(BaseModel):
    """What the background-work queue carries to ``BackgroundWorkFunction``: run a background tool or
    a background subagent for task ``task_id`` (then complete the task truthfully with its token), or
    check the task's deadline (``deadline``: complete it ``failed``, timed out, if it has no outcome
    by then; re-sent with a delay until the deadline is reached)."""

    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)  # built by the work function, not a wake

    kind: Literal["tool", "subagent", "deadline", "approval"]
    #: required for every kind but ``approval``
    task_id: str = Field(default="", pattern=ID_PATTERN)
    session_id: str = Field(pattern=ID_PATTERN)
    #: the task's token (the work queue is agentwake's own: only its functions send to it)
    task_token: str | None = Field(default=None, max_length=256)
    #: the tool's or the subagent's name (as in the session's config) and the call's arguments
    name: str | None = Field(default=None, max_length=128)
    args: dict[str, Any] = {}
    #: the run that started it (None: the product API)
    started_by: str | None = Field(default=None, max_length=512)
    deadline_at: str | None = Field(default=None, max_length=64)
    #: a deadline check's own id, and the check that sent it (None: the first of its chain);
    #: ``Task.deadline_check`` names the check that holds the chain's place
    check_id: str | None = Field(default=None, pattern=ID_PATTERN)
    after_check: str | None = Field(default=None, pattern=ID_PATTERN)
    #: an approval's check (``wake.approval_check``): the request it is about, and whether it is
    #: the decision's nudge (sent once, never re-sent) rather than a check of the expiry chain
    approval_id: str | None = Field(default=None, pattern=ID_PATTERN)
    nudge: bool = False

    @model_validator(mode="after")
    def _names_its_subject(self) -> WorkMessage:
        if self.kind == "approval" and not self.approval_id:
            raise ValueError("an approval check names its approval_id")
        if self.kind != "approval" and not self.task_id:
            raise ValueError(f"{self.kind} work names its task_id")
        return self

    @classmethod
    def parse_body(cls, body: str | None) -> WorkMessage:
        """Parse an SQS body of the work queue (checked as every queue's: ``json_object``)."""
        data = json_object(body)
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            problems = describe_validation_error(exc, whole="(body)")
            raise InvalidMessage(f"the message is not a valid background-work message: {problems}") from exc
