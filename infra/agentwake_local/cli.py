"""``agentwake local ...`` and ``agentwake invoke``: the embedded local AWS from the command line.

    agentwake local up [--faithful] [--deployed-outbound]
                                             moto + template.yaml + SQS pollers + async queue + scheduler, until Ctrl-C
    agentwake local status [--json]          the running local stack: endpoint, functions, queue depths
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
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from agentwake_local import activity, timing
from agentwake_local.http_api import AUTHORIZATION_NOTE
from agentwake_local.moto_patches import MotoPatchError
from agentwake_local.stack import (
    DEFAULT_LOCAL_NAME,
    LOCAL_NAME_ENV,
    LocalStackRunning,
    LocalStackRuntime,
    SeveralLocalStacks,
    chosen_name,
    env_path,
    log_path,
    read_state,
    running_stacks,
    state_path,
)
from agentwake_local.stop_signals import StopSignals
from agentwake_local.template import TemplateError
from agentwake_ops.terminal import inert

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


NameOption = Annotated[
    str | None,
    typer.Option(
        "--name",
        envvar=LOCAL_NAME_ENV,
        help=f"Which local stack: its name ({LOCAL_NAME_ENV}; default: the one that runs, '{DEFAULT_LOCAL_NAME}' for up).",
    ),
]


def _name(name: str | None) -> str | None:
    try:
        return chosen_name(name)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


def _running(name: str | None) -> dict[str, Any] | None:
    """The picked local stack's state, or None; several running and none picked: the error naming them."""
    try:
        return read_state(name=_name(name))
    except SeveralLocalStacks as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


