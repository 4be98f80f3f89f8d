"""``agentwake dlq``: why is this message here, and what to do about it."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agentwake_ops.cli_common import (
    JSON_HELP,
    YES_HELP,
    age,
    check_id,
    confirm,
    console,
    dash,
    err_console,
    escape,
    facts_panel,
    fail,
    ops,
    print_json,
    progress,
    when,
)

if TYPE_CHECKING:
    from agentwake_ops.dlq_actions import RedriveReport
    from agentwake_ops.dlq_view import DlqMessage

#: the DLQs by their short name (agentwake_ops.dlq_view.DLQS, kept here so --help imports nothing)
QUEUES = ("results", "cron", "scheduler")

app = typer.Typer(
    help="Triage the dead-letter queues: list, show, redrive, delete, purge, export.",
    no_args_is_help=True,
)

QUEUE_HELP = "Which DLQ: results (background results), cron (cron on-failure records), scheduler, or all."
QueueOpt = Annotated[str, typer.Option("--queue", "-q", help=QUEUE_HELP, metavar="results|cron|scheduler|all")]
JsonOpt = Annotated[bool, typer.Option("--json", help=JSON_HELP)]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help=YES_HELP)]


def _check_queue(queue: str) -> str:
    from agentwake_ops.dlq_view import queue_names

    queue_names(queue)  # raises OpsError with the valid choices
    return queue


# --------------------------------------------------------------------------------------------
# list


@app.command(
    "list",
    epilog="Example: agentwake dlq list --queue results --error-type AllProvidersFailed --json",
)
def list_(
    ctx: typer.Context,
    queue: QueueOpt = "all",
    error_type: Annotated[
        str | None, typer.Option("--error-type", help="Only messages whose last error has this type.")
    ] = None,
    session: Annotated[str | None, typer.Option("--session", help="Only messages of this session.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """List DLQ messages with run id, session, attempts, time in the DLQ and last error (none is consumed).

    Every message is seen exactly once, or the command says it could not be sure and exits 1.
    """
    from agentwake_ops.dlq_actions import list_messages
    from agentwake_ops.dlq_view import DLQS, Selection

    if session is not None:
        check_id(session, "session id")
    context = ops(ctx)
    if queue == "all":
        for name, role in DLQS.items():
            if not context.has_queue(role):
                err_console().print(f"note: the {name} DLQ is unknown here and is not listed", style="yellow")
    bar = progress(as_json)
    try:
        messages = list_messages(context, _check_queue(queue), progress=bar)
    finally:
        bar.close()
    messages = [m for m in messages if Selection(error_type=error_type, session_id=session).matches(m)]
    if as_json:
        print_json([m.view() for m in messages])
        return
    from rich.table import Table

    from agentwake_ops.dlq_view import first_line

    out = console()
    if not messages:
        out.print(
            "No messages in the dead-letter queues" + (" matching the filters." if error_type or session else ".")
        )
        return
    table = Table(title=f"{len(messages)} DLQ message(s)", show_lines=False)
    for column in ("id", "queue", "run id", "session", "attempts", "in DLQ for", "last error", "detail"):
        table.add_column(column, overflow="fold")
    for m in messages:
        table.add_row(
            m.short_id,
            m.queue,
            escape(dash(m.run_id)),
            escape(dash(m.session_id)),
            dash(m.attempts),
            age(m.age_seconds),
            escape(dash(m.error_type)),
            escape(first_line(m.error_detail) or "-"),
        )
    out.print(table)
    out.print("Show one in full: agentwake dlq show ID", style="dim")


# --------------------------------------------------------------------------------------------
# show


@app.command("show", epilog="Example: agentwake dlq show 3f2a9c1b --json")
def show(
    ctx: typer.Context,
    message_id: Annotated[
        str, typer.Argument(help="The message id (or a unique prefix, as `dlq list` shows it).", metavar="ID")
    ],
    queue: QueueOpt = "all",
    as_json: JsonOpt = False,
) -> None:
    """Show one DLQ message in full: body, attributes, every failed attempt, steps, deliveries."""
    from agentwake_ops.dlq_actions import find_message

    bar = progress(as_json)
    try:
        msg = find_message(ops(ctx), message_id, _check_queue(queue), progress=bar)
    finally:
        bar.close()
    if as_json:
        print_json(msg.full())
        return
    render_message(msg)


def render_message(msg: DlqMessage) -> None:
    from rich.panel import Panel
    from rich.syntax import Syntax
    from rich.table import Table

    from agentwake_ops.dlq_view import json_safe_attributes, safe_json

    out = console()
    rows = [
        ("message id", msg.message_id),
        ("queue", msg.queue),
        ("kind", msg.kind),
        ("run id", msg.run_id),
        ("run status", msg.run_status),
        ("session", msg.session_id),
        ("task / job", msg.task_id or msg.job_id),
        ("attempts", msg.attempts),
        ("first failure", when(msg.first_failure_at)),
        ("last failure", when(msg.last_failure_at)),
        (
            "in the DLQ since",
            f"{when(msg.in_dlq_since)} ({age(msg.age_seconds)} ago; from {dash(msg.in_dlq_since_source)})"
            if msg.in_dlq_since
            else "unknown",
        ),
        ("sent by the producer", when(msg.sent_at)),
        ("times received", f"{dash(msg.receive_count)} (SQS's count: every listing adds one)"),
        ("last error", f"{dash(msg.error_type)} (from {dash(msg.error_source)})"),
        *((key.replace("_", " "), value) for key, value in msg.trigger.items() if value is not None),
    ]
    out.print(facts_panel(rows, "DLQ message"))
    if msg.error_detail:
        out.print(Panel(escape(msg.error_detail), title="last error detail", expand=False))

    parsed = safe_json(msg.body)
    try:
        body: Any = Syntax(json.dumps(parsed, indent=2), "json", word_wrap=True) if parsed is not None else None
    except (ValueError, RecursionError):
        body = None
    if body is None:
        body = escape(msg.body)
    out.print(Panel(body, title="body", expand=False))
    if msg.attributes or msg.message_attributes:
        grid = Table("attribute", "value", title="attributes", title_justify="left")
        for key, value in sorted(msg.attributes.items()):
            grid.add_row(escape(key), escape(str(value)))
        for key, value in sorted(json_safe_attributes(msg.message_attributes).items()):
            shown = value.get("StringValue", value.get("BinaryValueBase64", ""))
            grid.add_row(escape(f"{key} (message attribute)"), escape(str(shown)))
        out.print(grid)

    summary = msg.summary
    if summary is None:
        out.print("No run in the store for this message (a permanent input error never becomes a run).")
        return
    render_summary_tables(summary)


def render_summary_tables(summary: Any) -> None:
    from rich.table import Table

    render_usage(summary)
    out = console()
    if summary.failures:
        table = Table(title=f"failed attempts ({len(summary.failures)})", title_justify="left", show_lines=True)
        for column in ("attempt", "time", "error type", "detail", "provider errors"):
            table.add_column(column, overflow="fold")
        for f in summary.failures:
            providers = "\n".join(f"{pid}: {err}" for pid, err in f.provider_errors.items()) or "-"
            table.add_row(str(f.attempt), when(f.at), escape(f.error_type), escape(f.detail), escape(providers))
        out.print(table)
    else:
        out.print("No failed attempt is recorded.")
    if summary.steps:
        table = Table(title=f"steps journaled ({len(summary.steps)})", title_justify="left")
        for column in ("step", "time", "what"):
            table.add_column(column, overflow="fold")
        for step in summary.steps:
            table.add_row(escape(step["key"]), when(step.get("at")), escape(_step_summary(step)))
        out.print(table)
    else:
        out.print("No step is journaled: a redrive starts this run from its first step.")
    if summary.deliveries:
        table = Table(
            title=f"deliveries already made ({len(summary.deliveries)}) — a redrive does not send them again",
            title_justify="left",
        )
        for column in ("delivery id", "time", "text"):
            table.add_column(column, overflow="fold")
        for d in summary.deliveries:
            table.add_row(escape(d["delivery_id"]), when(d.get("at")), escape(d["text"]))
        out.print(table)
    else:
        out.print("No message was delivered to the user by this run.")


def render_usage(summary: Any) -> None:
    """Tokens, latency and estimated cost of the run's model calls, per provider (``runs show``,
    ``dlq show``)."""
    from rich.table import Table

    usage = (summary.run.usage if summary.run is not None else None) or {}
    providers = usage.get("by_provider") or {}
    if not providers:
        return
    table = Table(title="model calls by provider", title_justify="left")
    for column in ("provider", "model", "calls", "input tokens", "output tokens", "latency", "estimated cost"):
        table.add_column(column, overflow="fold")

    def cost(value: Any) -> str:
        return "-" if value is None else f"${value:.6f}"

    for pid, row in providers.items():
        table.add_row(
            escape(pid),
            escape(dash(row.get("model"))),
            str(row.get("calls", 0)),
            str(row.get("input_tokens", 0)),
            str(row.get("output_tokens", 0)),
            f"{row.get('latency_ms', 0)} ms",
            cost(row.get("estimated_cost_usd")),
        )
    table.add_row(
        "total",
        "",
        str(usage.get("model_calls", 0)),
        str(usage.get("input_tokens", 0)),
        str(usage.get("output_tokens", 0)),
        f"{usage.get('latency_ms', 0)} ms",
        cost(usage.get("estimated_cost_usd")),
    )
    console().print(table)


def _step_summary(step: dict[str, Any]) -> str:
    parts = []
    if step.get("tool"):
        parts.append(f"tool {step['tool']} ->")
    text = step.get("text") or step.get("content") or ""
    if text:
        from agentwake_ops.dlq_view import first_line

        parts.append(first_line(str(text), 120))
    calls = step.get("tool_calls") or []
    if calls:
        names = ", ".join(str(c.get("name")) for c in calls if isinstance(c, dict))
        parts.append(f"calls {names}")
    usage = step.get("usage")
    if isinstance(usage, dict):
        parts.append(
            f"[{step.get('provider_id') or '?'}: {usage.get('input_tokens', 0)} in / "
            f"{usage.get('output_tokens', 0)} out tokens, {usage.get('latency_ms', 0)} ms, attempt {usage.get('attempt', 1)}]"
        )
    return " ".join(parts) or "-"


# --------------------------------------------------------------------------------------------
# redrive


@app.command(
    "redrive",
    epilog=(
        "Examples: agentwake dlq redrive --id 3f2a9c1b --dry-run  |  "
        "agentwake dlq redrive --error-type AllProvidersFailed --rate 5  |  agentwake dlq redrive --all --queue results"
    ),
)
def redrive(
    ctx: typer.Context,
    ids: Annotated[list[str] | None, typer.Option("--id", help="A message id or unique prefix (repeatable).")] = None,
    error_type: Annotated[
        str | None, typer.Option("--error-type", help="Every message whose last error has this type.")
    ] = None,
    session: Annotated[str | None, typer.Option("--session", help="Every message of this session.")] = None,
    everything: Annotated[bool, typer.Option("--all", help="Every message of the chosen queue(s).")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print what would move; change nothing.")] = False,
    rate: Annotated[
        float | None, typer.Option("--rate", help="At most N messages per second (default: no limit).", min=0.001)
    ] = None,
    queue: QueueOpt = "all",
    as_json: JsonOpt = False,
    verify: Annotated[
        bool, typer.Option("--verify", help="Replay each run first (runs replay); refuse if a replay still fails.")
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="With --verify: redrive even runs whose replay fails.")
    ] = False,
) -> None:
    """Redrive DLQ messages so their runs resume where they stopped.

    Background results are sent back to the background-result queue, then deleted from the DLQ (never the other way round). Cron and scheduler failures re-invoke CronWakeFunction asynchronously with the original job id and scheduled time, then are deleted. --all on the results DLQ uses SQS's StartMessageMoveTask where the endpoint offers it.
    """
    from agentwake_ops.dlq_actions import redrive as run_redrive
    from agentwake_ops.dlq_view import Selection

    if session is not None:
        check_id(session, "session id")
    selection = Selection(ids=tuple(ids or ()), error_type=error_type, session_id=session, everything=everything)
    context = ops(ctx)
    if verify and not selection.empty:
        from agentwake_ops.cli_replay import verify_before_redrive
        from agentwake_ops.dlq_actions import list_messages
        from agentwake_ops.dlq_view import filter_messages

        chosen = filter_messages(list_messages(context, _check_queue(queue)), selection)
        if not verify_before_redrive(context, chosen, force=force, to_stderr=as_json):
            raise typer.Exit(1)
    bar = progress(as_json)
    try:
        report = run_redrive(context, selection, queue=_check_queue(queue), dry_run=dry_run, rate=rate, progress=bar)
    finally:
        bar.close()
    if as_json:
        print_json(report.as_dict())
    else:
        _print_report(report)
    if not report.ok:
        raise typer.Exit(1)


def _print_report(report: RedriveReport) -> None:
    from rich.table import Table

    out = console()
    if report.native_fallback:
        out.print(escape(report.native_fallback), style="yellow")
    if report.dry_run:
        if not report.planned:
            out.print("Dry run: no message matches; nothing would move.")
            return
        table = Table(title=f"Dry run: {len(report.planned)} message(s) would be redriven (nothing changed)")
        for column in ("id", "queue", "run id", "action"):
            table.add_column(column, overflow="fold")
        for item in report.planned:
            table.add_row(item.message_id[:8], item.queue, escape(dash(item.run_id)), escape(item.action))
        out.print(table)
        return
    if report.native_task:
        handle, count = report.native_task
        out.print(
            f"Started StartMessageMoveTask for about {count} message(s) from the results DLQ "
            f"(task handle {escape(handle)}); follow it with `aws sqs list-message-move-tasks`."
        )
    out.print(f"Redrive: moved {len(report.moved)}, failed {len(report.failed)}.")
    if report.failed:
        table = Table(title="not moved", title_style="red")
        for column in ("id", "queue", "run id", "reason"):
            table.add_column(column, overflow="fold")
        for item in report.failed:
            table.add_row(item.message_id[:8], item.queue, escape(dash(item.run_id)), escape(item.reason))
        out.print(table)


# --------------------------------------------------------------------------------------------
# delete, purge, export


@app.command(
    "delete",
    epilog="Examples: agentwake dlq delete 3f2a9c1b --yes  |  agentwake dlq delete --from dlq.jsonl --yes",
)
def delete(
    ctx: typer.Context,
    message_id: Annotated[
        str | None, typer.Argument(help="The message id (or a unique prefix).", metavar="ID", show_default=False)
    ] = None,
    from_file: Annotated[
        str | None,
        typer.Option(
            "--from",
            help="Delete exactly the messages of this export file (or a file of ids, one a line).",
            metavar="FILE",
        ),
    ] = None,
    queue: QueueOpt = "all",
    yes: YesOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Delete DLQ messages for good: one by id, or exactly those of an export file (asks first)."""
    from agentwake_ops.dlq_actions import delete_messages, find_message, ids_from_file
    from agentwake_ops.dlq_view import Selection

    if (message_id is None) == (from_file is None):
        fail("give either one message ID or --from FILE")
    context = ops(ctx)
    if from_file is not None:
        wanted = ids_from_file(from_file)
        confirm(
            f"Delete the {len(wanted)} message(s) listed in {from_file} from the DLQ for good?",
            yes,
            what="delete DLQ messages",
        )
        selection = Selection(ids=tuple(wanted), exact=True)
        scope = _check_queue(queue)
    else:
        assert message_id is not None
        msg = find_message(context, message_id, _check_queue(queue))
        confirm(
            f"Delete DLQ message {msg.message_id} ({msg.queue}, run {dash(msg.run_id)}, {dash(msg.error_type)})?",
            yes,
            what="delete a DLQ message",
        )
        selection, scope = Selection(ids=(msg.message_id,), exact=True), msg.queue
    bar = progress(as_json)
    try:
        report = delete_messages(context, selection, queue=scope, progress=bar)
    finally:
        bar.close()
    _print_delete(report, as_json)
    if not report.ok or (message_id is not None and not report.deleted):
        raise typer.Exit(1)


