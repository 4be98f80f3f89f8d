"""Powertools Logger and Metrics, one of each per process. Keys: run_id, task_id/job_id, session_id, attempt."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger, Metrics

from agentwake.trust.redact import redact

if TYPE_CHECKING:
    from agentwake.errors import AgentwakeError


def _redacted_json(record: Any) -> str:
    """Every log line passes the redactor (secrets resolved for the run, bearer tokens, auth headers)."""
    return redact(json.dumps(record, default=str, separators=(",", ":")))


#: characters of an error's text a log line carries (the failure record keeps the whole, bounded text)
LOG_REASON_CHARS = 2000

logger = Logger(service=os.getenv("POWERTOOLS_SERVICE_NAME", "agentwake"), json_serializer=_redacted_json)
metrics = Metrics(namespace=os.getenv("POWERTOOLS_METRICS_NAMESPACE", "Agentwake"))


def permanent_failure_handed_over(exc: AgentwakeError, where: str) -> None:
    """Count and log a failure no retry can fix, once it is on its dead-letter queue (``where``):
    ``PermanentInputError`` for bad input, ``PermanentRunFailure`` for a run that failed for good."""
    from agentwake.domain.models import truncate
    from agentwake.errors import PermanentInputError

    metrics.add_metric(
        name="PermanentInputError" if isinstance(exc, PermanentInputError) else "PermanentRunFailure",
        unit="Count",
        value=1,
    )
    logger.warning(
        f"sent a permanent failure to {where} at once",
        extra={"error_type": exc.error_type, "reason": truncate(str(exc), LOG_REASON_CHARS)},
    )
