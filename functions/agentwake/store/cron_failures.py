"""CronFailureQueue, written by the cron handler itself for a failure no retry can fix.

Lambda sends a cron wake that raised to the on-failure destination only after its async retries
(``CronMaximumRetryAttempts``). A permanent failure (``BudgetExceeded``, an invalid event) is
known at once, so the handler sends the same record Lambda would send, itself, and returns: the
record reaches the queue after one invocation. It is Lambda's invocation record::

    {"version": "1.0", "timestamp": "...Z",
     "requestContext": {"requestId", "functionArn", "condition": "PermanentFailure"},
     "requestPayload": <the event>,
     "responseContext": {"statusCode": 200, "executedVersion": "...", "functionError": "Handled"},
     "responsePayload": {"errorMessage", "errorType", "requestId", "stackTrace": []}}

with ``condition: PermanentFailure`` (Lambda's own are ``RetriesExhausted`` / ``EventAgeExceeded``)
saying it was dead-lettered at once, the event redacted, and without ``approximateInvokeCount`` (a handler cannot see
Lambda's retry count; the operator CLI takes the attempts from the run record). The reason is
redacted and cut to 1 KiB like every reason agentwake dead-letters; the same ``agentwake-*``
message attributes as on the background DLQ carry the error type, the reason and the time.
"""

from __future__ import annotations

import json
from typing import Any

from agentwake.domain.models import utcnow_iso
from agentwake.errors import ConfigError
from agentwake.store.queues import (
    ATTR_DEAD_LETTERED_AT,
    ATTR_ERROR_TYPE,
    ATTR_REASON,
    SQS_MAX_MESSAGE_BYTES,
    _attr,
    _attributes_size,
)
from agentwake.trust.redact import redact_data

#: the record's ``requestContext.condition`` for a failure the handler dead-lettered at once
PERMANENT_FAILURE = "PermanentFailure"
#: the event keys kept when the whole event does not fit the message (what a redrive re-invokes)
_CRON_KEYS = ("job_id", "scheduled_time", "session_id")
#: the longest cron key value kept in a cut event
_MAX_KEY_CHARS = 512


def permanent_failure_record(
    event: Any,
    *,
    error_type: str,
    reason: str,
    request_id: str,
    function_arn: str,
    executed_version: str,
    timestamp: str,
) -> dict[str, Any]:
    """Lambda's on-failure record for ``event``, with the reason as Lambda's ``errorMessage``.

    ``reason`` goes through the same redaction and 1 KiB bound as a dead-lettered reason attribute;
    the event is redacted too (a credential-shaped value in an invalid event does not leave)."""
    message = _attr(reason)["StringValue"]
    return {
        "version": "1.0",
        "timestamp": timestamp,
        "requestContext": {"requestId": request_id, "functionArn": function_arn, "condition": PERMANENT_FAILURE},
        "requestPayload": redact_data(event),
        "responseContext": {"statusCode": 200, "executedVersion": executed_version, "functionError": "Handled"},
        "responsePayload": {
            "errorMessage": message,
            "errorType": _attr(error_type)["StringValue"],
            "requestId": request_id,
            "stackTrace": [],
        },
    }


def _body(record: dict[str, Any], max_bytes: int) -> str:
    """The record as JSON within ``max_bytes``: an event too large to fit keeps only its cron keys."""
    body = json.dumps(record, default=str)  # ASCII only: every character is one SQS accepts
    if len(body) <= max_bytes:
        return body
    event = record["requestPayload"]
    kept: dict[str, Any] = {}
    if isinstance(event, dict):
        kept = {k: event[k] for k in _CRON_KEYS if isinstance(event.get(k), str) and len(event[k]) <= _MAX_KEY_CHARS}
    size = len(json.dumps(event, default=str))
    kept["agentwakeTruncated"] = f"the event was {size} bytes as JSON; only its cron keys are kept"
    return json.dumps({**record, "requestPayload": kept})


class CronFailures:
    """Sends a permanent cron failure to CronFailureQueue. The SQS client is made on first use."""

    def __init__(self, queue_url: str | None, *, client: Any = None) -> None:
        self.url = queue_url
        self._client = client

    @property
    def client(self) -> Any:
        if self._client is None:
            from agentwake.store.aws import client as make_client

            self._client = make_client("sqs")
        return self._client

    def send(
        self,
        event: Any,
        *,
        error_type: str,
        reason: str,
        request_id: str,
        function_arn: str,
        executed_version: str = "$LATEST",
    ) -> str:
        """Put Lambda's record for ``event`` on the queue; returns the message id. Raises if the send fails."""
        if not self.url:
            raise ConfigError(
                "AGENTWAKE_CRON_FAILURE_QUEUE_URL is not set: cannot send a permanent cron failure to CronFailureQueue"
            )
        now = utcnow_iso()
        attributes = {ATTR_ERROR_TYPE: _attr(error_type), ATTR_REASON: _attr(reason), ATTR_DEAD_LETTERED_AT: _attr(now)}
        record = permanent_failure_record(
            event,
            error_type=error_type,
            reason=reason,
            request_id=request_id,
            function_arn=function_arn,
            executed_version=executed_version,
            timestamp=now,
        )
        body = _body(record, SQS_MAX_MESSAGE_BYTES - _attributes_size(attributes))
        resp = self.client.send_message(QueueUrl=self.url, MessageBody=body, MessageAttributes=attributes)
        return str(resp["MessageId"])