def _print_delete(report: Any, as_json: bool) -> None:
    if as_json:
        print_json(
            {
                "deleted": [m.message_id for m in report.deleted],
                "failed": report.failed,
                "missing": report.missing,
            }
        )
        return
    out = console()
    out.print(f"Deleted {len(report.deleted)} message(s) from the DLQ.")
    if report.missing:
        out.print(f"{len(report.missing)} id(s) were not in the DLQ (already redriven or deleted).")
    for mid, why in report.failed.items():
        out.print(f"not deleted, still in the DLQ: {escape(mid)}: {escape(why)}", style="red")


@app.command("purge", epilog="Example: agentwake dlq purge scheduler --yes")
def purge(
    ctx: typer.Context,
    queue: Annotated[str, typer.Argument(help="The DLQ to empty: results, cron or scheduler.", metavar="QUEUE")],
    yes: YesOpt = False,
) -> None:
    """Delete every message of one DLQ (shows the count, asks for confirmation; there is no undo)."""
    from agentwake_ops.dlq_actions import purge as run_purge
    from agentwake_ops.dlq_view import DLQS
    from agentwake_ops.sqs_scan import queue_counts

    if queue not in DLQS:
        fail(f"unknown queue {queue!r}: purge one of {', '.join(DLQS)}")
    context = ops(ctx)
    url = context.queue_url(DLQS[queue])
    visible, in_flight, delayed = queue_counts(context.sqs, url)
    total = visible + in_flight + delayed
    confirm(
        f"Purge {total} message(s) (as the queue counts them) from the {queue} DLQ ({url})? "
        "Keep a copy first with: agentwake dlq export --out FILE --delete",
        yes,
        what=f"purge the {queue} DLQ",
    )
    run_purge(context, queue)
    console().print(f"Purged the {queue} DLQ ({total} message(s)).")


