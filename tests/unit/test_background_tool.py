"""A background tool as the model sees it (agent/tools/background.py), and ToolRegistry.call, which
says which results failed (the background-work function completes a task from it, never from an
``error:`` prefix). No store: the start path is a fake starter here (tests/integration covers it)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentwake.agent.tools import DRY_RUN_RESULT, ToolContext, ToolRegistry
from agentwake.agent.tools.config import build_tools
from agentwake.domain.conversation import ToolCall
from agentwake.domain.models import Task
from agentwake.errors import StepInterrupted

SPEC = {
    "type": "http",
    "name": "lookup",
    "description": "Look a key up.",
    "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
    "url": "https://tools.example.com/lookup",
    "method": "GET",
    "background": True,
}
CTX = ToolContext(run_id="bg:t0", session_id="s1").for_call(0, 0)


class Starter:
    def __init__(self, fails: Exception | None = None) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.fails = fails

    def __call__(self, ctx: ToolContext, *, kind: str, name: str, args: dict[str, Any], deadline_s: Any = None) -> Task:
        self.calls.append((ctx.idempotency_key, args))
        if self.fails is not None:
            raise self.fails
        return Task(task_id="t-1", session_id=ctx.session_id, tool_name=name, deadline_at="2026-12-03T06:00:00Z")


def lookup(args: dict[str, Any] | str) -> ToolCall:
    return ToolCall(id="c1", name="lookup", arguments=args if isinstance(args, str) else json.dumps(args))


def test_a_background_call_starts_a_task_and_answers_at_once(stackless_settings: None) -> None:
    starter = Starter()
    registry = ToolRegistry(build_tools([SPEC], session_id="s1", starter=starter))
    outcome = registry.call(lookup({"key": "k"}), CTX)
    assert outcome.ok and outcome.text.startswith("started task t-1 (lookup in the background, deadline 2026-12-03")
    assert starter.calls == [("bg:t0#0#0", {"key": "k"})]
    # the model is told it runs in the background
    (spec,) = registry.specs()
    assert "Runs in the background" in spec.description and spec.parameters == SPEC["parameters"]


def test_arguments_the_tool_refuses_start_nothing_and_are_a_failed_result(stackless_settings: None) -> None:
    starter = Starter()
    registry = ToolRegistry(build_tools([SPEC], session_id="s1", starter=starter))
    outcome = registry.call(lookup({"key": 5}), CTX)
    assert not outcome.ok and outcome.text.startswith("error: arguments for 'lookup' do not match its schema")
    assert registry.execute(lookup({"key": 5}), CTX) == outcome.text  # the model reads the same text
    assert starter.calls == []


def test_a_what_if_replay_starts_nothing(stackless_settings: None) -> None:
    starter = Starter()
    registry = ToolRegistry(build_tools([SPEC], session_id="s1", starter=starter))
    assert registry.call(lookup({"key": "k"}), ToolContext(run_id="bg:t0", session_id="s1", dry_run=True)).text == (
        DRY_RUN_RESULT
    )
    assert starter.calls == []


def test_a_start_the_store_or_queue_failed_interrupts_the_step(stackless_settings: None) -> None:
    # a failed write may have landed: the model must not be told the tool failed (the retry redoes it)
    registry = ToolRegistry(build_tools([SPEC], session_id="s1", starter=Starter(fails=ConnectionError("down"))))
    with pytest.raises(StepInterrupted, match="starting background tool 'lookup' did not finish"):
        registry.call(lookup({"key": "k"}), CTX)


def test_the_work_functions_build_is_the_tool_itself(stackless_settings: None) -> None:
    (tool,) = build_tools([SPEC], session_id="s1", run_background=True)
    assert type(tool).__name__ == "HttpTool"
