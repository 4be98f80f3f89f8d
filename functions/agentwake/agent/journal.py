"""The step journal port: completed steps of one run, so a retry replays instead of redoing.

Keys are step keys such as ``000.reply`` and ``000.tool.01``; values are JSON-able dicts.
The DynamoDB implementation lives in ``agentwake.store``; this one is for tests and local use.
"""

from __future__ import annotations

from typing import Any, Protocol


class StepJournal(Protocol):
    def get(self, key: str) -> dict[str, Any] | None: ...

    def put(self, key: str, value: dict[str, Any]) -> None: ...


class InMemoryJournal:
    def __init__(self, entries: dict[str, dict[str, Any]] | None = None) -> None:
        self.entries: dict[str, dict[str, Any]] = dict(entries or {})

    def get(self, key: str) -> dict[str, Any] | None:
        return self.entries.get(key)

    def put(self, key: str, value: dict[str, Any]) -> None:
        self.entries[key] = value


#: the final answer sent by deliver_final (sorts after every step key)
FINAL_DELIVERY_KEY = "final.delivery"


def reply_key(step: int) -> str:
    return f"{step:03d}.reply"


def tool_key(step: int, index: int) -> str:
    return f"{step:03d}.tool.{index:02d}"
