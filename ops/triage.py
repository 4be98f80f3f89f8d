"""DLQ triage as plain Python: the joined view, redrive, delete, purge and export.

AWS's DLQs keep only the message; agentwake keeps each run's failure records. This module joins
them, so an operator's first question — "why is this message here?" — has an answer:

- ``results``: the background-result DLQ. A message moved there by SQS after ``maxReceiveCount``
  is a run that kept failing (run ``bg:{task_id}``, failure records in the store); a message the
  handler dead-lettered itself is a permanent input error (no run; the reason is in the
  ``agentwake-*`` message attributes).
- ``cron``: the on-failure destination of CronWakeFunction. The body is Lambda's invocation
  record: ``requestPayload`` is ``{job_id, scheduled_time}``, ``responsePayload`` the error.
- ``scheduler``: the DLQ of the job schedules. The body is the schedule's input; EventBridge
  Scheduler's ERROR_CODE / ERROR_MESSAGE / RETRY_ATTEMPTS message attributes say why.

Listing never consumes a message: messages are received with a short visibility timeout (so that
pagination moves on) and every receipt handle is made visible again (timeout 0) at the end. (A
receive with VisibilityTimeout=0 would not page: moto leaves the message visible and returns the
same first batch again.) Each listing adds one to a DLQ message's ApproximateReceiveCount, which is
why ``attempts`` comes from the run record or the trigger's own count whenever there is one.
Redrive sends first and deletes after: an interrupted move leaves at worst a duplicate, which
the run's idempotency absorbs — never a lost message.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from agentwake.redact import redact
from agentwake.store.dynamo import DynamoStore, RunSummary
from agentwake.store.itemsize import safe_text
from agentwake.store.models import cron_run_id
from agentwake.store.queues import ATTR_ERROR_TYPE, ATTR_ORIGINAL_ID, ATTR_REASON, ATTR_RECEIVE_COUNT, ATTR_SOURCE
from agentwake_ops.context import OpsContext, OpsError

#: the DLQs by the short name the CLI uses -> queue role in OpsContext
DLQS: dict[str, str] = {"results": "results-dlq", "cron": "cron-failures", "scheduler": "scheduler-dlq"}
QUEUE_CHOICES = (*DLQS, "all")
#: seconds a listing holds each received message invisible while it pages through the queue
PEEK_HOLD_SECONDS = 30
#: at least this long a redrive/delete holds the messages it claimed
CLAIM_HOLD_SECONDS = 120
MAX_VISIBILITY_SECONDS = 43_200
#: AWS's StartMessageMoveTask accepts at most this rate
NATIVE_MAX_RATE = 500
CRON_FUNCTION = "CronWakeFunction"


def queue_names(choice: str) -> list[str]:
    """``results|cron|scheduler|all`` -> the short queue names."""
    if choice == "all":
        return list(DLQS)
    if choice not in DLQS:
        raise OpsError(f"unknown queue {choice!r}: use one of {', '.join(QUEUE_CHOICES)}")
    return [choice]


def first_line(text: str | None, limit: int = 200) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


def _iso_ms(ms: str | int | None) -> str | None:
    if ms in (None, ""):
        return None
    try:
        moment = datetime.fromtimestamp(int(ms) / 1000, UTC)
    except (TypeError, ValueError):
        return None
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _attr(message_attributes: dict[str, Any], name: str) -> str | None:
    value = message_attributes.get(name)
    if isinstance(value, dict):
        return value.get("StringValue")
    return None


def json_safe_attributes(message_attributes: dict[str, Any]) -> dict[str, Any]:
    """SQS message attributes with binary values as base64 (for --json and export)."""
    out: dict[str, Any] = {}
    for name, value in message_attributes.items():
        item: dict[str, Any] = {"DataType": value.get("DataType")}
        if "StringValue" in value:
            item["StringValue"] = value["StringValue"]
        if "BinaryValue" in value:
            raw = value["BinaryValue"]
            item["BinaryValueBase64"] = base64.b64encode(raw if isinstance(raw, bytes) else raw.encode()).decode()
        out[name] = item
    return out


# --------------------------------------------------------------------------------------------
# the joined view


@dataclass
class DlqMessage:
    """One DLQ message joined with what the store knows about its run."""

    queue: str
    queue_url: str
    message_id: str
    receipt_handle: str
    body: str
    attributes: dict[str, str]
    message_attributes: dict[str, Any]
    kind: str = "invalid"  # background | cron | invalid
    run_id: str | None = None
    session_id: str | None = None
    task_id: str | None = None
    job_id: str | None = None
    #: what a redrive re-sends (the body) or re-invokes ({job_id, scheduled_time})
    payload: dict[str, Any] | None = None
    attempts: int | None = None
    first_failure_at: str | None = None
    last_failure_at: str | None = None
    sent_at: str | None = None
    age_seconds: float | None = None
    error_type: str | None = None
    error_detail: str | None = None
    #: where the error came from: failure-record | message-attributes | destination-record | body
    error_source: str | None = None
    #: extra facts from the trigger (Lambda's condition, Scheduler's retry condition, ...)
    trigger: dict[str, Any] = field(default_factory=dict)
    summary: RunSummary | None = None

    @property
    def short_id(self) -> str:
        return self.message_id[:8]

    @property
    def run_status(self) -> str | None:
        return self.summary.run.status if self.summary and self.summary.run else None

    def view(self) -> dict[str, Any]:
        """The row ``dlq list`` shows (JSON-able)."""
        return {
            "queue": self.queue,
            "message_id": self.message_id,
            "run_id": self.run_id,
            "kind": self.kind,
            "session_id": self.session_id,
            "task_id": self.task_id,
            "job_id": self.job_id,
            "attempts": self.attempts,
            "first_failure_at": self.first_failure_at,
            "last_failure_at": self.last_failure_at,
            "sent_at": self.sent_at,
            "age_seconds": None if self.age_seconds is None else round(self.age_seconds, 1),
            "error_type": self.error_type,
            "error": first_line(self.error_detail),
            "error_source": self.error_source,
            "run_status": self.run_status,
        }

    def full(self) -> dict[str, Any]:
        """Everything (``dlq show --json`` and ``dlq export``)."""
        body_json: Any = safe_json(self.body)
        summary = self.summary or RunSummary(run=None)
        return {
            **self.view(),
            "error_detail": self.error_detail,
            "trigger": self.trigger,
            "payload": self.payload,
            "body": self.body,
            "body_json": body_json,
            "attributes": self.attributes,
            "message_attributes": json_safe_attributes(self.message_attributes),
            "run": summary.run.model_dump(mode="json") if summary.run else None,
            "failures": [f.model_dump(mode="json") for f in summary.failures],
            "steps": summary.steps,
            "deliveries": summary.deliveries,
        }


def describe(
    raw: dict[str, Any], queue: str, queue_url: str, store: DynamoStore, *, now: float | None = None
) -> DlqMessage:
    """Join one received SQS message with the store."""
    attributes = dict(raw.get("Attributes") or {})
    msg = DlqMessage(
        queue=queue,
        queue_url=queue_url,
        message_id=raw["MessageId"],
        receipt_handle=raw.get("ReceiptHandle", ""),
        body=raw.get("Body", ""),
        attributes=attributes,
        message_attributes=dict(raw.get("MessageAttributes") or {}),
    )
    sent_ms = _int(attributes.get("SentTimestamp"))
    msg.sent_at = _iso_ms(sent_ms)
    if sent_ms is not None:
        msg.age_seconds = max(0.0, (time.time() if now is None else now) - sent_ms / 1000)
    if queue == "results":
        _describe_background(msg, store)
    elif queue == "cron":
        _describe_cron(msg, store)
    else:
        _describe_scheduler(msg, store)
    if msg.attempts is None:
        msg.attempts = _int(attributes.get("ApproximateReceiveCount"))
    if msg.error_detail:
        msg.error_detail = redact(msg.error_detail)
    # a body may name ids with lone surrogates ("\ud800" escapes): printable text only
    for name in ("run_id", "session_id", "task_id", "job_id", "error_type", "error_detail"):
        value = getattr(msg, name)
        if isinstance(value, str):
            setattr(msg, name, safe_text(value))
    return msg


def safe_json(text: str | None) -> Any:
    """``json.loads`` for any DLQ body: None for what is not JSON, too deep, or has oversized numbers."""
    if not text:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError, TypeError):
        return None


def _body_object(body: str) -> dict[str, Any] | None:
    data = safe_json(body)
    return data if isinstance(data, dict) else None


def _join_run(msg: DlqMessage, store: DynamoStore) -> None:
    """Fill attempts, times and the last error from the run's failure records, if any."""
    assert msg.run_id is not None
    summary = store.run_summary(msg.run_id)
    msg.summary = summary
    if summary.run is not None:
        msg.attempts = summary.run.attempts or None
        msg.session_id = msg.session_id or summary.run.session_id
    if summary.failures:
        first, last = summary.failures[0], summary.failures[-1]
        msg.first_failure_at, msg.last_failure_at = first.at, last.at
        msg.error_type, msg.error_detail, msg.error_source = last.error_type, last.detail, "failure-record"
        msg.session_id = msg.session_id or last.session_id
    elif summary.run is not None and summary.run.last_error:
        msg.error_type = summary.run.last_error_type
        msg.error_detail = summary.run.last_error
        msg.error_source = "run-record"
        msg.last_failure_at = summary.run.ended_at


