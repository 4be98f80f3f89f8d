"""Powertools Logger and Metrics, one of each per process. Keys: run_id, task_id/job_id, session_id, attempt."""

from __future__ import annotations

import os

from aws_lambda_powertools import Logger, Metrics

logger = Logger(service=os.getenv("POWERTOOLS_SERVICE_NAME", "agentwake"))
metrics = Metrics(namespace=os.getenv("POWERTOOLS_METRICS_NAMESPACE", "Agentwake"))
