"""BackgroundResultFunction: SQS batch of finished background tasks, partial batch responses.

Each record goes to one use case (``wake.background.on_background_record``); this maps its answer:
done → handled; resend (session busy) → re-sent with a delay, handled; dead-letter (a permanent
input error, a run that failed for good, a wait past SessionWaitLimit) → to the DLQ with its
reason, handled. A run that ended in ERROR raises: that record alone is a batch item failure.
A run that hands its session to a waiter may run that waiter next, in this invocation. Records of
different sessions run side by side (``wake.lanes``: BackgroundRecordConcurrency), one session's
one after another.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.batch import process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from agentwake import bootstrap
from agentwake.handlers import init_done
from agentwake.observability import inject_lambda_context, logger, metrics
from agentwake.wake.background import DeadLetter, Resend, handed_first, session_of
from agentwake.wake.invocation import on_background_record
from agentwake.wake.lanes import SessionLanes


def record_handler(record: SQSRecord, lambda_context: LambdaContext | None = None) -> str:
    logger.thread_safe_clear_keys()  # the keys of the record before it go
    logger.thread_safe_append_keys(message_id=record.message_id)
    time_left = lambda_context.get_remaining_time_in_millis if lambda_context is not None else None
    result = on_background_record(record, bootstrap.wake_deps(), time_left=time_left)
    if isinstance(result, Resend):
        result.send(bootstrap.result_queue())  # handled only once the re-send succeeded
        return "waiting"
    if isinstance(result, DeadLetter):
        result.send(bootstrap.dead_letters())
        return "dead-lettered"
    return result.status


@inject_lambda_context
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    deps = bootstrap.wake_deps()  # build the adapters once per process
    # one processor per invocation: it holds this batch's successes and failures
    processor = SessionLanes(session_of, deps.settings.record_concurrency)
    event = handed_first(event)  # a record handed the session does not wait behind the others
    return dict(
        process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)
    )


init_done()  # the collector runs again (agentwake.handlers)
