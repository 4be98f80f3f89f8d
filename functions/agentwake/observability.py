"""Powertools Logger and Metrics, one of each per process. Keys: run_id, task_id/job_id, session_id, attempt.

Records of one batch run side by side on threads (``wake.lanes``), so what is per record is kept per
thread: a record's log keys are Powertools' thread-safe keys (``logger.thread_safe_append_keys``, a
contextvar; the handler clears them as each record starts; never the logger's shared
``append_keys``), and a metric is added under one lock (``add_metric``:
Powertools' ``Metrics.add_metric`` reads, changes and writes back its metric set, and may print a
full set, unguarded), which also holds the log handler's lock, so an EMF line printed from one record
and a log line of another never interleave on stdout.
"""

from __future__ import annotations

import contextlib
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


def add_metric(name: str, unit: str, value: float) -> None:
    """``metrics.add_metric``, one record at a time (the module docstring says why)."""
    with stdout_lock():
        metrics.add_metric(name=name, unit=unit, value=value)


def stdout_lock() -> Any:
    """The lock of the log handler's stream (an RLock): held, no log line and no other metric is written."""
    return logger.registered_handler.lock or contextlib.nullcontext()


def permanent_failure_handed_over(exc: AgentwakeError, where: str) -> None:
    """Count and log a failure no retry can fix, once it is on its dead-letter queue (``where``):
    ``PermanentInputError`` for bad input, ``PermanentRunFailure`` for a run that failed for good."""
    from agentwake.domain.models import truncate
    from agentwake.errors import PermanentInputError

    add_metric(
        name="PermanentInputError" if isinstance(exc, PermanentInputError) else "PermanentRunFailure",
        unit="Count",
        value=1,
    )
    logger.warning(
        f"sent a permanent failure to {where} at once",
        extra={"error_type": exc.error_type, "reason": truncate(str(exc), LOG_REASON_CHARS)},
    )