#: error types of runs the handler dead-letters itself (agentwake.errors.BudgetExceeded): they were runs
PERMANENT_RUN_FAILURES = frozenset({"BudgetExceeded"})


def _valid_run_id(body: str) -> str | None:
    from agentwake.errors import InvalidMessage
    from agentwake.wake.messages import BackgroundResultMessage

    try:
        return BackgroundResultMessage.parse_body(body).run_id
    except InvalidMessage:
        return None


def _describe_background(msg: DlqMessage, store: DynamoStore) -> None:
    from agentwake.errors import InvalidMessage
    from agentwake.wake.messages import BackgroundResultMessage

    data = _body_object(msg.body)
    if data is not None:
        msg.task_id = data.get("task_id") if isinstance(data.get("task_id"), str) else None
        msg.session_id = data.get("session_id") if isinstance(data.get("session_id"), str) else None
        msg.payload = data
    dead_lettered_type = _attr(msg.message_attributes, ATTR_ERROR_TYPE)
    run_id = _valid_run_id(msg.body) if dead_lettered_type in PERMANENT_RUN_FAILURES else None
    if run_id is not None:
        # a run that failed for good (its budget) was dead-lettered by the handler: join its record
        msg.kind = "background"
        msg.run_id = run_id
        msg.error_type = dead_lettered_type
        msg.error_detail = _attr(msg.message_attributes, ATTR_REASON)
        msg.error_source = "message-attributes"
        _join_run(msg, store)
    elif dead_lettered_type == "SessionBusy":
        _describe_gave_up_waiting(msg, store)
    elif dead_lettered_type:
        # a permanent input error the handler dead-lettered itself: it never became a run
        msg.kind = "invalid"
        msg.error_type = dead_lettered_type
        msg.error_detail = _attr(msg.message_attributes, ATTR_REASON)
        msg.error_source = "message-attributes"
        msg.attempts = _int(_attr(msg.message_attributes, ATTR_RECEIVE_COUNT))
        msg.first_failure_at = msg.last_failure_at = msg.sent_at
        msg.trigger = {
            "original_message_id": _attr(msg.message_attributes, ATTR_ORIGINAL_ID),
            "source_queue": _attr(msg.message_attributes, ATTR_SOURCE),
        }
    else:
        try:
            parsed = BackgroundResultMessage.parse_body(msg.body)
        except InvalidMessage as exc:
            msg.kind = "invalid"
            msg.error_type, msg.error_detail, msg.error_source = "InvalidMessage", str(exc), "body"
        else:
            msg.kind = "background"
            msg.run_id = parsed.run_id
            _join_run(msg, store)
            if msg.error_type is None:
                msg.error_detail = "no failure recorded for this run (did the function crash or time out?)"
    if msg.session_id is None and msg.task_id:
        task = store.get_task(msg.task_id)
        if task is not None:
            msg.session_id = task.session_id


