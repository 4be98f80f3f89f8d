"""``agentwake history show``: a session's conversation history, newest entries, oldest first."""

from __future__ import annotations

from typing import Annotated

import typer

from agentwake_ops import render
from agentwake_ops.cli_common import JsonOpt, check_id, fail, ops

app = typer.Typer(help="Read a session's conversation history.", no_args_is_help=True)


@app.command("show", epilog="Example: agentwake history show session-42 --last 10")
def history_show(
    ctx: typer.Context,
    session: Annotated[str, typer.Argument(help="The session id.", metavar="SESSION")],
    last: Annotated[int, typer.Option("--last", "-n", help="How many of the newest entries.", min=1)] = 20,
    as_json: JsonOpt = False,
) -> None:
    """Show the newest history entries of a session, oldest first (notes, markers, deliveries, messages)."""
    check_id(session, "session id")
    store = ops(ctx).store
    entries = store.history_window(session, last)
    if not entries and store.get_session(session) is None:
        fail(f"no session {session!r} (create it with: agentwake sessions put {session})")
    if as_json:
        render.print_json([e.model_dump(mode="json") for e in entries])
        return
    render.history_table(session, entries)
