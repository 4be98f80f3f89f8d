"""Asking a person before acting (docs/tools.md, "Asking before acting"; design: issue 35).

A session's tool spec (HTTP, Python, background) or subagent spec may say ``"approval"``:

    "approval": "always"
    "approval": {"when": [{"arg": "amount", "gt": 100}], "expires_in_s": 86400,
                 "on_expiry": "reject", "deciders": ["owners", "token"], "hide": ["api_key"]}

This module is the rule (``ApprovalRule``, ``parse_rule``), whether a call's parsed arguments need a
decision (``matches``, the rule in words), the stable id of a request (``approval_id``), what a
person is shown (``shown_arguments``), the stored request (``Approval``) and the words the model
reads for a refused call (``decision_result``). No I/O.
"""

from __future__ import annotations

import fnmatch
import hashlib
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agentwake.domain.models import _Stored

#: a request nobody decides is decided by its expiry after this long (24 h) unless the rule says otherwise
DEFAULT_EXPIRES_IN_S = 86_400
MIN_EXPIRES_IN_S = 60
MAX_EXPIRES_IN_S = 7 * 86_400
Decider = Literal["owners", "token"]
#: who may decide unless the rule says: the session's owners and the holder of the decision token
DEFAULT_DECIDERS: tuple[Decider, ...] = ("owners", "token")
MAX_CONDITIONS = 8
MAX_PATH_DEPTH = 4
MAX_GLOB_CHARS = 200
MAX_IN_VALUES = 50
#: what a person is shown of the arguments: at most this many bytes of JSON
SHOWN_ARGUMENTS_BYTES = 8_000
#: what stands for a ``hide`` path's value in what a person is shown
HIDDEN = "…hidden"
MAX_REASON_CHARS = 1000

Decision = Literal["approved", "rejected"]
OPERATORS = ("eq", "ne", "gt", "ge", "lt", "le", "in", "glob", "exists")
#: how each operator reads in a rule's words
_WORDS = {"eq": "=", "ne": "!=", "gt": ">", "ge": ">=", "lt": "<", "le": "<=", "in": "in", "glob": "matches"}
_MISSING = object()


class Condition(BaseModel):
    """One condition of ``when``: ``arg`` (a dot path) and exactly one operator."""

    model_config = ConfigDict(extra="forbid")

    arg: str = Field(min_length=1, max_length=256)
    eq: Any = _MISSING
    ne: Any = _MISSING
    gt: int | float | None = None
    ge: int | float | None = None
    lt: int | float | None = None
    le: int | float | None = None
    in_: list[Any] | None = Field(default=None, alias="in", max_length=MAX_IN_VALUES)
    glob: str | None = Field(default=None, max_length=MAX_GLOB_CHARS)
    exists: bool | None = None

    @field_validator("arg")
    @classmethod
    def _path(cls, v: str) -> str:
        parts = v.split(".")
        if len(parts) > MAX_PATH_DEPTH or any(not p for p in parts):
            raise ValueError(f"arg must be a dot path of at most {MAX_PATH_DEPTH} names, like 'order.amount'")
        return v

    @model_validator(mode="after")
    def _one_operator(self) -> Condition:
        given = [op for op in OPERATORS if self._operand(op) is not _MISSING]
        if len(given) != 1:
            raise ValueError(f"a condition names exactly one operator of {', '.join(OPERATORS)}; got {given or 'none'}")
        return self

    def _operand(self, op: str) -> Any:
        value = getattr(self, "in_" if op == "in" else op)
        if op in ("eq", "ne"):
            return value
        return _MISSING if value is None else value

    @property
    def operator(self) -> str:
        return next(op for op in OPERATORS if self._operand(op) is not _MISSING)

    def words(self) -> str:
        op = self.operator
        if op == "exists":
            return f"{self.arg} {'is given' if self.exists else 'is not given'}"
        return f"{self.arg} {_WORDS[op]} {self._operand(op)!r}"

    def holds(self, args: Any) -> bool:
        value = _lookup(args, self.arg)
        op = self.operator
        if op == "exists":
            return (value is not _MISSING) is bool(self.exists)
        if value is _MISSING:
            return False  # a missing argument matches only ``exists: false``
        operand = self._operand(op)
        if op == "eq":
            return bool(value == operand)
        if op == "ne":
            return bool(value != operand)
        if op == "in":
            return value in operand
        if op == "glob":
            return isinstance(value, str) and fnmatch.fnmatchcase(value, operand)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False  # a comparison holds only for a number
        return {"gt": value > operand, "ge": value >= operand, "lt": value < operand, "le": value <= operand}[op]


class ApprovalRule(BaseModel):
    """A tool's ``approval``: ``when`` None means always."""

    model_config = ConfigDict(extra="forbid")

    when: list[Condition] | None = Field(default=None, min_length=1, max_length=MAX_CONDITIONS)
    expires_in_s: int = Field(default=DEFAULT_EXPIRES_IN_S, ge=MIN_EXPIRES_IN_S, le=MAX_EXPIRES_IN_S)
    on_expiry: Literal["reject", "approve"] = "reject"
    deciders: list[Decider] = Field(default=list(DEFAULT_DECIDERS), max_length=2)
    #: argument paths a person is shown as ``…hidden``
    hide: list[str] = Field(default=[], max_length=32)

    def matches(self, args: Any) -> str | None:
        """The rule, in words, that makes a call with these (parsed) arguments need a decision;
        None when it does not."""
        if self.when is None:
            return "always"
        for condition in self.when:
            if condition.holds(args):
                return condition.words()
        return None


