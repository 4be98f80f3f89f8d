"""Describe: each DLQ message with what agentwake knows about its run.

AWS's DLQs keep only the message; agentwake keeps each run's failure records. Describing a message
joins them, so an operator's first question — "why is this message here?" — has an answer. It
happens in two steps, so that a filter can rule a message out before its run is read:

- :func:`read`: what the message itself carries (ids, body, attributes, a dead-letter reason), no
  store call. A message that names no run, task or job is complete here; one that does is
  ``pending``, and its error type may still come from its failure records.
- :func:`join`: the run's partition in one Query (``agentwake_ops.runs.run_summary``), the task or
  job for a session the body does not name, then what depends on them (times, age). A session
  the message carries is never replaced by the join.

The queues:

- ``results``: the background-result DLQ. A message moved there by SQS after ``maxReceiveCount``
  is a run that kept failing (run ``bg:{task_id}``, failure records in the store); a message the
  handler dead-lettered itself is a permanent input error (no run; the reason is in the
  ``agentwake-*`` message attributes).
- ``cron``: the on-failure destination of CronWakeFunction. The body is Lambda's invocation
  record: ``requestPayload`` is ``{job_id, scheduled_time}``, ``responsePayload`` the error.
- ``scheduler``: the DLQ of the job schedules. The body is the schedule's input; EventBridge
  Scheduler's ERROR_CODE / ERROR_MESSAGE / RETRY_ATTEMPTS message attributes say why.

Honest fields: ``attempts`` comes from the run record (or the trigger's own count), never from
SQS's ApproximateReceiveCount, which every listing raises (it is shown apart, as
``receive_count``). "In the DLQ since" is when the message reached the DLQ, with where that came
from (``in_dlq_since_source``): agentwake's own ``agentwake-dead-lettered-at`` attribute; the
SentTimestamp of a message Lambda or Scheduler *sent* to its DLQ; and for a message SQS *moved*
there after ``maxReceiveCount`` (SQS keeps the producer's SentTimestamp and records no move time)
the run's last failed attempt, after which the next receive moved it.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from agentwake.domain.models import cron_run_id
from agentwake.store.dynamo import DynamoStore
from agentwake.store.itemsize import safe_text
from agentwake.store.queues import (
    ATTR_ATTEMPTS_SPENT,
    ATTR_DEAD_LETTERED_AT,
    ATTR_ERROR_TYPE,
    ATTR_ORIGINAL_ID,
    ATTR_REASON,
    ATTR_RECEIVE_COUNT,
    ATTR_SOURCE,
)
from agentwake.trust.redact import redact
from agentwake_ops.runs import RunSummary, run_summary
from agentwake_ops.terminal import first_line as first_line

#: error types of runs the handler dead-letters itself (agentwake.errors: BudgetExceeded, and the
#: channels' ChannelRefused and DeliveryUnconfirmed, which are not retryable): they were runs
PERMANENT_RUN_FAILURES = frozenset({"BudgetExceeded", "ChannelRefused", "DeliveryUnconfirmed"})
#: a result the handler dead-lettered because its session was busy: the run never started (why)
NEVER_RAN_BUSY = {"SessionBusy": "the session was busy", "WaitListFull": "the session's wait list was full"}
#: the ids a message body may name, and every field that may hold text from it: printable text only
_ID_FIELDS = ("run_id", "session_id", "task_id", "job_id")
_TEXT_FIELDS = (*_ID_FIELDS, "error_type", "error_detail")


def safe_json(text: str | None) -> Any:
    """``json.loads`` for any DLQ body: None for what is not JSON, too deep, or has oversized numbers."""
    if not text:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError, TypeError):
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
    kind: str = "invalid"  # background | cron | invalid | work:tool | work:subagent | work:deadline
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
    #: when the message reached the DLQ, and where that time comes from (see the module docstring)
    in_dlq_since: str | None = None
    in_dlq_since_source: str | None = None
    #: seconds since it reached the DLQ
    age_seconds: float | None = None
    #: SQS's ApproximateReceiveCount: every listing adds one; not the run's attempts
    receive_count: int | None = None
    error_type: str | None = None
    error_detail: str | None = None
    #: where the error came from: failure-record | message-attributes | destination-record | body
    error_source: str | None = None
    #: extra facts from the trigger (Lambda's condition, Scheduler's retry condition, ...)
    trigger: dict[str, Any] = field(default_factory=dict)
    summary: RunSummary | None = None
    #: read, not joined yet: it names a run, task or job whose records may still fill fields
    pending: bool = False

    @property
    def short_id(self) -> str:
        return self.message_id[:8]

    @property
    def run_status(self) -> str | None:
        return self.summary.run.status if self.summary and self.summary.run else None

    def view(self) -> dict[str, Any]:
        """The row ``dlq list --json`` prints (JSON-able; nothing shortened)."""
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
            "in_dlq_since": self.in_dlq_since,
            "in_dlq_since_source": self.in_dlq_since_source,
            "age_seconds": None if self.age_seconds is None else round(self.age_seconds, 1),
            "receive_count": self.receive_count,
            "error_type": self.error_type,
            "error": self.error_detail or "",
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
            **summary.as_dict(),
        }


# --------------------------------------------------------------------------------------------
# the two steps


def read(raw: dict[str, Any], queue: str, queue_url: str, *, now: float | None = None) -> DlqMessage:
    """One received SQS message as it reads, without the store (``pending`` if it names a run, task or job)."""
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
    msg.sent_at = _iso_ms(attributes.get("SentTimestamp"))
    msg.receive_count = _int(attributes.get("ApproximateReceiveCount"))
    if queue == "cron":
        msg.in_dlq_since, msg.in_dlq_since_source = msg.sent_at, "SentTimestamp (Lambda sent the on-failure record)"
    elif queue == "scheduler":
        msg.in_dlq_since, msg.in_dlq_since_source = msg.sent_at, "SentTimestamp (Scheduler sent it to its DLQ)"
    _READERS[queue](msg)
    if msg.pending:
        _printable(msg, _ID_FIELDS)  # what a filter may read before the join
    else:
        _complete(msg, now)
    return msg


def join(msg: DlqMessage, store: DynamoStore, *, now: float | None = None) -> DlqMessage:
    """Fill what the run, task or job the message names says (nothing to do for a complete message)."""
    if msg.pending:
        _JOINERS[msg.queue](msg, store)
        msg.pending = False
        _complete(msg, now)
    return msg


def describe(
    raw: dict[str, Any], queue: str, queue_url: str, store: DynamoStore, *, now: float | None = None
) -> DlqMessage:
    """Read one received SQS message and join it with the store."""
    return join(read(raw, queue, queue_url, now=now), store, now=now)


def _complete(msg: DlqMessage, now: float | None) -> None:
    """What follows from all the facts: the trigger's fallbacks, the age, redacted printable text."""
    settle = _SETTLERS.get(msg.queue)
    if settle is not None:
        settle(msg)
    since = _parse_iso(msg.in_dlq_since)
    if since is not None:
        msg.age_seconds = max(0.0, (time.time() if now is None else now) - since)
    if msg.error_detail:
        msg.error_detail = redact(msg.error_detail)
    _printable(msg)


