"""SQS adapters: the dead-letter path (permanent input errors, wakes that gave up waiting for their
session), and the result queue (producers send to it; a result whose session is busy re-sends
itself to it with a delay)."""

from __future__ import annotations

from typing import Any

from agentwake.errors import ConfigError
from agentwake.store.models import utcnow_iso

#: message attributes agentwake puts on a message it dead-letters itself
ATTR_ERROR_TYPE = "agentwake-error-type"
ATTR_REASON = "agentwake-reason"
ATTR_ORIGINAL_ID = "agentwake-original-message-id"
ATTR_SOURCE = "agentwake-source-queue"
ATTR_RECEIVE_COUNT = "agentwake-receive-count"
#: when agentwake dead-lettered it (ISO-8601 UTC): the operator's "in the DLQ since"
ATTR_DEAD_LETTERED_AT = "agentwake-dead-lettered-at"
#: how often a result found its session busy, and since when (epoch milliseconds) it waits
ATTR_WAIT_COUNT = "agentwake-wait-count"
ATTR_WAITING_SINCE = "agentwake-waiting-since"
#: SQS's largest DelaySeconds
MAX_DELAY_SECONDS = 900


def _attr(value: str) -> dict[str, str]:
    return {"DataType": "String", "StringValue": value[:1024] or "-"}


class DeadLetters:
    def __init__(self, dlq_url: str | None, *, client: Any = None) -> None:
        if client is None:
            from agentwake.store.aws import client as make_client

            client = make_client("sqs")
        self.url = dlq_url
        self.client = client

    def send(
        self,
        *,
        body: str,
        error_type: str,
        reason: str,
        original_message_id: str,
        source: str = "",
        receive_count: str = "1",
        extra: dict[str, str] | None = None,
    ) -> str:
        """Move a message to the DLQ with its reason attached. Raises if the send fails."""
        if not self.url:
            raise ConfigError("AGENTWAKE_RESULT_DLQ_URL is not set: cannot dead-letter a permanent input error")
        attributes = {
            ATTR_ERROR_TYPE: _attr(error_type),
            ATTR_REASON: _attr(reason),
            ATTR_ORIGINAL_ID: _attr(original_message_id),
            ATTR_SOURCE: _attr(source),
            ATTR_RECEIVE_COUNT: _attr(receive_count),
            ATTR_DEAD_LETTERED_AT: _attr(utcnow_iso()),
        }
        attributes.update({name: _attr(value) for name, value in (extra or {}).items()})
        resp = self.client.send_message(
            QueueUrl=self.url,
            MessageBody=body or "(empty body)",
            MessageAttributes=attributes,
        )
        return str(resp["MessageId"])


class ResultQueue:
    """The background-result queue, as the function itself writes to it: a delayed re-send."""

    def __init__(self, queue_url: str | None, *, client: Any = None) -> None:
        if client is None:
            from agentwake.store.aws import client as make_client

            client = make_client("sqs")
        self.url = queue_url
        self.client = client

    def send_later(
        self, *, body: str, delay_s: float, attributes: dict[str, dict[str, str]], wait: dict[str, str]
    ) -> str:
        """Send ``body`` again, visible after ``delay_s`` (at most 900 s), with the producer's
        ``attributes`` (SQS API shape) and the ``wait`` state as agentwake attributes. Raises if the send fails."""
        if not self.url:
            raise ConfigError("AGENTWAKE_RESULT_QUEUE_URL is not set: cannot re-send a result to wait for its session")
        merged = {name: value for name, value in attributes.items() if not name.startswith("agentwake-")}
        merged.update({name: _attr(value) for name, value in wait.items()})
        resp = self.client.send_message(
            QueueUrl=self.url,
            MessageBody=body,
            DelaySeconds=max(0, min(MAX_DELAY_SECONDS, round(delay_s))),
            MessageAttributes=merged,
        )
        return str(resp["MessageId"])
