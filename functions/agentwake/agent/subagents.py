"""Subagents: named helpers a session's agent hands work to (docs/subagents.md).

A session's config may name up to 8 (``SessionConfig.subagents``)::

    {"name": "researcher", "description": "Looks things up on the web.",
     "persona": "You are a careful researcher. Cite your sources.",
     "providers": [{"type": "bedrock"}],          # omitted: the session's own chain
     "tools": ["web_search"],                     # names of the session's declared tools
     "max_steps": 6, "time_budget_s": 300, "mode": "both"}

For each, the main agent is offered one tool, ``ask_{name}`` (``handoff_tool_name``), with the
task as text and ``background`` (run it now and read the answer, or start it as a task and be woken
with its answer). A subagent's own tools are a subset of the session's declared ones: never
``send_message_to_user`` and never a hand-off tool, so it can neither reach the user nor hand the
work on. This module is the spec, its checks and the subagent's prompt; the wake builds and runs it
(``agentwake.wake.agent_factory.subagent_agent``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agentwake.domain.approvals import check_approval
from agentwake.domain.conversation import Message
from agentwake.errors import ConfigError, describe_validation_error

#: a subagent's name: its hand-off tool ``ask_{name}`` must still be a tool name (at most 64 characters)
SUBAGENT_NAME = r"^[A-Za-z][A-Za-z0-9_-]{0,59}$"
HANDOFF_PREFIX = "ask_"
#: the tool that reaches the user: never a subagent's
USER_TOOL = "send_message_to_user"
#: how long a subagent may run at most: the background-work function's timeout (template.yaml's
#: FunctionTimeout is at most 900 s)
MAX_TIME_BUDGET_S = 900
SubagentMode = Literal["foreground", "background", "both"]


def handoff_tool_name(name: str) -> str:
    """The main agent's tool that hands work to subagent ``name``."""
    return f"{HANDOFF_PREFIX}{name}"


class SubagentSpec(BaseModel):
    """One subagent as a session's config declares it."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=SUBAGENT_NAME)
    #: what the main agent is told this subagent does (its hand-off tool's description)
    description: str = Field(default="", max_length=2000)
    persona: str = Field(min_length=1, max_length=20_000)
    #: its provider chain, primary first, in the session's spec format (empty: the session's own)
    providers: list[dict[str, Any]] = Field(default=[], max_length=5)
    #: names of the session's declared tools it may call (none: it only thinks and answers)
    tools: list[str] = Field(default=[], max_length=32)
    max_steps: int = Field(default=8, ge=1, le=50)
    #: seconds its run may take (a foreground hand-off: also never past the main run's deadline)
    time_budget_s: int = Field(default=300, ge=5, le=MAX_TIME_BUDGET_S)
    #: how the main agent may hand it work: now (the answer is the tool result), as a background
    #: task (the answer wakes the agent), or either
    mode: SubagentMode = "both"
    #: ask a person before ``ask_{name}`` hands it work, in the foreground and the background alike
    #: (agentwake.domain.approvals, docs/tools.md)
    approval: str | dict[str, Any] | None = None

    _approval = field_validator("approval")(check_approval)

    @property
    def tool_name(self) -> str:
        return handoff_tool_name(self.name)

    def allows(self, background: bool) -> bool:
        return self.mode == "both" or self.mode == ("background" if background else "foreground")


def _tool_names(session_tools: Sequence[Any]) -> list[str]:
    return [str(t.get("name")) for t in session_tools if isinstance(t, dict) and t.get("name")]


def parse_subagents(
    raw: Sequence[Any], session_tools: Sequence[Any] = (), *, session_id: str = "?"
) -> list[SubagentSpec]:
    """The session's subagents, checked against its declared tools; ConfigError saying what is wrong
    (a bad spec, a duplicate name, a hand-off tool that would shadow a tool, a tool the session does
    not declare, ``send_message_to_user`` or a hand-off tool among a subagent's tools)."""
    declared = _tool_names(session_tools)
    gated = {str(t.get("name")) for t in session_tools if isinstance(t, dict) and t.get("approval")}
    specs: list[SubagentSpec] = []
    for item in raw:
        if not isinstance(item, dict):
            raise ConfigError(
                f"session {session_id}: a subagent spec must be an object like "
                f'{{"name": "researcher", "persona": "..."}}, got {type(item).__name__}'
            )
        try:
            spec = SubagentSpec.model_validate(item)
        except ValidationError as exc:
            problems = describe_validation_error(exc, whole="(spec)")
            raise ConfigError(f"session {session_id}: invalid subagent spec {item.get('name')!r}: {problems}") from exc
        if any(s.name == spec.name for s in specs):
            raise ConfigError(f"session {session_id} declares subagent {spec.name!r} twice")
        if spec.tool_name in declared or spec.tool_name == USER_TOOL:
            raise ConfigError(
                f"session {session_id}: subagent {spec.name!r} would be handed work through tool "
                f"{spec.tool_name!r}, which the session already declares; rename one of them"
            )
        for tool in spec.tools:
            if tool == USER_TOOL:
                raise ConfigError(
                    f"session {session_id}: subagent {spec.name!r} may not have {USER_TOOL}: a subagent "
                    "answers the main agent, which decides what the user is told"
                )
            if tool.startswith(HANDOFF_PREFIX) and tool[len(HANDOFF_PREFIX) :] in {
                s.get("name") for s in raw if isinstance(s, dict)
            }:
                raise ConfigError(
                    f"session {session_id}: subagent {spec.name!r} may not have hand-off tool {tool!r}: "
                    "a subagent does not hand work on"
                )
            if tool in gated:
                raise ConfigError(
                    f"session {session_id}: subagent {spec.name!r} names tool {tool!r}, which asks for approval: "
                    "a subagent's run cannot wait for a person (in the background it holds no session and has no "
                    "channel; in the foreground it answers within the main run's call). Gate the subagent itself "
                    '(its own "approval" gates ask_{name}), or give it tools that do not ask'
                )
            if tool not in declared:
                have = ", ".join(declared) or "none"
                raise ConfigError(
                    f"session {session_id}: subagent {spec.name!r} names tool {tool!r}, which the session "
                    f"does not declare (its tools: {have})"
                )
        specs.append(spec)
    return specs


SUBAGENT_RULES = (
    "You are a subagent: the main agent handed you the task below. You cannot message the user and "
    "cannot hand the work on; your final answer goes back to the main agent, which decides what the "
    "user is told. Do the task with your tools if you need them, then answer with the result itself, "
    "complete and self-contained."
)


@dataclass(frozen=True)
class SubagentPrompt:
    """A subagent's opening messages: its persona and the rules, then the task (``agent.woken.Prompt``)."""

    persona: str
    task: str

    def messages(self, *, deliveries_left: int | None, deliveries_made: int) -> list[Message]:
        system = f"{self.persona.strip()}\n\n{SUBAGENT_RULES}"
        return [Message(role="system", content=system), Message(role="user", content=self.task)]
