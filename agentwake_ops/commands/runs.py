"""``agentwake runs list|show``: runs newest first; one run with every attempt, step and delivery.

(``runs replay`` is ``agentwake_ops.cli_replay``, mounted on this group by ``agentwake_ops.cli``.)
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from agentwake_ops import render
from agentwake_ops.cli_common import JsonOpt, WideOpt, check_id, fail, ops, user_error
from agentwake_ops.terminal import masked

app = typer.Typer(
    help="Runs: list them newest first; show one with every attempt, step and delivery.", no_args_is_help=True
)

RUN_STATUSES = ("running", "parked", "succeeded", "failed")


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


@app.command(
    "list",
    epilog="Examples: agentwake runs list --session s1 --status failed  |  agentwake runs list --since 6h --json",
)
def runs_list(
    ctx: typer.Context,
    session: Annotated[
        str | None, typer.Option("--session", help="Only this session's runs (a Query of its index partition).")
    ] = None,
    status: Annotated[
        str | None,
        typer.Option(
            "--status",
            help="Only runs in this state (parked: waiting for an approval).",
            metavar="running|parked|succeeded|failed",
        ),
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
    scan: Annotated[
        bool,
        typer.Option(
            "--scan",
            help="Without --session: Scan the runs of every session (the gsi3 and gsi1 indexes) instead of "
            "the by-day index (finds runs written before any by-day index; reads every run).",
        ),
    ] = False,
    tree: Annotated[
        bool,
        typer.Option(
            "--tree",
            help="With --session: its latest runs as a tree, oldest first: under each run the tasks and "
            "wakes it started, under those the runs they caused.",
        ),
    ] = False,
    as_json: JsonOpt = False,
    wide: WideOpt = False,
) -> None:
    """List runs, newest attempt first, a page at a time (--tree: one session's runs as a tree)."""
    from agentwake_ops.runs import list_runs, runs_page_note

    if session is not None:
        check_id(session, "session id")
    if tree:
        if session is None:
            raise user_error("--tree needs --session SESSION: a tree is one session's runs")
        if status or since or before or scan:
            raise user_error("--tree takes only --session and --limit (the tree needs every run of the page)")
        _runs_tree(ctx, session, limit, as_json=as_json)
        return
    if status is not None and status not in RUN_STATUSES:
        raise user_error(f"--status must be one of {', '.join(RUN_STATUSES)}, got {status!r}")
    page = list_runs(
        ops(ctx).store,
        session_id=session,
        status=status,
        since=_since(since) if since else None,
        before=before,
        limit=limit,
        scan=scan,
    )
    note = runs_page_note(page)
    if as_json:
        data = {"runs": [r.model_dump(mode="json") for r in page.runs], "next_before": page.next_before}
        render.print_json(masked({**data, "method": page.method, "note": note}))
        return
    render.runs_table(
        page.runs, page.next_before, filtered=bool(session or status or since or before), note=note, wide=wide
    )


def _runs_tree(ctx: typer.Context, session: str, limit: int, *, as_json: bool) -> None:
    from agentwake_ops.tree import session_tree

    roots, listed = session_tree(ops(ctx).store, session, limit=limit)
    if as_json:
        render.print_json(masked({"session_id": session, "runs_listed": listed, "tree": [r.as_dict() for r in roots]}))
        return
    render.run_tree(session, roots, listed)


@app.command(
    "show", epilog="Examples: agentwake runs show bg:task-1234 --transcript  |  agentwake runs show bg:task-1234 --json"
)
def runs_show(
    ctx: typer.Context,
    run_id: Annotated[
        str, typer.Argument(help="bg:{task_id}, sub:{task_id} or cron:{job_id}:{scheduled_time}.", metavar="RUN_ID")
    ],
    transcript: Annotated[
        bool,
        typer.Option(
            "--transcript", help="Every journaled step in order: replies, tool calls and results, deliveries, failures."
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Show a run: status and attempts, the run that started it, the tasks and wakes it started,
    every failed attempt, steps journaled, deliveries made (with what the user received: each
    platform's receipt) and sends in doubt ("sent? unknown": settle them with dlq redrive --delivered
    or --resend)."""
    from agentwake_ops.runs import run_summary
    from agentwake_ops.runs import transcript as build_transcript
    from agentwake_ops.tree import run_links

    store = ops(ctx).store
    summary = run_summary(store, run_id, with_note=True)
    if summary.empty:
        fail(
            f"no run {run_id!r} in the store (run ids look like bg:TASK_ID, sub:TASK_ID or "
            "cron:JOB_ID:SCHEDULED_TIME; find them with: agentwake runs list --session SESSION)"
        )
    links = run_links(store, summary.run) if summary.run is not None else None
    waiting = _waiting(ctx, summary.run)
    if as_json:
        data: dict[str, Any] = {"run_id": run_id, **summary.as_dict(), "links": links.as_dict() if links else None}
        if waiting is not None:
            data["waiting_for"] = {**waiting[0].model_dump(mode="json"), "said": waiting[1]}
        if transcript:
            data["transcript"] = [e.as_dict() for e in build_transcript(summary)]
        render.print_json(masked(data))
        return
    render.run_show(summary, build_transcript(summary) if transcript else None, links, parked=waiting and waiting[1])


def _waiting(ctx: typer.Context, run: Any) -> tuple[Any, str] | None:
    """A parked run's approval request and its one line: what it waits for, since when, until when and
    then what, and how to decide (``approvals_view.waiting_for``). None for a run that is not parked."""
    from agentwake_ops import approvals_view

    approval_id = getattr(run, "waiting_for", None)
    if run is None or run.status != "parked" or not approval_id:
        return None
    found = ops(ctx).approvals.approvals.get(approval_id)
    if found is None:
        return None
    shown = approvals_view.view(found)
    return shown, approvals_view.waiting_for(shown, parked_at=getattr(run, "parked_at", None), step=found.step)
