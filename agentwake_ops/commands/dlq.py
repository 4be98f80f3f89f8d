"""``agentwake dlq list|show|redrive|delete|purge|export``: why is this message here, and what to do about it.

Each command parses its options, calls the DLQ pipeline (``agentwake_ops.dlq``: scan → describe →
select → claim → act) and prints through ``agentwake_ops.render``.
"""

from __future__ import annotations

from typing import Annotated

import typer

from agentwake_ops import render
from agentwake_ops.cli_common import JsonOpt, WideOpt, YesOpt, check_id, confirm, fail, ops, progress
from agentwake_ops.terminal import masked

#: the DLQs by their short name (agentwake_ops.dlq.scan.DLQS, kept here so --help imports nothing)
QUEUES = ("results", "work", "cron", "scheduler")

app = typer.Typer(
    help="Triage the dead-letter queues: list, show, redrive, delete, purge, export.",
    no_args_is_help=True,
)

QUEUE_HELP = (
    "Which DLQ: results (background results), work (background tools and subagents), cron (cron on-failure "
    "records), scheduler, or all."
)
QueueOpt = Annotated[str, typer.Option("--queue", "-q", help=QUEUE_HELP, metavar="results|work|cron|scheduler|all")]


def _check_queue(queue: str) -> str:
    from agentwake_ops.dlq.scan import queue_names

    queue_names(queue)  # raises OpsError with the valid choices
    return queue


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
    wide: WideOpt = False,
) -> None:
    """List DLQ messages with run id, session, attempts, time in the DLQ and last error (none is consumed).

    Every message is seen exactly once, or the command says it could not be sure and exits 1.
    """
    from agentwake_ops.dlq.scan import DLQS
    from agentwake_ops.dlq.select import Selection, list_messages

    if session is not None:
        check_id(session, "session id")
    context = ops(ctx)
    if queue == "all":
        for name, role in DLQS.items():
            if not context.has_queue(role):
                render.err_console().print(f"note: the {name} DLQ is unknown here and is not listed", style="yellow")
    bar = progress(as_json)
    try:
        messages = list_messages(
            context, _check_queue(queue), Selection(error_type=error_type, session_id=session), progress=bar
        )
    finally:
        bar.close()
    if as_json:
        render.print_json(masked([m.view() for m in messages]))
        return
    render.dlq_table(messages, filtered=bool(error_type or session), wide=wide)


@app.command("show", epilog="Example: agentwake dlq show 3f2a9c1b --json")
def show(
    ctx: typer.Context,
    message_id: Annotated[
        str, typer.Argument(help="The message id (or a unique prefix, as `dlq list` shows it).", metavar="ID")
    ],
    queue: QueueOpt = "all",
    as_json: JsonOpt = False,
) -> None:
    """Show one DLQ message in full: body, attributes, every failed attempt, steps, deliveries (with their
    receipts) and sends in doubt ("sent? unknown": see dlq redrive --delivered / --resend).

    The body's task_token is masked (also with --json); `dlq export` writes the body byte-exact.
    """
    from agentwake_ops.dlq.select import find_message

    bar = progress(as_json)
    try:
        msg = find_message(ops(ctx), message_id, _check_queue(queue), progress=bar)
    finally:
        bar.close()
    if as_json:
        render.print_json(masked(msg.full()))
        return
    render.dlq_message(msg)


