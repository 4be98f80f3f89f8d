"""Powertools Logger and Metrics, one of each per process. Keys: run_id, task_id/job_id, session_id, attempt."""

from __future__ import annotations

import json
import os
from typing import Any

from aws_lambda_powertools import Logger, Metrics

from agentwake.redact import redact


def _redacted_json(record: Any) -> str:
    """Every log line passes the redactor (secrets resolved for the run, bearer tokens, auth headers)."""
    return redact(json.dumps(record, default=str, separators=(",", ":")))


#: characters of an error's text a log line carries (the failure record keeps the whole, bounded text)
LOG_REASON_CHARS = 2000

logger = Logger(service=os.getenv("POWERTOOLS_SERVICE_NAME", "agentwake"), json_serializer=_redacted_json)
metrics = Metrics(namespace=os.getenv("POWERTOOLS_METRICS_NAMESPACE", "Agentwake"))
