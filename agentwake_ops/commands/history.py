"""``agentwake history show``: a session's conversation, read as a product reads it
(``agentwake.product.sessions.SessionsService.read_conversation``): the newest entries, shown oldest first."""

from __future__ import annotations

from typing import Annotated

import typer

from agentwake_ops import render
from agentwake_ops.cli_common import JsonOpt, WideOpt, check_id, fail, ops

app = typer.Typer(help="Read a session's conversation history.", no_args_is_help=True)


@app.command("show", epilog="Example: agentwake history show session-42 --last 10")
def history_show(
    ctx: typer.Context,
    session: Annotated[str, typer.Argument(help="The session id.", metavar="SESSION")],
    last: Annotated[
        int, typer.Option("--last", "-n", help="How many of the newest entries (at most 200).", min=1, max=200)
    ] = 20,
    before: Annotated[
        str | None,
        typer.Option("--before", help="Older entries: the cursor the previous page printed.", metavar="CURSOR"),
    ] = None,
    as_json: JsonOpt = False,
    wide: WideOpt = False,
) -> None:
    """Show the newest history entries of a session, oldest first (live turns, deliveries, markers, notes)."""
    from agentwake.product.sessions import SessionsService

    check_id(session, "session id")
    store = ops(ctx).store
    try:
        page = SessionsService(store).read_conversation(session, cursor=before, limit=last)
    except ValueError:
        fail(f"--before {before!r} is not a cursor this command printed")
    entries = list(reversed(page.entries))
    if not entries and store.records.get_session(session) is None:
        fail(f"no session {session!r} (create it with: agentwake sessions put {session})")
    if as_json:
        # each entry's ``sk`` is its cursor: ``--before`` the first one's reads the page before
        render.print_json([e.model_dump(mode="json") for e in entries])
        return
    render.history_table(session, entries, wide=wide)
    if page.cursor is not None:
        typer.echo(f"older entries: agentwake history show {session} --before {page.cursor}")