def _describe_gave_up_waiting(msg: DlqMessage, store: DynamoStore) -> None:
    """A result the handler dead-lettered after waiting past SessionWaitLimit: a run that never
    started because another run held its session (the reason names that run)."""
    from agentwake.errors import InvalidMessage
    from agentwake.wake.messages import BackgroundResultMessage

    msg.kind = "background"
    try:
        msg.run_id = BackgroundResultMessage.parse_body(msg.body).run_id
    except InvalidMessage:
        msg.kind = "invalid"
    if msg.run_id is not None:
        _join_run(msg, store)
        # the run never started: no attempt (the SQS receive count says nothing here)
        msg.attempts = msg.summary.run.attempts if msg.summary and msg.summary.run else 0
    msg.error_type = "SessionBusy"
    msg.error_detail = _attr(msg.message_attributes, ATTR_REASON) or msg.error_detail
    msg.error_source = "message-attributes"
    msg.trigger = {
        "never_ran": "the session was busy",
        "holder_run_id": _attr(msg.message_attributes, "agentwake-holder-run-id"),
        "wait_count": _int(_attr(msg.message_attributes, "agentwake-wait-count")),
        "original_message_id": _attr(msg.message_attributes, ATTR_ORIGINAL_ID),
    }


def _cron_input(data: Any) -> dict[str, Any] | None:
    if isinstance(data, dict) and isinstance(data.get("job_id"), str) and isinstance(data.get("scheduled_time"), str):
        return {"job_id": data["job_id"], "scheduled_time": data["scheduled_time"]}
    return None


