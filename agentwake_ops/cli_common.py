"""What every CLI command shares: the state object, the lazily built OpsContext, output helpers.

Imports stay light (typer only): rich, boto3 and the store load when a command needs them, so that
``--help`` and commands that fail early answer at once.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NoReturn

import typer

from agentwake.redact import redact

if TYPE_CHECKING:
    from rich.console import Console
    from rich.panel import Panel

    from agentwake_ops.context import OpsContext, OpsOptions
    from agentwake_ops.plugins import InvokeAsync
    from agentwake_ops.progress import Progress


def _default_options() -> OpsOptions:
    from agentwake_ops.context import OpsOptions

    return OpsOptions()


JSON_HELP = "Print machine-parseable JSON instead of a table."
YES_HELP = "Do not ask for confirmation (required when stdin is not a terminal)."


@dataclass
class CliState:
    """``ctx.obj`` of every command. Tests pass one in (``CliRunner.invoke(app, ..., obj=...)``)
    to inject a ready context or an ``invoke_async``."""

    options: OpsOptions = field(default_factory=_default_options)
    context: OpsContext | None = None
    invoke_async: InvokeAsync | None = None
    env: Mapping[str, str] | None = None

    def ops(self) -> OpsContext:
        if self.context is None:
            from agentwake_ops.context import resolve_context

            self.context = resolve_context(self.options, self.env, invoke_async=self.invoke_async)
        return self.context


def state(ctx: typer.Context) -> CliState:
    obj = ctx.find_object(CliState)
    if obj is None:
        obj = ctx.ensure_object(CliState)
    return obj


def ops(ctx: typer.Context) -> OpsContext:
    return state(ctx).ops()


def console() -> Console:
    # created per call: it binds to the sys.stdout of the moment (CliRunner swaps it)
    from rich.console import Console

    return Console(highlight=False, soft_wrap=False)


def err_console() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def escape(text: str) -> str:
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def progress(as_json: bool) -> Progress:
    """A progress bar on stderr for a person watching; silent with --json or without a terminal."""
    from agentwake_ops.progress import for_cli

    return for_cli(as_json)


#: the rule the message model applies to task and session ids (agentwake.wake.messages.ID_PATTERN)
ID_RULE = "1-128 characters: letters, digits and _ . : @ -, starting with a letter or digit"


def check_id(value: str, what: str) -> str:
    """Refuse an id the message model would reject: it could never be woken, only get stuck."""
    from agentwake.wake.messages import ID_PATTERN
    from agentwake_ops.context import OpsError

    if not re.fullmatch(ID_PATTERN, value):
        raise OpsError(f"invalid {what} {value!r}: a {what} is {ID_RULE}")
    return value


def print_json(data: Any) -> None:
    """JSON on stdout, through the redactor like every CLI output (no bearer token or auth header)."""
    typer.echo(redact(json.dumps(data, indent=2, sort_keys=True, default=str)))


def fail(message: str, code: int = 1) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def confirm(question: str, yes: bool, *, what: str) -> None:
    """Ask, unless ``--yes``; refuse outright when nobody can answer (stdin is not a terminal)."""
    if yes:
        return
    if not sys.stdin.isatty():
        fail(f"refusing to {what} without confirmation: pass --yes (stdin is not a terminal)")
    if not typer.confirm(question, default=False):
        fail("aborted; nothing changed")


def user_error(message: str) -> Exception:
    """An OpsError (``error: <message>``, exit 1), built without importing the context at start-up."""
    from agentwake_ops.context import OpsError

    return OpsError(message)


def parse_json_option(value: str, option: str) -> Any:
    from agentwake_ops.context import OpsError

    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise OpsError(f"{option} is not valid JSON ({exc.msg} at position {exc.pos}): {value!r}") from exc


def age(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600}h"


def when(iso: str | None) -> str:
    """An ISO time as ``YYYY-MM-DD HH:MM:SS`` (UTC), or ``-``."""
    if not iso:
        return "-"
    try:
        moment = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return iso
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def dash(value: Any) -> str:
    return "-" if value in (None, "") else str(value)


__all__ = [
    "JSON_HELP",
    "YES_HELP",
    "CliState",
    "age",
    "confirm",
    "console",
    "dash",
    "err_console",
    "escape",
    "check_id",
    "fail",
    "progress",
    "ops",
    "parse_json_option",
    "print_json",
    "user_error",
    "state",
    "when",
]


def facts_panel(rows: Iterable[tuple[str, Any]], title: str) -> Panel:
    """A bold-label / value grid in a panel: how `runs show`, `dlq show` and `sessions show` print
    one record. Values are escaped; None shows as a dash."""
    from rich.panel import Panel
    from rich.table import Table

    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    for label, value in rows:
        grid.add_row(label, escape(dash(value)))
    return Panel(grid, title=title, expand=False)
