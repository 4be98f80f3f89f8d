"""``agentwake console``: the operator's web UI on 127.0.0.1 (``agentwake_ops.console``), on the
stack every command finds (AGENTWAKE_* variables, a running local stack, or --stack-name's outputs)."""

from __future__ import annotations

from typing import Annotated

import typer

from agentwake_ops.cli_common import ops


def console(
    ctx: typer.Context,
    port: Annotated[int, typer.Option("--port", help="Port on 127.0.0.1 (0: any free port).", min=0, max=65535)] = 8765,
) -> None:
    """Serve the console (DLQ, runs and their timelines, replay, redrive) on 127.0.0.1 until Ctrl-C.

    It prints a URL with a token made for this start: every request needs it.
    """
    from agentwake_ops.console.server import make_server, url

    context = ops(ctx)
    try:
        server, console_ = make_server(context, port)
    except OSError as exc:
        from agentwake_ops.context import OpsError

        raise OpsError(f"cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}") from None
    typer.echo(f"agentwake console for {context.description}")
    typer.echo(f"open: {url(console_)}", err=False)
    typer.echo("(the token in the URL is required on every request; Ctrl-C stops the console)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