def _none_running(name: str | None) -> str:
    picked = _name(name)
    others = running_stacks()
    where = f"no local stack named {picked!r} is running" if picked else "no local stack is running"
    also = f" (running: {', '.join(s['name'] for s in others)})" if picked and others else ""
    return f"{where} (no live {state_path(name=picked)}){also}"


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
    name: NameOption = None,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose",
            "-v",
            help="Print the functions' JSON log and metric lines here (default: one line per wake; the logs "
            "go to $AGENTWAKE_HOME/local.log, local-NAME.log for --name).",
        ),
    ] = False,
) -> None:
    """Run the local stack until Ctrl-C: SQS pollers, the async queue and the scheduler on background threads.

    Its data lives in this process: when it stops, its sessions, runs, jobs and queues are gone.
    Each stack has a name (--name; default 'default') and its own state file in $AGENTWAKE_HOME
    (default ~/.agentwake): a second one on a name that runs is refused, another name starts beside it.
    """
    chosen = timing.faithful() if faithful else timing.local()
    if visibility_timeout_override is not None:
        chosen = dataclasses.replace(chosen, visibility_timeout_override=visibility_timeout_override)
    template = find_template(template)
    local_name = _name(name) or DEFAULT_LOCAL_NAME
    runtime = LocalStackRuntime(
        server_host=host, server_port=port, timing=chosen, deployed_outbound=deployed_outbound, local_name=local_name
    )
    try:
        runtime.refuse_if_running()  # before anything is written: the running one's log is its own
    except LocalStackRunning as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    log_file = log_path(name=local_name)
    if verbose:
        terminal = sys.stdout
        if not logging.getLogger().handlers:  # one line per invocation from the pollers/async queue
            logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
            logging.getLogger("botocore").setLevel(logging.WARNING)
    else:
        terminal = activity.quiet_output(log_file)

    def say(text: str) -> None:
        print(text, file=terminal, flush=True)

    try:
        runtime.start(template, _overrides(parameter_overrides), background=True)
    except LocalStackRunning as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    except (TemplateError, MotoPatchError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    runtime.on_invocation = lines = activity.WakeLines(runtime, terminal)
    if runtime.async_invoker is not None:
        runtime.async_invoker.on_outcome = lines.outcome
    stop = StopSignals()
    say(f"local stack {local_name!r} ({runtime.stack_name}) on {runtime.endpoint_url}  (template {template})")
    say("its data lives only as long as this process: when it stops, sessions, runs and jobs are gone")
    if runtime.api_url:
        say(f"product API on {runtime.api_url}  ({AUTHORIZATION_NOTE})")
    if runtime.push_url:
        say(f"push API on {runtime.push_url}  (a page opens it with a push ticket)")
    say(chosen.describe())
    if deployed_outbound:
        say("outbound: the deployed policy (https only, no loopback)")
    if seed and "AgentTableName" in runtime.outputs:
        created = runtime.seed()
        say(f"seeded what events/ names: {', '.join(created) or 'already there'}")
    say(f"state: {state_path(name=local_name)}  env.json: {env_path(name=local_name)}")
    if local_name != DEFAULT_LOCAL_NAME:
        say(f"other terminals reach it with: export {LOCAL_NAME_ENV}={local_name}")
    for logical_id, resource in runtime.stack.resources.items():
        if resource.provisioned:
            say(f"  {logical_id:<28} {resource.ref}")
    for poller in runtime.pollers:
        say(f"  polling {poller.queue_url} -> {poller.function.logical_id}")
    watch = None
    if "AgentTableName" in runtime.outputs:
        from agentwake.store.dynamo import DynamoStore
        from agentwake_local.job_watch import JobWatch

        watch = JobWatch(DynamoStore(runtime.outputs["AgentTableName"], client=runtime.client("dynamodb")))
        for line in watch.summary():
            say(line)
    if not verbose:
        say(f"one line per wake below; the functions' JSON logs: {log_file} (--verbose shows them here)")
    say("Ctrl-C to stop")
    try:
        # a signal sets it; every 2 s the jobs are looked at (a job paused, resumed, or missed fires)
        while not stop.wait(2.0):
            if watch is not None:
                try:
                    for line in watch.changes():
                        say(line)
                except Exception as exc:  # the stack is stopping, a transient error: say so, keep running
                    typer.echo(f"could not read the jobs: {type(exc).__name__}", err=True)
    finally:
        runtime.stop()
        say("stopped")


@app.command()
def status(
    name: NameOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="The whole state document (local.json), as JSON.")] = False,
) -> None:
    """The running local stack: endpoint, functions, queues and DLQs with their depths, what to do
    next (--json: the whole state recorded in $AGENTWAKE_HOME/local.json, local-NAME.json for --name)."""
    state = _running(name)
    if state is None:
        typer.echo(_none_running(name), err=True)
        raise typer.Exit(1)
    if as_json:
        _echo_json(state)
        return
    for line in status_lines(state, _queue_depths(state)):
        typer.echo(line)


def _queue_depths(state: dict[str, Any]) -> dict[str, tuple[int, int, int] | None]:
    """Each queue of the stack (a resource whose Ref is its URL) -> (visible, in flight, delayed),
    None when it cannot be read."""
    from agentwake_local.server import boto3_session
    from agentwake_ops.sqs_scan import queue_counts

    sqs = boto3_session(state.get("region") or "us-east-1").client("sqs", endpoint_url=state["endpoint_url"])
    depths: dict[str, tuple[int, int, int] | None] = {}
    for logical_id, ref in sorted((state.get("resources") or {}).items()):
        if isinstance(ref, str) and ref.startswith(("http://", "https://")):
            try:
                depths[logical_id] = queue_counts(sqs, ref)
            except Exception as exc:  # the server is stopping: said in the row, not as a traceback
                logging.getLogger(__name__).debug("queue %s unreadable: %s", logical_id, type(exc).__name__)
                depths[logical_id] = None
    return depths


def _is_dead_letter(queue: str) -> bool:
    """A queue where failures land (the DLQs and the cron on-failure destination)."""
    return queue.endswith(("DLQ", "DeadLetterQueue")) or "Failure" in queue


