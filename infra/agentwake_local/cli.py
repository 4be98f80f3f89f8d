"""``agentwake local ...`` and ``agentwake invoke``: the embedded local AWS from the command line.

    agentwake local up [--faithful] [--deployed-outbound]
                                             moto + template.yaml + SQS pollers + async queue + scheduler, until Ctrl-C
    agentwake local status                   the running local stack (endpoint, resources, functions)
    agentwake local seed                     create what events/ names (local up does it unless --no-seed)
    agentwake local env [--docker-host H]    env.json for `sam local invoke --env-vars`
    agentwake invoke FUNCTION -e events/X.json [--env-vars env.json] [--deployed-outbound]
                                             run a function as `sam local invoke` would, without Docker:
                                             on the running local stack, or on a throwaway one

The local stack lets its functions reach loopback over plain http (``LOCAL_OUTBOUND_ENV``); the
deployed template does not. ``--deployed-outbound``, or an ``--env-vars`` file that sets
``AGENTWAKE_OUTBOUND_ALLOW_LOOPBACK`` / ``AGENTWAKE_OUTBOUND_ALLOW_HTTP``, gives them the deployed policy.

Registered with the operator CLI by ``agentwake_local.cli_plugin`` (entry point group
``agentwake.cli``): ``app`` becomes ``agentwake local`` and ``invoke`` the top-level
``agentwake invoke``. Needs typer (the ``ops`` extra) and the ``local`` extra.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Annotated, Any

import typer

from agentwake_local import timing
from agentwake_local.http_api import AUTHORIZATION_NOTE
from agentwake_local.moto_patches import MotoPatchError
from agentwake_local.stack import LocalStackRuntime, read_state, state_path
from agentwake_local.template import TemplateError

app = typer.Typer(
    name="local",
    help="The embedded local AWS: a moto server provisioned from template.yaml, no account, no Docker.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

TemplateOption = Annotated[
    Path | None,
    typer.Option(
        "--template",
        "-t",
        help="SAM template to provision (default: template.yaml here or in a parent directory, "
        "else the agentwake repository's).",
        dir_okay=False,
    ),
]
TEMPLATE_NAME = "template.yaml"

DeployedOutboundOption = Annotated[
    bool,
    typer.Option(
        "--deployed-outbound",
        help="The deployed outbound policy (https only, no loopback), as template.yaml sets it; "
        "default: the local stack allows loopback and plain http.",
    ),
]


def find_template(given: Path | None, cwd: Path | None = None) -> Path:
    """The template to provision: ``given``, else ``template.yaml`` in ``cwd`` or a parent, else the
    one of the repository this package runs from. Exits with a message saying how to point at one."""
    if given is not None:
        if not given.is_file():
            typer.echo(f"error: no template at {given} (give the path of a SAM template.yaml)", err=True)
            raise typer.Exit(2)
        return given
    here = (cwd or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        if (directory / TEMPLATE_NAME).is_file():
            return directory / TEMPLATE_NAME
    repository = Path(__file__).resolve().parents[2] / TEMPLATE_NAME  # an editable install of agentwake
    if repository.is_file():
        return repository
    typer.echo(
        f"error: no {TEMPLATE_NAME} in {here} or any parent directory.\n"
        "  run from the agentwake repository, or point at a template:   agentwake local up --template PATH",
        err=True,
    )
    raise typer.Exit(2)


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
    template: TemplateOption = None,
    parameter_overrides: OverridesOption = None,
    host: Annotated[str, typer.Option(help="Address to bind (0.0.0.0 lets Docker containers reach it).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port (0: any free port).")] = 0,
    visibility_timeout_override: Annotated[
        int | None,
        typer.Option(
            help=f"Seconds before a failed SQS record is received again (default: "
            f"{timing.LOCAL_VISIBILITY_TIMEOUT_S}; with --faithful: the queue's own VisibilityTimeout)."
        ),
    ] = None,
    faithful: Annotated[
        bool,
        typer.Option(
            "--faithful",
            help="AWS's timing: the template's visibility timeouts, Lambda's async retry delays (1 then 2 "
            "minutes), Scheduler's retry backoff. Default: all of them shortened for people at a keyboard.",
        ),
    ] = False,
    seed: Annotated[
        bool, typer.Option("--seed/--no-seed", help="Create the sessions, tasks and job that events/ names.")
    ] = True,
    deployed_outbound: DeployedOutboundOption = False,
) -> None:
    """Run the local stack until Ctrl-C: SQS pollers, the async queue and the scheduler on background threads."""
    if not logging.getLogger().handlers:  # one line per invocation from the pollers/async queue
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
        logging.getLogger("botocore").setLevel(logging.WARNING)
    chosen = timing.faithful() if faithful else timing.local()
    if visibility_timeout_override is not None:
        chosen = dataclasses.replace(chosen, visibility_timeout_override=visibility_timeout_override)
    template = find_template(template)
    try:
        runtime = LocalStackRuntime(
            server_host=host, server_port=port, timing=chosen, deployed_outbound=deployed_outbound
        ).start(template, _overrides(parameter_overrides), background=True)
    except (TemplateError, MotoPatchError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    typer.echo(f"local stack {runtime.stack_name} on {runtime.endpoint_url}  (template {template})")
    if runtime.api_url:
        typer.echo(f"product API on {runtime.api_url}  ({AUTHORIZATION_NOTE})")
    typer.echo(chosen.describe())
    if deployed_outbound:
        typer.echo("outbound: the deployed policy (https only, no loopback)")
    if seed and "AgentTableName" in runtime.outputs:
        created = runtime.seed()
        typer.echo(f"seeded what events/ names: {', '.join(created) or 'already there'}")
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


@app.command("seed")
def seed_command() -> None:
    """Create the sessions, tasks and job that the sample events in events/ name, on the running stack."""
    state = read_state()
    if state is None:
        typer.echo(
            f"error: no local stack is running (no live {state_path()}); start one: agentwake local up", err=True
        )
        raise typer.Exit(1)
    try:
        created = LocalStackRuntime.attach(state=state).seed()
    except RuntimeError as exc:  # a template without agentwake's table
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"seeded: {', '.join(created)}" if created else "already seeded: nothing to create")


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


def _env_vars(path: Path | None, function: str) -> dict[str, str]:
    """Environment overrides from a `sam local invoke --env-vars` file: ``Parameters`` (all
    functions), then the function's own block. Like sam, only variables the template declares."""
    if path is None:
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise typer.BadParameter(f"cannot read {path}: {exc}", param_hint="--env-vars") from exc
    if not isinstance(data, dict):
        raise typer.BadParameter(f"{path} must hold a JSON object", param_hint="--env-vars")
    merged: dict[str, str] = {}
    for block in (data.get("Parameters"), data.get(function)):
        if isinstance(block, dict):
            merged.update({str(k): str(v) for k, v in block.items()})
    return merged


