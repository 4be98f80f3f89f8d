"""BackgroundWorkFunction: SQS batch of work agentwake runs for a task itself, partial batch responses.

Each record goes to one use case (``wake.work.on_work_record``: a background tool, a background
subagent's run, a task's deadline check); this maps its answer: done → handled; dead-letter (a
malformed message, work this deployment cannot run) → to BackgroundWorkDLQ at once with its reason,
handled. Work that should be retried raises: that record alone is a batch item failure. The template
gives it one record per invocation (BatchSize 1); a larger batch would run its tasks side by side
(``wake.lanes``, one lane per task: work takes no session lease).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.batch import process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from agentwake import bootstrap
from agentwake.handlers import init_done
from agentwake.observability import inject_lambda_context, logger, metrics
from agentwake.wake.background import DeadLetter
from agentwake.wake.lanes import SessionLanes
from agentwake.wake.work import lane_of, on_work_record


def record_handler(record: SQSRecord, lambda_context: LambdaContext | None = None) -> str:
    logger.thread_safe_clear_keys()  # the keys of the record before it go
    logger.thread_safe_append_keys(message_id=record.message_id)
    remaining_ms = lambda_context.get_remaining_time_in_millis() if lambda_context is not None else None
    result = on_work_record(record, bootstrap.wake_deps(), remaining_ms=remaining_ms)
    if isinstance(result, DeadLetter):
        result.send(bootstrap.work_dead_letters())
        return "dead-lettered"
    return result.status


@inject_lambda_context
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    deps = bootstrap.wake_deps()  # build the adapters once per process
    processor = SessionLanes(lane_of, deps.settings.record_concurrency)  # one per invocation: its outcomes
    return dict(
        process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)
    )


init_done()  # the collector runs again (agentwake.handlers)
