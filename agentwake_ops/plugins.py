"""Extension points of the operator CLI.

Other installed packages extend ``agentwake`` by registering here through the entry point group
``agentwake.cli`` (declared in their package metadata), so the CLI never imports them: the embedded
local AWS (``agentwake_local``) adds ``agentwake local …`` and ``agentwake invoke``, and tells the
CLI how to find a running local stack and invoke a function on it.

An entry point names a callable taking a :class:`Registry`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

ENTRY_POINT_GROUP = "agentwake.cli"

#: (function logical id, payload) -> a short description of what happened
InvokeAsync = Callable[[str, dict[str, Any]], Any]


@dataclass(frozen=True)
class LocalStackHooks:
    """What the CLI needs from a local stack, without knowing how it is built."""

    #: the running local stack's recorded state (endpoint, outputs, ...), or None when none runs
    read_state: Callable[[], dict[str, Any] | None]
    #: an asynchronous invoker running functions on that local stack
    invoker: Callable[[dict[str, Any]], InvokeAsync]


@dataclass
class Registry:
    """Handed to each plugin: what it may add to the CLI."""

    #: (sub-app, name) pairs added as ``agentwake NAME …``
    groups: list[tuple[Any, str]] = field(default_factory=list)
    #: (command function, name) pairs added as ``agentwake NAME``
    commands: list[tuple[Callable[..., Any], str]] = field(default_factory=list)
    local_stack: LocalStackHooks | None = None

    def add_group(self, app: Any, name: str) -> None:
        self.groups.append((app, name))

    def add_command(self, fn: Callable[..., Any], name: str) -> None:
        self.commands.append((fn, name))

    def set_local_stack(self, hooks: LocalStackHooks) -> None:
        self.local_stack = hooks


_registry: Registry | None = None


def registry() -> Registry:
    """Every installed plugin, loaded once per process. A plugin that fails to load is skipped
    (the CLI still works for deployed stacks); set AGENTWAKE_DEBUG=1 to see why."""
    global _registry
    if _registry is None:
        from importlib.metadata import entry_points

        reg = Registry()
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            try:
                ep.load()(reg)
            except Exception as exc:  # a broken optional extra must not break triage
                import os
                import sys

                if os.environ.get("AGENTWAKE_DEBUG"):
                    print(f"agentwake: plugin {ep.name} not loaded: {exc!r}", file=sys.stderr)
        _registry = reg
    return _registry


def local_stack() -> LocalStackHooks | None:
    return registry().local_stack
