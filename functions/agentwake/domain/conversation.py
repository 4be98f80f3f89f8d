"""The conversation's message type: what history entries become in a prompt and what a model is
sent. Plain data (no agent, no store): both the agent and the store import it from here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True)
class ToolCall:
    """A tool call as the model produced it. ``arguments`` is the raw JSON text, possibly malformed."""

    id: str
    name: str | None
    arguments: str = "{}"

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ToolCall:
        args = d.get("arguments")
        return cls(id=str(d["id"]), name=d.get("name"), arguments="{}" if args is None else str(args))


@dataclass(frozen=True)
class Message:
    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None  # tool name, on role="tool" messages

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            d["tool_calls"] = [c.to_dict() for c in self.tool_calls]
        if self.tool_call_id is not None:
            d["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            d["name"] = self.name
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Message:
        return cls(
            role=d["role"],
            content=d.get("content") or "",
            tool_calls=tuple(ToolCall.from_dict(c) for c in d.get("tool_calls") or ()),
            tool_call_id=d.get("tool_call_id"),
            name=d.get("name"),
        )
