"""SQS adapters: the dead-letter path for permanent input errors, and the result queue producers use."""

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
    ) -> str:
        """Move a message to the DLQ with its reason attached. Raises if the send fails."""
        if not self.url:
            raise ConfigError("AGENTWAKE_RESULT_DLQ_URL is not set: cannot dead-letter a permanent input error")

        def attr(value: str) -> dict[str, str]:
            return {"DataType": "String", "StringValue": value[:1024] or "-"}

        resp = self.client.send_message(
            QueueUrl=self.url,
            MessageBody=body or "(empty body)",
            MessageAttributes={
                ATTR_ERROR_TYPE: attr(error_type),
                ATTR_REASON: attr(reason),
                ATTR_ORIGINAL_ID: attr(original_message_id),
                ATTR_SOURCE: attr(source),
                ATTR_RECEIVE_COUNT: attr(receive_count),
                ATTR_DEAD_LETTERED_AT: attr(utcnow_iso()),
            },
        )
        return str(resp["MessageId"])