@app.command(
    "export",
    epilog="Examples: agentwake dlq export --out dlq.jsonl --queue results  |  agentwake dlq export --out dlq.jsonl --delete --yes",
)
def export(
    ctx: typer.Context,
    out: Annotated[str, typer.Option("--out", "-o", help="The JSON Lines file to write.", metavar="FILE")],
    queue: QueueOpt = "all",
    delete: Annotated[
        bool,
        typer.Option(
            "--delete",
            help="Then delete exactly the exported messages (only once the file is written and synced to disk).",
        ),
    ] = False,
    yes: YesOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Export every DLQ message as JSON Lines: joined view, failure records, raw body and attributes.

    Every message is written exactly once, or the command says it could not be sure and writes nothing.
    """
    from agentwake_ops.dlq_actions import export as run_export

    context = ops(ctx)
    if delete:
        confirm(f"Export the DLQ to {out} and then delete every exported message?", yes, what="export --delete")
    bar = progress(as_json)
    try:
        report = run_export(context, out, queue=_check_queue(queue), delete=delete, progress=bar)
    finally:
        bar.close()
    deleted = report.deleted
    if as_json:
        print_json(
            {
                "path": report.path,
                "written": report.written,
                "deleted": None if deleted is None else len(deleted.deleted),
                "not_deleted": None if deleted is None else deleted.failed,
            }
        )
    else:
        console().print(f"Wrote {report.written} message(s) to {escape(out)}.")
        if deleted is not None:
            console().print(f"Deleted {len(deleted.deleted)} exported message(s) from the DLQ.")
            for mid, why in deleted.failed.items():
                console().print(f"not deleted, still in the DLQ: {escape(mid)}: {escape(why)}", style="red")
    if deleted is not None and not deleted.ok:
        raise typer.Exit(1)
