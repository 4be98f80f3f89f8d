"""The agent runner: IDLE → RUNNING → DONE | ERROR, one model call per step, journaled steps.

ERROR is a state with a completion text, never an exception out of the runner: the wake use
cases read the state and decide (DONE → commit the note, ERROR → record a failure and raise).
The one exception that does escape is an infrastructure failure (the journal cannot be written,
StepInterrupted from a tool): that is a crash, not an outcome, and the trigger retries it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from agentwake.agent.journal import InMemoryJournal, StepJournal, reply_key, tool_key
from agentwake.agent.tools import ToolContext, ToolRegistry
from agentwake.agent.types import ChatRequest, Message, ModelReply, ToolSpec
from agentwake.errors import AllProvidersFailed

MAX_STEPS_MESSAGE = (
    "You have reached the maximum number of steps. Stop calling tools and answer directly with your final response now."
)


class AgentState(StrEnum):
    IDLE = "IDLE"
    RUNNING = "RUNNING"
    DONE = "DONE"
    ERROR = "ERROR"


class ChatModel(Protocol):
    """What the runner needs of a model: the provider chain implements it."""

    def complete(self, request: ChatRequest) -> ModelReply: ...


@dataclass(frozen=True)
class RunEvent:
    """Something that happened in a run, for transcripts and logs."""

    kind: str  # "reply" | "tool" | "final_step" | "done" | "error"
    step: int
    data: dict[str, Any] = field(default_factory=dict)
    replayed: bool = False


class Runner:
    def __init__(
        self,
        *,
        model: ChatModel,
        tools: ToolRegistry,
        messages: Sequence[Message],
        context: ToolContext,
        journal: StepJournal | None = None,
        max_steps: int = 8,
        on_event: Callable[[RunEvent], None] | None = None,
    ) -> None:
        if max_steps < 1:
            raise ValueError("max_steps must be at least 1")
        self.model = model
        self.tools = tools
        self.messages: list[Message] = list(messages)
        self.context = context
        self.journal: StepJournal = journal if journal is not None else InMemoryJournal()
        self.max_steps = max_steps
        self.on_event = on_event
        self.state = AgentState.IDLE
        self.steps_done = 0
        self.final_response: ModelReply | None = None
        self.completion_text = ""
        self.error_type: str | None = None
        self.provider_errors: dict[str, str] = {}
        self.replayed_steps = 0
        self._tool_specs: tuple[ToolSpec, ...] = tools.specs()
        self._final_step = False

    @property
    def finished(self) -> bool:
        return self.state in (AgentState.DONE, AgentState.ERROR)

    def _emit(self, kind: str, step: int, replayed: bool = False, **data: Any) -> None:
        if self.on_event is not None:
            self.on_event(RunEvent(kind=kind, step=step, data=data, replayed=replayed))

    def _fail(self, step: int, error_type: str, text: str) -> None:
        self.state = AgentState.ERROR
        self.error_type = error_type
        self.completion_text = text
        self._emit("error", step, error_type=error_type, text=text)

    def enter_final_step(self) -> None:
        """Take every tool away and tell the model to answer directly; the next step is the last."""
        self._final_step = True
        self._tool_specs = ()
        self.messages.append(Message(role="user", content=MAX_STEPS_MESSAGE))
        self._emit("final_step", self.steps_done, message=MAX_STEPS_MESSAGE)

    def step(self) -> AgentState:
        """Run one step: one model call (or its journaled reply), then its tool calls."""
        if self.finished:
            raise RuntimeError(f"the run already ended in {self.state.value}")
        self.state = AgentState.RUNNING
        n = self.steps_done
        key = reply_key(n)
        recorded = self.journal.get(key)
        if recorded is not None:
            reply = ModelReply.from_dict(recorded)
            self.replayed_steps += 1
        else:
            request = ChatRequest(
                messages=tuple(self.messages), tools=self._tool_specs, step=n, run_id=self.context.run_id
            )
            try:
                reply = self.model.complete(request)
            except AllProvidersFailed as exc:
                self.provider_errors = dict(exc.errors)
                self._fail(n, "AllProvidersFailed", str(exc))
                return self.state
            except Exception as exc:  # a model that is not a chain: still ERROR, never a raise
                self._fail(n, type(exc).__name__, f"the chat model failed: {type(exc).__name__}: {exc}")
                return self.state
            if not (self._final_step and reply.tool_calls):
                # a final step that still calls tools is a failed step: never journaled, so a
                # retry or redrive asks the (perhaps fixed) model again instead of replaying it
                self.journal.put(key, reply.to_dict())
        self.messages.append(reply.to_message())
        self.steps_done += 1
        self._emit(
            "reply",
            n,
            replayed=recorded is not None,
            text=reply.text,
            tool_calls=[c.to_dict() for c in reply.tool_calls],
            provider_id=reply.provider_id,
            truncated=reply.truncated,
        )

        if not reply.tool_calls:
            self.state = AgentState.DONE
            self.final_response = reply
            self.completion_text = reply.text
            self._emit("done", n, text=reply.text)
            return self.state
        if self._final_step:
            names = ", ".join(c.name or "?" for c in reply.tool_calls)
            self._fail(
                n,
                "MaxStepsExceeded",
                f"did not finish within {self.max_steps} steps (still calling tools: {names})",
            )
            return self.state

        for i, call in enumerate(reply.tool_calls):
            tkey = tool_key(n, i)
            done = self.journal.get(tkey)
            if done is not None:
                result = str(done["content"])
            else:
                result = self.tools.execute(call, self.context.for_call(n, i))
                self.journal.put(tkey, {"content": result, "tool": call.name})
            self.messages.append(Message(role="tool", content=result, tool_call_id=call.id, name=call.name))
            self._emit("tool", n, replayed=done is not None, name=call.name, arguments=call.arguments, result=result)
        return self.state

    def run(self, max_steps: int | None = None) -> AgentState:
        """Step until DONE or ERROR. After ``max_steps`` steps, one final tool-less step."""
        if max_steps is not None:
            if max_steps < 1:
                raise ValueError("max_steps must be at least 1")
            self.max_steps = max_steps
        while not self.finished:
            if self.steps_done >= self.max_steps and not self._final_step:
                self.enter_final_step()
            self.step()
        return self.state
