"""One background-result record through the real handler, with the Lambda time the test chooses."""

from __future__ import annotations

import json
import uuid
from typing import Any

from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError

from agentwake.handlers import background_result
from agentwake.product.tasks import TasksService
from tests.security.conftest import Stack
from tests.support.aws import FakeLambdaContext


def completion_body(stack: Stack, session_id: str, **over: Any) -> str:
    """Register a task of ``session_id`` and return its completion message body (with its token)."""
    registered = TasksService(stack.store, stack.res.queue_url, sqs=stack.sqs).register_task(
        session_id, "web_research", {"query": "q"}
    )
    body = {
        "task_id": registered.task_id,
        "session_id": session_id,
        "task_token": registered.task_token,
        "status": "succeeded",
        "result_text": "the result",
        "finished_at": "2026-11-30T05:00:00Z",
        **over,
    }
    return json.dumps(body)


def record(body: str, message_id: str | None = None) -> dict[str, Any]:
    return {
        "messageId": message_id or str(uuid.uuid4()),
        "receiptHandle": "handle",
        "body": body,
        "attributes": {
            "ApproximateReceiveCount": "1",
            "SentTimestamp": "1796014802150",
            "SenderId": "AROAEXAMPLE:producer",
            "ApproximateFirstReceiveTimestamp": "1796014802163",
        },
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:results",
        "awsRegion": "us-east-1",
    }


def handle(bodies: list[str], *, remaining_ms: int = 120_000, ids: list[str] | None = None) -> dict[str, Any]:
    """The handler's response; a batch whose every record failed is reported as Lambda would treat
    Powertools' BatchProcessingError: every record failed (retried)."""
    records = [record(b, ids[i] if ids else None) for i, b in enumerate(bodies)]
    try:
        return dict(background_result.handler({"Records": records}, FakeLambdaContext(remaining_ms)))
    except BatchProcessingError:
        return {"batchItemFailures": [{"itemIdentifier": r["messageId"]} for r in records], "all_failed": True}
