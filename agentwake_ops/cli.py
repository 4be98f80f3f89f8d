"""``agentwake``: the operator CLI (typer + rich, from the ``ops`` extra; never imported by a handler).

    agentwake dlq list                      why is each message in a DLQ?
    agentwake dlq show ID                   every failed attempt, steps journaled, deliveries made
    agentwake sessions put S --provider ... fix the cause
    agentwake dlq redrive --id ID           resume the run where it stopped

Resources are found from the AGENTWAKE_* variables, a running local stack, or the CloudFormation
outputs of --stack-name (see ``agentwake_ops.context``).
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer
from typer.core import TyperGroup
from typer.exceptions import TyperException

from agentwake_ops import cli_replay
from agentwake_ops.cli_common import CliState, error_message, state, user_errors
from agentwake_ops.commands import approvals, console, dlq, history, jobs, runs, sessions, tasks
from agentwake_ops.terminal import inert

#: typer's type labels in --help, as a person reads them
_PLAIN_TYPES = {"str": "TEXT", "int": "INTEGER", "float": "NUMBER", "path": "PATH", "file": "FILE", "bool": ""}


def _plain_metavars() -> None:
    """``--help`` shows ``TEXT``/``INTEGER`` and nothing for flags, not typer's ``<bool>``/``<list[str]>``."""
    from typer import core

    for cls in (core.TyperOption, core.TyperArgument):
        original = cls.display_type_rich
        if getattr(original, "_agentwake_plain", False):
            continue

        def display(self: Any, ctx: Any, _original: Any = original) -> str | None:
            if getattr(self, "is_flag", False) or getattr(self, "count", False):
                return None
            if self.metavar is not None:
                return str(self.metavar)
            label = _original(self, ctx)
            if label is None:
                return None
            bare = str(label).removesuffix("...").strip("<>").removeprefix("list[").removesuffix("]")
            bare = bare.removesuffix(" range")
            plain = _PLAIN_TYPES.get(bare, bare.upper())
            return plain or None

        display._agentwake_plain = True  # type: ignore[attr-defined]
        cls.display_type_rich = display  # type: ignore[method-assign]


_plain_metavars()


def _option_names_whole() -> None:
    """At 80 columns an option's help gives way, never its name. Rich shares a row that does not
    fit by narrowing its widest wrappable columns together, the option names' column too
    (``--visibility-timeout-ov…``): every column of typer's help tables but the last (the help
    text) is made unwrappable, and a help word longer than its column folds rather than ending
    in an ellipsis (``$AGENTWAKE_HOME/local.log``)."""
    from rich.table import Table
    from rich.text import Text
    from typer import rich_utils

    if getattr(rich_utils.Table, "_agentwake_names_whole", False):
        return

    class HelpTable(Table):
        _agentwake_names_whole = True

        def add_row(self, *renderables: Any, **kwargs: Any) -> None:
            super().add_row(*renderables, **kwargs)
            for column in self.columns[:-1]:
                column.no_wrap = True
            last = renderables[-1] if renderables else None
            for part in getattr(last, "renderables", [last]):
                if isinstance(part, Text):
                    part.overflow = "fold"

    rich_utils.Table = HelpTable  # type: ignore[misc]


class OpsGroup(TyperGroup):
    """Turns the errors an operator can fix into ``error: <one line>`` and exit code 1 (no traceback).

    Plugin commands (``agentwake local …``, ``agentwake invoke``: see ``agentwake_ops.plugins``) are
    loaded only when a command is not one of the CLI's own, or when the root ``--help`` lists them,
    so every other command starts without importing them.
    """

    def list_commands(self, ctx: Any) -> list[str]:
        names = list(super().list_commands(ctx))
        return names + [n for n in _plugin_commands() if n not in names]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if command is None:
            command = _plugin_commands().get(cmd_name)
        return command

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if "--help" in args or len(args) < 2:  # help is printed (a group without a command prints it)
            _option_names_whole()  # here, not at import: a command that prints no help never loads rich
        return list(super().parse_args(ctx, args))

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, TyperException):
            raise
        except user_errors() as exc:
            typer.echo(f"error: {inert(error_message(exc))}", err=True)
            raise typer.Exit(1) from None


app = typer.Typer(
    cls=OpsGroup,
    name="agentwake",
    help=(
        "Operate agentwake: triage and redrive the dead-letter queues, read runs and history, "
        "manage jobs, sessions and background tasks, decide approval requests."
    ),
    epilog="Example: agentwake --region eu-west-1 dlq list",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root(
    ctx: typer.Context,
    stack_name: Annotated[
        str | None,
        typer.Option(
            "--stack-name",
            envvar="AGENTWAKE_STACK_NAME",
            help="CloudFormation stack to read outputs from (default: agentwake; giving it skips the local stack).",
        ),
    ] = None,
    region: Annotated[
        str | None, typer.Option("--region", help="AWS region (default: the profile's or AWS_REGION).")
    ] = None,
    profile: Annotated[str | None, typer.Option("--profile", help="AWS named profile (default: AWS_PROFILE).")] = None,
) -> None:
    from agentwake_ops.context import OpsOptions

    obj = ctx.ensure_object(CliState)
    obj.options = OpsOptions(stack_name=stack_name, region=region, profile=profile)
    state(ctx)


app.add_typer(dlq.app, name="dlq")
runs.app.command(
    "replay",
    epilog='Example: agentwake runs replay bg:task-1234 --provider \'{"type":"bedrock","model_id":"amazon.nova-lite-v1:0"}\'',
)(cli_replay.runs_replay)
app.add_typer(runs.app, name="runs")
app.add_typer(history.app, name="history")
app.add_typer(jobs.app, name="jobs")
app.add_typer(sessions.app, name="sessions")
app.add_typer(tasks.app, name="tasks")
app.add_typer(approvals.app, name="approvals")
app.command("console", epilog="Example: agentwake console --port 8765  (then open the URL it prints)")(console.console)


_PLUGIN_COMMANDS: dict[str, Any] | None = None


def _plugin_commands() -> dict[str, Any]:
    """The click commands other packages register (see ``agentwake_ops.plugins``), built once."""
    global _PLUGIN_COMMANDS
    if _PLUGIN_COMMANDS is None:
        from agentwake_ops.plugins import registry

        reg = registry()
        holder = typer.Typer()
        for sub_app, name in reg.groups:
            holder.add_typer(sub_app, name=name)
        for fn, name in reg.commands:
            holder.command(name)(fn)
        group = typer.main.get_group(holder) if (reg.groups or reg.commands) else None
        _PLUGIN_COMMANDS = {}
        if group is not None:
            for name in group.list_commands(None):  # type: ignore[arg-type]
                _PLUGIN_COMMANDS[name] = group.get_command(None, name)  # type: ignore[arg-type]
    return _PLUGIN_COMMANDS


def main(argv: list[str] | None = None) -> int:
    """The console script: ``agentwake = agentwake_ops.cli:main``."""
    try:
        app(args=argv, prog_name="agentwake", standalone_mode=True)
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
