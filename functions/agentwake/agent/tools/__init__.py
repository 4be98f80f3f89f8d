"""Tools the woken agent can call, and the registry that turns every failure into an ``error:`` result
(``ToolRegistry.call`` says which results were failures, for the background-work function)."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

from pydantic import BaseModel, ValidationError

from agentwake.agent.bounds import ArgumentsRefused, parse_arguments
from agentwake.agent.types import ToolSpec
from agentwake.domain.conversation import ToolCall
from agentwake.domain.steps import final_delivery_id
from agentwake.errors import OutboundRefused, SecretRefRefused, StepInterrupted, describe_validation_error
from agentwake.trust.redact import redact

if TYPE_CHECKING:
    from agentwake.agent.gate import Gate
    from agentwake.agent.ledger import RunLedger
    from agentwake.domain.approvals import ApprovalRule
    from agentwake.domain.models import Task


@dataclass(frozen=True)
class ToolContext:
    """Who is running the tool: the run, its session, its role, and which call this is."""

    run_id: str
    session_id: str
    role: Literal["user", "admin"] = "user"
    step: int = 0
    call_index: int = 0
    #: a what-if replay: side-effecting tools say what they would do instead of doing it
    dry_run: bool = False
    #: what the run spent and sent so far, and its caps (None: no caps, nothing counted)
    ledger: RunLedger | None = field(default=None, compare=False, repr=False)
    #: the run's final answer sent by deliver_final, not a tool call of the model
    final: bool = False

    @property
    def delivery_id(self) -> str:
        """Stable across retries and redrives: run id + step + call index (``{run_id}#final`` for
        the final answer that deliver_final sends)."""
        if self.final:
            return final_delivery_id(self.run_id)
        return f"{self.run_id}#{self.step}#{self.call_index}"

    @property
    def idempotency_key(self) -> str:
        """What a side-effecting tool sends as its idempotency key: the same on every retry and
        redrive of the run (run id + step + call index), so the receiver can drop a repeat."""
        return self.delivery_id

    def for_call(self, step: int, call_index: int) -> ToolContext:
        return replace(self, step=step, call_index=call_index)


#: what a side-effecting tool answers in a what-if replay instead of being called
DRY_RUN_RESULT = "dry run: not called (side effect)"


class ToolArgumentsInvalid(ValueError):
    """The call's arguments do not match the tool's schema (the message says how)."""


class Tool(ABC):
    name: str
    description: str
    Args: ClassVar[type[BaseModel]]
    #: True for a tool that changes something outside (creates a ticket, sends mail): it is called
    #: with ``ctx.idempotency_key`` and never in a what-if replay. Every tool says which it is: a
    #: Python tool that leaves it unset (None) is refused when the session's tools are built, and a
    #: registry never calls an undeclared tool in a replay either.
    side_effect: bool | None = None
    #: ask a person before a call runs (the spec's ``approval``; agentwake.domain.approvals). None: never
    approval: ApprovalRule | None = None
    #: True for a Python tool whose one instance may be called by runs of different sessions at once
    #: (a batch's records run side by side: docs/durability.md, "Records side by side"). Left False,
    #: agentwake calls a Python tool's instance one call at a time in a process (``serialize_calls``)
    thread_safe: bool = False

    def spec(self) -> ToolSpec:
        schema = self.Args.model_json_schema()
        schema.pop("title", None)
        return ToolSpec(name=self.name, description=self.description, parameters=schema)

    def parse_args(self, raw: dict[str, Any]) -> Any:
        """Validate the call's arguments; raise ToolArgumentsInvalid saying what is wrong."""
        try:
            return self.Args.model_validate(raw)
        except ValidationError as exc:
            raise ToolArgumentsInvalid(describe_validation_error(exc, whole="(arguments)")) from exc

    @abstractmethod
    def invoke(self, args: Any, ctx: ToolContext) -> str:
        """Run the tool. Raise to report a failure; the registry makes it an ``error:`` result."""


#: the Python tools a process shares between runs and calls one call at a time (id of the instance:
#: entry-point tools live as long as the process, ``entry_points._loaded``)
_serial: dict[int, threading.Lock] = {}


