"""``agentwake dlq``: why is this message here, and what to do about it."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table

from agentwake_ops import triage
from agentwake_ops.cli_common import (
    JSON_HELP,
    YES_HELP,
    age,
    confirm,
    console,
    dash,
    err_console,
    facts_panel,
    fail,
    ops,
    print_json,
    when,
)
from agentwake_ops.triage import DlqMessage, RedriveItem, RedriveReport, Selection

app = typer.Typer(
    help="Triage the dead-letter queues: list, show, redrive, delete, purge, export.",
    no_args_is_help=True,
)

QUEUE_HELP = "Which DLQ: results (background results), cron (cron on-failure records), scheduler, or all."
QueueOpt = Annotated[str, typer.Option("--queue", "-q", help=QUEUE_HELP, metavar="results|cron|scheduler|all")]
JsonOpt = Annotated[bool, typer.Option("--json", help=JSON_HELP)]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help=YES_HELP)]


def _check_queue(queue: str) -> str:
    triage.queue_names(queue)  # raises OpsError with the valid choices
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
    """List DLQ messages with run id, session, attempts, age and last error (none is consumed)."""
    context = ops(ctx)
    if queue == "all":
        for name, role in triage.DLQS.items():
            if not context.has_queue(role):
                err_console().print(f"note: the {name} DLQ is unknown here and is not listed", style="yellow")
    messages = triage.list_messages(context, _check_queue(queue))
    messages = [m for m in messages if Selection(error_type=error_type, session_id=session).matches(m)]
    if as_json:
        print_json([m.view() for m in messages])
        return
    out = console()
    if not messages:
        out.print(
            "No messages in the dead-letter queues" + (" matching the filters." if error_type or session else ".")
        )
        return
    table = Table(title=f"{len(messages)} DLQ message(s)", show_lines=False)
    for column in ("id", "queue", "run id", "session", "attempts", "age", "last error", "detail"):
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
            escape(triage.first_line(m.error_detail) or "-"),
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
    msg = triage.find_message(ops(ctx), message_id, _check_queue(queue))
    if as_json:
        print_json(msg.full())
        return
    render_message(msg)


def render_message(msg: DlqMessage) -> None:
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
        ("in the DLQ since", f"{when(msg.sent_at)} ({age(msg.age_seconds)} ago)"),
        ("last error", f"{dash(msg.error_type)} (from {dash(msg.error_source)})"),
        *((key.replace("_", " "), value) for key, value in msg.trigger.items() if value is not None),
    ]
    out.print(facts_panel(rows, "DLQ message"))
    if msg.error_detail:
        out.print(Panel(escape(msg.error_detail), title="last error detail", expand=False))

    parsed = triage.safe_json(msg.body)
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
        for key, value in sorted(triage.json_safe_attributes(msg.message_attributes).items()):
            shown = value.get("StringValue", value.get("BinaryValueBase64", ""))
            grid.add_row(escape(f"{key} (message attribute)"), escape(str(shown)))
        out.print(grid)

    summary = msg.summary
    if summary is None:
        out.print("No run in the store for this message (a permanent input error never becomes a run).")
        return
    render_summary_tables(summary)


def render_summary_tables(summary: Any) -> None:
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
    render_usage(summary)
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
        parts.append(triage.first_line(str(text), 120))
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
) -> None:
    """Redrive DLQ messages so their runs resume where they stopped.

    Background results are sent back to the background-result queue, then deleted from the DLQ (never the other way round). Cron and scheduler failures re-invoke CronWakeFunction asynchronously with the original job id and scheduled time, then are deleted. --all on the results DLQ uses SQS's StartMessageMoveTask where the endpoint offers it.
    """
    selection = Selection(ids=tuple(ids or ()), error_type=error_type, session_id=session, everything=everything)
    context = ops(ctx)
    progress_state: dict[str, Any] = {}
    err = err_console()

    def on_start(total: int) -> None:
        if total > 5 and not as_json:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            bar = Progress(TextColumn("redriving"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err)
            bar.start()
            progress_state["bar"] = bar
            progress_state["task"] = bar.add_task("redrive", total=total)

    def on_progress(_item: RedriveItem) -> None:
        if "bar" in progress_state:
            progress_state["bar"].advance(progress_state["task"])

    try:
        report = triage.redrive(
            context,
            selection,
            queue=_check_queue(queue),
            dry_run=dry_run,
            rate=rate,
            on_start=on_start,
            on_progress=on_progress,
        )
    finally:
        if "bar" in progress_state:
            progress_state["bar"].stop()
    if as_json:
        print_json(report.as_dict())
    else:
        _print_report(report)
    if not report.ok:
        raise typer.Exit(1)


def _print_report(report: RedriveReport) -> None:
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


@app.command("delete", epilog="Example: agentwake dlq delete 3f2a9c1b --queue results --yes")
def delete(
    ctx: typer.Context,
    message_id: Annotated[str, typer.Argument(help="The message id (or a unique prefix).", metavar="ID")],
    queue: QueueOpt = "all",
    yes: YesOpt = False,
) -> None:
    """Delete one DLQ message for good (asks for confirmation)."""
    context = ops(ctx)
    msg = triage.find_message(context, message_id, _check_queue(queue))
    confirm(
        f"Delete DLQ message {msg.message_id} ({msg.queue}, run {dash(msg.run_id)}, {dash(msg.error_type)})?",
        yes,
        what="delete a DLQ message",
    )
    deleted = triage.delete_messages(context, [msg.message_id], queue=msg.queue)
    if not deleted:
        fail(f"message {msg.message_id} is no longer in the {msg.queue} DLQ")
    console().print(f"Deleted {msg.message_id} from the {msg.queue} DLQ.")


@app.command("purge", epilog="Example: agentwake dlq purge scheduler --yes")
def purge(
    ctx: typer.Context,
    queue: Annotated[str, typer.Argument(help="The DLQ to empty: results, cron or scheduler.", metavar="QUEUE")],
    yes: YesOpt = False,
) -> None:
    """Delete every message of one DLQ (asks for confirmation; there is no undo)."""
    if queue not in triage.DLQS:
        fail(f"unknown queue {queue!r}: purge one of {', '.join(triage.DLQS)}")
    context = ops(ctx)
    url = context.queue_url(triage.DLQS[queue])
    count = context.sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    total = int(count.get("ApproximateNumberOfMessages", 0)) + int(
        count.get("ApproximateNumberOfMessagesNotVisible", 0)
    )
    confirm(f"Purge about {total} message(s) from the {queue} DLQ ({url})?", yes, what=f"purge the {queue} DLQ")
    triage.purge(context, queue)
    console().print(f"Purged the {queue} DLQ (about {total} message(s)).")


@app.command("export", epilog="Example: agentwake dlq export --out dlq.jsonl --queue results")
def export(
    ctx: typer.Context,
    out: Annotated[str, typer.Option("--out", "-o", help="The JSON Lines file to write.")],
    queue: QueueOpt = "all",
) -> None:
    """Export every DLQ message as JSON Lines: joined view, failure records, raw body and attributes."""
    count = triage.export(ops(ctx), out, queue=_check_queue(queue))
    console().print(f"Wrote {count} message(s) to {escape(out)}.")
