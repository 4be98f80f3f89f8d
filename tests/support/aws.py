"""Test support: the agent resources on moto, provisioned from template.yaml itself."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import boto3

REGION = "us-east-1"


@dataclass
class Resources:
    table: str
    queue_url: str
    dlq_url: str
    cron_failure_url: str
    scheduler_dlq_url: str
    schedule_group: str
    #: the provisioned local stack (functions with their event sources, outputs)
    stack: Any = None
    #: the background-work queue and its DLQ (background tools, subagents, deadline checks)
    work_queue_url: str = ""
    work_dlq_url: str = ""

    def env(self) -> dict[str, str]:
        return {
            "AGENTWAKE_TABLE": self.table,
            "AGENTWAKE_RESULT_QUEUE_URL": self.queue_url,
            "AGENTWAKE_RESULT_DLQ_URL": self.dlq_url,
            "AGENTWAKE_CRON_FAILURE_QUEUE_URL": self.cron_failure_url,
            "AGENTWAKE_WORK_QUEUE_URL": self.work_queue_url,
            "AGENTWAKE_WORK_DLQ_URL": self.work_dlq_url,
            "AGENTWAKE_SCHEDULE_GROUP": self.schedule_group,
            "AGENTWAKE_RUN_TIMEOUT_MARGIN_MS": "1000",
            "POWERTOOLS_METRICS_NAMESPACE": "AgentwakeTest",
            "POWERTOOLS_SERVICE_NAME": "agentwake",
        }


#: the repository's SAM template: the tests' resources are what it declares, never a copy
TEMPLATE_PATH = Path(__file__).resolve().parents[2] / "template.yaml"


@lru_cache(maxsize=8)
def _template(max_receive_count: int) -> Any:
    """template.yaml read and resolved once per test session (per MaxReceiveCount)."""
    from agentwake_local.template import load_template

    return load_template(TEMPLATE_PATH, {"MaxReceiveCount": str(max_receive_count)}, region=REGION)


@lru_cache(maxsize=1)
def _session() -> boto3.session.Session:
    # one session (its service models loaded once); moto's mock reaches every client it makes
    return boto3.session.Session(region_name=REGION)


class _ClientsOnce:
    """The provisioner's session whose clients are made once per test process and environment (five
    clients a provisioning were about half of what is left of its CPU). A client holds no AWS state:
    moto's mock, started and reset per test, answers a kept client as a new one. What a client reads
    from the environment when it is made (``AWS_ENDPOINT_URL``: a test's own moto server; the
    credentials) is part of its key, so a test with another environment gets its own."""

    def __init__(self, session: boto3.session.Session) -> None:
        self.session = session
        self.clients: dict[tuple[Any, ...], Any] = {}

    def client(self, service: str, *, endpoint_url: str | None = None, region_name: str | None = None) -> Any:
        import os

        env = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_")))
        key = (service, endpoint_url, region_name, env)
        if key not in self.clients:
            self.clients[key] = self.session.client(service, endpoint_url=endpoint_url, region_name=region_name)
        return self.clients[key]


@lru_cache(maxsize=1)
def _provisioning_session() -> _ClientsOnce:
    return _ClientsOnce(_session())


def create_resources(max_receive_count: int = 5) -> Resources:
    """Provision template.yaml's resources on moto (inside ``mock_aws()``) with the local stack's
    own provisioner, as ``agentwake local up`` does on the embedded server."""
    from agentwake_local.provision import provision

    stack = provision(_template(max_receive_count), None, session=_provisioning_session())
    out = stack.outputs
    return Resources(
        table=out["AgentTableName"],
        queue_url=out["BackgroundResultQueueUrl"],
        dlq_url=out["BackgroundResultDLQUrl"],
        cron_failure_url=out["CronFailureQueueUrl"],
        scheduler_dlq_url=out["SchedulerDLQUrl"],
        schedule_group=out["ScheduleGroupName"],
        stack=stack,
        work_queue_url=out["BackgroundWorkQueueUrl"],
        work_dlq_url=out["BackgroundWorkDLQUrl"],
    )


def drain(queue_url: str) -> list[dict[str, Any]]:
    """Every message currently visible on a queue, with attributes (they stay unacknowledged)."""
    sqs = boto3.client("sqs", region_name=REGION)
    out: list[dict[str, Any]] = []
    while True:
        resp = sqs.receive_message(
            QueueUrl=queue_url,
            MaxNumberOfMessages=10,
            MessageAttributeNames=["All"],
            AttributeNames=["All"],
            VisibilityTimeout=30,
        )
        msgs = resp.get("Messages", [])
        if not msgs:
            return out
        out += msgs


class FakeLambdaContext:
    function_name = "agentwake-test"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:agentwake-test"
    memory_limit_in_mb = 512
    aws_request_id = "req-00000000"
    log_group_name = "/aws/lambda/agentwake-test"
    log_stream_name = "stream"

    def __init__(self, remaining_ms: int = 120_000) -> None:
        self.remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


def moto_one_request_at_a_time(monkeypatch: Any) -> None:
    """moto's in-process mock answering one request at a time, as the local stack's server does
    (``agentwake_local.server.serialized``): its backends are not thread-safe, and records of a batch
    run on threads (``agentwake.wake.lanes``)."""
    import threading

    from moto.core.botocore_stubber import BotocoreStubber

    lock = threading.RLock()
    answer = BotocoreStubber.__call__

    def serialized(self: Any, event_name: str, request: Any, **kwargs: Any) -> Any:
        with lock:
            return answer(self, event_name, request, **kwargs)

    monkeypatch.setattr(BotocoreStubber, "__call__", serialized)
