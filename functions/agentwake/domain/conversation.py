"""The conversation's message type: what history entries become in a prompt and what a model is
sent. Plain data (no agent, no store): both the agent and the store import it from here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
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


#: the default of a session's ``history_window_bytes``: the woken agent's history window holds at
#: most this many bytes of message text (UTF-8), besides at most ``history_window`` entries
HISTORY_WINDOW_BYTES = 32_000
#: a message that would cross the window's bound is cut to what is left when at least this much is
#: left (else the window ends before it)
MIN_CUT_BYTES = 512


def fit_window(messages: Sequence[Message], max_bytes: int) -> list[Message]:
    """The newest of ``messages`` (oldest first, as given) whose texts take at most ``max_bytes``
    (UTF-8) together, oldest first. Newer messages win; the one that would cross the bound is cut
    to what is left, with a marker saying so, when ``MIN_CUT_BYTES`` are left — so the newest
    message always appears, cut if it is bigger than the whole window — and older ones are left
    out, as the count bound leaves them out."""
    kept: list[Message] = []
    left = max_bytes
    for message in reversed(messages):
        size = len(message.content.encode("utf-8", errors="surrogatepass"))
        if size <= left:
            kept.append(message)
            left -= size
            continue
        if left >= MIN_CUT_BYTES or not kept:
            kept.append(replace(message, content=_cut(message.content, size, left, max_bytes)))
        break
    return kept[::-1]


def _cut(text: str, size: int, room: int, max_bytes: int) -> str:
    """``text`` (``size`` bytes) cut to at most ``room`` bytes, the marker included."""
    marker = f"\n…[cut: this message has {size:,} bytes; the history window holds {max_bytes:,}]"
    keep = max(0, room - len(marker.encode("utf-8")))
    head = text.encode("utf-8", errors="surrogatepass")[:keep].decode("utf-8", errors="ignore")
    return head + marker
