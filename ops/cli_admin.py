"""``agentwake runs|history|jobs|sessions|tasks``: look at runs and conversations, manage what wakes the agent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from pydantic import ValidationError
from rich.markup import escape
from rich.table import Table

from agentwake.errors import describe_validation_error
from agentwake.store.dynamo import RunSummary
from agentwake.store.models import SessionConfig, background_run_id, utcnow_iso
from agentwake_ops.cli_common import (
    JSON_HELP,
    YES_HELP,
    confirm,
    console,
    dash,
    facts_panel,
    fail,
    ops,
    parse_json_option,
    print_json,
    when,
)
from agentwake_ops.context import OpsError

JsonOpt = Annotated[bool, typer.Option("--json", help=JSON_HELP)]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help=YES_HELP)]

runs_app = typer.Typer(
    help="Look at one run: its record, failed attempts, journaled steps, deliveries.", no_args_is_help=True
)
history_app = typer.Typer(help="Read a session's conversation history.", no_args_is_help=True)
jobs_app = typer.Typer(help="Cron jobs: one EventBridge Scheduler schedule per job.", no_args_is_help=True)
sessions_app = typer.Typer(help="Session configs: persona, provider chain, limits, delivery.", no_args_is_help=True)
tasks_app = typer.Typer(help="Background tasks: register one, send its completion message.", no_args_is_help=True)


# --------------------------------------------------------------------------------------------
# runs


def summary_dict(summary: RunSummary) -> dict[str, Any]:
    return {
        "run": summary.run.model_dump(mode="json") if summary.run else None,
        "failures": [f.model_dump(mode="json") for f in summary.failures],
        "steps": summary.steps,
        "deliveries": summary.deliveries,
    }


@runs_app.command("show", epilog="Example: agentwake runs show bg:task-1234 --json")
def runs_show(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(help="bg:{task_id} or cron:{job_id}:{scheduled_time}.", metavar="RUN_ID")],
    as_json: JsonOpt = False,
) -> None:
    """Show a run: status and attempts, every failed attempt, steps journaled, deliveries made."""
    from agentwake_ops.cli_dlq import render_summary_tables

    summary = ops(ctx).store.run_summary(run_id)
    if summary.run is None and not (summary.failures or summary.steps or summary.deliveries):
        fail(f"no run {run_id!r} in the store (run ids look like bg:TASK_ID or cron:JOB_ID:SCHEDULED_TIME)")
    if as_json:
        print_json({"run_id": run_id, **summary_dict(summary)})
        return
    out = console()
    run = summary.run
    if run is not None:
        rows = (
            ("run id", run.run_id),
            ("kind", run.kind),
            ("session", run.session_id),
            ("status", run.status),
            ("attempts", run.attempts),
            ("steps", run.steps),
            ("tokens", _tokens(run.usage)),
            ("started", when(run.started_at)),
            ("ended", when(run.ended_at)),
            ("last error", f"{dash(run.last_error_type)}: {dash(run.last_error)}" if run.last_error else "-"),
        )
        out.print(facts_panel(rows, "run"))
    render_summary_tables(summary)


def _tokens(usage: dict[str, Any] | None) -> str | None:
    if not usage or not usage.get("model_calls"):
        return None
    text = f"{usage['input_tokens']} in / {usage['output_tokens']} out over {usage['model_calls']} model calls"
    if usage.get("estimated_cost_usd") is not None:
        text += f", estimated ${usage['estimated_cost_usd']:.6f}"
    return text


# --------------------------------------------------------------------------------------------
# history


@history_app.command("show", epilog="Example: agentwake history show session-42 --last 10")
def history_show(
    ctx: typer.Context,
    session: Annotated[str, typer.Argument(help="The session id.", metavar="SESSION")],
    last: Annotated[int, typer.Option("--last", "-n", help="How many of the newest entries.", min=1)] = 20,
    as_json: JsonOpt = False,
) -> None:
    """Show the newest history entries of a session, oldest first (notes, markers, deliveries, messages)."""
    entries = ops(ctx).store.history_window(session, last)
    if as_json:
        print_json([e.model_dump(mode="json") for e in entries])
        return
    out = console()
    if not entries:
        out.print(f"No history for session {escape(session)}.")
        return
    table = Table(title=f"last {len(entries)} entries of {escape(session)}", show_lines=True)
    for column in ("time", "role", "kind", "run id", "content"):
        table.add_column(column, overflow="fold")
    for e in entries:
        table.add_row(when(e.created_at), e.role, e.kind, escape(dash(e.run_id)), escape(e.content))
    out.print(table)


# --------------------------------------------------------------------------------------------
# jobs


def _job_dict(job: Any) -> dict[str, Any]:
    return dict(job.model_dump(mode="json"))


@jobs_app.command(
    "create",
    epilog=(
        "Examples: agentwake jobs create --session s1 --name 'Nightly report' --cron '0 6 * * ? *' "
        "--timezone Europe/Berlin  |  agentwake jobs create --session s1 --name Once --at 2026-12-01T09:00:00"
    ),
)
def jobs_create(
    ctx: typer.Context,
    session: Annotated[str, typer.Option("--session", help="The session the job wakes (must exist).")],
    name: Annotated[str, typer.Option("--name", help="A short name, shown to the agent.")],
    cron: Annotated[str | None, typer.Option("--cron", help="Six cron fields, or cron(...) / rate(...).")] = None,
    at: Annotated[str | None, typer.Option("--at", help="Once, at yyyy-mm-ddThh:mm:ss in --timezone.")] = None,
    timezone: Annotated[str, typer.Option("--timezone", help="IANA timezone of the schedule.")] = "UTC",
    description: Annotated[str, typer.Option("--description", help="What the agent should do when woken.")] = "",
    as_json: JsonOpt = False,
) -> None:
    """Create a cron job and its schedule (give exactly one of --cron and --at)."""
    job = ops(ctx).jobs.create(
        session_id=session, name=name, cron=cron, at=at, timezone=timezone, description=description
    )
    if as_json:
        print_json(_job_dict(job))
        return
    console().print(
        f"Created job {job.job_id}: {escape(job.schedule_expression)} ({job.timezone}), schedule {job.schedule_name}."
    )


@jobs_app.command("list", epilog="Example: agentwake jobs list --json")
def jobs_list(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """List every job with its schedule, status, last run and last error."""
    jobs = ops(ctx).jobs.list()
    if as_json:
        print_json([_job_dict(j) for j in jobs])
        return
    out = console()
    if not jobs:
        out.print("No jobs.")
        return
    table = Table(title=f"{len(jobs)} job(s)")
    for column in ("job id", "name", "session", "schedule", "status", "enabled", "last run", "last error"):
        table.add_column(column, overflow="fold")
    for j in jobs:
        table.add_row(
            j.job_id,
            escape(j.name),
            escape(j.session_id),
            escape(f"{j.schedule_expression} {j.timezone}"),
            j.status,
            "yes" if j.enabled else "no",
            when(j.last_run_at),
            escape((j.last_error or "-").splitlines()[0] if j.last_error else "-"),
        )
    out.print(table)


@jobs_app.command("delete", epilog="Example: agentwake jobs delete job-0123abcd --yes")
def jobs_delete(
    ctx: typer.Context,
    job_id: Annotated[str, typer.Argument(help="The job id.", metavar="JOB_ID")],
    yes: YesOpt = False,
) -> None:
    """Delete a job and its schedule (asks for confirmation)."""
    context = ops(ctx)
    job = context.jobs.get(job_id)
    confirm(f"Delete job {job.job_id} ({job.name}) and its schedule?", yes, what="delete a job")
    context.jobs.delete(job_id)
    console().print(f"Deleted job {job_id} and its schedule.")


@jobs_app.command("run-now", epilog="Example: agentwake jobs run-now job-0123abcd")
def jobs_run_now(
    ctx: typer.Context, job_id: Annotated[str, typer.Argument(help="The job id.", metavar="JOB_ID")]
) -> None:
    """Wake the job's agent now: invoke CronWakeFunction asynchronously, as the schedule would."""
    run_id = ops(ctx).jobs.run_now(job_id)
    console().print(f"Invoked CronWakeFunction for {job_id}: run {escape(run_id)}.")