def status_lines(state: dict[str, Any], depths: dict[str, tuple[int, int, int] | None]) -> list[str]:
    """``local status`` for a person, within 80 columns: what runs, where, what waits, what next."""
    stack = state.get("name") or DEFAULT_LOCAL_NAME
    lines = [
        f"local stack {stack!r} is running (pid {state.get('pid')}, since {state.get('started_at')})",
        f"  endpoint   {state['endpoint_url']}  (region {state.get('region')})",
    ]
    if state.get("api_url"):
        lines.append(f"  API        {state['api_url']}")
    if state.get("push_url"):
        lines.append(f"  push       {state['push_url']}")
    functions = sorted(state.get("functions") or {})
    row = "  functions  "
    for i, function in enumerate(functions):
        word = function + ("," if i < len(functions) - 1 else "")
        if len(row) + len(word) > 80 and row.strip() != "functions":
            lines.append(row.rstrip())
            row = " " * 13
        row += word + " "
    lines.append(row.rstrip())

    def depth(counts: tuple[int, int, int] | None) -> str:
        return "unreadable" if counts is None else "{} visible, {} in flight, {} delayed".format(*counts)

    queues = {q: c for q, c in depths.items() if not _is_dead_letter(q)}
    dead = {q: c for q, c in depths.items() if _is_dead_letter(q)}
    lines.append("  queues")
    lines += [f"    {q:<24} {depth(c)}" for q, c in queues.items()]
    lines.append("  DLQs")
    lines += [f"    {q:<24} {depth(c)}" for q, c in dead.items()]
    logs = log_path(name=state.get("name"))
    if logs.exists():  # `local up` writes it; a long path goes whole on a line of its own
        shown = f"~/{logs.relative_to(Path.home())}" if logs.is_relative_to(Path.home()) else str(logs)
        lines += [f"  logs       {shown}"] if len(shown) <= 80 - 13 else ["  logs", f"    {shown}"]
    held = sum(sum(c) for c in dead.values() if c is not None)
    lines.append("next:")
    if stack != DEFAULT_LOCAL_NAME:
        lines.append(f"  export {LOCAL_NAME_ENV}={stack}         point the CLI at this stack")
    if held:
        lines.append(f"  agentwake dlq list             {held} dead-lettered message(s): why each failed")
    lines += [
        "  agentwake sessions list        the sessions on this stack",
        "  agentwake local status --json  the whole state document",
    ]
    return lines


@app.command("list")
def list_command() -> None:
    """The local stacks running under $AGENTWAKE_HOME: name, endpoint, pid, since when."""
    stacks = running_stacks()
    if not stacks:
        typer.echo("no local stack is running; start one: agentwake local up")
        return
    for state in stacks:
        typer.echo(
            f"{state['name']:<16} {state['endpoint_url']:<28} pid {state.get('pid')}  since {state.get('started_at')}"
        )


