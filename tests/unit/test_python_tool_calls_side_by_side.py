"""A Python tool's one instance is shared by every run of a process, and a batch's records run side
by side (issue 37, ``wake.lanes``): agentwake calls it one call at a time unless it says it is
``thread_safe``. The tool itself watches for a second call arriving while one is inside."""

from __future__ import annotations

import threading
import time
from typing import Any

from pydantic import BaseModel

from agentwake.agent.tools import Tool, ToolContext, ToolRegistry, serialize_calls
from agentwake.domain.conversation import ToolCall


class _NoArgs(BaseModel):
    pass


class Watching(Tool):
    """Counts the calls inside it; the first waits (bounded) for a second to come in beside it."""

    name = "watching"
    description = "watches"
    Args = _NoArgs
    side_effect = False

    def __init__(self) -> None:
        self.inside = 0
        self.most_inside = 0
        self.lock = threading.Lock()
        self.first_in = threading.Event()

    def invoke(self, args: Any, ctx: ToolContext) -> str:
        with self.lock:
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
            first = not self.first_in.is_set()
            self.first_in.set()
        if first:  # give a second call every chance to come in beside it (it ends early if one does)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and self.most_inside < 2:
                time.sleep(0.01)
        with self.lock:
            self.inside -= 1
        return "ok"


def _two_runs_call(tool: Tool) -> list[str]:
    """Two runs (each its own registry, as each run builds its tools) call the one instance at once."""
    out: list[str] = []

    def run(n: int) -> None:
        registry = ToolRegistry([tool])
        ctx = ToolContext(run_id=f"bg:t{n}", session_id=f"s{n}").for_call(0, 0)
        out.append(registry.call(ToolCall(id=f"c{n}", name="watching", arguments="{}"), ctx).text)

    first = threading.Thread(target=run, args=(1,))
    first.start()
    assert tool.first_in.wait(60)  # type: ignore[attr-defined]
    second = threading.Thread(target=run, args=(2,))
    second.start()
    first.join(60)
    second.join(60)
    return out


def test_a_python_tool_shared_by_two_runs_is_called_one_call_at_a_time() -> None:
    # GIVEN a Python tool as an entry point loads it (one instance for the process), not thread-safe
    tool = Watching()
    serialize_calls(tool)
    # WHEN two runs of different sessions call it at once
    out = _two_runs_call(tool)
    # THEN both calls ran, never both inside it
    assert out == ["ok", "ok"]
    assert tool.most_inside == 1


def test_a_python_tool_that_says_it_is_thread_safe_is_called_side_by_side() -> None:
    # GIVEN the same tool declaring itself thread-safe
    tool = Watching()
    tool.thread_safe = True
    serialize_calls(tool)
    # WHEN two runs call it at once THEN the second call comes in while the first is inside
    out = _two_runs_call(tool)
    assert out == ["ok", "ok"]
    assert tool.most_inside == 2
