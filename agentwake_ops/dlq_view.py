"""The joined DLQ view: each DLQ message with what agentwake knows about its run.

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
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from agentwake.redact import redact
from agentwake.store.dynamo import DynamoStore
from agentwake.store.itemsize import safe_text
from agentwake.store.models import cron_run_id
from agentwake.store.queues import (
    ATTR_DEAD_LETTERED_AT,
    ATTR_ERROR_TYPE,
    ATTR_ORIGINAL_ID,
    ATTR_REASON,
    ATTR_RECEIVE_COUNT,
    ATTR_SOURCE,
)
from agentwake_ops.context import OpsError
from agentwake_ops.runs import RunSummary, run_summary

#: the DLQs by the short name the CLI uses -> queue role in OpsContext
DLQS: dict[str, str] = {"results": "results-dlq", "cron": "cron-failures", "scheduler": "scheduler-dlq"}
QUEUE_CHOICES = (*DLQS, "all")


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
    msg.sent_at = _iso_ms(attributes.get("SentTimestamp"))
    msg.receive_count = _int(attributes.get("ApproximateReceiveCount"))
    if queue == "results":
        _describe_background(msg, store)
    elif queue == "cron":
        msg.in_dlq_since, msg.in_dlq_since_source = msg.sent_at, "SentTimestamp (Lambda sent the on-failure record)"
        _describe_cron(msg, store)
    else:
        msg.in_dlq_since, msg.in_dlq_since_source = msg.sent_at, "SentTimestamp (Scheduler sent it to its DLQ)"
        _describe_scheduler(msg, store)
    since = _parse_iso(msg.in_dlq_since)
    if since is not None:
        msg.age_seconds = max(0.0, (time.time() if now is None else now) - since)
    if msg.error_detail:
        msg.error_detail = redact(msg.error_detail)
    # a body may name ids with lone surrogates ("\ud800" escapes): printable text only
    for name in ("run_id", "session_id", "task_id", "job_id", "error_type", "error_detail"):
        value = getattr(msg, name)
        if isinstance(value, str):
            setattr(msg, name, safe_text(value))
    return msg


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


#: error types of runs the handler dead-letters itself (agentwake.errors.BudgetExceeded): they were runs
PERMANENT_RUN_FAILURES = frozenset({"BudgetExceeded"})


def _valid_run_id(body: str) -> str | None:
    from agentwake.errors import InvalidMessage
    from agentwake.wake.messages import BackgroundResultMessage

    try:
        return BackgroundResultMessage.parse_body(body).run_id
    except InvalidMessage:
        return None


def _stamp_dead_lettered(msg: DlqMessage) -> None:
    """A message agentwake sent to the DLQ itself: it reached the DLQ when it was stamped (or sent)."""
    stamped = _attr(msg.message_attributes, ATTR_DEAD_LETTERED_AT)
    if stamped:
        msg.in_dlq_since, msg.in_dlq_since_source = stamped, ATTR_DEAD_LETTERED_AT
    else:  # dead-lettered before the attribute existed: its own send is the move
        msg.in_dlq_since, msg.in_dlq_since_source = msg.sent_at, "SentTimestamp (agentwake sent it to the DLQ)"


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
        _stamp_dead_lettered(msg)
    elif dead_lettered_type == "SessionBusy":
        _describe_gave_up_waiting(msg, store)
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
            _join_run(msg, store)
            if msg.error_type is None:
                msg.error_detail = "no failure recorded for this run (did the function crash or time out?)"
        if msg.last_failure_at:
            msg.in_dlq_since = msg.last_failure_at
            msg.in_dlq_since_source = (
                "the run's last failed attempt (SQS moved it on the next receive; SQS records no move time)"
            )
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
# choosing messages


@dataclass
class Selection:
    """Which messages an operation applies to (criteria combine with AND).

    ``ids`` are unique prefixes (as ``dlq list`` shows them), or whole ids with ``exact`` (ids
    read from an export file: one no longer in the DLQ is reported, not an error).
    """

    ids: tuple[str, ...] = ()
    error_type: str | None = None
    session_id: str | None = None
    everything: bool = False
    exact: bool = False

    @property
    def empty(self) -> bool:
        return not (self.ids or self.error_type or self.session_id or self.everything)

    @property
    def only_everything(self) -> bool:
        return self.everything and not (self.ids or self.error_type or self.session_id)

    def matches(self, msg: DlqMessage) -> bool:
        if self.ids:
            if self.exact:
                if msg.message_id not in self.ids:
                    return False
            elif not any(msg.message_id.startswith(i) for i in self.ids):
                return False
        if self.error_type and (msg.error_type or "").lower() != self.error_type.lower():
            return False
        return not (self.session_id and msg.session_id != self.session_id)

    def missing(self, messages: list[DlqMessage]) -> list[str]:
        """The given ids that match no message."""
        if self.exact:
            present = {m.message_id for m in messages}
            return [i for i in self.ids if i not in present]
        return [p for p in self.ids if not any(m.message_id.startswith(p) for m in messages)]


def filter_messages(messages: list[DlqMessage], selection: Selection) -> list[DlqMessage]:
    """Apply the selection; a prefix that matches nothing or several messages is an error."""
    if not selection.exact:
        for prefix in selection.ids:
            hits = {m.message_id for m in messages if m.message_id.startswith(prefix)}
            if not hits:
                raise OpsError(f"no DLQ message with id {prefix!r} (see `agentwake dlq list`)")
            if len(hits) > 1:
                raise OpsError(f"id {prefix!r} is ambiguous: it matches {len(hits)} messages; give more of it")
    return [m for m in messages if selection.matches(m)]
