"""The product API's request and response models (``product/api.py``'s routes; the OpenAPI
document ``schemas/product-api.openapi.json`` is generated from them)."""

from __future__ import annotations

from collections.abc import Callable
from copy import copy
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, create_model

from agentwake.delivery.factory import CHANNEL_EXAMPLES, AnySpec
from agentwake.domain.models import SessionConfig
from agentwake.product.sessions import (
    DEFAULT_TURN_TTL_S,
    MAX_APPEND_MESSAGES,
    MAX_CONTENT_CHARS,
    MAX_IDEMPOTENCY_KEY_CHARS,
    MAX_TOKEN_CHARS,
    MAX_TURN_ID_CHARS,
    MAX_TURN_TTL_S,
    MAX_TURN_WAIT_S,
    Role,
)
from agentwake.wake.messages import ID_PATTERN, MAX_RESULT_CHARS


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


#: what a product may set in a session config: every field of ``SessionConfig`` but its id and time,
#: with the same types, bounds and defaults (the config model validates the merged result again)
SESSION_FIELDS = tuple(name for name in SessionConfig.model_fields if name not in ("session_id", "updated_at"))


class _SessionBodyBase(_Body):
    # its validator is built at the first PUT, not at every cold start (create_model: 1 ms CPU, not ~30)
    model_config = ConfigDict(extra="forbid", defer_build=True)


def _field(name: str) -> tuple[Any, Any]:
    info = SessionConfig.model_fields[name]
    if name == "delivery":
        # the config keeps a dict (a wake validates only the spec its session names); the API's body
        # names every channel and route, so the OpenAPI document shows them and a bad spec is a 422
        # that names the one channel its "type" chose
        return AnySpec, Field(
            default_factory=cast(Callable[[], Any], info.default_factory),  # the config's ({"type": "log"})
            discriminator="type",
            description="where the woken agent's messages go: one channel, or a first/each route over up to "
            "four (docs/channels.md)",
            examples=list(CHANNEL_EXAMPLES.values()),
        )
    return info.annotation, copy(info)


SessionBody = create_model(  # type: ignore[call-overload]
    "SessionBody", __base__=_SessionBodyBase, **{name: _field(name) for name in SESSION_FIELDS}
)
#: an admin session's agent may message other sessions: only an operator makes one
ADMIN_BY_OPERATOR = (
    "role admin (its agent may message other sessions) is set only by an operator: agentwake sessions put "
    "SESSION --role admin"
)


class SessionDeleted(BaseModel):
    session_id: str
    deleted_items: int = Field(description="config, history entries and lease removed")


class BeginTurn(_Body):
    ttl_s: float = Field(
        default=DEFAULT_TURN_TTL_S, gt=0, le=MAX_TURN_TTL_S, description="how long the turn holds the session"
    )
    wait_s: float | None = Field(
        default=None, ge=0, le=MAX_TURN_WAIT_S, description="default: the session's live_turn_wait_s"
    )


class Turn(BaseModel):
    turn_id: str
    token: str = Field(description="the turn's proof of holding the session: keep it, never show it")
    expires_at: float = Field(description="epoch seconds")


class RenewTurn(_Body):
    token: str = Field(min_length=1, max_length=MAX_TOKEN_CHARS)
    ttl_s: float = Field(default=DEFAULT_TURN_TTL_S, gt=0, le=MAX_TURN_TTL_S)


class Renewed(BaseModel):
    turn_id: str
    expires_at: float


class Ended(BaseModel):
    turn_id: str
    handed_to: str | None = Field(description="the waiting run the session was handed to, if any")


class LiveMessage(_Body):
    role: Role
    content: str = Field(max_length=MAX_CONTENT_CHARS)


class AppendBody(_Body):
    turn_id: str = Field(min_length=1, max_length=MAX_TURN_ID_CHARS)
    token: str = Field(min_length=1, max_length=MAX_TOKEN_CHARS)
    messages: list[LiveMessage] = Field(min_length=1, max_length=MAX_APPEND_MESSAGES)
    idempotency_key: str = Field(min_length=1, max_length=MAX_IDEMPOTENCY_KEY_CHARS)


class AppendResult(BaseModel):
    written: bool = Field(description="False: a retry of an append already written (nothing written now)")
    entries: int


class Entry(BaseModel):
    kind: str
    role: str
    content: str
    run_id: str | None = None
    delivery_id: str | None = None
    created_at: str


class Conversation(BaseModel):
    entries: list[Entry] = Field(description="newest first")
    cursor: str | None = Field(description="the next (older) page; null at the first entry")