def _describe_cron_input(msg: DlqMessage, payload: dict[str, Any] | None, store: DynamoStore) -> None:
    if payload is None:
        msg.kind = "invalid"
        return
    msg.kind = "cron"
    msg.payload = payload
    msg.job_id = payload["job_id"]
    msg.run_id = cron_run_id(payload["job_id"], payload["scheduled_time"])
    _join_run(msg, store)
    if msg.session_id is None:
        job = store.get_job(msg.job_id)
        if job is not None:
            msg.session_id = job.session_id


def _describe_cron(msg: DlqMessage, store: DynamoStore) -> None:
    record: dict[str, Any] = _body_object(msg.body) or {}
    context: dict[str, Any] = record["requestContext"] if isinstance(record.get("requestContext"), dict) else {}
    response: dict[str, Any] = record["responsePayload"] if isinstance(record.get("responsePayload"), dict) else {}
    request = record.get("requestPayload") if "requestPayload" in record else record
    msg.trigger = {
        k: v
        for k, v in {
            "condition": context.get("condition"),
            "approximate_invoke_count": context.get("approximateInvokeCount"),
            "function_arn": context.get("functionArn"),
            "request_id": context.get("requestId"),
            "timestamp": record.get("timestamp"),
        }.items()
        if v is not None
    }
    _describe_cron_input(msg, _cron_input(request), store)
    if msg.error_type is None and response:
        msg.error_type = response.get("errorType")
        msg.error_detail = response.get("errorMessage")
        msg.error_source = "destination-record"
    if msg.error_type is None and context.get("condition"):
        msg.error_type, msg.error_source = str(context["condition"]), "destination-record"
    if msg.attempts is None:
        msg.attempts = _int(context.get("approximateInvokeCount"))
    if msg.last_failure_at is None and isinstance(record.get("timestamp"), str):
        msg.last_failure_at = record["timestamp"]
        msg.first_failure_at = msg.first_failure_at or record["timestamp"]
    if msg.kind == "invalid" and msg.error_detail is None:
        msg.error_detail = "not a Lambda invocation record with requestPayload {job_id, scheduled_time}"


def _describe_scheduler(msg: DlqMessage, store: DynamoStore) -> None:
    attrs = msg.message_attributes
    msg.trigger = {
        name.lower(): _attr(attrs, name)
        for name in (
            "ERROR_CODE",
            "RETRY_ATTEMPTS",
            "EXHAUSTED_RETRY_CONDITION",
            "SCHEDULE_ARN",
            "TARGET_ARN",
            "EXECUTION_ID",
            "INVOCATION_TIMESTAMP",
        )
        if _attr(attrs, name) is not None
    }
    _describe_cron_input(msg, _cron_input(_body_object(msg.body)), store)
    if msg.error_type is None and (_attr(attrs, "ERROR_CODE") or _attr(attrs, "ERROR_MESSAGE")):
        msg.error_type = _attr(attrs, "ERROR_CODE") or "SchedulerError"
        msg.error_detail = _attr(attrs, "ERROR_MESSAGE")
        msg.error_source = "message-attributes"
    if msg.attempts is None and _int(_attr(attrs, "RETRY_ATTEMPTS")) is not None:
        msg.attempts = (_int(_attr(attrs, "RETRY_ATTEMPTS")) or 0) + 1
    if msg.last_failure_at is None:
        msg.first_failure_at = msg.last_failure_at = msg.sent_at
    if msg.kind == "invalid" and msg.error_detail is None:
        msg.error_detail = "the body is not a schedule input {job_id, scheduled_time}"


