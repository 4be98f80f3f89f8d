"""Test support: the agent resources on moto, shaped as template.yaml declares them."""

from __future__ import annotations

import json
from dataclasses import dataclass
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

    def env(self) -> dict[str, str]:
        return {
            "AGENTWAKE_TABLE": self.table,
            "AGENTWAKE_RESULT_QUEUE_URL": self.queue_url,
            "AGENTWAKE_RESULT_DLQ_URL": self.dlq_url,
            "AGENTWAKE_SCHEDULE_GROUP": self.schedule_group,
            "AGENTWAKE_RUN_TIMEOUT_MARGIN_MS": "1000",
            "POWERTOOLS_METRICS_NAMESPACE": "AgentwakeTest",
            "POWERTOOLS_SERVICE_NAME": "agentwake",
        }


def create_resources(max_receive_count: int = 5) -> Resources:
    ddb = boto3.client("dynamodb", region_name=REGION)
    ddb.create_table(
        TableName="agentwake-test",
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": n, "AttributeType": "S"} for n in ("pk", "sk", "gsi1pk", "gsi1sk")],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "gsi1",
                "KeySchema": [
                    {"AttributeName": "gsi1pk", "KeyType": "HASH"},
                    {"AttributeName": "gsi1sk", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
    )
    sqs = boto3.client("sqs", region_name=REGION)
    dlq = sqs.create_queue(QueueName="results-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    queue = sqs.create_queue(
        QueueName="results",
        Attributes={
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(max_receive_count)})
        },
    )["QueueUrl"]
    cron_failures = sqs.create_queue(QueueName="cron-failures")["QueueUrl"]
    scheduler_dlq = sqs.create_queue(QueueName="scheduler-dlq")["QueueUrl"]
    boto3.client("scheduler", region_name=REGION).create_schedule_group(Name="agentwake-jobs")
    return Resources(
        table="agentwake-test",
        queue_url=queue,
        dlq_url=dlq,
        cron_failure_url=cron_failures,
        scheduler_dlq_url=scheduler_dlq,
        schedule_group="agentwake-jobs",
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