@app.command(
    "redrive",
    epilog=(
        "Examples: agentwake dlq redrive --id 3f2a9c1b --dry-run  |  "
        "agentwake dlq redrive --error-type AllProvidersFailed --rate 5  |  agentwake dlq redrive --all --queue results"
        "  |  agentwake dlq redrive --id 3f2a9c1b --delivered 'bg:task-1#2#0'"
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
    delivered: Annotated[
        list[str] | None,
        typer.Option(
            "--delivered",
            help=(
                "A send in doubt (dlq show: 'sent? unknown') that you found in the user's chat: recorded as "
                "delivered by an operator, never sent again. With --id; repeatable."
            ),
            metavar="DELIVERY_ID",
        ),
    ] = None,
    resend: Annotated[
        list[str] | None,
        typer.Option(
            "--resend",
            help=(
                "A send in doubt that is NOT in the user's chat: marked not sent, so the redriven run sends it "
                "again. With --id; repeatable."
            ),
            metavar="DELIVERY_ID",
        ),
    ] = None,
) -> None:
    """Redrive DLQ messages so their runs resume where they stopped.

    Background results are sent back to the background-result queue, then deleted from the DLQ (never the other way round). Cron and scheduler failures re-invoke CronWakeFunction asynchronously with the original job id and scheduled time, then are deleted. --all on the results DLQ uses SQS's StartMessageMoveTask where the endpoint offers it.

    A run dead-lettered with a send in doubt (DeliveryUnconfirmed: a Telegram message whose request left, or not, before a crash) waits for you to look at the chat `dlq show` names: if the message is there, redrive with --delivered DELIVERY_ID; if not, with --resend DELIVERY_ID (a plain redrive dead-letters it again).
    """
    from agentwake_ops.dlq.act import redrive as run_redrive
    from agentwake_ops.dlq.select import Selection

    if session is not None:
        check_id(session, "session id")
    selection = Selection(ids=tuple(ids or ()), error_type=error_type, session_id=session, everything=everything)
    bar = progress(as_json)
    try:
        report = run_redrive(
            ops(ctx),
            selection,
            queue=_check_queue(queue),
            dry_run=dry_run,
            rate=rate,
            verify=verify,
            force=force,
            on_verdicts=lambda verdicts: render.replay_verdicts(verdicts, force=force, to_stderr=as_json),
            progress=bar,
            delivered=tuple(delivered or ()),
            resend=tuple(resend or ()),
        )
    finally:
        bar.close()
    if report.refused:
        failing = sum(1 for v in report.verdicts if not v.ok)
        fail(
            f"refusing to redrive: the replay of {failing} run(s) still fails "
            "(fix the session, check with `agentwake runs replay RUN_ID`, or pass --force); nothing moved"
        )
    if as_json:
        render.print_json(report.as_dict())
    else:
        render.redrive_report(report)
    if not report.ok:
        raise typer.Exit(1)


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
    from agentwake_ops.dlq.act import delete_messages, ids_from_file
    from agentwake_ops.dlq.select import Selection, find_message

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
            f"Delete DLQ message {msg.message_id} ({msg.queue}, run {render.dash(msg.run_id)}, "
            f"{render.dash(msg.error_type)})?",
            yes,
            what="delete a DLQ message",
        )
        selection, scope = Selection(ids=(msg.message_id,), exact=True), msg.queue
    bar = progress(as_json)
    try:
        report = delete_messages(context, selection, queue=scope, progress=bar)
    finally:
        bar.close()
    render.delete_report(report, as_json)
    if not report.ok or (message_id is not None and not report.deleted):
        raise typer.Exit(1)


@app.command("purge", epilog="Example: agentwake dlq purge scheduler --yes")
def purge(
    ctx: typer.Context,
    queue: Annotated[str, typer.Argument(help="The DLQ to empty: results, work, cron or scheduler.", metavar="QUEUE")],
    yes: YesOpt = False,
) -> None:
    """Delete every message of one DLQ (shows the count, asks for confirmation; there is no undo)."""
    from agentwake_ops.dlq.act import purge as run_purge
    from agentwake_ops.dlq.scan import DLQS
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
    render.console().print(f"Purged the {queue} DLQ ({total} message(s)).")


@app.command(
    "export",
    epilog="Examples: agentwake dlq export --out dlq.jsonl --queue results  |  agentwake dlq export --out dlq.jsonl --delete --yes",
)
def export(
    ctx: typer.Context,
    out: Annotated[
        str,
        typer.Option(
            "--out", "-o", help="The JSON Lines file to write (it holds task tokens: keep it secret).", metavar="FILE"
        ),
    ],
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

    The file holds the messages' task tokens in clear: bodies are kept byte-exact so they can be sent again. Keep it like a secret and delete it when done. Its first line is a header record saying so (`dlq delete --from FILE` skips it).
    """
    from agentwake_ops.dlq.act import export as run_export

    context = ops(ctx)
    if delete:
        confirm(f"Export the DLQ to {out} and then delete every exported message?", yes, what="export --delete")
    bar = progress(as_json)
    try:
        report = run_export(context, out, queue=_check_queue(queue), delete=delete, progress=bar)
    finally:
        bar.close()
    render.export_report(report, out, as_json)
    if report.deleted is not None and not report.deleted.ok:
        raise typer.Exit(1)
