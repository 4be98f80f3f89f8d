"""``agentwake jobs create|list|show|update|pause|resume|backfill|trigger|delete|run-now``: cron jobs,
one EventBridge Scheduler schedule each, with their policies (docs/operations.md, "Job policies")."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from agentwake_ops import render
from agentwake_ops.cli_common import JsonOpt, WideOpt, YesOpt, check_id, confirm, ops

app = typer.Typer(
    help=(
        "Cron jobs: one EventBridge Scheduler schedule per job.\n\n"
        "Policies of each job (set with create or update):\n\n"
        "--overlap (default queue): a fire due while this job's previous run is still going: skip "
        "(recorded as skipped and counted), queue (waits for the session), buffer_one (one waits, "
        "the rest are skipped).\n\n"
        "--catch-up (default latest) within --catch-up-window (default 86400 s): on resume, which "
        "fires missed while paused run: none, latest, or all; each with the run id its own fire would have had.\n\n"
        "--pause-after-failures (default 3; 0 = never): after this many failed runs in a row the job "
        "pauses itself (its schedule disabled, the reason recorded) until jobs resume."
    ),
    no_args_is_help=True,
)

OverlapOpt = Annotated[
    str | None,
    typer.Option("--overlap", help="skip | queue | buffer_one: a fire due while this job's previous run is going."),
]
CatchUpOpt = Annotated[
    str | None, typer.Option("--catch-up", help="none | latest | all: which missed fires run on resume.")
]
WindowOpt = Annotated[
    int | None, typer.Option("--catch-up-window", help="Seconds: only missed fires this recent are caught up.")
]
PauseOpt = Annotated[
    int | None,
    typer.Option("--pause-after-failures", help="Failed runs in a row that pause the job (0 = never)."),
]
JobArg = Annotated[str, typer.Argument(help="The job id.", metavar="JOB_ID")]


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
    overlap: OverlapOpt = None,
    catch_up: CatchUpOpt = None,
    catch_up_window: WindowOpt = None,
    pause_after_failures: PauseOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a cron job and its schedule (give exactly one of --cron and --at).

    The expression is checked with EventBridge Scheduler's rules first: six cron fields, '?' in
    exactly one of day-of-month and day-of-week, every value in its range. Policies default to
    overlap queue, catch-up latest within 86400 s, pause after 3 failed runs in a row.
    """
    from agentwake.jobs.service import check_policies, schedule_expression

    check_id(session, "session id")
    schedule_expression(cron, at)  # refuse a bad expression before looking anything up
    check_policies(overlap, catch_up, catch_up_window, pause_after_failures)
    policies = {
        k: v
        for k, v in (
            ("overlap", overlap),
            ("catch_up", catch_up),
            ("catch_up_window_s", catch_up_window),
            ("pause_after_failures", pause_after_failures),
        )
        if v is not None
    }
    job = ops(ctx).jobs.create(
        session_id=session, name=name, cron=cron, at=at, timezone=timezone, description=description, **policies
    )
    if as_json:
        render.print_json(render.job_dict(job))
        return
    render.console().print(
        f"Created job {job.job_id}: {render.escape(job.schedule_expression)} ({job.timezone}), "
        f"schedule {job.schedule_name}."
    )
    render.console().print(render.next_fires_line(job))


@app.command("list", epilog="Example: agentwake jobs list --json")
def jobs_list(ctx: typer.Context, as_json: JsonOpt = False, wide: WideOpt = False) -> None:
    """List every job with its schedule, status, last run and last error."""
    jobs = ops(ctx).jobs.list()
    if as_json:
        render.print_json([render.job_dict(j) for j in jobs])
        return
    render.jobs_table(jobs, wide=wide)


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


@app.command("show", epilog="Example: agentwake jobs show job-0123abcd --runs 20")
def jobs_show(
    ctx: typer.Context,
    job_id: JobArg,
    runs: Annotated[int, typer.Option("--runs", min=1, max=100, help="How many of the last runs to list.")] = 10,
    as_json: JsonOpt = False,
) -> None:
    """Show a job: config, policies, next fires, last runs, why it is paused, skipped and missed fires.

    Each run is listed with its status, duration, estimated cost and the reason it failed.
    """
    context = ops(ctx)
    view = context.jobs.show(job_id, runs=runs)
    dead, note = _dead_lettered_fires(context, job_id)
    if as_json:
        render.print_json({**render.job_view_dict(view), "dead_lettered": [m.view() for m in dead]})
        return
    render.job_view(view)
    render.dead_lettered_fires(dead, note)