def _printable(msg: DlqMessage, names: tuple[str, ...] = _TEXT_FIELDS) -> None:
    # a body may name ids with lone surrogates ("\ud800" escapes): printable text only
    for name in names:
        value = getattr(msg, name)
        if isinstance(value, str):
            setattr(msg, name, safe_text(value))


# --------------------------------------------------------------------------------------------
# small parsers


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


def _parse_iso(text: str | None) -> float | None:
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _body_object(body: str) -> dict[str, Any] | None:
    data = safe_json(body)
    return data if isinstance(data, dict) else None


def _valid_run_id(body: str) -> str | None:
    from agentwake.errors import InvalidMessage
    from agentwake.wake.messages import BackgroundResultMessage

    try:
        return BackgroundResultMessage.parse_body(body).run_id
    except InvalidMessage:
        return None


def _join_run(msg: DlqMessage, store: DynamoStore) -> None:
    """Fill attempts, times and the last error from the run's failure records, if any."""
    assert msg.run_id is not None
    summary = run_summary(store, msg.run_id)
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


# --------------------------------------------------------------------------------------------
# results: the background-result DLQ


def _stamp_dead_lettered(msg: DlqMessage) -> None:
    """A message agentwake sent to the DLQ itself: it reached the DLQ when it was stamped (or sent)."""
    stamped = _attr(msg.message_attributes, ATTR_DEAD_LETTERED_AT)
    if stamped:
        msg.in_dlq_since, msg.in_dlq_since_source = stamped, ATTR_DEAD_LETTERED_AT
    else:  # dead-lettered before the attribute existed: its own send is the move
        msg.in_dlq_since, msg.in_dlq_since_source = msg.sent_at, "SentTimestamp (agentwake sent it to the DLQ)"


