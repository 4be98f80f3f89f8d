"""The repeated-call guard: the same tool call (name + arguments) made N times in a row.

At the Nth identical call in a row the call is not run; the model gets an ``error:`` result
telling it that it repeats itself. If the next call is the same again, it is not run either and
the runner forces the final step (tools removed, answer directly). Any other call resets the count.
The verdicts depend only on the calls, so a replay from the journal reaches the same ones.
"""

from __future__ import annotations

import json
from typing import Literal

from agentwake.agent.bounds import ArgumentsRefused, parse_arguments
from agentwake.domain.conversation import ToolCall

Verdict = Literal["run", "warn", "stop"]

REPEAT_FINAL_MESSAGE = (
    "You keep repeating the same tool call. Stop calling tools and answer directly with your final response now."
)


def call_signature(call: ToolCall) -> str:
    """Name + arguments, with JSON arguments compared by value (key order and spacing ignored)."""
    try:
        args = json.dumps(parse_arguments(call.arguments), sort_keys=True, separators=(",", ":"))
    except (ArgumentsRefused, TypeError):  # too long, too deep or not JSON: compared as text
        args = str(call.arguments).strip()
    return f"{call.name or ''}\x00{args}"


class RepeatGuard:
    def __init__(self, limit: int | None = 3) -> None:
        if limit is not None and limit < 1:
            raise ValueError("the repeated-call limit must be at least 1")
        self.limit = limit
        self._last: str | None = None
        self.count = 0

    def observe(self, call: ToolCall) -> Verdict:
        signature = call_signature(call)
        self.count = self.count + 1 if signature == self._last else 1
        self._last = signature
        if self.limit is None or self.count < self.limit:
            return "run"
        return "warn" if self.count == self.limit else "stop"

    def warning(self, call: ToolCall) -> str:
        return (
            f"error: not run: you made this same call ({call.name} with the same arguments) {self.count} times "
            "in a row. You are repeating yourself: do something different or answer directly. "
            "If you make this call again, your tools are taken away."
        )

    def stopped(self, call: ToolCall) -> str:
        return (
            f"error: not run: {call.name} with the same arguments again ({self.count} times in a row); "
            "your tools are now removed, answer directly."
        )
