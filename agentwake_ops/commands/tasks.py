"""``agentwake tasks register|finish|cancel|list|show``: a background task's start, the completion that
wakes the agent, cancelling one, and reading them back."""

from __future__ import annotations

import json
from typing import Annotated, Literal

import typer

from agentwake_ops import render
from agentwake_ops.cli_common import (
    JsonOpt,
    WideOpt,
    YesOpt,
    check_id,
    confirm,
    fail,
    ops,
    parse_json_option,
    user_error,
)
from agentwake_ops.terminal import masked

app = typer.Typer(
    help="Background tasks: register one, send its completion message, cancel one, list and show them.",
    no_args_is_help=True,
)

TASK_STATUSES = ("running", "finished", "woken", "failed", "cancelled")


@app.command(
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
    from agentwake.domain.models import background_run_id

    check_id(session, "session id")
    context = ops(ctx)
    tool_args = parse_json_option(args, "--args") if args else {}
    if not isinstance(tool_args, dict):
        raise user_error("--args must be a JSON object")
    if context.store.records.get_session(session) is None:
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
    render.console().print(task_id)
    render.console().print(f"task token (shown once; `tasks finish` needs it): {registered.task_token}")


@app.command(
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
    from agentwake.domain.models import background_run_id

    check_id(task_id, "task id")
    if status not in ("succeeded", "failed"):
        raise user_error(f"--status must be succeeded or failed, got {status!r}")
    final: Literal["succeeded", "failed"] = "succeeded" if status == "succeeded" else "failed"
    context = ops(ctx)
    task = context.store.records.get_task(task_id)
    if task is None:
        fail(f"no task {task_id!r} (register one with: agentwake tasks register --session SESSION --tool TOOL)")
    run_id = background_run_id(task_id)
    run = context.store.records.get_run(run_id)
    message_id = context.tasks.finish_task(task_id, final, result, task_token=token, summary_name=summary)
    what = _what_happens(run_id, run.status if run is not None else None, task.status)
    if as_json:
        render.print_json({"task_id": task_id, "message_id": message_id, "run_id": run_id, "what_happens": what})
        return
    render.console().print(f"Sent the completion of {render.escape(task_id)} (message {message_id}); {what}.")


@app.command("cancel", epilog="Example: agentwake tasks cancel task-0123 --yes")
def tasks_cancel(
    ctx: typer.Context,
    task_id: Annotated[str, typer.Argument(help="The task id.", metavar="TASK_ID")],
    yes: YesOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Cancel a task with no outcome yet: it never wakes the agent (its outcome is failed, cancelled),
    and a completion that arrives later changes nothing (counted as late). Asks for confirmation."""
    check_id(task_id, "task id")
    context = ops(ctx)
    task = context.store.records.get_task(task_id)
    if task is None:
        fail(f"no task {task_id!r} (list them with: agentwake tasks list)")
    confirm(
        f"Cancel task {task_id} ({task.tool_name}, session {task.session_id})? The agent is never woken for it.",
        yes,
        what="cancel a task",
    )
    cancelled = context.tasks.cancel_task(task_id, by="an operator (agentwake tasks cancel)")
    if as_json:
        render.print_json(render.task_dict(cancelled))
        return
    render.console().print(
        f"Cancelled {render.escape(task_id)} at {cancelled.cancelled_at}: it will not wake the agent; "
        "a completion that arrives later is refused and counted as late."
    )


def _what_happens(run_id: str, run_status: str | None, task_status: str) -> str:
    """What the wake does with a completion, given the run's and the task's status before it was
    sent (a run wakes the agent once)."""
    if run_status == "succeeded":
        return f"run {run_id} already succeeded, so this completion wakes nothing (the agent was woken once)"
    if run_status == "failed":
        return (
            f"run {run_id} already failed for good, so this completion is dead-lettered "
            "(see: agentwake dlq list; a redrive of the run's own DLQ message retries it)"
        )
    if run_status == "running" or task_status != "running":
        return (
            f"a completion of this task was already sent and run {run_id} wakes once, "
            "so this one wakes nothing new (see: agentwake tasks show)"
        )
    return f"it wakes run {run_id}"


@app.command("list", epilog="Example: agentwake tasks list --session s1 --status running")
def tasks_list(
    ctx: typer.Context,
    session: Annotated[str | None, typer.Option("--session", help="Only this session's tasks.")] = None,
    status: Annotated[
        str | None, typer.Option("--status", help="Only tasks in this status.", metavar="|".join(TASK_STATUSES))
    ] = None,
    as_json: JsonOpt = False,
    wide: WideOpt = False,
) -> None:
    """List background tasks, newest first: session, tool, status, when created and finished."""
    from agentwake.store.operator import OperatorStore

    if session is not None:
        check_id(session, "session id")
    if status is not None and status not in TASK_STATUSES:
        raise user_error(f"--status must be one of {', '.join(TASK_STATUSES)}, got {status!r}")
    tasks = OperatorStore(ops(ctx).store).tasks(session_id=session, status=status)
    if as_json:
        render.print_json([render.task_dict(t) for t in tasks])
        return
    render.tasks_table(tasks, filtered=bool(session or status), wide=wide)


@app.command("show", epilog="Example: agentwake tasks show task-0123 --json")
def tasks_show(
    ctx: typer.Context,
    task_id: Annotated[str, typer.Argument(help="The task id.", metavar="TASK_ID")],
    as_json: JsonOpt = False,
) -> None:
    """Show a task (never its token): the run (and tool call) that started it, its subagent's run,
    the wake run of each outcome, its deadline, outcome and why, late completions, cancellation."""
    from agentwake_ops.tree import task_links

    check_id(task_id, "task id")
    context = ops(ctx)
    task = context.store.records.get_task(task_id)
    if task is None:
        fail(f"no task {task_id!r} (list them with: agentwake tasks list)")
    links = task_links(context.store, task)
    if as_json:
        run_status = next((r.status for r in links.wake_runs if r.run_id == task.run_id), None)
        render.print_json({**render.task_dict(task), "run_status": run_status, "links": masked(links.as_dict())})
        return
    render.task_panel(links)
