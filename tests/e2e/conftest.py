"""Fixtures for the operator CLI: the stack's resources on moto (in-process), the CLI runner, and a
small emulation of Lambda's SQS poller to run the background-result handler against the queue."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError
from moto import mock_aws
from typer.testing import CliRunner

from agentwake.agent.providers import scripted
from agentwake.handlers import background_result
from agentwake.ops.cli import app
from agentwake.ops.cli_common import CliState
from agentwake.settings import reset_caches
from agentwake.store.dynamo import DynamoStore
from tests.support.aws import REGION, FakeLambdaContext, Resources, create_resources

#: receives of a result message before SQS moves it to the DLQ (two failed attempts)
MAX_RECEIVE_COUNT = 2


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
        """One poll of the background-result queue as Lambda's event source mapping does it:
        receive a batch, invoke the handler, delete what succeeded; a failed record becomes
        visible again at once (as if its visibility timeout had passed). Returns (ok, failed) ids."""
        resp = self.sqs.receive_message(
            QueueUrl=self.res.queue_url,
            MaxNumberOfMessages=10,
            VisibilityTimeout=60,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        messages = resp.get("Messages", [])
        if not messages:
            return [], []
        arn = self.queue_arn(self.res.queue_url)
        records = [sqs_record(m, arn) for m in messages]
        try:
            response = background_result.handler({"Records": records}, FakeLambdaContext())
            failed = {f["itemIdentifier"] for f in response.get("batchItemFailures", [])}
        except BatchProcessingError:  # every record failed: Lambda retries the whole batch
            failed = {r["messageId"] for r in records}
        ok = []
        for m in messages:
            if m["MessageId"] in failed:
                self.sqs.change_message_visibility(
                    QueueUrl=self.res.queue_url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0
                )
            else:
                self.sqs.delete_message(QueueUrl=self.res.queue_url, ReceiptHandle=m["ReceiptHandle"])
                ok.append(m["MessageId"])
        return ok, sorted(failed)

    def poll_until_dead_lettered(self, rounds: int = MAX_RECEIVE_COUNT + 1) -> list[str]:
        """Poll until the queue is empty: failing messages end in the DLQ after maxReceiveCount."""
        failed_ids: list[str] = []
        for _ in range(rounds):
            _, failed = self.poll()
            failed_ids += failed
        assert self.counts(self.res.queue_url) == (0, 0), "messages left on the results queue"
        return failed_ids


def sqs_record(message: dict[str, Any], queue_arn: str) -> dict[str, Any]:
    """A ReceiveMessage message as a record of Lambda's SQS event."""
    attributes = message.get("Attributes") or {}
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": {
            k: attributes[k]
            for k in ("ApproximateReceiveCount", "SentTimestamp", "SenderId", "ApproximateFirstReceiveTimestamp")
            if k in attributes
        },
        "messageAttributes": {
            name: {
                "stringValue": value.get("StringValue"),
                "stringListValues": [],
                "binaryListValues": [],
                "dataType": value["DataType"],
            }
            for name, value in (message.get("MessageAttributes") or {}).items()
        },
        "md5OfBody": message.get("MD5OfBody", ""),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": REGION,
    }


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
        scripted.CALLS.clear()
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