def serialize_calls(tool: Tool) -> None:
    """Calls of ``tool`` (one instance shared by every run of the process) are made one at a time,
    unless it says it is ``thread_safe``."""
    if not tool.thread_safe:
        _serial.setdefault(id(tool), threading.Lock())


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self._tools[tool.name] = tool

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def specs(self) -> tuple[ToolSpec, ...]:
        return tuple(t.spec() for t in self._tools.values())

    def execute(self, call: ToolCall, ctx: ToolContext) -> str:
        """Run one call. Every problem becomes an ``error: ...`` text the model sees, except
        StepInterrupted (infrastructure failed mid-step, the deadline passed), which aborts the run,
        and a refused URL or secret reference: a configuration error, not something to retry.

        Every result passes the redactor, a success as much as an ``error:``: a tool's server that
        echoes the credential it was sent must not hand it to the model, the journal or the user."""
        return self.call(call, ctx).text

    def call(self, call: ToolCall, ctx: ToolContext) -> ToolOutcome:
        """``execute``, saying whether the tool answered (``ok``) or the call failed (its ``error:``
        text, and the exception it came from): the background-work function completes a task from
        this, never by reading an ``error:`` prefix. Raises what ``execute`` raises."""
        outcome = self._call(call, ctx)
        return replace(outcome, text=redact(outcome.text))

    def gate(self, call: ToolCall) -> Gate | None:
        """Whether this call must wait for a person's decision: judged on the validated arguments
        (the parse ``_call`` makes). A call whose tool has no rule, whose rule does not match, or whose
        arguments do not parse is not gated (the last is an ``error:`` result: nobody is asked about a
        call that cannot run)."""
        tool = self._tools.get((call.name or "").strip())
        if tool is None or tool.approval is None:
            return None
        parsed = self._parse(call)
        if isinstance(parsed, ToolOutcome):
            return None
        _, raw, args = parsed
        judged = args.model_dump(mode="json") if isinstance(args, BaseModel) else args
        words = tool.approval.matches(judged if isinstance(judged, dict) else raw)
        if words is None:
            return None
        from agentwake.agent.gate import Gate  # a gated call's (cold start)

        return Gate(tool=tool.name, rule=tool.approval, words=words, arguments=raw)

    def _parse(self, call: ToolCall) -> tuple[Tool, dict[str, Any], Any] | ToolOutcome:
        """The call's tool, raw arguments and validated arguments; or the ``error:`` outcome saying why not."""
        name = (call.name or "").strip()
        if not name:
            return _failed("error: the tool call has no tool name; name one of: " + ", ".join(self.names))
        tool = self._tools.get(name)
        if tool is None:
            return _failed(f"error: unknown tool {name!r}; available tools: " + ", ".join(self.names))
        try:
            raw = parse_arguments(call.arguments)  # bounded in length and depth before json.loads
        except ArgumentsRefused as exc:
            return _failed(f"error: arguments for {name!r} {exc}", exc)
        if not isinstance(raw, dict):
            return _failed(f"error: arguments for {name!r} must be a JSON object, got {type(raw).__name__}")
        try:
            args = tool.parse_args(raw)
        except ToolArgumentsInvalid as exc:
            return _failed(f"error: arguments for {name!r} do not match its schema: {exc}", exc)
        return tool, raw, args

    def _call(self, call: ToolCall, ctx: ToolContext) -> ToolOutcome:
        parsed = self._parse(call)
        if isinstance(parsed, ToolOutcome):
            return parsed
        tool, _, args = parsed
        name = tool.name
        if ctx.dry_run and tool.side_effect is not False:
            return ToolOutcome(ok=True, text=DRY_RUN_RESULT)  # side-effecting, or undeclared: a replay never calls it
        try:
            with _serial.get(id(tool)) or nullcontext():
                return ToolOutcome(ok=True, text=str(tool.invoke(args, ctx)))
        except (StepInterrupted, OutboundRefused, SecretRefRefused):
            raise  # the step did not complete: abort the run unjournaled so a retry redoes it
        except Exception as exc:  # a tool failure is information for the model, not an ERROR
            return _failed(f"error: tool {name!r} failed: {type(exc).__name__}: {exc}", exc)


@dataclass(frozen=True)
class ToolOutcome:
    """One call's result: ``ok`` (the tool answered ``text``) or not (``text`` says why, as the model
    reads it; ``error`` is the exception, when there was one)."""

    ok: bool
    text: str
    error: BaseException | None = field(default=None, compare=False, repr=False)


def _failed(text: str, error: BaseException | None = None) -> ToolOutcome:
    return ToolOutcome(ok=False, text=text, error=error)


class TaskStarter(Protocol):
    """Starts a background task for a tool call (``wake.start_task.start_background_task``, bound to
    the wake's tasks service): once per call across retries and redrives. Returns the task."""

    def __call__(
        self,
        ctx: ToolContext,
        *,
        kind: Literal["tool", "subagent"],
        name: str,
        args: dict[str, Any],
        deadline_s: float | None = None,
    ) -> Task: ...
