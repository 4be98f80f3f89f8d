"""SQS adapters: the dead-letter path (permanent input errors, wakes that gave up waiting for their
session), and the result queue (producers send to it; a result whose session is busy re-sends
itself to it with a delay)."""

from __future__ import annotations

import re
from typing import Any

from agentwake.domain.models import utcnow_iso
from agentwake.errors import ConfigError
from agentwake.trust.redact import redact

#: message attributes agentwake puts on a message it dead-letters itself
ATTR_ERROR_TYPE = "agentwake-error-type"
ATTR_REASON = "agentwake-reason"
ATTR_ORIGINAL_ID = "agentwake-original-message-id"
ATTR_SOURCE = "agentwake-source-queue"
ATTR_RECEIVE_COUNT = "agentwake-receive-count"
#: when agentwake dead-lettered it (ISO-8601 UTC): the operator's "in the DLQ since"
ATTR_DEAD_LETTERED_AT = "agentwake-dead-lettered-at"
#: a run whose attempts (maxReceiveCount, counted across the copies of a result that waited for its
#: session) are spent, dead-lettered by the handler: how many it made
ATTR_ATTEMPTS_SPENT = "agentwake-attempts-spent"
#: SQS's largest DelaySeconds
MAX_DELAY_SECONDS = 900


#: SQS's whole-message limit (body + attribute names, types and values)
SQS_MAX_MESSAGE_BYTES = 256 * 1024
#: each attribute value agentwake attaches is cut to this many UTF-8 bytes
MAX_ATTRIBUTE_BYTES = 1024
#: characters SQS refuses in bodies and attribute values: anything outside
#: #x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF (lone surrogates included),
#: written as the complement (the negated class costs about 3 ms of cold start to compile; the two
#: are checked equal over every code point in tests/unit/test_queues_text.py)
_NOT_SQS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
ATTR_BODY_SANITIZED = "agentwake-body-sanitized"


def sqs_safe(text: str) -> str:
    """``text`` with every character SQS refuses replaced by U+FFFD."""
    return _NOT_SQS.sub("\ufffd", text)


def cut_utf8(text: str, max_bytes: int, marker: str = "…") -> str:
    """``text`` cut to at most ``max_bytes`` UTF-8 bytes (on a character boundary), marked if cut."""
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    room = max(0, max_bytes - len(marker.encode("utf-8")))
    return data[:room].decode("utf-8", errors="ignore") + marker


def _attr(value: Any) -> dict[str, str]:
    """An attribute value SQS accepts: redacted, only characters SQS allows, at most 1 KiB."""
    text = cut_utf8(sqs_safe(redact(str(value))).strip(), MAX_ATTRIBUTE_BYTES)
    return {"DataType": "String", "StringValue": text or "-"}


def _attributes_size(attributes: dict[str, dict[str, str]]) -> int:
    return sum(
        len(name.encode()) + len(value["DataType"].encode()) + len(value["StringValue"].encode("utf-8"))
        for name, value in attributes.items()
    )


def _sqs_client(client: Any) -> Any:
    """``client`` if given, else the runtime's SQS client, made now: ``agentwake.store.aws`` (boto3)
    is imported on first use, never when this module is (cold start)."""
    if client is not None:
        return client
    from agentwake.store.aws import client as make_client

    return make_client("sqs")


class DeadLetters:
    def __init__(self, dlq_url: str | None, *, client: Any = None) -> None:
        self.url = dlq_url
        self.client = _sqs_client(client)

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
        body, attributes = dead_letter_message(
            body=body,
            error_type=error_type,
            reason=reason,
            original_message_id=original_message_id,
            source=source,
            receive_count=receive_count,
            extra={ATTR_DEAD_LETTERED_AT: utcnow_iso(), **(extra or {})},
        )
        resp = self.client.send_message(QueueUrl=self.url, MessageBody=body, MessageAttributes=attributes)
        return str(resp["MessageId"])


def dead_letter_message(
    *,
    body: str,
    error_type: str,
    reason: str,
    original_message_id: str,
    source: str = "",
    receive_count: str = "1",
    extra: dict[str, str] | None = None,
) -> tuple[str, dict[str, dict[str, str]]]:
    """The body and attributes of a dead-lettered message, as SQS accepts them: only characters
    SQS allows, the reason redacted, every value at most 1 KiB, the whole message within 256 KiB."""
    attributes = {
        ATTR_ERROR_TYPE: _attr(error_type),
        ATTR_REASON: _attr(reason),
        ATTR_ORIGINAL_ID: _attr(original_message_id),
        ATTR_SOURCE: _attr(source),
        ATTR_RECEIVE_COUNT: _attr(receive_count),
    }
    attributes.update({name: _attr(value) for name, value in (extra or {}).items()})
    safe_body = sqs_safe(body or "") or "(empty body)"
    notes = []
    if safe_body != (body or "(empty body)"):
        notes.append("characters SQS refuses were replaced by U+FFFD")
    room = SQS_MAX_MESSAGE_BYTES - _attributes_size(attributes) - 256  # 256: the note attribute below
    if len(safe_body.encode("utf-8")) > room:
        safe_body = cut_utf8(safe_body, room, marker="…[truncated to fit the DLQ]")
        notes.append("the body was cut to fit SQS's 256 KiB")
    if notes:
        attributes[ATTR_BODY_SANITIZED] = _attr("; ".join(notes))
    return safe_body, attributes


class ResultQueue:
    """The background-result queue, as the function itself writes to it: a delayed re-send."""

    def __init__(self, queue_url: str | None, *, client: Any = None) -> None:
        self.url = queue_url
        self._client = client

    @property
    def client(self) -> Any:
        """Made on first use (a hand-off, a wait), not when every wake builds its adapters."""
        if self._client is None:
            self._client = _sqs_client(None)
        return self._client

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


class WorkQueue:
    """The background-work queue: a started task's work message, a deadline check (re-sent with a
    delay until it is due). Only agentwake's own functions send to it."""

    def __init__(self, queue_url: str | None, *, client: Any = None) -> None:
        self.url = queue_url
        self._client = client

    @property
    def client(self) -> Any:
        """Made on first use (a wake that starts a task), not when every wake builds its adapters."""
        if self._client is None:
            self._client = _sqs_client(None)
        return self._client

    def send(self, body: str, *, delay_s: float = 0) -> str:
        """Send one work message (visible after ``delay_s``, at most 900 s). Raises if the send fails."""
        if not self.url:
            raise ConfigError("AGENTWAKE_WORK_QUEUE_URL is not set: cannot start background work")
        request: dict[str, Any] = {"QueueUrl": self.url, "MessageBody": body}
        if delay_s > 0:
            request["DelaySeconds"] = max(0, min(MAX_DELAY_SECONDS, round(delay_s)))
        resp = self.client.send_message(**request)
        return str(resp["MessageId"])
