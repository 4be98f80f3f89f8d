"""Powertools Logger and Metrics, one of each per process. Keys: run_id, task_id/job_id, session_id, attempt.

Records of one batch run side by side on threads (``wake.lanes``), so what is per record is kept per
thread: a record's log keys are Powertools' thread-safe keys (``logger.thread_safe_append_keys``, a
contextvar; the handler clears them as each record starts; never the logger's shared
``append_keys``), and a metric is added under one lock (``add_metric``:
Powertools' ``Metrics.add_metric`` reads, changes and writes back its metric set, and may print a
full set, unguarded), which also holds the log handler's lock, so an EMF line printed from one record
and a log line of another never interleave on stdout. A run's token metrics (``provider``
dimension) are added to its provider's line of the invocation (``add_provider_metrics``), printed
with the invocation's other metrics: one line a provider per invocation, whatever the batch holds.
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


#: this invocation's metrics of one provider (``provider`` dimension: InputTokens, OutputTokens), a
#: line each, printed by the invocation's flush: each record adds its values to its provider's line,
#: so a batch of ten records of one provider prints one line of ten values, not ten lines
_by_provider: dict[str, Any] = {}


def add_provider_metrics(provider_id: str, counts: dict[str, float]) -> None:
    """Count metrics with the ``provider`` dimension, on that provider's own line (never on the
    handler's other metrics, which have no such dimension), printed with the invocation's metrics."""
    from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit

    with stdout_lock():
        line = _by_provider.get(provider_id)
        if line is None:
            line = EphemeralMetrics(namespace=metrics.namespace, service=getattr(metrics, "service", None))
            for name, value in (metrics.default_dimensions or {}).items():
                line.add_dimension(name=name, value=value)
            line.add_dimension(name="provider", value=provider_id[:250])
            _by_provider[provider_id] = line
        for name, value in counts.items():  # a 100th value prints the line (Powertools): bounded
            line.add_metric(name=name, unit=MetricUnit.Count, value=value)


def _flushed_under_the_lock(flush: Any) -> Any:
    def flush_whole(*args: Any, **kwargs: Any) -> Any:
        with stdout_lock():
            try:
                return flush(*args, **kwargs)
            finally:
                lines = list(_by_provider.values())
                _by_provider.clear()
                for line in lines:
                    try:
                        line.flush_metrics()
                    except Exception:  # a metric never fails the invocation (its records are done)
                        logger.exception("could not print a provider's token metrics")

    return flush_whole


# the invocation's flush (``metrics.log_metrics``) walks the metric set while, on the local stack, another
# invocation's records of the same process may add to it: it runs under the lock ``add_metric`` takes,
# and prints the providers' lines too
metrics.provider.flush_metrics = _flushed_under_the_lock(metrics.provider.flush_metrics)  # type: ignore[method-assign]

#: keys Powertools' ``inject_lambda_context`` puts on every line that say what the line's log group
#: already says (``/aws/lambda/{function}``; the memory: each REPORT line): 140 bytes or more a line
SAME_ON_EVERY_LINE = ("function_name", "function_arn", "function_memory_size")


def inject_lambda_context(handler: Any) -> Any:
    """Powertools' ``logger.inject_lambda_context(clear_state=True)`` without ``SAME_ON_EVERY_LINE``:
    every line keeps ``function_request_id`` (the invocation, as Lambda's REPORT line names it) and
    ``cold_start``. Every handler is decorated with this."""
    import functools

    @functools.wraps(handler)
    def without_repeats(event: Any, context: Any) -> Any:
        logger.remove_keys(list(SAME_ON_EVERY_LINE))
        return handler(event, context)

    return logger.inject_lambda_context(clear_state=True)(without_repeats)


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
