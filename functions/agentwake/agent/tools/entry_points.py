"""Python tools from the deployer's own code: entry points of the group ``agentwake.tools``.

A package declares, in its pyproject.toml::

    [project.entry-points."agentwake.tools"]
    word_count = "my_tools:WordCount"

and a session names ``{"type": "python", "name": "word_count"}``. The entry point may be a ``Tool``
subclass (instantiated with no arguments), a ``Tool`` instance, or a function returning one. The tool
must declare ``side_effect`` (``True``: it changes something outside, is called with
``ctx.idempotency_key`` and never by a replay; ``False``: it only reads): one that does not is
refused when the session's tools are built, since a silent "no effects" would let a replay call it.
Entry points are looked up (``importlib.metadata``) only when a session names such a tool, and each
is loaded once per process: the first wake that needs it pays the import, later ones reuse it.
"""

from __future__ import annotations

import threading
from typing import Any

from agentwake.agent.tools import Tool, serialize_calls
from agentwake.errors import ConfigError

GROUP = "agentwake.tools"

_loaded: dict[str, Tool] = {}
_lock = threading.Lock()


def installed() -> dict[str, Any]:
    """Entry points of the group, by name."""
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=GROUP)}


def load_tool(name: str, *, session_id: str = "?") -> Tool:
    """The tool of entry point ``name``; ConfigError if it is not installed or is not a tool."""
    with _lock:
        if name in _loaded:
            return _loaded[name]
        available = installed()
        ep = available.get(name)
        if ep is None:
            raise ConfigError(missing_tool_message(name, session_id, available))
        try:
            target = ep.load()
        except Exception as exc:
            raise ConfigError(
                f"Python tool {name!r} ({ep.value}) cannot be loaded: {type(exc).__name__}: {exc}"
            ) from exc
        tool = _instantiate(target, name, ep.value)
        _check_declared(tool, name, ep.value)
        serialize_calls(tool)  # one instance for every run of the process: records run side by side
        _loaded[name] = tool
        return tool


def missing_tool_message(name: str, session_id: str, available: dict[str, Any] | None = None) -> str:
    """Why a Python tool is not there, and what to do on each kind of stack (docs/tools.md)."""
    names = ", ".join(sorted(installed() if available is None else available)) or "none"
    return (
        f"session {session_id} names Python tool {name!r}, but no package installs an entry point "
        f"{name!r} in group {GROUP!r} (installed: {names}); on the local stack: install the package into "
        "the environment that runs `agentwake local up` (e.g. .venv/bin/pip install PATH) and restart it; "
        "for `sam build`: add the package to functions/requirements.txt (docs/tools.md)"
    )


def _instantiate(target: Any, name: str, where: str) -> Tool:
    if isinstance(target, Tool):
        return target
    if isinstance(target, type) and issubclass(target, Tool):
        return target()
    if callable(target):
        made = target()
        if isinstance(made, Tool):
            return made
    raise ConfigError(
        f"Python tool {name!r} ({where}) is not an agentwake Tool (a Tool subclass, instance, or factory)"
    )


def _check_declared(tool: Tool, name: str, where: str) -> None:
    if not isinstance(tool.side_effect, bool):
        raise ConfigError(
            f"Python tool {name!r} ({where}) does not declare side_effect: set side_effect = True on the tool "
            "if it changes anything outside agentwake (it is then called with ctx.idempotency_key and never "
            "in a replay), or side_effect = False if it only reads (docs/tools.md)"
        )
