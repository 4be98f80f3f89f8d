"""CronWakeFunction: invoked asynchronously by EventBridge Scheduler with ``{job_id, scheduled_time}``.

A run that ends in ERROR raises: Lambda retries it, then sends the event with the error to the
on-failure destination queue. A failure no retry can fix (``retryable`` false: an invalid event, a
run over its token budget, recorded first as any failure) goes to that queue from the handler at
once, returning ``failed_permanently``; if that send fails it raises instead, for Lambda's retries
and destination. A wake whose session is busy joins its wait list (the holder's release hands the
session over; a one-time schedule is the fallback) and returns, spending no retry; past
SessionWaitLimit it raises SessionBusy. A run handing its session to a waiter may run it next, here.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from agentwake import bootstrap
from agentwake.errors import AgentwakeError
from agentwake.handlers import init_done
from agentwake.observability import inject_lambda_context, logger, metrics, permanent_failure_handed_over
from agentwake.wake.invocation import on_cron_event


@inject_lambda_context
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    try:
        return on_cron_event(
            event,
            bootstrap.wake_deps(),
            target_arn=getattr(context, "invoked_function_arn", None),
            time_left=context.get_remaining_time_in_millis,
        )
    except AgentwakeError as exc:
        if exc.retryable:  # a failed run, a busy session past its limit: Lambda retries, then the destination
            raise
        return _failed_permanently(event, exc, context)


def _failed_permanently(event: Any, exc: AgentwakeError, context: LambdaContext) -> dict[str, Any]:
    """Send the failure to CronFailureQueue now; no retry can help. If the send fails, raise ``exc``."""
    try:
        bootstrap.cron_failures().send(
            event,
            error_type=exc.error_type,
            reason=str(exc),
            request_id=getattr(context, "aws_request_id", None) or "-",
            function_arn=getattr(context, "invoked_function_arn", None) or "-",
            executed_version=getattr(context, "function_version", None) or "$LATEST",
        )
    except Exception as send_error:
        # nothing may be lost: Lambda retries the event and its own on-failure destination takes it
        logger.exception("could not send a permanent failure to CronFailureQueue; raising it for Lambda's retries")
        raise exc from send_error
    permanent_failure_handed_over(exc, "CronFailureQueue")
    return {"run_id": getattr(exc, "run_id", None), "status": "failed_permanently", "error_type": exc.error_type}


init_done()  # the collector runs again (agentwake.handlers)