# --------------------------------------------------------------------------------------------
# receiving without consuming


def _receive_all(sqs: Any, url: str, hold_seconds: int) -> tuple[dict[str, dict[str, Any]], dict[str, list[str]]]:
    """Every message of the queue, each held invisible for ``hold_seconds``.

    Returns the messages by id (with their latest receipt handle) and every receipt handle
    received per message id (a hold that expires mid-scan yields a message twice).
    """
    seen: dict[str, dict[str, Any]] = {}
    handles: dict[str, list[str]] = {}
    idle_rounds = 0
    while idle_rounds < 3:
        resp = sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            VisibilityTimeout=hold_seconds,
            WaitTimeSeconds=0,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        batch = resp.get("Messages", [])
        new = 0
        for message in batch:
            handles.setdefault(message["MessageId"], []).append(message["ReceiptHandle"])
            if message["MessageId"] not in seen:
                new += 1
            seen[message["MessageId"]] = message
        if new:
            idle_rounds = 0
            continue
        # nothing new: short polling samples servers, so ask the queue whether more are visible
        visible = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
        if int(visible["Attributes"].get("ApproximateNumberOfMessages", "0")) == 0:
            break
        idle_rounds += 1
    return seen, handles


def _change_visibility(sqs: Any, url: str, handles: Iterable[str], seconds: int) -> list[str]:
    """Best effort, in batches of 10; returns the handles that failed."""
    failed: list[str] = []
    batch: list[str] = []

    def flush() -> None:
        if not batch:
            return
        entries = [{"Id": str(i), "ReceiptHandle": h, "VisibilityTimeout": seconds} for i, h in enumerate(batch)]
        try:
            resp = sqs.change_message_visibility_batch(QueueUrl=url, Entries=entries)
            failed.extend(batch[int(e["Id"])] for e in resp.get("Failed", []))
        except Exception:
            failed.extend(batch)
        batch.clear()

    for handle in handles:
        batch.append(handle)
        if len(batch) == 10:
            flush()
    flush()
    return failed


def peek(sqs: Any, url: str, *, hold_seconds: int = PEEK_HOLD_SECONDS) -> list[dict[str, Any]]:
    """Every message on the queue, left on it and visible again (listing twice shows the same)."""
    seen: dict[str, dict[str, Any]] = {}
    handles: dict[str, list[str]] = {}
    try:
        seen, handles = _receive_all(sqs, url, hold_seconds)
    finally:
        _change_visibility(sqs, url, [h for hs in handles.values() for h in hs], 0)
    return sorted(seen.values(), key=lambda m: int((m.get("Attributes") or {}).get("SentTimestamp", "0")))


def _queues(ctx: OpsContext, names: Iterable[str], *, skip_unknown: bool) -> list[tuple[str, str]]:
    out = []
    for name in names:
        role = DLQS[name]
        if not ctx.has_queue(role) and skip_unknown:
            continue
        out.append((name, ctx.queue_url(role)))
    return out


def list_messages(ctx: OpsContext, queue: str = "all", *, now: float | None = None) -> list[DlqMessage]:
    """The joined view of every message in the chosen DLQs (none consumed)."""
    names = queue_names(queue)
    out: list[DlqMessage] = []
    for name, url in _queues(ctx, names, skip_unknown=queue == "all"):
        out += [describe(raw, name, url, ctx.store, now=now) for raw in peek(ctx.sqs, url)]
    return out


@dataclass
class Selection:
    """Which messages an operation applies to (criteria combine with AND; ``ids`` may be prefixes)."""

    ids: tuple[str, ...] = ()
    error_type: str | None = None
    session_id: str | None = None
    everything: bool = False

    @property
    def empty(self) -> bool:
        return not (self.ids or self.error_type or self.session_id or self.everything)

    @property
    def only_everything(self) -> bool:
        return self.everything and not (self.ids or self.error_type or self.session_id)

    def matches(self, msg: DlqMessage) -> bool:
        if self.ids and not any(msg.message_id.startswith(i) for i in self.ids):
            return False
        if self.error_type and (msg.error_type or "").lower() != self.error_type.lower():
            return False
        return not (self.session_id and msg.session_id != self.session_id)


