"""``agentwake runs|history|jobs|sessions|tasks``: look at runs and conversations, manage what wakes the agent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from agentwake_ops.cli_common import (
    JSON_HELP,
    YES_HELP,
    check_id,
    confirm,
    console,
    dash,
    escape,
    facts_panel,
    fail,
    ops,
    parse_json_option,
    print_json,
    user_error,
    when,
)

if TYPE_CHECKING:
    from agentwake.store.models import SessionConfig

JsonOpt = Annotated[bool, typer.Option("--json", help=JSON_HELP)]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help=YES_HELP)]

runs_app = typer.Typer(
    help="Runs: list them newest first; show one with every attempt, step and delivery.", no_args_is_help=True
)
history_app = typer.Typer(help="Read a session's conversation history.", no_args_is_help=True)
jobs_app = typer.Typer(help="Cron jobs: one EventBridge Scheduler schedule per job.", no_args_is_help=True)
sessions_app = typer.Typer(help="Session configs: persona, provider chain, limits, delivery.", no_args_is_help=True)
tasks_app = typer.Typer(help="Background tasks: register one, send its completion message.", no_args_is_help=True)

RUN_STATUSES = ("running", "succeeded", "failed")


# --------------------------------------------------------------------------------------------
# runs


def _since(value: str) -> str:
    """``--since``: an ISO date/time (UTC), or a duration back from now: 30m, 6h, 2d."""
    from datetime import UTC, datetime, timedelta

    text = value.strip()
    units = {"m": 60, "h": 3600, "d": 86400}
    if text[:-1].isdigit() and text[-1:] in units:
        moment = datetime.now(UTC) - timedelta(seconds=int(text[:-1]) * units[text[-1]])
        return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise user_error(
            f"--since takes an ISO time (2026-11-30T06:00:00Z) or a duration (30m, 6h, 2d), got {value!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


@runs_app.command(
    "list",
    epilog="Examples: agentwake runs list --session s1 --status failed  |  agentwake runs list --since 6h --json",
)
def runs_list(
    ctx: typer.Context,
    session: Annotated[
        str | None, typer.Option("--session", help="Only this session's runs (a Query of its index partition).")
    ] = None,
    status: Annotated[
        str | None, typer.Option("--status", help="Only runs in this state.", metavar="running|succeeded|failed")
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            help="Only runs whose latest attempt started since: an ISO time, or 30m / 6h / 2d.",
            metavar="WHEN",
        ),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", help="Runs per page.", min=1, max=1000)] = 20,
    before: Annotated[
        str | None,
        typer.Option("--before", help="The cursor a previous page printed: the next, older page.", metavar="CURSOR"),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """List runs, newest attempt first, a page at a time."""
    from agentwake_ops.runs import list_runs

    if session is not None:
        check_id(session, "session id")
    if status is not None and status not in RUN_STATUSES:
        raise user_error(f"--status must be one of {', '.join(RUN_STATUSES)}, got {status!r}")
    page = list_runs(
        ops(ctx).store,
        session_id=session,
        status=status,
        since=_since(since) if since else None,
        before=before,
        limit=limit,
    )
    if as_json:
        print_json({"runs": [r.model_dump(mode="json") for r in page.runs], "next_before": page.next_before})
        return
    from rich.table import Table

    out = console()
    if not page.runs:
        out.print("No runs" + (" match the filters." if session or status or since or before else "."))
        return
    table = Table(title=f"{len(page.runs)} run(s), newest first")
    for column in ("run id", "session", "status", "attempts", "steps", "started", "ended", "last error"):
        table.add_column(column, overflow="fold")
    for r in page.runs:
        table.add_row(
            escape(r.run_id),
            escape(r.session_id),
            r.status,
            str(r.attempts),
            str(r.steps),
            when(r.started_at),
            when(r.ended_at),
            escape(
                f"{r.last_error_type}: {(r.last_error or '').splitlines()[0] if r.last_error else ''}"
                if r.last_error_type
                else "-"
            ),
        )
    out.print(table)
    if page.next_before:
        out.print(f"More: add --before '{escape(page.next_before)}'", style="dim")
    out.print("Show one: agentwake runs show RUN_ID --transcript", style="dim")


@runs_app.command(
    "show", epilog="Examples: agentwake runs show bg:task-1234 --transcript  |  agentwake runs show bg:task-1234 --json"
)
def runs_show(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(help="bg:{task_id} or cron:{job_id}:{scheduled_time}.", metavar="RUN_ID")],
    transcript: Annotated[
        bool,
        typer.Option(
            "--transcript", help="Every journaled step in order: replies, tool calls and results, deliveries, failures."
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Show a run: status and attempts, every failed attempt, steps journaled, deliveries made."""
    from agentwake_ops.cli_dlq import render_summary_tables
    from agentwake_ops.runs import run_summary
    from agentwake_ops.runs import transcript as build_transcript

    summary = run_summary(ops(ctx).store, run_id)
    if summary.empty:
        fail(
            f"no run {run_id!r} in the store (run ids look like bg:TASK_ID or cron:JOB_ID:SCHEDULED_TIME; "
            "find them with: agentwake runs list --session SESSION)"
        )
    if as_json:
        data: dict[str, Any] = {"run_id": run_id, **summary.as_dict()}
        if transcript:
            data["transcript"] = [e.as_dict() for e in build_transcript(summary)]
        print_json(data)
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
    if transcript:
        from rich.text import Text

        out.print("transcript", style="bold")
        for entry in build_transcript(summary):
            style = {"failure": "red", "outcome": "bold", "delivery": "green"}.get(entry.kind, "")
            out.print(Text(f"[{when(entry.at)}] {entry.title}", style=style))
            for line in entry.lines:
                for part in line.splitlines() or [""]:
                    out.print(Text(f"    {part}"))
        return
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
    check_id(session, "session id")
    store = ops(ctx).store
    entries = store.history_window(session, last)
    if not entries and store.get_session(session) is None:
        fail(f"no session {session!r} (create it with: agentwake sessions put {session})")
    if as_json:
        print_json([e.model_dump(mode="json") for e in entries])
        return
    from rich.table import Table

    out = console()
    if not entries:
        out.print(f"No history for session {escape(session)} yet.")
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
    from agentwake.jobs import next_fire_times

    return {**job.model_dump(mode="json"), "next_fire_times": [t.isoformat() for t in next_fire_times(job)]}