@app.command("seed")
def seed_command(name: NameOption = None) -> None:
    """Create the sessions, tasks and job that the sample events in events/ name, on the running stack."""
    state = _running(name)
    if state is None:
        typer.echo(f"error: {_none_running(name)}; start one: agentwake local up", err=True)
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
    name: NameOption = None,
) -> None:
    """env.json for `sam local invoke --env-vars` pointing at the running local stack."""
    state = _running(name)
    if state is None:
        typer.echo(f"error: {_none_running(name)}; start one: agentwake local up", err=True)
        raise typer.Exit(1)
    runtime = LocalStackRuntime.attach(state=state)
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
    "  or run on a fresh, throwaway stack (seeded as local up seeds):   agentwake invoke FUNCTION -e EVENT --throwaway\n"
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
        bool,
        typer.Option(
            "--throwaway",
            help="Run on a fresh local stack made for this call and removed afterwards, even when one is running.",
        ),
    ] = False,
    seed: Annotated[
        bool,
        typer.Option("--seed/--no-seed", help="--throwaway: create what events/ names first, as local up does."),
    ] = True,
    deployed_outbound: DeployedOutboundOption = False,
    name: NameOption = None,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose",
            "-v",
            help="Print the function's JSON log lines and warnings on stderr (default: they go to "
            "$AGENTWAKE_HOME/functions.log, and stderr gets one line saying how the wake ended).",
        ),
    ] = False,
) -> None:
    """Run FUNCTION with an event as `sam local invoke` would, without Docker.

    Handler, timeout and environment come from the template; variables from --env-vars win over the local stack's own (its outbound allowances too, so an env file with AGENTWAKE_OUTBOUND_ALLOW_LOOPBACK=false gets the deployed policy). It runs on the local stack that `agentwake local up` keeps running (--name picks one), or on the endpoint AWS_ENDPOINT_URL names (resources missing there are provisioned from the template), or with --throwaway on a fresh stack, seeded as `local up` seeds it (--no-seed: empty), removed afterwards. Prints the response on stdout and, on stderr, one line saying how the wake ended (as `local up` prints it; the function's JSON logs go to $AGENTWAKE_HOME/functions.log unless --verbose); a function error, or a record the function dead-lettered, exits with status 1 and says why.

    Example: agentwake invoke BackgroundResultFunction -e events/background-result-success.json
    """
    import os

    from agentwake_local import dead_letters, function_output

    payload = _read_event(event)
    strict: dict[str, Any] = {"deployed_outbound": True} if deployed_outbound else {}
    owned = True
    if throwaway:
        runtime = LocalStackRuntime(write_state=False, timing=timing.local(), **strict).start(
            find_template(template), _overrides(parameter_overrides)
        )
        where = f"a throwaway local stack at {runtime.endpoint_url} (removed afterwards)"
        if seed and "AgentTableName" in runtime.outputs:
            with contextlib.redirect_stdout(sys.stderr):
                created = runtime.seed()
            where += f", seeded with {', '.join(created)}" if created else ""
    elif (state := _running(name)) is not None:
        runtime = LocalStackRuntime.attach(state=state, **strict)
        owned = False
        where = f"the local stack {state.get('name', DEFAULT_LOCAL_NAME)!r} at {runtime.endpoint_url}"
    elif os.environ.get("AWS_ENDPOINT_URL") and not _name(name):
        endpoint = os.environ["AWS_ENDPOINT_URL"]
        runtime = LocalStackRuntime(write_state=False, timing=timing.local(), **strict).start(
            find_template(template), _overrides(parameter_overrides), endpoint_url=endpoint
        )
        where = f"the endpoint {endpoint} (AWS_ENDPOINT_URL)"
    else:
        typer.echo(f"error: {_none_running(name) if _name(name) else NO_STACK_HELP}", err=True)
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
        before = dead_letters.watch(runtime, dead_letters.dead_letter_queues(runtime))
        # only the response on stdout; the function's logs in a file (--verbose: on stderr, as sam prints them)
        log = function_output.default_log()
        lines = None
        if not verbose:
            typer.echo(f"the function's JSON logs: {log} (--verbose prints them here)", err=True)
            runtime.on_invocation = lines = activity.WakeLines(runtime, sys.stderr)
            if runtime.async_invoker is not None:
                runtime.async_invoker.on_outcome = lines.outcome
        with contextlib.redirect_stdout(sys.stderr) if verbose else function_output.to_log(log):
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
        if asynchronous and failed:
            lost = []
        elif lines is not None and lines.dead_lettered is not None and not asynchronous:
            lost = lines.dead_lettered  # its line read the dead-letter queues already
        else:
            lost = dead_letters.arrived(runtime, before, payload)
    finally:
        if owned:
            runtime.stop()
    for item in lost:
        typer.echo(f"error: {inert(item.line())}", err=True)
    if lost:
        see = "the throwaway stack is gone with it" if throwaway else "see it with: agentwake dlq list"
        typer.echo(f"the record woke nothing ({see})", err=True)
    if failed or lost:
        raise typer.Exit(1)


if __name__ == "__main__":  # pragma: no cover
    app()
