"""What an ``agentwake invoke`` dead-lettered: a function that sends a record to a dead-letter queue
itself (agentwake's permanent input errors, a run that failed for good) still answers the batch
with ``"batchItemFailures": []``, so the response alone does not tell. ``agentwake invoke`` counts the
stack's dead-letter queues before the call and reads what arrived after it.

A dead-letter queue is a queue another queue's RedrivePolicy names, or a function's SQS on-failure
destination. What arrived is matched to the invocation by the ``agentwake-original-message-id``
attribute agentwake puts on what it dead-letters (the event's ``Records[].messageId``); an event
without records (a cron wake) claims whatever arrived on those queues meanwhile.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agentwake.store.queues import ATTR_ERROR_TYPE, ATTR_ORIGINAL_ID, ATTR_REASON

#: how much of a reason or body one line shows
_SHOWN = 300


@dataclass(frozen=True)
class DeadLettered:
    queue: str
    error_type: str
    reason: str

    def line(self) -> str:
        return f"dead-lettered to {self.queue}: {self.error_type}: {self.reason}"


def dead_letter_queues(runtime: Any) -> dict[str, str]:
    """Logical id -> URL of every dead-letter queue of the stack."""
    stack = runtime.stack
    sqs = runtime.client("sqs")
    by_arn = {r.arn: lid for lid, r in stack.resources.items() if r.type == "AWS::SQS::Queue" and r.provisioned}
    found: set[str] = set()
    for lid in by_arn.values():
        attrs = sqs.get_queue_attributes(QueueUrl=stack.queue_url(lid), AttributeNames=["RedrivePolicy"])
        policy = json.loads(attrs.get("Attributes", {}).get("RedrivePolicy") or "{}")
        if policy.get("deadLetterTargetArn") in by_arn:
            found.add(by_arn[policy["deadLetterTargetArn"]])
    for function in stack.functions.values():
        config = function.async_config
        failure = config.on_failure if config is not None else None
        if failure is not None and failure.type == "SQS" and failure.arn in by_arn:
            found.add(by_arn[failure.arn])
    return {lid: stack.queue_url(lid) for lid in sorted(found)}


def counts(runtime: Any, queues: dict[str, str]) -> dict[str, int]:
    sqs = runtime.client("sqs")
    return {
        lid: int(
            sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"][
                "ApproximateNumberOfMessages"
            ]
        )
        for lid, url in queues.items()
    }


def arrived(runtime: Any, queues: dict[str, str], before: dict[str, int], event: Any) -> list[DeadLettered]:
    """What reached the dead-letter queues since ``before`` that belongs to ``event``. Read with
    VisibilityTimeout 0: the messages stay where they are, for ``agentwake dlq list``."""
    ids = _record_ids(event)
    sqs = runtime.client("sqs")
    found: list[DeadLettered] = []
    for lid, count in counts(runtime, queues).items():
        new = count - before.get(lid, 0)
        if new <= 0:
            continue
        messages = sqs.receive_message(
            QueueUrl=queues[lid],
            MaxNumberOfMessages=10,
            VisibilityTimeout=0,
            MessageAttributeNames=["All"],
        ).get("Messages", [])
        mine = []
        for message in messages:
            attrs = {k: v.get("StringValue", "") for k, v in (message.get("MessageAttributes") or {}).items()}
            if ids and attrs.get(ATTR_ORIGINAL_ID) not in ids:
                continue
            reason = attrs.get(ATTR_REASON) or _first_line(message.get("Body", ""))
            mine.append(DeadLettered(lid, attrs.get(ATTR_ERROR_TYPE) or "failure", _cut(reason)))
        if not ids and not mine:  # a destination record (no agentwake attributes) arrived
            mine = [DeadLettered(lid, "failure", f"{new} new message(s)")]
        found += mine
    return found


def _record_ids(event: Any) -> set[str]:
    records = event.get("Records") if isinstance(event, dict) else None
    return {str(r["messageId"]) for r in records or [] if isinstance(r, dict) and r.get("messageId")}


def _first_line(text: str) -> str:
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):  # an on-failure destination record
        condition = (data.get("requestContext") or {}).get("condition")
        error = (data.get("responsePayload") or {}).get("errorMessage")
        if condition or error:
            return f"{condition or '?'}: {error or ''}".strip(": ")
    return (text.strip().splitlines() or [""])[0]


def _cut(text: str) -> str:
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"