def parse_rule(raw: Any) -> ApprovalRule | None:
    """A spec's ``approval`` value as a rule (None: no approval). ValueError says what is wrong."""
    if raw is None or raw is False:
        return None
    if raw == "always":
        return ApprovalRule()
    if not isinstance(raw, dict):
        raise ValueError('approval must be "always" or an object like {"when": [...], "expires_in_s": 86400}')
    try:
        return ApprovalRule.model_validate(raw)
    except ValidationError as exc:
        from agentwake.errors import describe_validation_error

        raise ValueError(f"approval: {describe_validation_error(exc, whole='(approval)')}") from exc


def check_approval(raw: Any) -> Any:
    """A spec's ``approval`` as written, once ``parse_rule`` accepts it (a pydantic field validator
    of the tool and subagent specs: the config write refuses a bad rule, saying why)."""
    parse_rule(raw)
    return raw


def matches(rule: ApprovalRule | None, args: Any) -> str | None:
    """``rule.matches(args)``, None without a rule."""
    return None if rule is None else rule.matches(args)


def approval_id(run_id: str, step: int, index: int) -> str:
    """The request of tool call ``index`` of step ``step`` of ``run_id``: the same across retries
    and redrives of the run, so a re-park of the same call finds the same request."""
    return "apr-" + hashlib.sha256(f"{run_id}#{step}#{index}".encode()).hexdigest()[:24]


def token_sha256(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    """A decision token: 32 random bytes, url-safe. Stored only hashed (``token_sha256``)."""
    import secrets

    return secrets.token_urlsafe(32)


def shown_arguments(args: Any, hide: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """What a person is shown of a call's arguments: ``hide`` paths as ``…hidden``, every string
    redacted like any text that leaves a run, at most ``SHOWN_ARGUMENTS_BYTES`` of JSON."""
    import copy

    from agentwake.store.itemsize import bound_json
    from agentwake.trust.redact import redact_data

    shown = copy.deepcopy(args) if isinstance(args, dict) else {"arguments": args}
    for path in hide:
        parts = path.split(".")
        parent: Any = shown
        for name in parts[:-1]:
            parent = parent.get(name) if isinstance(parent, dict) else None
        if isinstance(parent, dict) and parts[-1] in parent:
            parent[parts[-1]] = HIDDEN
    return bound_json(redact_data(shown), SHOWN_ARGUMENTS_BYTES)


def _lookup(args: Any, path: str) -> Any:
    value = args
    for name in path.split("."):
        if not isinstance(value, dict) or name not in value:
            return _MISSING
        value = value[name]
    return value


#: how an owner's decision over the product API is stored: ``{principal} on behalf of {name}``
ON_BEHALF_OF = " on behalf of "


def decider_named(by: str, via: str | None) -> str:
    """Who decided, as the model (and so the user) may read it: an owner's decision names whom it was
    made on behalf of, or "the session's owner" — never the owner's principal (an IAM ARN)."""
    if via == "api-owner":
        return by.split(ON_BEHALF_OF, 1)[1] if ON_BEHALF_OF in by else "the session's owner"
    return by


def decision_result(
    decision: str,
    *,
    by: str,
    via: str | None = None,
    reason: str | None = None,
    expired: bool = False,
    expires_in_s: int | None = None,
) -> str:
    """The tool result the model reads for a call a person (or the expiry) did not approve."""
    if expired:
        within = f"within {expires_in_s} s" if expires_in_s else "in time"
        return f"not run: nobody decided {within}, so it was rejected by default"
    why = f': "{reason}"' if reason else " (no reason given)"
    return f"not run: {decider_named(by, via)} rejected this call{why}"


class Approval(_Stored):
    """One request to approve a gated call (``APPROVAL#{approval}`` / ``APPROVAL``; docs/table-design.md)."""

    JSON_FIELDS = frozenset({"arguments", "deciders", "resume"})

    approval_id: str
    run_id: str
    session_id: str
    kind: Literal["background", "cron"] = "background"
    step: int
    call_index: int
    call_id: str = ""
    tool: str
    #: what a person is shown (``shown_arguments``), never the raw call
    arguments: dict[str, Any] = {}
    #: the condition that matched, in words
    rule: str = "always"
    deciders: list[str] = list(DEFAULT_DECIDERS)
    requested_at: str
    expiry_at: str
    expiry_epoch: float
    expires_in_s: int = DEFAULT_EXPIRES_IN_S
    on_expiry: Literal["reject", "approve"] = "reject"
    token_sha256: str = ""
    token_gen: int = 1
    asked_at: str | None = None
    state: Literal["pending", "approved", "rejected"] = "pending"
    decided_by: str | None = None
    decided_via: str | None = None
    reason: str | None = None
    decided_at: str | None = None
    expired: bool = False
    resumed_at: str | None = None
    resumed_attempt: int | None = None
    check_id: str | None = None
    #: the copy that re-queues the run: ``{kind, body, attributes, target}`` (never shown)
    resume: dict[str, Any] | None = None

    @property
    def pending(self) -> bool:
        return self.state == "pending"

    def decision_step(self) -> dict[str, Any]:
        """The journal's ``decision`` step for this decided request."""
        return {
            "approval_id": self.approval_id,
            "decision": self.state,
            "by": self.decided_by,
            "via": self.decided_via,
            "reason": self.reason,
            "at": self.decided_at,
            "expired": self.expired,
        }

    def said(self) -> str:
        """The decision in words: ``rejected by alice at T: "why"``."""
        why = f": {self.reason}" if self.reason else ""
        return f"{self.state} by {self.decided_by} at {self.decided_at}{why}"