def _read_background(msg: DlqMessage) -> None:
    from agentwake.errors import InvalidMessage
    from agentwake.wake.messages import BackgroundResultMessage

    data = _body_object(msg.body)
    if data is not None:
        msg.task_id = data.get("task_id") if isinstance(data.get("task_id"), str) else None
        msg.session_id = data.get("session_id") if isinstance(data.get("session_id"), str) else None
        msg.payload = data
    dead_lettered_type = _attr(msg.message_attributes, ATTR_ERROR_TYPE)
    spent = _attr(msg.message_attributes, ATTR_ATTEMPTS_SPENT)
    run_id = _valid_run_id(msg.body) if dead_lettered_type in PERMANENT_RUN_FAILURES or spent else None
    if run_id is not None:
        # a run that failed for good (its budget), or that spent its attempts across the copies of a
        # result that waited for its session, was dead-lettered by the handler: its record is joined
        msg.kind = "background"
        msg.run_id = run_id
        msg.error_type = dead_lettered_type
        msg.error_detail = _attr(msg.message_attributes, ATTR_REASON)
        msg.error_source = "message-attributes"
        _stamp_dead_lettered(msg)
    elif dead_lettered_type in NEVER_RAN_BUSY:
        _read_gave_up_waiting(msg)
        _stamp_dead_lettered(msg)
    elif dead_lettered_type:
        # a permanent input error the handler dead-lettered itself: it never became a run
        msg.kind = "invalid"
        msg.error_type = dead_lettered_type
        msg.error_detail = _attr(msg.message_attributes, ATTR_REASON)
        msg.error_source = "message-attributes"
        msg.attempts = _int(_attr(msg.message_attributes, ATTR_RECEIVE_COUNT))
        msg.first_failure_at = msg.last_failure_at = msg.sent_at
        _stamp_dead_lettered(msg)
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
    msg.pending = msg.run_id is not None or (msg.session_id is None and bool(msg.task_id))


def _read_gave_up_waiting(msg: DlqMessage) -> None:
    """A result the handler dead-lettered after waiting past SessionWaitLimit, or refused because
    its session's wait list was full (WaitListFull): a run that never started because another run
    held its session (the reason names that run)."""
    from agentwake.errors import InvalidMessage
    from agentwake.wake.messages import BackgroundResultMessage

    msg.kind = "background"
    try:
        msg.run_id = BackgroundResultMessage.parse_body(msg.body).run_id
    except InvalidMessage:
        msg.kind = "invalid"
    if msg.run_id is None:
        _gave_up_waiting_error(msg)
    msg.trigger = {
        "never_ran": NEVER_RAN_BUSY.get(_attr(msg.message_attributes, ATTR_ERROR_TYPE) or "", "the session was busy"),
        "holder_run_id": _attr(msg.message_attributes, "agentwake-holder-run-id"),
        "wait_count": _int(_attr(msg.message_attributes, "agentwake-wait-count")),
        "original_message_id": _attr(msg.message_attributes, ATTR_ORIGINAL_ID),
    }


def _gave_up_waiting_error(msg: DlqMessage) -> None:
    """SessionBusy (or WaitListFull), with the reason the handler attached (else what the run's records say)."""
    dead_lettered_type = _attr(msg.message_attributes, ATTR_ERROR_TYPE)
    msg.error_type = dead_lettered_type if dead_lettered_type in NEVER_RAN_BUSY else "SessionBusy"
    msg.error_detail = _attr(msg.message_attributes, ATTR_REASON) or msg.error_detail
    msg.error_source = "message-attributes"


def _join_background(msg: DlqMessage, store: DynamoStore) -> None:
    dead_lettered_type = _attr(msg.message_attributes, ATTR_ERROR_TYPE)
    if msg.run_id is not None:
        _join_run(msg, store)
        if dead_lettered_type in NEVER_RAN_BUSY:
            # the run never started: no attempt (the SQS receive count says nothing here)
            msg.attempts = msg.summary.run.attempts if msg.summary and msg.summary.run else 0
            _gave_up_waiting_error(msg)
        elif dead_lettered_type not in PERMANENT_RUN_FAILURES:
            # moved by SQS after maxReceiveCount
            if msg.error_type is None:
                msg.error_detail = "no failure recorded for this run (did the function crash or time out?)"
            if msg.last_failure_at:
                msg.in_dlq_since = msg.last_failure_at
                msg.in_dlq_since_source = (
                    "the run's last failed attempt (SQS moved it on the next receive; SQS records no move time)"
                )
    if msg.session_id is None and msg.task_id:
        task = store.records.get_task(msg.task_id)
        if task is not None:
            msg.session_id = task.session_id


