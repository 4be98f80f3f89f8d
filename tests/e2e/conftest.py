"""Fixtures for the operator CLI: the stack's resources on moto (in-process, from template.yaml), the
CLI runner, and the local stack's SQS poller running the background-result handler against the queue."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws
from typer.testing import CliRunner

from agentwake.bootstrap import reset_caches
from agentwake.store.dynamo import DynamoStore
from agentwake_local import lambda_runtime
from agentwake_local.poller import SqsPoller
from agentwake_ops.cli import app
from agentwake_ops.cli_common import CliState
from tests.support.aws import REGION, Resources, create_resources
from tests.support.moto_patched import apply_moto_patches

#: receives of a result message before SQS moves it to the DLQ (two failed attempts)
MAX_RECEIVE_COUNT = 2


def pytest_configure(config: pytest.Config) -> None:
    """moto patched as the local stack runs it (tests/support/moto_patched.py)."""
    apply_moto_patches()


@dataclass
class Stack:
    res: Resources
    store: DynamoStore
    sqs: Any
    tmp: Path
    #: every (function logical id, payload) the CLI invoked asynchronously
    invocations: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        return {
            **self.res.env(),
            "AGENTWAKE_CRON_FAILURE_QUEUE_URL": self.res.cron_failure_url,
            "AGENTWAKE_SCHEDULER_DLQ_URL": self.res.scheduler_dlq_url,
        }

    def invoke_async(self, logical_id: str, payload: dict[str, Any]) -> str:
        self.invocations.append((logical_id, payload))
        return "recorded"

    def queue_arn(self, url: str) -> str:
        return str(self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"])

    def counts(self, url: str) -> tuple[int, int]:
        """(visible, in flight) messages of a queue."""
        attrs = self.sqs.get_queue_attributes(
            QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
        )["Attributes"]
        return int(attrs["ApproximateNumberOfMessages"]), int(attrs["ApproximateNumberOfMessagesNotVisible"])

    def poll(self) -> tuple[list[str], list[str]]:
        """One poll of the background-result queue by the local stack's own SQS poller (Lambda's
        event source mapping: receive a batch, invoke the handler, delete what succeeded); a failed
        record becomes visible again at once. Returns (ok, failed) ids."""
        result = self.poller().poll_once()
        return result.deleted, sorted(result.failed)

    def poller(self) -> SqsPoller:
        function = self.res.stack.functions["BackgroundResultFunction"]
        (source,) = function.sqs_events

        def invoke(event: Any) -> Any:
            # the handler runs in this process with the test's environment (already in os.environ)
            return lambda_runtime.invoke(function, event, base_env=dict(os.environ), on_env_change=reset_caches)

        return SqsPoller(function, source, sqs_client=self.sqs, invoke=invoke, visibility_timeout_override=0)

    def poll_until_dead_lettered(self, rounds: int = MAX_RECEIVE_COUNT + 1) -> list[str]:
        """Poll until the queue is empty: failing messages end in the DLQ after maxReceiveCount."""
        failed_ids: list[str] = []
        for _ in range(rounds):
            _, failed = self.poll()
            failed_ids += failed
        assert self.counts(self.res.queue_url) == (0, 0), "messages left on the results queue"
        return failed_ids


@pytest.fixture
def stack(aws_credentials: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Stack]:
    with mock_aws():
        res = create_resources(max_receive_count=MAX_RECEIVE_COUNT)
        s = Stack(
            res=res,
            store=DynamoStore(res.table, client=boto3.client("dynamodb", region_name=REGION)),
            sqs=boto3.client("sqs", region_name=REGION),
            tmp=tmp_path,
        )
        for key, value in s.env().items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("AGENTWAKE_HOME", str(tmp_path / "agentwake-home"))  # never a developer's local stack
        monkeypatch.setenv("COLUMNS", "250")  # rich tables wide enough to read whole cells
        reset_caches()
        yield s
        reset_caches()


Cli = Callable[..., Any]


@pytest.fixture
def cli(stack: Stack) -> Cli:
    """Run ``agentwake ARGS...`` in-process; ``invoke_async`` is recorded on ``stack.invocations``."""
    runner = CliRunner()

    def run(*args: str, obj: CliState | None = None, expect: int | None = 0) -> Any:
        result = runner.invoke(app, list(args), obj=obj or CliState(invoke_async=stack.invoke_async))
        if expect is not None:
            assert result.exit_code == expect, (
                f"agentwake {' '.join(args)} exited {result.exit_code}\n"
                f"stdout: {result.stdout}\nstderr: {result.stderr}\nexception: {result.exception!r}"
            )
        return result

    return run


def cli_json(cli: Cli, *args: str) -> Any:
    return json.loads(cli(*args, "--json").stdout)
