"""BackgroundResultFunction: SQS batch of finished background tasks, partial batch responses.

A permanent input error, or a run that failed for good (BudgetExceeded), is dead-lettered at once
with its reason and reported as handled; a run that ends in ERROR otherwise raises, so that record
alone is a batch item failure and is retried. A result whose session is busy re-sends itself with
a delay and is reported as handled (it waits without spending a receive); past SessionWaitLimit it
is dead-lettered as SessionBusy.
"""

from __future__ import annotations

import base64
import time
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from agentwake import bootstrap
from agentwake.errors import AgentwakeError, SessionBusy
from agentwake.observability import logger, metrics, permanent_failure_handed_over
from agentwake.store.queues import ATTR_WAIT_COUNT
from agentwake.wake.background import wake_for_background_result
from agentwake.wake.messages import BackgroundResultMessage

if TYPE_CHECKING:
    from agentwake.wake.session_wait import ParkedRecord

_RECORD_KEYS = ["run_id", "task_id", "session_id", "attempt", "message_id"]


def record_handler(record: SQSRecord, lambda_context: LambdaContext | None = None) -> str:
    logger.remove_keys(_RECORD_KEYS)
    logger.append_keys(message_id=record.message_id)
    remaining = lambda_context.get_remaining_time_in_millis() if lambda_context is not None else None
    try:
        msg = BackgroundResultMessage.parse_body(record.body)
        deps = bootstrap.wake_deps()
        try:
            outcome = wake_for_background_result(msg, deps, remaining_ms=remaining)
        except SessionBusy as busy:
            # the wait machinery is loaded by the wakes that wait, not by every cold start
            from agentwake.wake.session_wait import wait_background

            return wait_background(
                busy,
                _parked(record),
                store=deps.store,
                settings=deps.settings,
                result_queue=bootstrap.result_queue(),
                dead_letters=bootstrap.dead_letters(),
                task_id=msg.task_id,
            )
        if ATTR_WAIT_COUNT in (record.raw_event.get("messageAttributes") or {}):
            from agentwake.wake.session_wait import ran_after_waiting

            ran_after_waiting(_parked(record).state, time.time())
        return outcome.status
    except AgentwakeError as exc:
        if exc.retryable:  # a failed run, a deferred record: the batch item fails and SQS retries it
            raise
        # a permanent input error, or a run that failed for good (BudgetExceeded): no retry can help
        bootstrap.dead_letters().send(
            body=record.body,
            error_type=exc.error_type,
            reason=str(exc),
            original_message_id=record.message_id,
            source=record.event_source_arn,
            receive_count=str(record.attributes.approximate_receive_count),
        )
        permanent_failure_handed_over(exc, "the DLQ")
        return "dead-lettered"


def _parked(record: SQSRecord) -> ParkedRecord:
    """The record as it would be re-sent: body, the producer's attributes, the wait state."""
    from agentwake.wake.session_wait import ParkedRecord, WaitState

    attributes: dict[str, dict[str, str]] = {}
    strings: dict[str, str | None] = {}
    for name, value in (record.raw_event.get("messageAttributes") or {}).items():
        data_type = value.get("dataType") or "String"
        if value.get("stringValue") is not None:
            attributes[name] = {"DataType": data_type, "StringValue": value["stringValue"]}
            strings[name] = value["stringValue"]
        elif value.get("binaryValue") is not None:
            attributes[name] = {"DataType": data_type, "BinaryValue": base64.b64decode(value["binaryValue"])}  # type: ignore[dict-item]
    return ParkedRecord(
        body=record.body,
        message_id=record.message_id,
        source=record.event_source_arn,
        receive_count=str(record.attributes.approximate_receive_count),
        attributes=attributes,
        state=WaitState.from_attributes(strings),
    )


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    bootstrap.wake_deps()  # build the adapters once per process
    # one processor per invocation: it holds this batch's successes and failures
    processor = BatchProcessor(event_type=EventType.SQS)
    return dict(
        process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)
    )
