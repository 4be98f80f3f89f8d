"""Models with empty-collection defaults: each instance gets its own copy (pydantic copies a mutable
default), so a change to one instance never shows in another."""

from __future__ import annotations

from agentwake.agent.providers import ScriptedSpec
from agentwake.agent.providers.scripted import ScriptStep, ScriptToolCall
from agentwake.domain.models import SessionConfig, Task


def test_a_mutable_default_is_never_shared_between_instances() -> None:
    # GIVEN two instances of each model built from its defaults
    pairs = [
        (
            Task(task_id="a", session_id="s", tool_name="t"),
            Task(task_id="b", session_id="s", tool_name="t"),
            "tool_args",
        ),
        (SessionConfig(session_id="a"), SessionConfig(session_id="b"), "prices"),
        (SessionConfig(session_id="a"), SessionConfig(session_id="b"), "tools"),
        (ScriptStep(), ScriptStep(), "tool_calls"),
        (ScriptToolCall(), ScriptToolCall(), "arguments"),
        (ScriptedSpec(), ScriptedSpec(), "script"),
    ]
    for first, second, name in pairs:
        # WHEN the first one's collection is changed in place
        value = getattr(first, name)
        if isinstance(value, dict):
            value["changed"] = 1
        else:
            value.append({"changed": 1})
        # THEN the second one still has an empty one
        assert getattr(second, name) in ({}, []), (type(first).__name__, name)
        assert getattr(type(first)(**_required(first)), name) in ({}, []), (type(first).__name__, name)


def _required(model: object) -> dict[str, object]:
    return {k: getattr(model, k) for k, f in type(model).model_fields.items() if f.is_required()}  # type: ignore[attr-defined]