def _dead_lettered_fires(context: Any, job_id: str) -> tuple[list[Any], str | None]:
    """The job's fires the Scheduler could not deliver (in SchedulerDLQ; listed, none consumed),
    or why they could not be read."""
    from agentwake_ops.dlq.select import list_messages

    try:
        messages = list_messages(context, "scheduler")
    except Exception as exc:  # no SchedulerDLQ in this stack, a scan that could not finish
        return [], f"SchedulerDLQ not read: {exc}"
    return [m for m in messages if m.job_id == job_id], None


@app.command(
    "update",
    epilog="Examples: agentwake jobs update job-0123abcd --cron '0 7 * * ? *' --timezone Europe/Berlin  |  "
    "agentwake jobs update job-0123abcd --overlap skip --pause-after-failures 5",
)
def jobs_update(
    ctx: typer.Context,
    job_id: JobArg,
    cron: Annotated[
        str | None, typer.Option("--cron", help="A new schedule: six cron fields, cron(...), rate(...).")
    ] = None,
    at: Annotated[str | None, typer.Option("--at", help="A new one-time schedule: yyyy-mm-ddThh:mm:ss.")] = None,
    timezone: Annotated[str | None, typer.Option("--timezone", help="A new IANA timezone.")] = None,
    name: Annotated[str | None, typer.Option("--name", help="A new name.")] = None,
    description: Annotated[str | None, typer.Option("--description", help="A new prompt.")] = None,
    session: Annotated[str | None, typer.Option("--session", help="Wake another session (must exist).")] = None,
    overlap: OverlapOpt = None,
    catch_up: CatchUpOpt = None,
    catch_up_window: WindowOpt = None,
    pause_after_failures: PauseOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Change a job in place: schedule, time zone, prompt, session, policies.

    Its schedule is updated (not re-created); its id, run history and run ids are kept. Only the
    options given change.
    """
    if session is not None:
        check_id(session, "session id")
    job = ops(ctx).jobs.update(
        job_id,
        cron=cron,
        at=at,
        timezone=timezone,
        name=name,
        description=description,
        session_id=session,
        overlap=overlap,  # type: ignore[arg-type]
        catch_up=catch_up,  # type: ignore[arg-type]
        catch_up_window_s=catch_up_window,
        pause_after_failures=pause_after_failures,
    )
    if as_json:
        render.print_json(render.job_dict(job))
        return
    render.console().print(f"Updated job {job.job_id}: {render.escape(job.schedule_expression)} ({job.timezone}).")
    render.console().print(render.next_fires_line(job))


@app.command("pause", epilog="Example: agentwake jobs pause job-0123abcd")
def jobs_pause(ctx: typer.Context, job_id: JobArg, as_json: JsonOpt = False) -> None:
    """Pause a job: its schedule is disabled; the fires it misses are counted from now."""
    job = ops(ctx).jobs.pause(job_id)
    if as_json:
        render.print_json(render.job_dict(job))
        return
    render.console().print(
        f"Paused job {job.job_id}; its schedule is disabled. Resume it with: agentwake jobs resume {job.job_id}"
    )


@app.command("resume", epilog="Example: agentwake jobs resume job-0123abcd")
def jobs_resume(ctx: typer.Context, job_id: JobArg, as_json: JsonOpt = False) -> None:
    """Resume a paused job, catching up the fires it missed by its catch-up policy.

    Its schedule is enabled again, every fire time it missed is recorded (jobs show), and its
    catch-up policy runs none, the latest, or all of them within its window. Fires of the job that
    the Scheduler could not deliver (in SchedulerDLQ) count as missed too: they are caught up by
    the same policy, then deleted from SchedulerDLQ (the job keeps the record). A job that is not
    paused but has such fires is caught up the same way.
    """
    from agentwake_ops.dlq.act import delete_messages
    from agentwake_ops.dlq.select import Selection

    context = ops(ctx)
    dead, note = _dead_lettered_fires(context, job_id)
    times = [str(m.payload["scheduled_time"]) for m in dead if m.payload and m.payload.get("scheduled_time")]
    result = context.jobs.resume(job_id, undelivered=_valid_times(times))
    handled = [m for m in dead if m.payload and str(m.payload.get("scheduled_time")) in set(_valid_times(times))]
    deleted = 0
    if handled:
        report = delete_messages(
            context, Selection(ids=tuple(m.message_id for m in handled), exact=True), queue="scheduler"
        )
        deleted = len(report.deleted)
    if as_json:
        render.print_json(
            {
                "job": render.job_dict(result.job),
                "missed": result.missed,
                "caught_up": result.caught_up,
                "scheduler_dlq_deleted": deleted,
            }
        )
        return
    job = result.job
    if note:
        render.err_console().print(render.escape(note))
    render.console().print(f"Resumed job {job.job_id}: {render.escape(_caught_up_words(job, result, len(handled)))}")
    render.console().print(render.next_fires_line(job))


def _caught_up_words(job: Any, result: Any, undelivered: int) -> str:
    """What a resume did, in words: the fires missed, and which runs its catch-up policy started."""
    if not result.missed:
        return "it missed no fire, so there is nothing to catch up."
    dlq = f" ({undelivered} of them undelivered, from SchedulerDLQ)" if undelivered else ""
    ran = (
        f"ran {len(result.caught_up)}: {', '.join(result.caught_up)}."
        if result.caught_up
        else "ran none of them (jobs show says why for each)."
    )
    return f"{len(result.missed)} fire(s) missed{dlq}; catch-up {job.catch_up} {ran}"


def _valid_times(times: list[str]) -> list[str]:
    """The scheduled times that are times (a redriven manual run's ``manual-...`` is not a fire)."""
    from agentwake.jobs.fires import parse_time

    valid = []
    for text in times:
        try:
            parse_time(text)
        except ValueError:
            continue
        valid.append(text)
    return valid


@app.command(
    "backfill",
    epilog="Example: agentwake jobs backfill job-0123abcd --from 2026-11-01T00:00:00Z --to 2026-11-05T23:59:59Z",
)
def jobs_backfill(
    ctx: typer.Context,
    job_id: JobArg,
    start: Annotated[str, typer.Option("--from", help="The range's start, ISO-8601 (2026-11-01T00:00:00Z).")],
    end: Annotated[str, typer.Option("--to", help="The range's end, ISO-8601, included.")],
    cap: Annotated[int, typer.Option("--max", help="Refuse a range with more fire times than this (1-1000).")] = 50,
    yes: YesOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Run the job once per fire time in a range (a dry run unless --yes).

    Each run has the run id its own fire would have had; times that already have a run are left
    out, so the same backfill twice starts nothing new. More than --max times is refused.
    """
    plan = ops(ctx).jobs.backfill(job_id, start, end, dry_run=not yes, cap=cap)
    if as_json:
        render.print_json(
            {"dry_run": plan.dry_run, "times": plan.times, "existing": plan.existing, "run_ids": plan.run_ids}
        )
        return
    out = render.console()
    verb = "Would run" if plan.dry_run else "Invoked"
    out.print(
        f"{len(plan.times)} fire time(s) in the range; {len(plan.existing)} already have a run. "
        f"{verb} {len(plan.to_run)}:"
    )
    for run_id in plan.run_ids:
        out.print(f"  {render.escape(run_id)}")
    if plan.dry_run and plan.to_run:
        out.print("Dry run: nothing started. Run it with --yes.")


@app.command("trigger", epilog="Example: agentwake jobs trigger job-0123abcd --time 2026-11-03T06:00:00Z")
def jobs_trigger(
    ctx: typer.Context,
    job_id: JobArg,
    at: Annotated[str, typer.Option("--time", help="The scheduled time to run, ISO-8601.")],
) -> None:
    """Run the job for one scheduled time now, with that fire's run id.

    The run id is cron:JOB_ID:TIME (TIME in UTC, as the Scheduler writes it): a run that succeeded
    already is not run again.
    """
    run_id = ops(ctx).jobs.trigger(job_id, at)
    render.console().print(f"Invoked CronWakeFunction for {job_id}: run {render.escape(run_id)}.")
