"""Act: what an operator does to the DLQ messages selected and claimed: redrive, delete, purge, export.

Every action reads the queue through one complete scan (``agentwake_ops.dlq.claim``): if the scan
cannot be sure it saw every message, the action changes nothing and raises ``IncompleteScan``.

- Redrive sends first and deletes after (after settling the sends in doubt the operator names:
  ``agentwake_ops.dlq.settle``, ``--delivered`` / ``--resend``): an interrupted move leaves at worst a duplicate, which the
  run record absorbs (a run that already succeeded does nothing) — never a lost message. With
  ``verify`` it replays each claimed run first (``agentwake_ops.replay.verify``) and redrives from
  that same claim: the DLQ is scanned once.
- Export writes the file, flushes and fsyncs it, and only then (with ``delete=True``) deletes
  exactly the messages it wrote, by the receipt handles the scan holds; an export interrupted
  before the file is complete deletes nothing and leaves every message visible again. Its bodies
  are byte-exact (for re-sending), so the file holds task tokens: its first line is a header
  record (:func:`export_header`) that says so, and readers of the file (:func:`ids_from_file`,
  :func:`read_export`) skip it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentwake_ops.context import OpsContext, OpsError
from agentwake_ops.dlq.claim import Claim, claim
from agentwake_ops.dlq.describe import DlqMessage, first_line
from agentwake_ops.dlq.scan import DLQS, queue_names
from agentwake_ops.dlq.select import Selection, list_messages
from agentwake_ops.progress import SILENT, Progress
from agentwake_ops.sqs_scan import delete_batch

if TYPE_CHECKING:
    from agentwake_ops.dlq.settle import Settlement
    from agentwake_ops.replay import Verdict

#: AWS's StartMessageMoveTask accepts at most this rate
NATIVE_MAX_RATE = 500
CRON_FUNCTION = "CronWakeFunction"


# --------------------------------------------------------------------------------------------
# redrive


@dataclass
class RedriveItem:
    message_id: str
    queue: str
    run_id: str | None
    action: str
    ok: bool = True
    reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "message_id": self.message_id,
            "queue": self.queue,
            "run_id": self.run_id,
            "action": self.action,
            "ok": self.ok,
            "reason": self.reason,
        }


@dataclass
class RedriveReport:
    dry_run: bool = False
    moved: list[RedriveItem] = field(default_factory=list)
    failed: list[RedriveItem] = field(default_factory=list)
    planned: list[RedriveItem] = field(default_factory=list)
    #: StartMessageMoveTask started for the results DLQ: (task handle, approximate message count)
    native_task: tuple[str, int] | None = None
    #: why StartMessageMoveTask was not used when it was tried
    native_fallback: str | None = None
    #: with verify: each claimed message's replay verdict
    verdicts: list[Verdict] = field(default_factory=list)
    #: with verify and without force: a replay still fails, so nothing moved
    refused: bool = False
    #: sends in doubt settled first (``--delivered`` / ``--resend``); planned only, with dry_run
    settled: list[Settlement] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed and not self.refused

    def as_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "moved": [i.as_dict() for i in self.moved],
            "failed": [i.as_dict() for i in self.failed],
            "planned": [i.as_dict() for i in self.planned],
            "native_task": (
                {"task_handle": self.native_task[0], "approximate_messages": self.native_task[1]}
                if self.native_task
                else None
            ),
            "native_fallback": self.native_fallback,
            "settled": [s.as_dict() for s in self.settled],
        }


def resend_attributes(message_attributes: dict[str, Any]) -> dict[str, Any]:
    """The attributes to send back with a redriven message: all but agentwake's own ``agentwake-*``."""
    out: dict[str, Any] = {}
    for name, value in message_attributes.items():
        if name.startswith("agentwake-"):
            continue
        attr: dict[str, Any] = {"DataType": value["DataType"]}
        if "StringValue" in value:
            attr["StringValue"] = value["StringValue"]
        elif "BinaryValue" in value:
            attr["BinaryValue"] = value["BinaryValue"]
        else:
            continue
        out[name] = attr
    return out


def _action(msg: DlqMessage) -> str:
    if msg.queue == "results":
        return "send to the background-result queue"
    if msg.queue == "work":
        return "send to the background-work queue"
    return f"invoke {CRON_FUNCTION} asynchronously with {json.dumps(msg.payload)}"


