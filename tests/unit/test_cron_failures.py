"""The record the cron handler sends to CronFailureQueue for a permanent failure: Lambda's shape,
built only on that path (the handlers' behaviour is in tests/integration/test_wake_handlers.py)."""

from __future__ import annotations

import json
import subprocess
import sys

from agentwake.store.cron_failures import PERMANENT_FAILURE, CronFailures, permanent_failure_record


class RecordingSqs:
    def __init__(self) -> None:
        self.sent: list[dict] = []

    def send_message(self, **kwargs: object) -> dict:
        self.sent.append(kwargs)
        return {"MessageId": f"m{len(self.sent)}"}


def test_the_record_has_lambdas_fields_and_a_bounded_redacted_reason() -> None:
    # GIVEN a reason with a bearer token and 5,000 characters
    reason = "run cron:j:t failed: Authorization: Bearer abcdefghijklmnop " + "x" * 5000
    # WHEN the record is built
    record = permanent_failure_record(
        {"job_id": "j", "scheduled_time": "t"},
        error_type="BudgetExceeded",
        reason=reason,
        request_id="req-1",
        function_arn="arn:aws:lambda:us-east-1:123456789012:function:f:live",
        executed_version="7",
        timestamp="2026-11-30T06:00:00.000000Z",
    )
    # THEN it has the fields of Lambda's on-failure record, with the condition that says "at once"
    assert set(record) == {
        "version",
        "timestamp",
        "requestContext",
        "requestPayload",
        "responseContext",
        "responsePayload",
    }
    assert record["requestContext"]["condition"] == PERMANENT_FAILURE
    assert record["responseContext"] == {"statusCode": 200, "executedVersion": "7", "functionError": "Handled"}
    assert record["responsePayload"]["errorType"] == "BudgetExceeded"
    # AND the reason is redacted and at most 1 KiB, as every dead-lettered reason
    message = record["responsePayload"]["errorMessage"]
    assert "abcdefghijklmnop" not in message and "[REDACTED]" in message
    assert len(message.encode()) <= 1024 and message.endswith("…")


def test_the_sqs_client_is_made_on_first_send_only() -> None:
    # GIVEN the sender, as bootstrap builds it
    sqs = RecordingSqs()
    sender = CronFailures("https://sqs.example/queue")
    # THEN building it made no client
    assert sender._client is None
    # WHEN it sends (a client given here stands for the one it would make)
    sender._client = sqs
    sender.send(
        {"job_id": "j", "scheduled_time": "t"},
        error_type="InvalidMessage",
        reason="r",
        request_id="q",
        function_arn="a",
    )
    # THEN one message went to the queue with the agentwake attributes
    [sent] = sqs.sent
    assert sent["QueueUrl"] == "https://sqs.example/queue"
    assert json.loads(sent["MessageBody"])["requestPayload"] == {"job_id": "j", "scheduled_time": "t"}
    assert sent["MessageAttributes"]["agentwake-error-type"]["StringValue"] == "InvalidMessage"


def test_importing_the_cron_handler_does_not_load_the_sender() -> None:
    # GIVEN a fresh interpreter WHEN it imports the cron handler as a cold start does
    code = "import sys, agentwake.handlers.cron_wake; print('agentwake.store.cron_failures' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # THEN the sender's module waits for the first permanent failure
    assert out.stdout.strip() == "False"
