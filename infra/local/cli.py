"""``agentwake local ...`` and ``agentwake invoke``: the embedded local AWS from the command line.

    agentwake local up                       moto + template.yaml + SQS pollers + async queue, until Ctrl-C
    agentwake local status                   the running local stack (endpoint, resources, functions)
    agentwake local env [--docker-host H]    env.json for `sam local invoke --env-vars`
    agentwake invoke FUNCTION -e events/X.json
                                             run a function as `sam local invoke` would, without Docker:
                                             on the running local stack, or on a throwaway one

Loaded by ``agentwake.ops.cli`` when installed (``app`` becomes ``agentwake local``; ``register``
adds the top-level ``invoke``). Needs typer (the ``ops`` extra) and the ``local`` extra.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Annotated, Any

import typer

from infra.local.stack import LocalStackRuntime, read_state, state_path

app = typer.Typer(
    name="local",
    help="The embedded local AWS: a moto server provisioned from template.yaml, no account, no Docker.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

TemplateOption = Annotated[Path, typer.Option("--template", "-t", help="SAM template to provision.", dir_okay=False)]
OverridesOption = Annotated[
    list[str] | None,
    typer.Option("--parameter-overrides", "-p", help="Template parameter as Key=Value (repeatable)."),
]


def _overrides(pairs: list[str] | None) -> dict[str, str]:
    overrides: dict[str, str] = {}
    for pair in pairs or []:
        for item in pair.split():
            key, sep, value = item.partition("=")
            if not sep:
                raise typer.BadParameter(f"expected Key=Value, got {item!r}", param_hint="--parameter-overrides")
            overrides[key.removeprefix("ParameterKey=")] = value
    return overrides


def _echo_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, default=str))


@app.command()
def up(
    template: TemplateOption = Path("template.yaml"),
    parameter_overrides: OverridesOption = None,
    host: Annotated[str, typer.Option(help="Address to bind (0.0.0.0 lets Docker containers reach it).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port (0: any free port).")] = 0,
    visibility_timeout_override: Annotated[
        int | None,
        typer.Option(help="Seconds before a failed SQS record is retried (default: the queue's own timeout)."),
    ] = None,
) -> None:
    """Run the local stack until Ctrl-C: pollers and the async queue on background threads."""
    if not logging.getLogger().handlers:  # one line per invocation from the pollers/async queue
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
        logging.getLogger("botocore").setLevel(logging.WARNING)
    runtime = LocalStackRuntime(server_host=host, server_port=port).start(
        template, _overrides(parameter_overrides), visibility_timeout_override, background=True
    )
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    typer.echo(f"local stack {runtime.stack_name} on {runtime.endpoint_url}")
    typer.echo(f"state: {state_path()}  env.json: {state_path().parent / 'env.json'}")
    for logical_id, resource in runtime.stack.resources.items():
        if resource.provisioned:
            typer.echo(f"  {logical_id:<28} {resource.ref}")
    for poller in runtime.pollers:
        typer.echo(f"  polling {poller.queue_url} -> {poller.function.logical_id}")
    typer.echo("Ctrl-C to stop")
    try:
        while not stop.wait(0.5):
            pass
    finally:
        runtime.stop()
        typer.echo("stopped")


@app.command()
def status() -> None:
    """The running local stack, as recorded in $AGENTWAKE_HOME/local.json."""
    state = read_state()
    if state is None:
        typer.echo(f"no local stack is running (no live {state_path()})", err=True)
        raise typer.Exit(1)
    _echo_json(state)


@app.command("env")
def env_json(
    docker_host: Annotated[
        str | None,
        typer.Option(help="Host a container reaches the server at, e.g. host.docker.internal."),
    ] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write to this file.")] = None,
) -> None:
    """env.json for `sam local invoke --env-vars` pointing at the running local stack."""
    runtime = LocalStackRuntime.attach()
    endpoint = runtime.endpoint_url
    if docker_host:
        port = endpoint.rsplit(":", 1)[-1]
        endpoint = f"http://{docker_host}:{port}"
    data = runtime.env_json(output, endpoint_url=endpoint)
    if output is None:
        _echo_json(data)


def _read_event(event: str | None) -> Any:
    if event is None:
        return {}
    text = sys.stdin.read() if event == "-" else Path(event).read_text(encoding="utf-8")
    return json.loads(text) if text.strip() else {}


@app.command("invoke")
def invoke(
    function: Annotated[str, typer.Argument(help="Logical id (or name/ARN) of a function in the template.")],
    event: Annotated[str | None, typer.Option("--event", "-e", help="Event JSON file ('-' for stdin).")] = None,
    template: TemplateOption = Path("template.yaml"),
    parameter_overrides: OverridesOption = None,
    asynchronous: Annotated[
        bool, typer.Option("--async", help="Invoke as Event: retries, then the on-failure destination.")
    ] = False,
) -> None:
    """Run FUNCTION with an event as `sam local invoke` would, without Docker.

    On the running local stack if there is one (`agentwake local up`), else on a throwaway one
    provisioned from the template. Prints the response; a function error exits with status 1.
    """
    payload = _read_event(event)
    state = read_state()
    if state is not None:
        runtime = LocalStackRuntime.attach(state=state)
        typer.echo(f"on the local stack at {runtime.endpoint_url}", err=True)
    else:
        runtime = LocalStackRuntime(write_state=False).start(template, _overrides(parameter_overrides))
        typer.echo(f"on a throwaway local stack at {runtime.endpoint_url}", err=True)
    try:
        if asynchronous:
            outcome = runtime.invoke_async(function, payload, wait=True).wait()
            _echo_json(
                {
                    "requestId": outcome.request_id,
                    "condition": outcome.condition,
                    "approximateInvokeCount": outcome.approximate_invoke_count,
                    "destination": outcome.destination.arn if outcome.destination else None,
                    "record": outcome.record,
                }
            )
            failed = not outcome.ok
        else:
            result = runtime.invoke(function, payload)
            _echo_json(result.error if result.error is not None else result.response)
            failed = result.error is not None
    finally:
        if state is None:
            runtime.stop()
    if failed:
        raise typer.Exit(1)


def register(root: typer.Typer) -> None:
    """Add ``agentwake invoke`` at the top level (``sam local invoke`` without Docker)."""
    root.command("invoke")(invoke)


if __name__ == "__main__":  # pragma: no cover
    app()
