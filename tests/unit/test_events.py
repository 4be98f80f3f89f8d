"""events/*.json look exactly like what SQS and EventBridge Scheduler deliver, so `sam local invoke
-e` and the tests exercise the same shapes as production."""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from aws_lambda_powertools.utilities.parser.models import SqsModel

from tests.support.tasks import token_for

EVENTS = Path(__file__).resolve().parents[2] / "events"
ALL = sorted(EVENTS.glob("*.json"))
SQS_EVENTS = (
    "background-result-success.json",
    "background-result-mixed-batch.json",
    "background-work-malformed.json",
)
CRON_EVENTS = ("cron-wake.json", "cron-wake-missing-job.json")

# What Lambda's SQS poller puts in every record (md5OfMessageAttributes only when there are some).
RECORD_KEYS = {
    "messageId",
    "receiptHandle",
    "body",
    "attributes",
    "messageAttributes",
    "md5OfBody",
    "eventSource",
    "eventSourceARN",
    "awsRegion",
}
ATTRIBUTE_KEYS = {"ApproximateReceiveCount", "SentTimestamp", "SenderId", "ApproximateFirstReceiveTimestamp"}
RESULT_KEYS = {
    "task_id",
    "session_id",
    "task_token",
    "tool_name",
    "tool_args",
    "status",
    "result_text",
    "note",
    "summary_name",
    "finished_at",
}


def load(name: str) -> Any:
    return json.loads((EVENTS / name).read_text())


def bodies(name: str) -> list[str]:
    return [r["body"] for r in load(name)["Records"]]


def test_the_expected_events_exist() -> None:
    assert {p.name for p in ALL} == set(SQS_EVENTS) | set(CRON_EVENTS)


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_every_event_parses_and_is_described(path: Path) -> None:
    assert isinstance(json.loads(path.read_text()), dict)
    assert f"`{path.name}`" in (EVENTS / "README.md").read_text()


@pytest.mark.parametrize("name", SQS_EVENTS)
def test_sqs_event_has_every_field_lambda_sends(name: str) -> None:
    event = load(name)
    assert set(event) == {"Records"}
    records = event["Records"]
    assert records
    assert len({r["messageId"] for r in records}) == len(records)
    for record in records:
        assert set(record) >= RECORD_KEYS, RECORD_KEYS - set(record)
        assert set(record) - RECORD_KEYS <= {"md5OfMessageAttributes"}
        uuid.UUID(record["messageId"])
        assert record["receiptHandle"]
        assert isinstance(record["body"], str)
        assert set(record["attributes"]) >= ATTRIBUTE_KEYS
        assert all(isinstance(v, str) for v in record["attributes"].values())
        assert record["attributes"]["ApproximateReceiveCount"].isdigit()
        assert int(record["attributes"]["ApproximateFirstReceiveTimestamp"]) >= int(
            record["attributes"]["SentTimestamp"]
        )
        assert record["messageAttributes"] == {}
        assert record["eventSource"] == "aws:sqs"
        arn = re.fullmatch(r"arn:aws:sqs:([a-z0-9-]+):\d{12}:[A-Za-z0-9_-]+", record["eventSourceARN"])
        assert arn and arn.group(1) == record["awsRegion"]


@pytest.mark.parametrize("name", SQS_EVENTS)
def test_md5_of_body_matches_the_body(name: str) -> None:
    for record in load(name)["Records"]:
        assert record["md5OfBody"] == hashlib.md5(record["body"].encode()).hexdigest()


@pytest.mark.parametrize("name", SQS_EVENTS)
def test_sqs_event_validates_against_the_powertools_model(name: str) -> None:
    SqsModel.model_validate(load(name))


def test_success_event_carries_one_complete_result() -> None:
    (body,) = bodies("background-result-success.json")
    result = json.loads(body)
    assert set(result) == RESULT_KEYS
    assert result["task_id"] == "task-ok-1"
    # the token the sample task is registered with (tests/support/tasks.py, events/README.md)
    assert result["task_token"] == token_for("task-ok-1")
    assert result["session_id"] == "session-demo"
    assert result["tool_args"] == {"query": "aurora pricing"}
    assert result["status"] == "succeeded"
    assert result["finished_at"] == "2026-11-30T05:00:00Z"


def test_mixed_batch_is_a_success_an_agent_error_and_a_malformed_body() -> None:
    ok, failing, malformed = bodies("background-result-mixed-batch.json")
    ok_result, failing_result = json.loads(ok), json.loads(failing)
    assert set(ok_result) == set(failing_result) == RESULT_KEYS
    assert (ok_result["task_id"], ok_result["session_id"]) == ("task-ok-2", "session-demo")
    assert (failing_result["task_id"], failing_result["session_id"]) == ("task-fail-1", "session-failing")
    assert malformed == '{"task_id": 42'
    with pytest.raises(json.JSONDecodeError):
        json.loads(malformed)


@pytest.mark.parametrize("name", CRON_EVENTS)
def test_cron_event_is_the_scheduler_input_exactly(name: str) -> None:
    event = load(name)
    assert set(event) == {"job_id", "scheduled_time"}
    assert event["job_id"]
    assert event["scheduled_time"].endswith("Z")
    assert datetime.fromisoformat(event["scheduled_time"].replace("Z", "+00:00")).tzinfo is not None


def test_cron_events_name_the_demo_job_and_a_missing_one() -> None:
    assert load("cron-wake.json")["job_id"] == "job-nightly"
    assert load("cron-wake-missing-job.json")["job_id"] == "job-does-not-exist"


def test_the_work_event_is_one_work_message_the_function_dead_letters() -> None:
    from agentwake.errors import InvalidMessage
    from agentwake.wake.messages import WorkMessage

    (body,) = bodies("background-work-malformed.json")
    assert json.loads(body)["kind"] == "tool"
    with pytest.raises(InvalidMessage, match="task_id"):
        WorkMessage.parse_body(body)