NO_STACK_HELP = (
    "no local stack is running and no AWS_ENDPOINT_URL is set.\n"
    "  start one in another terminal:   agentwake local up\n"
    "  or run on an empty, throwaway stack:   agentwake invoke FUNCTION -e EVENT --throwaway\n"
    "  (against a deployed stack use `sam remote invoke`, or `sam local invoke` with Docker)"
)


@app.command("invoke")
def invoke(
    function: Annotated[str, typer.Argument(help="Logical id (or name/ARN) of a function in the template.")],
    event: Annotated[str | None, typer.Option("--event", "-e", help="Event JSON file ('-' for stdin).")] = None,
    env_vars: Annotated[
        Path | None,
        typer.Option(
            "--env-vars", "-n", help="JSON file of environment overrides, as for `sam local invoke`.", dir_okay=False
        ),
    ] = None,
    template: TemplateOption = None,
    parameter_overrides: OverridesOption = None,
    asynchronous: Annotated[
        bool, typer.Option("--async", help="Invoke as Event: retries, then the on-failure destination.")
    ] = False,
    throwaway: Annotated[
        bool, typer.Option("--throwaway", help="No local stack running: provision an empty one for this call.")
    ] = False,
    deployed_outbound: DeployedOutboundOption = False,
) -> None:
    """Run FUNCTION with an event as `sam local invoke` would, without Docker.

    Handler, timeout and environment come from the template; variables from --env-vars win over the local stack's own (its outbound allowances too, so an env file with AGENTWAKE_OUTBOUND_ALLOW_LOOPBACK=false gets the deployed policy). It runs on the local stack that `agentwake local up` keeps running, or on the endpoint AWS_ENDPOINT_URL names (resources missing there are provisioned from the template), or with --throwaway on an empty stack removed afterwards. Prints the response; a function error exits with status 1.

    Example: agentwake invoke BackgroundResultFunction -e events/background-result-success.json
    """
    import os

    payload = _read_event(event)
    state = read_state()
    owned = state is None
    strict: dict[str, Any] = {"deployed_outbound": True} if deployed_outbound else {}
    if state is not None:
        runtime = LocalStackRuntime.attach(state=state, **strict)
        where = f"the local stack at {runtime.endpoint_url}"
    elif os.environ.get("AWS_ENDPOINT_URL"):
        endpoint = os.environ["AWS_ENDPOINT_URL"]
        runtime = LocalStackRuntime(write_state=False, timing=timing.local(), **strict).start(
            find_template(template), _overrides(parameter_overrides), endpoint_url=endpoint
        )
        where = f"the endpoint {endpoint} (AWS_ENDPOINT_URL)"
    elif throwaway:
        runtime = LocalStackRuntime(write_state=False, timing=timing.local(), **strict).start(
            find_template(template), _overrides(parameter_overrides)
        )
        where = f"a throwaway local stack at {runtime.endpoint_url}"
    else:
        typer.echo(f"error: {NO_STACK_HELP}", err=True)
        raise typer.Exit(2)
    try:
        try:
            function = runtime.stack.function(function).logical_id
        except KeyError as exc:
            typer.echo(f"error: {exc.args[0]}", err=True)
            raise typer.Exit(2) from None
        typer.echo(f"invoking {function} on {where}", err=True)
        overrides = _env_vars(env_vars, runtime.stack.function(function).logical_id)
        if overrides:
            spec = runtime.stack.function(function)
            undeclared = sorted(set(overrides) - set(spec.environment))
            if undeclared:
                typer.echo(f"ignoring variables the template does not declare: {', '.join(undeclared)}", err=True)
            # over everything, the local stack's allowances included (as sam's --env-vars win)
            runtime.override_env(function, {k: v for k, v in overrides.items() if k in spec.environment})
        # like sam local invoke: the function's logs on stderr, only the response on stdout
        with contextlib.redirect_stdout(sys.stderr):
            if asynchronous:
                outcome: Any = runtime.invoke_async(function, payload, wait=True).wait()
            else:
                result = runtime.invoke(function, payload)
        if asynchronous:
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
            _echo_json(result.error if result.error is not None else result.response)
            failed = result.error is not None
    finally:
        if owned:
            runtime.stop()
    if failed:
        raise typer.Exit(1)


if __name__ == "__main__":  # pragma: no cover
    app()
