"""Toy Lambda handlers for the local AWS tests (imported by the local runtime from this directory).

Every call is recorded in ``CALLS`` so tests can count invocations and look at what a handler saw.
"""

from __future__ import annotations

import os
import time
from typing import Any

CALLS: list[dict[str, Any]] = []


class ToyCrash(RuntimeError):
    """Raised by batch_handler for a record whose body contains "crash"."""


class ToyAsyncError(RuntimeError):
    """Raised by async_handler on every invocation."""


def _record_call(kind: str, event: Any, context: Any) -> dict[str, Any]:
    call = {
        "kind": kind,
        "function_name": context.function_name,
        "request_id": context.aws_request_id,
        "event": event,
        "env": dict(os.environ),
    }
    CALLS.append(call)
    return call


def batch_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Fails (as a batch item failure) every record whose body contains "fail"; raises on "crash"."""
    _record_call("batch", event, context)
    failures = []
    for record in event["Records"]:
        if "crash" in record["body"]:
            raise ToyCrash(f"crashed on {record['messageId']}")
        if "fail" in record["body"]:
            failures.append({"itemIdentifier": record["messageId"]})
    return {"batchItemFailures": failures}


def async_handler(event: dict[str, Any], context: Any) -> None:
    _record_call("async", event, context)
    raise ToyAsyncError(f"cannot process job {event.get('job_id')}")


def info_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Reports the context and the environment it ran with."""
    _record_call("info", event, context)
    first = context.get_remaining_time_in_millis()
    time.sleep(event.get("sleep", 0.2))
    second = context.get_remaining_time_in_millis()
    return {
        "remaining": [first, second],
        "function_name": context.function_name,
        "function_version": context.function_version,
        "invoked_function_arn": context.invoked_function_arn,
        "memory_limit_in_mb": context.memory_limit_in_mb,
        "aws_request_id": context.aws_request_id,
        "log_group_name": context.log_group_name,
        "log_stream_name": context.log_stream_name,
        "env": {key: value for key, value in os.environ.items() if key.startswith(("TOY_", "AWS_"))},
    }


def slow_handler(event: dict[str, Any], context: Any) -> str:
    _record_call("slow", event, context)
    time.sleep(event.get("sleep", 1.1))
    return "finished too late"


def unserializable_handler(event: dict[str, Any], context: Any) -> Any:
    return {"when": object()}
