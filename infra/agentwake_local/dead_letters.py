"""What an invocation dead-lettered: a function that sends a record to a dead-letter queue itself
(agentwake's permanent input errors, a run that failed for good) still answers the batch with
``"batchItemFailures": []``, so the response alone does not tell. ``agentwake invoke`` and ``local up``'s
wake lines count the stack's dead-letter queues before the call (``watch``) and read what arrived
after it (``arrived``).

A dead-letter queue is a queue another queue's RedrivePolicy names, or a function's SQS on-failure
destination. Reading one is the ops CLI's own complete scan (``agentwake_ops.sqs_scan.peek``: every
message, however many, left on the queue and visible again) and each message is described as
``agentwake dlq list`` describes it (``agentwake_ops.dlq.describe``). What arrived is matched to the
invocation by the ``agentwake-original-message-id`` attribute agentwake puts on what it dead-letters
(the event's ``Records[].messageId``), else by the run it names (a cron wake's on-failure record),
sent since the watch began.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

from agentwake.store.queues import ATTR_ERROR_TYPE, ATTR_ORIGINAL_ID, ATTR_REASON

#: one scan of the dead-letter queues at a time in this process: two at once would hold each
#: other's messages and neither could be sure it saw them all
_SCANS = threading.Lock()


@dataclass(frozen=True)
class DeadLettered:
    queue: str
    error_type: str
    reason: str
    #: the run the message names (None: a body that names none)
    run_id: str | None = None

    def line(self) -> str:
        from agentwake_ops.runs import failure_line

        return f"dead-lettered to {self.queue}: {failure_line(self.error_type, self.reason)}"


@dataclass(frozen=True)
class Watch:
    """The dead-letter queues (logical id -> URL) and their counts when an invocation began."""

    queues: dict[str, str]
    counts: dict[str, int]
    since: float = field(default_factory=time.time)


def run_ids(event: Any) -> list[str]:
    """The runs an event wakes: a background result per SQS record, or a cron firing."""
    from agentwake.domain.models import background_run_id, cron_run_id
    from agentwake_ops.dlq.describe import safe_json

    if not isinstance(event, dict):
        return []
    if isinstance(event.get("Records"), list):
        found = []
        for record in event["Records"]:
            body = safe_json(record.get("body") if isinstance(record, dict) else None)
            if isinstance(body, dict) and isinstance(body.get("task_id"), str):
                found.append(background_run_id(body["task_id"]))
        return found
    if isinstance(event.get("job_id"), str) and isinstance(event.get("scheduled_time"), str):
        return [cron_run_id(event["job_id"], event["scheduled_time"])]
    return []


def dead_letter_queues(runtime: Any) -> dict[str, str]:
    """Logical id -> URL of every dead-letter queue of the stack."""
    stack = runtime.stack
    by_arn = _queues_by_arn(runtime)
    found = {dlq for _, dlq in redrive_limits(runtime).values()}
    for function in stack.functions.values():
        config = function.async_config
        failure = config.on_failure if config is not None else None
        if failure is not None and failure.type == "SQS" and failure.arn in by_arn:
            found.add(by_arn[failure.arn])
    return {lid: stack.queue_url(lid) for lid in sorted(found)}


def redrive_limits(runtime: Any) -> dict[str, tuple[int, str]]:
    """Source queue ARN -> (its maxReceiveCount, the logical id of its dead-letter queue)."""
    stack = runtime.stack
    sqs = runtime.client("sqs")
    by_arn = _queues_by_arn(runtime)
    limits: dict[str, tuple[int, str]] = {}
    for arn, lid in by_arn.items():
        attrs = sqs.get_queue_attributes(QueueUrl=stack.queue_url(lid), AttributeNames=["RedrivePolicy"])
        policy = json.loads(attrs.get("Attributes", {}).get("RedrivePolicy") or "{}")
        if policy.get("deadLetterTargetArn") in by_arn:
            limits[arn] = (int(policy.get("maxReceiveCount") or 0), by_arn[policy["deadLetterTargetArn"]])
    return limits


def _queues_by_arn(runtime: Any) -> dict[str, str]:
    return {r.arn: lid for lid, r in runtime.stack.resources.items() if r.type == "AWS::SQS::Queue" and r.provisioned}


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


def watch(runtime: Any, queues: dict[str, str]) -> Watch:
    return Watch(queues, counts(runtime, queues))


def arrived(runtime: Any, before: Watch, event: Any, *, store: Any = None) -> list[DeadLettered]:
    """What reached the dead-letter queues since ``before`` that belongs to ``event``; ``store``
    (the agent table) joins a message with the run it names, for its recorded failure."""
    from agentwake_ops.sqs_scan import peek

    ids = _record_ids(event)  # message id -> the run its record wakes (None: a body that names none)
    runs = set(filter(None, ids.values())) | set(run_ids(event))
    short = _short_names(runtime)
    sqs = runtime.client("sqs")
    found: list[DeadLettered] = []
    for lid, count in counts(runtime, before.queues).items():
        new = count - before.counts.get(lid, 0)
        if new <= 0:
            continue
        url = before.queues[lid]
        with _SCANS:
            messages = peek(sqs, url).messages()
        mine = []
        for message in messages:
            item = _described(message, lid, short.get(url), url, store)
            if ids:  # agentwake marks what it dead-letters with the record's message id
                original = _attributes(message).get(ATTR_ORIGINAL_ID)
                ours = original in ids
                if ours and item.run_id is None:  # a record that never became a run names its run here
                    item = replace(item, run_id=ids[str(original)])
            else:  # an on-failure record: the run it names (any, for an event that names none), sent since
                ours = (item.run_id in runs or not runs) and _sent_since(message, before.since)
            if ours:
                mine.append(item)
        if not mine and not ids:  # a destination record (no agentwake attributes) arrived
            mine = [DeadLettered(lid, "failure", f"{new} new message(s); see them with: agentwake dlq list")]
        found += mine
    return found


def _described(message: dict[str, Any], lid: str, short: str | None, url: str, store: Any) -> DeadLettered:
    """One DLQ message in words, as ``agentwake dlq list`` describes it (a queue agentwake does not
    know: the dead-letter attributes, else the body's first line)."""
    if short is not None:
        from agentwake_ops.dlq.describe import join, read

        msg = read(message, short, url)
        if store is not None:
            join(msg, store)
        return DeadLettered(lid, msg.error_type or "failure", msg.error_detail or "", msg.run_id)
    attrs = _attributes(message)
    from agentwake_ops.dlq.describe import first_line

    reason = attrs.get(ATTR_REASON) or first_line(message.get("Body", ""))
    return DeadLettered(lid, attrs.get(ATTR_ERROR_TYPE) or "failure", reason)


def _short_names(runtime: Any) -> dict[str, str]:
    """Queue URL -> the name the DLQ commands know it by (results, work, cron, scheduler)."""
    from agentwake_ops.context import QUEUE_OUTPUTS
    from agentwake_ops.dlq.scan import DLQS

    outputs = getattr(runtime, "outputs", {}) or {}
    return {str(outputs[QUEUE_OUTPUTS[role]]): name for name, role in DLQS.items() if outputs.get(QUEUE_OUTPUTS[role])}


def _attributes(message: dict[str, Any]) -> dict[str, str]:
    return {k: v.get("StringValue", "") for k, v in (message.get("MessageAttributes") or {}).items()}


def _sent_since(message: dict[str, Any], since: float) -> bool:
    sent = str((message.get("Attributes") or {}).get("SentTimestamp"))
    try:
        return int(sent) >= int(since * 1000) - 1000  # a second of slack: the two clocks are this host's
    except (TypeError, ValueError):
        return True


def _record_ids(event: Any) -> dict[str, str | None]:
    """Message id -> the run its record wakes, for every record of an SQS event."""
    records = event.get("Records") if isinstance(event, dict) else None
    return {
        str(r["messageId"]): next(iter(run_ids({"Records": [r]})), None)
        for r in records or []
        if isinstance(r, dict) and r.get("messageId")
    }
