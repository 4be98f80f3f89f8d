"""The step journal port: completed steps of one run, so a retry replays instead of redoing.

Values are JSON-able dicts; keys are step keys, built and parsed by ``agentwake.domain.steps`` (the
journal's one key grammar). The DynamoDB implementation lives in ``agentwake.store``;
``InMemoryJournal`` is for tests, local use and replays.
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

    def learn(self, key: str, value: dict[str, Any]) -> None:
        """Know a step another writer journaled, without writing it (as the DynamoDB journal's)."""
        self.entries[key] = value