def _error(exc: BaseException) -> str:
    from botocore.exceptions import ClientError

    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        message = first_line(str(err.get("Message", "")))
        if message.startswith("<"):  # an HTML error page (a local endpoint that lacks the action)
            message = ""
        return f"{err.get('Code', 'ClientError')}: {message}".rstrip(": ")
    text = first_line(str(exc))
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _try_native_move(ctx: OpsContext, rate: float | None, report: RedriveReport) -> bool:
    """StartMessageMoveTask from the results DLQ back to the results queue; False if unavailable."""
    try:
        dlq_arn = ctx.queue_arn("results-dlq")
        source_arn = ctx.queue_arn("results")
        count = int(
            ctx.sqs.get_queue_attributes(
                QueueUrl=ctx.queue_url("results-dlq"), AttributeNames=["ApproximateNumberOfMessages"]
            )["Attributes"].get("ApproximateNumberOfMessages", "0")
        )
        kwargs: dict[str, Any] = {"SourceArn": dlq_arn, "DestinationArn": source_arn}
        if rate:
            kwargs["MaxNumberOfMessagesPerSecond"] = max(1, min(NATIVE_MAX_RATE, int(rate)))
        resp = ctx.sqs.start_message_move_task(**kwargs)
    except OpsError:
        raise
    except Exception as exc:  # NotImplementedError (moto), UnsupportedOperation, AccessDenied, ...
        report.native_fallback = (
            f"StartMessageMoveTask is not available here ({_error(exc)}); moving messages one by one"
        )
        return False
    report.native_task = (str(resp.get("TaskHandle", "")), count)
    return True


def _verified(
    ctx: OpsContext,
    messages: list[DlqMessage],
    report: RedriveReport,
    *,
    force: bool,
    on_verdicts: Callable[[list[Verdict]], None] | None,
    renew: Callable[[Iterable[DlqMessage]], None] | None = None,
) -> bool:
    """Replay each message's run (renewing the claim's holds between replays); False when a replay
    still fails and ``force`` is not given (the report says ``refused``)."""
    from agentwake_ops.replay import verify

    def renewing() -> Iterator[DlqMessage]:
        pending = list(messages)
        for msg in messages:
            if renew is not None:
                renew(pending)
            yield msg
            pending.remove(msg)

    report.verdicts = verify(ctx.store, renewing())
    if on_verdicts is not None:
        on_verdicts(report.verdicts)
    report.refused = not force and any(not v.ok for v in report.verdicts)
    return not report.refused


