"""Tools a session's config declares besides ``send_message_to_user`` (docs/tools.md).

    {"type": "http", "name": "create_ticket", "description": "...", "parameters": {JSON Schema},
     "url": "https://...", "method": "POST", "secret_ref": "env:AGENTWAKE_SECRET_TICKETS",
     "timeout": 10, "side_effect": true}
    {"type": "python", "name": "word_count"}      # an entry point of group ``agentwake.tools``

An HTTP tool whose method is not GET/HEAD is side-effecting unless it says ``"side_effect": false``;
a Python tool's class declares ``side_effect`` (True or False) or is refused here (docs/tools.md).
Either may say ``"background": true``: the model's call then starts a task (``BackgroundTool``) and the
background-work function calls the tool (docs/background-work.md).

Imported only when a session declares tools, so sessions without them load none of this.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from agentwake.agent.tools import TaskStarter, Tool
from agentwake.agent.tools.http import TOOL_NAME, HttpToolSpec
from agentwake.domain.approvals import check_approval
from agentwake.errors import ConfigError, describe_validation_error

RESERVED = frozenset({"send_message_to_user"})


class PythonToolSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["python"] = "python"
    #: the entry point's name in the ``agentwake.tools`` group
    name: str = Field(pattern=TOOL_NAME)
    #: run as a background task (as an HTTP tool's ``background``; docs/background-work.md)
    background: bool = False
    deadline_s: int | None = Field(default=None, ge=60, le=7 * 86_400)
    #: ask a person before a call runs (agentwake.domain.approvals, docs/tools.md)
    approval: str | dict[str, Any] | None = None

    _approval = field_validator("approval")(check_approval)


ToolConfig = Annotated[HttpToolSpec | PythonToolSpec, Field(discriminator="type")]
_ADAPTER: TypeAdapter[Any] = TypeAdapter(ToolConfig)


def parse_tool_spec(raw: Any) -> HttpToolSpec | PythonToolSpec:
    if not isinstance(raw, dict):
        raise ConfigError(f'a tool spec must be an object like {{"type": "http", ...}}, got {type(raw).__name__}')
    try:
        return _ADAPTER.validate_python(raw)  # type: ignore[no-any-return]
    except ValidationError as exc:
        problems = describe_validation_error(exc, whole="(spec)")
        raise ConfigError(f"invalid tool spec {raw.get('name')!r} (type {raw.get('type')!r}): {problems}") from exc


def build_tools(
    specs: list[dict[str, Any]],
    *,
    session_id: str = "?",
    starter: TaskStarter | None = None,
    run_background: bool = False,
) -> list[Tool]:
    """The session's declared tools, built. Raises ConfigError for anything that cannot be built
    (a bad spec, a duplicate or reserved name, an invalid schema, a Python tool not installed).

    A ``background`` tool is offered as a ``BackgroundTool`` that starts a task through ``starter``;
    ``run_background``: the background-work function's own build, where it is the tool itself."""
    tools: list[Tool] = []
    seen: set[str] = set()
    for raw in specs:
        spec = parse_tool_spec(raw)
        if spec.name in RESERVED or spec.name in seen:
            raise ConfigError(f"session {session_id} declares tool {spec.name!r} twice or over a built-in tool")
        seen.add(spec.name)
        if isinstance(spec, HttpToolSpec):
            from agentwake.agent.tools.http import HttpTool

            tool: Tool = HttpTool(spec)
        else:
            from agentwake.agent.tools.entry_points import load_tool

            tool = load_tool(spec.name, session_id=session_id)
            if tool.name != spec.name:
                raise ConfigError(f"entry point {spec.name!r} gives a tool named {tool.name!r}; the names must agree")
        if spec.background and not run_background:
            from agentwake.agent.tools.background import BackgroundTool

            tool = BackgroundTool(tool, starter, deadline_s=spec.deadline_s)
        if spec.approval is not None and not run_background:
            # the call in the run is what waits for a person (a background tool: the start of its
            # task); the background-work function's own build runs what was already approved
            from agentwake.domain.approvals import parse_rule

            tool.approval = parse_rule(spec.approval)
        tools.append(tool)
    return tools
