"""What every CLI command shares: the state object, the lazily built OpsContext, option types and
the checks and prompts of user input. How output looks is ``agentwake_ops.render``.

Imports stay light (typer only): rich, boto3 and the store load when a command needs them, so that
``--help`` and commands that fail early answer at once.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

if TYPE_CHECKING:
    from agentwake_ops.context import OpsContext, OpsOptions
    from agentwake_ops.plugins import InvokeAsync
    from agentwake_ops.progress import Progress


def _default_options() -> OpsOptions:
    from agentwake_ops.context import OpsOptions

    return OpsOptions()


JSON_HELP = "Print machine-parseable JSON instead of a table."
YES_HELP = "Do not ask for confirmation (required when stdin is not a terminal)."
JsonOpt = Annotated[bool, typer.Option("--json", help=JSON_HELP)]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help=YES_HELP)]
WIDE_HELP = "Every column, nothing folded, however wide (ids whole); by default the table fits the terminal."
WideOpt = Annotated[bool, typer.Option("--wide", help=WIDE_HELP)]


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


def fail(message: str, code: int = 1) -> NoReturn:
    from agentwake_ops.terminal import inert

    typer.echo(f"error: {inert(message)}", err=True)
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


def user_errors() -> tuple[type[BaseException], ...]:
    """The errors an operator can fix: one ``error:`` line, no traceback."""
    from botocore.exceptions import BotoCoreError, ClientError
    from pydantic import ValidationError

    from agentwake.errors import AgentwakeError
    from agentwake.jobs.service import JobError
    from agentwake_ops.context import OpsError

    return (OpsError, AgentwakeError, JobError, ValidationError, ClientError, BotoCoreError, OSError)


def error_message(exc: BaseException) -> str:
    """One line for an error the operator can act on (the CLI's ``error:`` line, the console's error page)."""
    from botocore.exceptions import ClientError
    from pydantic import ValidationError

    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        op = getattr(exc, "operation_name", "") or "AWS call"
        return f"{op} failed: {err.get('Code', 'ClientError')}: {err.get('Message', '')}".rstrip(": ")
    if isinstance(exc, ValidationError):
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(value)'}: {e['msg']}" for e in exc.errors()[:5])
        return f"invalid {exc.title}: {problems}"
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    text = " ".join(str(exc).split())
    return text or type(exc).__name__