def _fires(job: Any) -> str:
    from agentwake.jobs import next_fire_times

    times = next_fire_times(job)
    if not times:
        return "-"
    return ", ".join(t.strftime("%Y-%m-%d %H:%M %Z") for t in times)


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
    """Create a cron job and its schedule (give exactly one of --cron and --at).

    The expression is checked with EventBridge Scheduler's rules first: six cron fields, '?' in
    exactly one of day-of-month and day-of-week, every value in its range.
    """
    from agentwake.jobs import schedule_expression

    check_id(session, "session id")
    schedule_expression(cron, at)  # refuse a bad expression before looking anything up
    job = ops(ctx).jobs.create(
        session_id=session, name=name, cron=cron, at=at, timezone=timezone, description=description
    )
    if as_json:
        print_json(_job_dict(job))
        return
    console().print(
        f"Created job {job.job_id}: {escape(job.schedule_expression)} ({job.timezone}), schedule {job.schedule_name}."
    )
    console().print(f"Next fire times ({job.timezone}): {_fires(job)}")


@jobs_app.command("list", epilog="Example: agentwake jobs list --json")
def jobs_list(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """List every job with its schedule, status, last run and last error."""
    jobs = ops(ctx).jobs.list()
    if as_json:
        print_json([_job_dict(j) for j in jobs])
        return
    from rich.table import Table

    out = console()
    if not jobs:
        out.print("No jobs.")
        return
    table = Table(title=f"{len(jobs)} job(s)")
    for column in (
        "job id",
        "name",
        "session",
        "schedule",
        "next fire times",
        "status",
        "enabled",
        "last run",
        "last error",
    ):
        table.add_column(column, overflow="fold")
    for j in jobs:
        table.add_row(
            j.job_id,
            escape(j.name),
            escape(j.session_id),
            escape(f"{j.schedule_expression} {j.timezone}"),
            escape(_fires(j)),
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
        raise user_error("give either --provider (repeatable) or --providers-file, not both")
    from agentwake.errors import ConfigError

    raw: Any
    if providers_file is not None:
        try:
            raw = json.loads(providers_file.read_text(encoding="utf-8"))
        except OSError as exc:
            raise user_error(f"cannot read {providers_file}: {exc.strerror}") from exc
        except ValueError as exc:
            raise user_error(f"{providers_file} is not valid JSON: {exc}") from exc
        if isinstance(raw, dict) and "providers" in raw:
            raw = raw["providers"]
        if not isinstance(raw, list) or not raw:
            raise user_error(f"{providers_file} must hold a non-empty JSON list of provider specs (primary first)")
    elif provider:
        raw = [parse_json_option(p, "--provider") for p in provider]
    else:
        return None
    for index, spec in enumerate(raw):
        where = "--provider" if provider else f"{providers_file} item {index + 1}"
        if not isinstance(spec, dict):
            raise user_error(
                f'{where}: a provider spec must be a JSON object like {{"type": "scripted"}}, got {spec!r}'
            )
        try:
            parse_spec(spec)
        except ConfigError as exc:
            raise user_error(f"{where}: {exc}") from None
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
    tools: Annotated[
        str | None, typer.Option("--tools", help="HTTP/Python tools as a JSON list (docs/tools.md); [] for none.")
    ] = None,
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
    from agentwake.store.models import SessionConfig, utcnow_iso

    check_id(session, "session id")
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
            raise user_error(f"--role must be user or admin, got {role!r}")
        data["role"] = role
    if tools is not None:
        from agentwake.agent.tools.config import parse_tool_spec

        specs = parse_json_option(tools, "--tools")
        if not isinstance(specs, list):
            raise user_error('--tools must be a JSON list like [{"type": "python", "name": "word_count"}]')
        for spec in specs:
            parse_tool_spec(spec)  # ConfigError naming the problem
        data["tools"] = specs
    for item in setting or ():
        name, sep, raw = item.partition("=")
        if not sep or name.strip() not in SessionConfig.model_fields or name.strip() in ("session_id", "updated_at"):
            raise user_error(f"--set takes NAME=VALUE with NAME a session setting, got {item!r}")
        try:
            data[name.strip()] = json.loads(raw)
        except ValueError:
            data[name.strip()] = raw
    data["updated_at"] = utcnow_iso()
    from pydantic import ValidationError

    from agentwake.errors import describe_validation_error

    try:
        config = SessionConfig.model_validate(data)
    except ValidationError as exc:
        raise user_error(f"invalid session config: {describe_validation_error(exc)}") from exc
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
    check_id(session, "session id")
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
        *((f"tool {spec.get('name')}", json.dumps(spec)) for spec in config.tools),
        ("updated", when(config.updated_at)),
    ]
    console().print(facts_panel(rows, "session"))


@sessions_app.command("delete", epilog="Example: agentwake sessions delete s1 --yes")
def sessions_delete(
    ctx: typer.Context,
    session: Annotated[str, typer.Argument(help="The session id.", metavar="SESSION")],
    force: Annotated[
        bool, typer.Option("--force", help="Delete even while jobs or unfinished tasks still reference the session.")
    ] = False,
    yes: YesOpt = False,
) -> None:
    """Delete a session: its config and its history (refuses while jobs or unfinished tasks use it)."""
    from agentwake.store.operator import OperatorStore

    check_id(session, "session id")
    context = ops(ctx)
    store = OperatorStore(context.store)
    if context.store.get_session(session) is None and not context.store.history_window(session, 1):
        fail(
            f"no session {session!r} (list the jobs and runs that name one with: agentwake jobs list / agentwake runs list)"
        )
    jobs = [j for j in context.jobs.list() if j.session_id == session]
    tasks = [t for t in store.tasks_of_session(session) if t.status in ("running", "finished")]
    if (jobs or tasks) and not force:
        users = []
        if jobs:
            users.append(f"{len(jobs)} job(s) ({', '.join(j.job_id for j in jobs[:5])})")
        if tasks:
            users.append(f"{len(tasks)} unfinished task(s) ({', '.join(t.task_id for t in tasks[:5])})")
        fail(
            f"session {session!r} is still used by {' and '.join(users)}: delete those first "
            "(agentwake jobs delete JOB_ID), or pass --force"
        )
    confirm(f"Delete session {session} (config and history) for good?", yes, what="delete a session")
    removed = store.delete_session(session)
    console().print(f"Deleted session {escape(session)} ({removed} item(s): config, history, lease).")
    if jobs or tasks:
        console().print(
            f"Left in place: {len(jobs)} job(s) and {len(tasks)} task(s) that name it; their wakes will fail "
            "until they are deleted.",
            style="yellow",
        )


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
    from agentwake.store.models import background_run_id

    check_id(session, "session id")
    context = ops(ctx)
    tool_args = parse_json_option(args, "--args") if args else {}
    if not isinstance(tool_args, dict):
        raise user_error("--args must be a JSON object")
    if context.store.get_session(session) is None:
        fail(f"no session {session!r} (create it with: agentwake sessions put {session})")
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
    from agentwake.store.models import background_run_id

    check_id(task_id, "task id")
    if status not in ("succeeded", "failed"):
        raise user_error(f"--status must be succeeded or failed, got {status!r}")
    final: Literal["succeeded", "failed"] = "succeeded" if status == "succeeded" else "failed"
    context = ops(ctx)
    if context.store.get_task(task_id) is None:
        fail(f"no task {task_id!r} (register one with: agentwake tasks register --session SESSION --tool TOOL)")
    message_id = context.tasks.finish_task(task_id, final, result, task_token=token, summary_name=summary)
    if as_json:
        print_json({"task_id": task_id, "message_id": message_id, "run_id": background_run_id(task_id)})
        return
    console().print(
        f"Sent the completion of {escape(task_id)} (message {message_id}); it wakes run bg:{escape(task_id)}."
    )