#: a task's own deadline, in seconds (``TasksService.register_task``; the same bounds)
DEADLINE_FIELD = Field(
    default=None,
    ge=60,
    le=7 * 86_400,
    description="seconds until the task is completed failed (timed out) if no completion came; "
    "default: the session's task_deadline_s",
)


class RegisterBody(_Body):
    session_id: str = Field(pattern=ID_PATTERN)
    tool_name: str = Field(min_length=1, max_length=128)
    args: dict[str, Any] = {}
    task_id: str | None = Field(default=None, pattern=ID_PATTERN)
    deadline: int | None = DEADLINE_FIELD


class Registered(BaseModel):
    task_id: str
    task_token: str = Field(description="shown once: send it with the completion")


class TaskStatusOut(BaseModel):
    task_id: str
    tool_name: str
    status: str
    created_at: str
    finished_at: str | None = None
    kind: str = "producer"
    #: its one outcome (and 2 when its work failed, was redriven and then succeeded), when it ends
    outcome: Literal["succeeded", "failed"] | None = None
    outcomes: int = 0
    deadline_at: str | None = None
    cancelled_at: str | None = None
    timed_out_at: str | None = None
    late_completions: int = Field(default=0, description="completions that came after it ended: they changed nothing")
    started_by: str | None = Field(default=None, description="the run that started it (None: the product)")
    session_id: str | None = Field(default=None, description="only to the holder of the task's token")
    args: dict[str, Any] | None = Field(default=None, description="only to the holder of the task's token")


class CompletionBody(_Body):
    task_token: str = Field(min_length=1, max_length=256)
    status: Literal["succeeded", "failed"]
    result_text: str = Field(max_length=MAX_RESULT_CHARS)
    note: str = Field(default="", max_length=4000)
    summary_name: str | None = Field(default=None, min_length=1, max_length=256)
    subagent_name: str | None = Field(default=None, max_length=128)


class Enqueued(BaseModel):
    task_id: str
    message_id: str


class StartBody(_Body):
    """Start one of the session's background tools or subagents (the product's own live agent
    delegating through the same machinery as the woken agent)."""

    kind: Literal["tool", "subagent"]
    name: str = Field(min_length=1, max_length=128, description="the tool's or subagent's name in the session's config")
    args: dict[str, Any] = {}
    task_id: str | None = Field(
        default=None, pattern=ID_PATTERN, description="yours: a repeat of the same start starts nothing new"
    )
    deadline: int | None = DEADLINE_FIELD


class TaskList(BaseModel):
    tasks: list[TaskStatusOut]
    cursor: str | None = Field(default=None, description="the next (older) page; None: no more")


# -- approvals (product/api_approvals.py) -----------------------------------------------------------

#: a decision's reason: at most this many characters (stored redacted)
MAX_REASON_CHARS = 1000


class ApprovalOut(BaseModel):
    """An approval request as its session's owners (or its decision token's holder) see it: what the
    agent wants to do and what became of it. Never its token, nor the copy a resume re-sends."""

    approval_id: str
    session_id: str
    run_id: str
    tool: str
    arguments: Any = Field(
        default=None, description="as a person should see them: redacted, hidden paths shown as …hidden"
    )
    rule: str | None = Field(default=None, description="the condition that asked for approval, in words")
    state: Literal["pending", "approved", "rejected"]
    requested_at: str
    expiry_at: str | None = None
    on_expiry: Literal["approve", "reject"] = "reject"
    deciders: list[str] = []
    decided_by: str | None = None
    decided_via: str | None = Field(
        default=None, description="api-owner, api-token, cli, console, expiry, slack or telegram"
    )
    decided_at: str | None = None
    reason: str | None = None
    expired: bool = False
    resumed_at: str | None = None

    @classmethod
    def of(cls, approval: Any) -> ApprovalOut:
        """From a stored approval (a mapping or a model): only the fields above, so a token's hash or
        the resume copy never leaves."""
        data = approval if isinstance(approval, dict) else approval.model_dump(mode="json")
        return cls.model_validate({name: data[name] for name in cls.model_fields if data.get(name) is not None})


class ApprovalList(BaseModel):
    approvals: list[ApprovalOut] = Field(description="newest request first")
    cursor: str | None = Field(default=None, description="the next (older) page; None: no more")


class DecisionBody(_Body):
    decision: Literal["approve", "reject"]
    reason: str | None = Field(default=None, max_length=MAX_REASON_CHARS)
    decided_by: str | None = Field(
        default=None, min_length=1, max_length=200, description="who decided, in your product's words"
    )
    token: str | None = Field(
        default=None, min_length=1, max_length=256, description="the decision token the request's delivery carried"
    )