def _read_work(msg: DlqMessage) -> None:
    """A background-work message: a background tool's work (no run of its own: its task says how it
    ended), a background subagent's ``sub:{task}`` run, or a deadline check."""
    from agentwake.domain.models import subagent_run_id
    from agentwake.errors import InvalidMessage
    from agentwake.wake.messages import WorkMessage

    data = _body_object(msg.body)
    if data is not None:
        msg.task_id = data.get("task_id") if isinstance(data.get("task_id"), str) else None
        msg.session_id = data.get("session_id") if isinstance(data.get("session_id"), str) else None
        msg.payload = data
    dead_lettered_type = _attr(msg.message_attributes, ATTR_ERROR_TYPE)
    try:
        parsed = WorkMessage.parse_body(msg.body)
    except InvalidMessage as exc:
        msg.kind = "invalid"
        msg.error_type, msg.error_detail, msg.error_source = "InvalidMessage", str(exc), "body"
    else:
        msg.kind = f"work:{parsed.kind}"
        msg.run_id = subagent_run_id(parsed.task_id) if parsed.kind == "subagent" else None
        msg.pending = True
    if dead_lettered_type:
        # the work function dead-lettered it itself, at once, with its reason
        msg.error_type = dead_lettered_type
        msg.error_detail = _attr(msg.message_attributes, ATTR_REASON)
        msg.error_source = "message-attributes"
        msg.attempts = _int(_attr(msg.message_attributes, ATTR_RECEIVE_COUNT))
        msg.first_failure_at = msg.last_failure_at = msg.sent_at
        _stamp_dead_lettered(msg)


# --------------------------------------------------------------------------------------------
# cron and scheduler: {job_id, scheduled_time}


def _cron_input(data: Any) -> dict[str, Any] | None:
    if isinstance(data, dict) and isinstance(data.get("job_id"), str) and isinstance(data.get("scheduled_time"), str):
        return {"job_id": data["job_id"], "scheduled_time": data["scheduled_time"]}
    return None


def _read_cron_input(msg: DlqMessage, payload: dict[str, Any] | None) -> None:
    if payload is None:
        msg.kind = "invalid"
        return
    msg.kind = "cron"
    msg.payload = payload
    msg.job_id = payload["job_id"]
    msg.run_id = cron_run_id(payload["job_id"], payload["scheduled_time"])
    msg.pending = True


def _join_cron_input(msg: DlqMessage, store: DynamoStore) -> None:
    _join_run(msg, store)
    if msg.session_id is None and msg.job_id is not None:
        job = store.records.get_job(msg.job_id)
        if job is not None:
            msg.session_id = job.session_id


def _destination_record(msg: DlqMessage) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Lambda's on-failure record: (the record, its requestContext, its responsePayload)."""
    record: dict[str, Any] = _body_object(msg.body) or {}
    context: dict[str, Any] = record["requestContext"] if isinstance(record.get("requestContext"), dict) else {}
    response: dict[str, Any] = record["responsePayload"] if isinstance(record.get("responsePayload"), dict) else {}
    return record, context, response


def _read_cron(msg: DlqMessage) -> None:
    record, context, _ = _destination_record(msg)
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
    _read_cron_input(msg, _cron_input(request))


def _settle_cron(msg: DlqMessage) -> None:
    """Where the store says nothing: Lambda's error payload, its condition and invoke count."""
    record, context, response = _destination_record(msg)
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


_SCHEDULER_FACTS = (
    "ERROR_CODE",
    "RETRY_ATTEMPTS",
    "EXHAUSTED_RETRY_CONDITION",
    "SCHEDULE_ARN",
    "TARGET_ARN",
    "EXECUTION_ID",
    "INVOCATION_TIMESTAMP",
)


def _read_scheduler(msg: DlqMessage) -> None:
    attrs = msg.message_attributes
    msg.trigger = {name.lower(): _attr(attrs, name) for name in _SCHEDULER_FACTS if _attr(attrs, name) is not None}
    _read_cron_input(msg, _cron_input(_body_object(msg.body)))


def _settle_scheduler(msg: DlqMessage) -> None:
    """Where the store says nothing: Scheduler's ERROR_CODE / ERROR_MESSAGE / RETRY_ATTEMPTS."""
    attrs = msg.message_attributes
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


_READERS: dict[str, Callable[[DlqMessage], None]] = {
    "results": _read_background,
    "work": _read_work,
    "cron": _read_cron,
    "scheduler": _read_scheduler,
}
_JOINERS: dict[str, Callable[[DlqMessage, DynamoStore], None]] = {
    "results": _join_background,
    "work": _join_background,
    "cron": _join_cron_input,
    "scheduler": _join_cron_input,
}
_SETTLERS: dict[str, Callable[[DlqMessage], None]] = {"cron": _settle_cron, "scheduler": _settle_scheduler}