def filter_messages(messages: list[DlqMessage], selection: Selection) -> list[DlqMessage]:
    """Apply the selection; an id (prefix) that matches nothing or several messages is an error."""
    for prefix in selection.ids:
        hits = {m.message_id for m in messages if m.message_id.startswith(prefix)}
        if not hits:
            raise OpsError(f"no DLQ message with id {prefix!r} (see `agentwake dlq list`)")
        if len(hits) > 1:
            raise OpsError(f"id {prefix!r} is ambiguous: it matches {len(hits)} messages; give more of it")
    return [m for m in messages if selection.matches(m)]


def find_message(ctx: OpsContext, message_id: str, queue: str = "all") -> DlqMessage:
    [msg] = filter_messages(list_messages(ctx, queue), Selection(ids=(message_id,)))
    return msg


@dataclass
class Claim:
    """Messages taken for an operation: held invisible until processed or released."""

    messages: list[DlqMessage]
    hold_seconds: int


def claim(ctx: OpsContext, queues: list[str], selection: Selection, *, hold_seconds: int = CLAIM_HOLD_SECONDS) -> Claim:
    """Receive every message of the queues, hold the selected ones, make the rest visible again."""
    hold_seconds = min(MAX_VISIBILITY_SECONDS, max(CLAIM_HOLD_SECONDS, hold_seconds))
    joined: list[DlqMessage] = []
    held: dict[str, dict[str, list[str]]] = {}  # queue url -> message id -> receipt handles
    try:
        for name, url in _queues(ctx, queues, skip_unknown=len(queues) > 1):
            seen, handles = _receive_all(ctx.sqs, url, PEEK_HOLD_SECONDS)
            held[url] = handles
            joined += [describe(raw, name, url, ctx.store) for raw in seen.values()]
        chosen = filter_messages(joined, selection)
    except BaseException:
        for url, by_id in held.items():
            _change_visibility(ctx.sqs, url, [h for hs in by_id.values() for h in hs], 0)
        raise
    chosen_ids = {m.message_id for m in chosen}
    for msg in chosen:
        _change_visibility(ctx.sqs, msg.queue_url, [msg.receipt_handle], hold_seconds)
    for url, by_id in held.items():
        # a chosen message's older handles stay untouched too: releasing one could make it visible
        others = [h for mid, hs in by_id.items() if mid not in chosen_ids for h in hs]
        _change_visibility(ctx.sqs, url, others, 0)
    return Claim(sorted(chosen, key=lambda m: (m.queue, m.sent_at or "")), hold_seconds)


def release(ctx: OpsContext, messages: Iterable[DlqMessage]) -> None:
    for msg in messages:
        _change_visibility(ctx.sqs, msg.queue_url, [msg.receipt_handle], 0)


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

    @property
    def ok(self) -> bool:
        return not self.failed

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