# --------------------------------------------------------------------------------------------
# sessions


def _providers(provider: list[str] | None, providers_file: Path | None) -> list[dict[str, Any]] | None:
    from agentwake.agent.providers import parse_spec

    if provider and providers_file:
        raise OpsError("give either --provider (repeatable) or --providers-file, not both")
    raw: Any
    if providers_file is not None:
        try:
            raw = json.loads(providers_file.read_text(encoding="utf-8"))
        except OSError as exc:
            raise OpsError(f"cannot read {providers_file}: {exc.strerror}") from exc
        except ValueError as exc:
            raise OpsError(f"{providers_file} is not valid JSON: {exc}") from exc
        if isinstance(raw, dict) and "providers" in raw:
            raw = raw["providers"]
        if not isinstance(raw, list) or not raw:
            raise OpsError(f"{providers_file} must hold a non-empty JSON list of provider specs (primary first)")
    elif provider:
        raw = [parse_json_option(p, "--provider") for p in provider]
    else:
        return None
    for spec in raw:
        if not isinstance(spec, dict):
            raise OpsError(f'a provider spec must be a JSON object like {{"type": "scripted"}}, got {spec!r}')
        parse_spec(spec)  # ConfigError naming the problem
    return list(raw)


@sessions_app.command(
    "put",
    epilog=(
        "Example: agentwake sessions put s1 --persona 'You are terse.' "
        '--provider \'{"type":"bedrock","model_id":"amazon.nova-lite-v1:0"}\' '
        '--provider \'{"type":"scripted"}\' --max-steps 6'
    ),
)
def sessions_put(
    ctx: typer.Context,
    session: Annotated[str, typer.Argument(help="The session id.", metavar="SESSION")],
    persona: Annotated[str | None, typer.Option("--persona", help="The system prompt's persona.")] = None,
    provider: Annotated[
        list[str] | None,
        typer.Option("--provider", help="A provider spec as JSON; repeat for fallbacks, primary first."),
    ] = None,
    providers_file: Annotated[
        Path | None, typer.Option("--providers-file", help="A JSON file with the list of provider specs.")
    ] = None,
    max_steps: Annotated[int | None, typer.Option("--max-steps", help="Model calls per run (1-50).")] = None,
    history_window: Annotated[
        int | None, typer.Option("--history-window", help="History entries a wake reads (0-200).")
    ] = None,
    delivery: Annotated[
        str | None, typer.Option("--delivery", help='Where messages go, as JSON: {"type":"log"} or a webhook.')
    ] = None,
    role: Annotated[str | None, typer.Option("--role", help="user or admin.", metavar="user|admin")] = None,
    setting: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help=(
                "Any other session setting as NAME=VALUE (VALUE is JSON, else text; null clears it), e.g. "
                "deliver_final=always, max_tokens_per_run=20000, max_deliveries_per_day=5, "
                'prices=\'{"p": {"input_per_mtok": 3, "output_per_mtok": 15}}\'. Repeatable.'
            ),
            metavar="NAME=VALUE",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a session config, or update only the given fields of an existing one."""
    store = ops(ctx).store
    existing = store.get_session(session)
    data: dict[str, Any] = existing.model_dump() if existing else {"session_id": session}
    providers = _providers(provider, providers_file)
    if providers is not None:
        data["providers"] = providers
    if persona is not None:
        data["persona"] = persona
    if max_steps is not None:
        data["max_steps"] = max_steps
    if history_window is not None:
        data["history_window"] = history_window
    if delivery is not None:
        from agentwake.delivery.factory import parse_spec as parse_delivery

        spec = parse_json_option(delivery, "--delivery")
        parse_delivery(spec)
        data["delivery"] = spec
    if role is not None:
        if role not in ("user", "admin"):
            raise OpsError(f"--role must be user or admin, got {role!r}")
        data["role"] = role
    for item in setting or ():
        name, sep, raw = item.partition("=")
        if not sep or name.strip() not in SessionConfig.model_fields or name.strip() in ("session_id", "updated_at"):
            raise OpsError(f"--set takes NAME=VALUE with NAME a session setting, got {item!r}")
        try:
            data[name.strip()] = json.loads(raw)
        except ValueError:
            data[name.strip()] = raw
    data["updated_at"] = utcnow_iso()
    try:
        config = SessionConfig.model_validate(data)
    except ValidationError as exc:
        raise OpsError(f"invalid session config: {describe_validation_error(exc)}") from exc
    store.put_session(config)
    if as_json:
        print_json(config.model_dump(mode="json"))
        return
    console().print(f"{'Updated' if existing else 'Created'} session {escape(session)}.")
    _print_session(config)


@sessions_app.command("show", epilog="Example: agentwake sessions show s1 --json")
def sessions_show(
    ctx: typer.Context,
    session: Annotated[str, typer.Argument(help="The session id.", metavar="SESSION")],
    as_json: JsonOpt = False,
) -> None:
    """Show a session's config: persona, provider chain, limits, delivery, role."""
    config = ops(ctx).store.get_session(session)
    if config is None:
        fail(f"no session {session!r} (create it with: agentwake sessions put {session})")
    if as_json:
        print_json(config.model_dump(mode="json"))
        return
    _print_session(config)


def _print_session(config: SessionConfig) -> None:
    rows = [
        ("session", config.session_id),
        ("persona", config.persona),
        *(("primary" if i == 0 else f"fallback {i}", json.dumps(spec)) for i, spec in enumerate(config.providers)),
        ("max steps", config.max_steps),
        ("history window", config.history_window),
        ("delivery", json.dumps(config.delivery)),
        ("role", config.role),
        ("deliver final", config.deliver_final),
        ("repeated calls", f"the model is told at {config.max_repeated_tool_calls} identical calls in a row"),
        ("deliveries", f"{config.max_deliveries_per_run} per run, {dash(config.max_deliveries_per_day)} per day"),
        ("token budget", f"{dash(config.max_tokens_per_run)} per run, {dash(config.max_tokens_per_day)} per day"),
        *((f"price {key}", json.dumps(price.model_dump())) for key, price in config.prices.items()),
        ("updated", when(config.updated_at)),
    ]
    console().print(facts_panel(rows, "session"))


# --------------------------------------------------------------------------------------------
# tasks


@tasks_app.command(
    "register", epilog='Example: agentwake tasks register --session s1 --tool web_research --args \'{"q": "aurora"}\''
)
def tasks_register(
    ctx: typer.Context,
    session: Annotated[str, typer.Option("--session", help="The session the task belongs to (must exist).")],
    tool: Annotated[str, typer.Option("--tool", help="The tool that started the task.")],
    args: Annotated[str | None, typer.Option("--args", help="The tool's arguments as a JSON object.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Register a background task when it starts; prints its task id and its task token.

    The token is shown once (agentwake keeps only its hash): `tasks finish` needs it.
    """
    context = ops(ctx)
    tool_args = parse_json_option(args, "--args") if args else {}
    if not isinstance(tool_args, dict):
        raise OpsError("--args must be a JSON object")
    if context.store.get_session(session) is None:
        raise OpsError(f"session {session!r} does not exist; create it first (agentwake sessions put {session})")
    registered = context.tasks.register_task(session, tool, tool_args)
    task_id = registered.task_id
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "task_id": task_id,
                    "task_token": registered.task_token,
                    "session_id": session,
                    "run_id": background_run_id(task_id),
                },
                indent=2,
                sort_keys=True,
            )
        )
        return
    console().print(task_id)
    console().print(f"task token (shown once; `tasks finish` needs it): {registered.task_token}")


@tasks_app.command(
    "finish",
    epilog="Example: agentwake tasks finish task-0123 --token awt_... --status succeeded --result 'Found 3 offers' --summary 'Aurora research'",
)
def tasks_finish(
    ctx: typer.Context,
    task_id: Annotated[str, typer.Argument(help="The task id `tasks register` printed.", metavar="TASK_ID")],
    token: Annotated[
        str,
        typer.Option(
            "--token",
            envvar="AGENTWAKE_TASK_TOKEN",
            help="The task token `tasks register` printed (or AGENTWAKE_TASK_TOKEN).",
        ),
    ],
    status: Annotated[str, typer.Option("--status", help="succeeded or failed.", metavar="succeeded|failed")],
    result: Annotated[str, typer.Option("--result", help="The task's result text, shown to the agent.")],
    summary: Annotated[
        str | None, typer.Option("--summary", help="A short name for the task (default: the tool).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Send the task's completion message to the background-result queue; it wakes the agent."""
    if status not in ("succeeded", "failed"):
        raise OpsError(f"--status must be succeeded or failed, got {status!r}")
    final: Literal["succeeded", "failed"] = "succeeded" if status == "succeeded" else "failed"
    message_id = ops(ctx).tasks.finish_task(task_id, final, result, task_token=token, summary_name=summary)
    if as_json:
        print_json({"task_id": task_id, "message_id": message_id, "run_id": background_run_id(task_id)})
        return
    console().print(
        f"Sent the completion of {escape(task_id)} (message {message_id}); it wakes run bg:{escape(task_id)}."
    )
