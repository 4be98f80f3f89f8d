"""CronWakeFunction: invoked asynchronously by EventBridge Scheduler with ``{job_id, scheduled_time}``.

A run that ends in ERROR raises, so Lambda retries it and then sends the event with the error to
the on-failure destination queue. A wake whose session is busy schedules itself again (a one-time
schedule) and returns: waiting spends none of Lambda's retries. Past SessionWaitLimit it raises
SessionBusy and ends on the on-failure destination like any failure.
"""

from __future__ import annotations

import time
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import ValidationError

from agentwake import bootstrap
from agentwake.errors import InvalidMessage, SessionBusy
from agentwake.observability import logger, metrics
from agentwake.wake.cron import wake_for_cron_job
from agentwake.wake.messages import CronWakeInput
from agentwake.wake.session_wait import WaitState, ran_after_waiting, wait_cron


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    deps = bootstrap.wake_deps_for(context)
    try:
        wake = CronWakeInput.model_validate(event)
    except ValidationError as exc:
        raise InvalidMessage(f"not a cron wake (expected job_id and scheduled_time): {exc}") from exc
    waited = WaitState.from_payload(event.get("session_wait"))
    try:
        outcome = wake_for_cron_job(wake, deps, remaining_ms=context.get_remaining_time_in_millis())
    except SessionBusy as busy:
        status = wait_cron(
            busy,
            {"job_id": wake.job_id, "scheduled_time": wake.scheduled_time},
            waited,
            store=deps.store,
            settings=deps.settings,
            schedules=deps.schedules,
            target_arn=getattr(context, "invoked_function_arn", None),
            job_id=wake.job_id,
        )
        return {"run_id": wake.run_id, "status": status}
    ran_after_waiting(waited, time.time())
    if outcome is None:
        return {"run_id": wake.run_id, "status": "skipped"}
    return {"run_id": outcome.run_id, "status": outcome.status, "steps": outcome.steps}
