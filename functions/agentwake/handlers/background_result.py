"""BackgroundResultFunction: SQS batch of finished background tasks, partial batch responses.

A permanent input error, or a run that failed for good (BudgetExceeded), is dead-lettered at once
with its reason and reported as handled; a run that ends in ERROR otherwise raises, so that record
alone is a batch item failure and is retried.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from agentwake import bootstrap
from agentwake.errors import BudgetExceeded, PermanentInputError
from agentwake.observability import logger, metrics
from agentwake.wake.background import wake_for_background_result
from agentwake.wake.messages import BackgroundResultMessage

processor = BatchProcessor(event_type=EventType.SQS)
_RECORD_KEYS = ["run_id", "task_id", "session_id", "attempt", "message_id"]


def record_handler(record: SQSRecord, lambda_context: LambdaContext | None = None) -> str:
    logger.remove_keys(_RECORD_KEYS)
    logger.append_keys(message_id=record.message_id)
    remaining = lambda_context.get_remaining_time_in_millis() if lambda_context is not None else None
    try:
        msg = BackgroundResultMessage.parse_body(record.body)
        return wake_for_background_result(msg, bootstrap.wake_deps(), remaining_ms=remaining).status
    except (PermanentInputError, BudgetExceeded) as exc:
        bootstrap.dead_letters().send(
            body=record.body,
            error_type=exc.error_type,
            reason=str(exc),
            original_message_id=record.message_id,
            source=record.event_source_arn,
            receive_count=str(record.attributes.approximate_receive_count),
        )
        metrics.add_metric(
            name="PermanentInputError" if isinstance(exc, PermanentInputError) else "PermanentRunFailure",
            unit="Count",
            value=1,
        )
        logger.warning("dead-lettered a permanent failure", extra={"error_type": exc.error_type, "reason": str(exc)})
        return "dead-lettered"


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    bootstrap.wake_deps_for(context)  # build the adapters once, tell idempotency our remaining time
    return dict(
        process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)
    )