def redrive(
    ctx: OpsContext,
    selection: Selection,
    *,
    queue: str = "all",
    dry_run: bool = False,
    rate: float | None = None,
    verify: bool = False,
    force: bool = False,
    on_verdicts: Callable[[list[Verdict]], None] | None = None,
    progress: Progress = SILENT,
    on_progress: Callable[[RedriveItem], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    delivered: Sequence[str] = (),
    resend: Sequence[str] = (),
) -> RedriveReport:
    """Move the selected DLQ messages back to where they can succeed.

    Background results (and background work): send body + attributes (minus ``agentwake-*``) to the
    results queue (the work queue), then delete from the DLQ. Cron and scheduler failures: invoke CronWakeFunction asynchronously with
    the original ``{job_id, scheduled_time}``, then delete. ``--all`` on the results DLQ tries SQS's
    own StartMessageMoveTask first (not with ``verify``: that redrives exactly what it verified).

    ``verify``: replay each selected run first (``on_verdicts`` sees the verdicts before anything
    moves); if one still fails and ``force`` is not given, nothing moves and the report is ``refused``.

    ``delivered`` / ``resend``: delivery ids of sends in doubt of the selected message's run, settled
    first (``agentwake_ops.dlq.settle``): an id that names none, or a delivery already made, is
    refused before anything is written or moved.
    """
    if selection.empty:
        raise OpsError("say which messages to redrive: --id, --error-type, --session or --all")
    settling = bool(delivered or resend)
    if settling and not selection.ids:
        raise OpsError(
            "--delivered/--resend settle a send of one message's run: select that message with --id "
            "(agentwake dlq show ID lists its sends in doubt)"
        )
    if rate is not None and rate <= 0:
        raise OpsError("--rate must be a positive number of messages per second")
    names = queue_names(queue)
    report = RedriveReport(dry_run=dry_run)

    native = not (dry_run or verify or settling) and selection.only_everything and "results" in names
    if native and ctx.has_queue("results-dlq") and _try_native_move(ctx, rate, report):
        names = [n for n in names if n != "results"]

    if dry_run:
        chosen = list_messages(ctx, queue, selection, progress=progress)
        if settling:
            from agentwake_ops.dlq.settle import plan

            report.settled = plan(ctx, chosen, delivered=delivered, resend=resend)
        if verify and not _verified(ctx, chosen, report, force=force, on_verdicts=on_verdicts):
            return report
        report.planned = [RedriveItem(m.message_id, m.queue, m.run_id, _action(m)) for m in chosen]
        return report

    if not names:
        return report
    claimed = claim(ctx, names, selection, what="redrive", progress=progress)
    try:
        if settling:
            from agentwake_ops.dlq.settle import apply, plan

            report.settled = plan(ctx, claimed.messages, delivered=delivered, resend=resend)
            for settlement in report.settled:
                apply(ctx, settlement)
        if verify and not _verified(
            ctx, claimed.messages, report, force=force, on_verdicts=on_verdicts, renew=claimed.renew
        ):
            claimed.release(claimed.messages)
            return report
    except BaseException:
        claimed.release(claimed.messages)
        raise
    progress.phase("redriving", total=len(claimed.messages))
    pending = list(claimed.messages)
    started = clock()
    try:
        for index, msg in enumerate(claimed.messages):
            if rate is not None:
                wait = started + index / rate - clock()
                if wait > 0:
                    sleep(wait)
            claimed.renew(pending)
            item = _redrive_one(ctx, claimed, msg)
            pending.remove(msg)
            (report.moved if item.ok else report.failed).append(item)
            progress.advance()
            if on_progress:
                on_progress(item)
    finally:
        claimed.release(pending)  # interrupted: what was not processed becomes visible again at once
    return report


def _redrive_one(ctx: OpsContext, claimed: Claim, msg: DlqMessage) -> RedriveItem:
    item = RedriveItem(msg.message_id, msg.queue, msg.run_id, _action(msg))
    try:
        if msg.queue in ("results", "work"):
            # back to the queue it came from (its role in the context is its short name)
            kwargs: dict[str, Any] = {"QueueUrl": ctx.queue_url(msg.queue), "MessageBody": msg.body}
            attributes = resend_attributes(msg.message_attributes)
            if attributes:
                kwargs["MessageAttributes"] = attributes
            ctx.sqs.send_message(**kwargs)
        else:
            if msg.payload is None:
                raise OpsError("the record carries no {job_id, scheduled_time} to invoke the cron function with")
            ctx.invoke_async(CRON_FUNCTION, dict(msg.payload))
    except Exception as exc:
        claimed.release([msg])
        item.ok, item.reason = False, f"not redriven, left in the DLQ: {_error(exc)}"
        return item
    try:
        ctx.sqs.delete_message(QueueUrl=msg.queue_url, ReceiptHandle=claimed.handle(msg))
    except Exception as exc:
        claimed.release([msg])
        item.ok = False
        item.reason = (
            f"redriven, but not deleted from the DLQ ({_error(exc)}): it is still there, and a second "
            "redrive would only repeat a run its run record absorbs (a succeeded run does nothing)"
        )
    return item


# --------------------------------------------------------------------------------------------
# delete, purge, export


@dataclass
class DeleteReport:
    deleted: list[DlqMessage] = field(default_factory=list)
    #: message id -> why it was not deleted (it stays in the DLQ, visible again)
    failed: dict[str, str] = field(default_factory=dict)
    #: ids asked for that are not in the DLQ (already redriven or deleted)
    missing: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed


def _delete_claimed(ctx: OpsContext, claimed: Claim, messages: list[DlqMessage], progress: Progress) -> DeleteReport:
    report = DeleteReport(missing=list(claimed.missing))
    progress.phase(f"deleting {len(messages)} message(s)", total=len(messages))
    by_url: dict[str, list[DlqMessage]] = {}
    for msg in messages:
        by_url.setdefault(msg.queue_url, []).append(msg)
    for url, group in by_url.items():
        for start in range(0, len(group), 100):
            chunk = group[start : start + 100]
            claimed.renew(chunk)
            deleted, failed = delete_batch(ctx.sqs, url, {m.message_id: claimed.handle(m) for m in chunk})
            done = set(deleted)
            report.deleted += [m for m in chunk if m.message_id in done]
            report.failed.update(failed)
            progress.advance(len(chunk))
    claimed.release([m for m in messages if m.message_id in report.failed])
    return report


def delete_messages(
    ctx: OpsContext, selection: Selection, *, queue: str = "all", progress: Progress = SILENT
) -> DeleteReport:
    """Delete exactly the selected DLQ messages (prefixes, or exact ids read from an export file)."""
    if not selection.ids:
        raise OpsError("say which messages to delete: an ID, or --from an export file")
    claimed = claim(ctx, queue_names(queue), selection, what="delete", progress=progress)
    try:
        return _delete_claimed(ctx, claimed, claimed.messages, progress)
    except BaseException:
        claimed.release(claimed.messages)
        raise


def ids_from_file(path: str) -> list[str]:
    """Message ids from an export file (JSON Lines with ``message_id``) or one id per line."""
    ids: list[str] = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            text = line.strip()
            if not text:
                continue
            if text.startswith("{"):
                try:
                    record = json.loads(text)
                    if isinstance(record, dict) and EXPORT_HEADER in record:
                        continue
                    value = record.get("message_id")
                except (ValueError, AttributeError):
                    value = None
                if not isinstance(value, str) or not value:
                    raise OpsError(f"{path} line {number}: not an export line with a message_id")
                ids.append(value)
            else:
                ids.append(text)
    if not ids:
        raise OpsError(f"{path} holds no message ids")
    return ids


def purge(ctx: OpsContext, queue: str) -> str:
    """Purge one DLQ (``results``, ``work``, ``cron`` or ``scheduler``); returns its URL."""
    if queue not in DLQS:
        raise OpsError(f"purge one queue at a time: {', '.join(DLQS)}")
    url = ctx.queue_url(DLQS[queue])
    ctx.sqs.purge_queue(QueueUrl=url)
    return url


#: the key of the export file's first line, the header record (no message has it: it is not a message)
EXPORT_HEADER = "agentwake_dlq_export"
EXPORT_WARNING = (
    "This file holds the messages' task tokens in clear: each body is byte-exact so it can be sent "
    "again, and a body's task_token completes its task. Keep it like a secret; delete it when done."
)


def export_header(count: int) -> dict[str, Any]:
    """The first line of an export file: what it is, and that it holds task tokens."""
    from datetime import UTC, datetime

    return {
        EXPORT_HEADER: 1,
        "holds_task_tokens": True,
        "warning": EXPORT_WARNING,
        "messages": count,
        "exported_at": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
    }


def read_export(path: str) -> list[dict[str, Any]]:
    """The message records of an export file (the header record skipped)."""
    with open(path, encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle if line.strip()]
    return [r for r in records if not (isinstance(r, dict) and EXPORT_HEADER in r)]


def export_lines(messages: Iterable[DlqMessage]) -> Iterable[str]:
    """The message lines of an export (after its header): every field, the body byte-exact."""
    for msg in messages:
        yield json.dumps(msg.full(), sort_keys=True, default=str)


@dataclass
class ExportReport:
    path: str
    written: int
    deleted: DeleteReport | None = None


def _write_durably(path: str, messages: list[DlqMessage], progress: Progress, keep_alive: Callable[[], None]) -> None:
    """Write to ``path.partial``, flush + fsync, rename over ``path``, fsync the directory."""
    directory = os.path.dirname(os.path.abspath(path))
    partial = f"{path}.partial"
    progress.phase(f"writing {len(messages)} message(s)", total=len(messages))
    try:
        with open(partial, "w", encoding="utf-8") as out:
            out.write(json.dumps(export_header(len(messages)), sort_keys=True) + "\n")
            for index, line in enumerate(export_lines(messages)):
                out.write(line + "\n")
                progress.advance()
                if index % 500 == 499:
                    keep_alive()
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, path)
    except BaseException:
        try:
            os.unlink(partial)
        except OSError:
            pass
        raise
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def export(
    ctx: OpsContext, path: str, *, queue: str = "all", delete: bool = False, progress: Progress = SILENT
) -> ExportReport:
    """Write one JSON line per DLQ message (joined view, failure records, raw body and attributes).

    With ``delete``: the messages stay claimed while the file is written; once it is on disk
    (flushed and fsynced), exactly the messages in it are deleted. Anything going wrong before that
    deletes nothing and makes every message visible again.
    """
    if not delete:
        messages = list_messages(ctx, queue, progress=progress)
        _write_durably(path, messages, progress, lambda: None)
        return ExportReport(path, len(messages))
    claimed = claim(ctx, queue_names(queue), Selection(everything=True), what="export --delete", progress=progress)
    try:
        _write_durably(path, claimed.messages, progress, lambda: claimed.renew(claimed.messages))
    except BaseException:
        claimed.release(claimed.messages)
        raise
    try:
        report = _delete_claimed(ctx, claimed, claimed.messages, progress)
    except BaseException:
        claimed.release(claimed.messages)
        raise
    return ExportReport(path, len(claimed.messages), report)