def redrive(
    ctx: OpsContext,
    selection: Selection,
    *,
    queue: str = "all",
    dry_run: bool = False,
    rate: float | None = None,
    on_start: Callable[[int], None] | None = None,
    on_progress: Callable[[RedriveItem], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> RedriveReport:
    """Move the selected DLQ messages back to where they can succeed.

    Background results: send body + attributes (minus ``agentwake-*``) to the results queue, then
    delete from the DLQ. Cron and scheduler failures: invoke CronWakeFunction asynchronously with
    the original ``{job_id, scheduled_time}``, then delete. ``--all`` on the results DLQ tries SQS's
    own StartMessageMoveTask first.
    """
    if selection.empty:
        raise OpsError("say which messages to redrive: --id, --error-type, --session or --all")
    if rate is not None and rate <= 0:
        raise OpsError("--rate must be a positive number of messages per second")
    names = queue_names(queue)
    report = RedriveReport(dry_run=dry_run)

    native = not dry_run and selection.only_everything and "results" in names and ctx.has_queue("results-dlq")
    if native and _try_native_move(ctx, rate, report):
        names = [n for n in names if n != "results"]

    if dry_run:
        listed = [m for name in names for m in list_messages(ctx, name)] if queue != "all" else list_messages(ctx)
        chosen = [m for m in filter_messages(listed, selection) if m.queue in names]
        report.planned = [RedriveItem(m.message_id, m.queue, m.run_id, _action(m)) for m in chosen]
        return report

    if not names:
        return report
    claimed = claim(ctx, names, selection)
    if rate is not None and len(claimed.messages) / rate * 1.5 + 60 > claimed.hold_seconds:
        # a paced move of many messages: hold them until it is done
        hold = min(MAX_VISIBILITY_SECONDS, int(len(claimed.messages) / rate * 1.5) + 60)
        for m in claimed.messages:
            _change_visibility(ctx.sqs, m.queue_url, [m.receipt_handle], hold)
    if on_start:
        on_start(len(claimed.messages))
    pending = list(claimed.messages)
    started = clock()
    try:
        for index, msg in enumerate(claimed.messages):
            if rate is not None:
                wait = started + index / rate - clock()
                if wait > 0:
                    sleep(wait)
            item = _redrive_one(ctx, msg)
            pending.remove(msg)
            (report.moved if item.ok else report.failed).append(item)
            if on_progress:
                on_progress(item)
    finally:
        release(ctx, pending)  # interrupted: what was not processed becomes visible again at once
    return report


def _redrive_one(ctx: OpsContext, msg: DlqMessage) -> RedriveItem:
    item = RedriveItem(msg.message_id, msg.queue, msg.run_id, _action(msg))
    try:
        if msg.queue == "results":
            kwargs: dict[str, Any] = {"QueueUrl": ctx.queue_url("results"), "MessageBody": msg.body}
            attributes = resend_attributes(msg.message_attributes)
            if attributes:
                kwargs["MessageAttributes"] = attributes
            ctx.sqs.send_message(**kwargs)
        else:
            if msg.payload is None:
                raise OpsError("the record carries no {job_id, scheduled_time} to invoke the cron function with")
            ctx.invoke_async(CRON_FUNCTION, dict(msg.payload))
    except Exception as exc:
        release(ctx, [msg])
        item.ok, item.reason = False, f"not redriven, left in the DLQ: {_error(exc)}"
        return item
    try:
        ctx.sqs.delete_message(QueueUrl=msg.queue_url, ReceiptHandle=msg.receipt_handle)
    except Exception as exc:
        release(ctx, [msg])
        item.ok = False
        item.reason = (
            f"redriven, but not deleted from the DLQ ({_error(exc)}): it is still there, and a second "
            "redrive would only repeat a run the idempotency of its run id absorbs"
        )
    return item


# --------------------------------------------------------------------------------------------
# delete, purge, export


def delete_messages(ctx: OpsContext, message_ids: Iterable[str], *, queue: str = "all") -> list[DlqMessage]:
    """Delete the given DLQ messages (ids may be unique prefixes)."""
    claimed = claim(ctx, queue_names(queue), Selection(ids=tuple(message_ids)))
    deleted: list[DlqMessage] = []
    try:
        for msg in claimed.messages:
            ctx.sqs.delete_message(QueueUrl=msg.queue_url, ReceiptHandle=msg.receipt_handle)
            deleted.append(msg)
    finally:
        release(ctx, [m for m in claimed.messages if m not in deleted])
    return deleted


def purge(ctx: OpsContext, queue: str) -> str:
    """Purge one DLQ (``results``, ``cron`` or ``scheduler``); returns its URL."""
    if queue not in DLQS:
        raise OpsError(f"purge one queue at a time: {', '.join(DLQS)}")
    url = ctx.queue_url(DLQS[queue])
    ctx.sqs.purge_queue(QueueUrl=url)
    return url


def export_lines(messages: Iterable[DlqMessage]) -> Iterator[str]:
    for msg in messages:
        yield json.dumps(msg.full(), sort_keys=True, default=str)


def export(ctx: OpsContext, path: str, *, queue: str = "all") -> int:
    """Write one JSON line per DLQ message (joined view, failure records, raw body and attributes)."""
    messages = list_messages(ctx, queue)
    with open(path, "w", encoding="utf-8") as out:
        for line in export_lines(messages):
            out.write(line + "\n")
    return len(messages)
