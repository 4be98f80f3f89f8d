"""Plain data the runtime passes around; every type round-trips through JSON for the journal."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentwake.domain.conversation import Message, ToolCall


@dataclass(frozen=True)
class ToolSpec:
    """What the model is told about a tool: name, description, JSON schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class Usage:
    """What one model call cost: tokens from the provider's own usage fields (OpenAI-compatible
    ``usage.prompt_tokens``/``completion_tokens``, Bedrock ``usage.inputTokens``/``outputTokens``),
    the model that answered, how long the call took and which attempt on that provider it was."""

    input_tokens: int = 0
    output_tokens: int = 0
    model: str = ""
    latency_ms: int = 0
    attempt: int = 1

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def to_dict(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "model": self.model,
            "latency_ms": self.latency_ms,
            "attempt": self.attempt,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Usage:
        return cls(
            input_tokens=int(d.get("input_tokens") or 0),
            output_tokens=int(d.get("output_tokens") or 0),
            model=str(d.get("model") or ""),
            latency_ms=int(d.get("latency_ms") or 0),
            attempt=int(d.get("attempt") or 1),
        )


@dataclass(frozen=True)
class ModelReply:
    """One model answer. ``truncated`` marks a reply cut by the token limit (still a normal reply).

    ``usage`` is None when the provider reported none (its tokens then count as zero)."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    truncated: bool = False
    provider_id: str = ""
    usage: Usage | None = None

    @property
    def is_empty(self) -> bool:
        return not self.text.strip() and not self.tool_calls

    def to_message(self) -> Message:
        return Message(role="assistant", content=self.text, tool_calls=self.tool_calls)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "text": self.text,
            "tool_calls": [c.to_dict() for c in self.tool_calls],
            "truncated": self.truncated,
            "provider_id": self.provider_id,
        }
        if self.usage is not None:
            d["usage"] = self.usage.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelReply:
        usage = d.get("usage")
        return cls(
            text=d.get("text") or "",
            tool_calls=tuple(ToolCall.from_dict(c) for c in d.get("tool_calls") or ()),
            truncated=bool(d.get("truncated", False)),
            provider_id=d.get("provider_id") or "",
            usage=Usage.from_dict(usage) if isinstance(usage, dict) else None,
        )


@dataclass(frozen=True)
class ChatRequest:
    """What a provider is asked: the conversation so far and the tools on offer.

    ``step`` is the 0-based step index within the run (the scripted provider keys on it).
    """

    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    step: int = 0
    run_id: str = ""
    timeout: float = 60.0
    metadata: dict[str, Any] = field(default_factory=dict)
