"""``agentwake console``: the operator's web UI on 127.0.0.1 (``agentwake_ops.console``), on the
stack every command finds (AGENTWAKE_* variables, a running local stack, or --stack-name's outputs)."""

from __future__ import annotations

from typing import Annotated

import typer

from agentwake_ops.cli_common import ops, state


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
        server, console_ = make_server(context, port, metrics=_cloudwatch(ctx, context))
    except OSError as exc:
        from agentwake_ops.context import OpsError

        raise OpsError(f"cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}") from None
    typer.echo(f"agentwake console for {context.description}")
    typer.echo(f"open: {url(console_)}", err=False)
    typer.echo("(the URL holds a token made for this start: every request needs it; Ctrl-C stops the console)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def _cloudwatch(ctx: typer.Context, context: object) -> object | None:
    """A CloudWatch client with the operator's credentials when the stack was found through
    CloudFormation (on AWS); None for the local stack and the AGENTWAKE_* variables."""
    description = str(getattr(context, "description", ""))
    if not description.startswith("CloudFormation stack"):
        return None
    import boto3

    options = state(ctx).options
    sqs = getattr(context, "sqs", None)
    region = getattr(getattr(sqs, "meta", None), "region_name", None) or options.region
    return boto3.Session(profile_name=options.profile).client("cloudwatch", region_name=region)
