"""``agentwake jobs create|list|delete|run-now``: cron jobs, one EventBridge Scheduler schedule each."""

from __future__ import annotations

from typing import Annotated

import typer

from agentwake_ops import render
from agentwake_ops.cli_common import JsonOpt, YesOpt, check_id, confirm, ops

app = typer.Typer(help="Cron jobs: one EventBridge Scheduler schedule per job.", no_args_is_help=True)


@app.command(
    "create",
    epilog=(
        "Examples: agentwake jobs create --session s1 --name 'Nightly report' --cron '0 6 * * ? *' "
        "--timezone Europe/Berlin  |  agentwake jobs create --session s1 --name Once --at 2030-12-01T09:00:00"
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
        render.print_json(render.job_dict(job))
        return
    render.console().print(
        f"Created job {job.job_id}: {render.escape(job.schedule_expression)} ({job.timezone}), "
        f"schedule {job.schedule_name}."
    )
    render.console().print(f"Next fire times ({job.timezone}): {render.fires(job)}")


@app.command("list", epilog="Example: agentwake jobs list --json")
def jobs_list(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """List every job with its schedule, status, last run and last error."""
    jobs = ops(ctx).jobs.list()
    if as_json:
        render.print_json([render.job_dict(j) for j in jobs])
        return
    render.jobs_table(jobs)


@app.command("delete", epilog="Example: agentwake jobs delete job-0123abcd --yes")
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
    render.console().print(f"Deleted job {job_id} and its schedule.")


@app.command("run-now", epilog="Example: agentwake jobs run-now job-0123abcd")
def jobs_run_now(
    ctx: typer.Context, job_id: Annotated[str, typer.Argument(help="The job id.", metavar="JOB_ID")]
) -> None:
    """Wake the job's agent now: invoke CronWakeFunction asynchronously, as the schedule would."""
    run_id = ops(ctx).jobs.run_now(job_id)
    render.console().print(f"Invoked CronWakeFunction for {job_id}: run {render.escape(run_id)}.")
