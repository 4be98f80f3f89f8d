"""The operator's DLQ commands on BackgroundWorkDLQ (`--queue work`): why is this work message here,
and a redrive that sends it back to BackgroundWorkQueue, where it runs once."""

from __future__ import annotations

import json

from pytest_httpserver import HTTPServer

from agentwake import bootstrap
from agentwake.domain.models import subagent_run_id
from agentwake.handlers import background_work
from agentwake.wake.messages import BackgroundResultMessage, WorkMessage
from agentwake.wake.start_task import start_for_session
from tests.e2e.conftest import Cli, Stack, cli_json
from tests.integration.test_wake_handlers import sqs_record
from tests.support.aws import FakeLambdaContext, drain
from tests.support.builders import seed_session


def test_work_messages_in_the_dlq_are_listed_with_their_reason_and_redriven_to_the_work_queue(
    cli: Cli, stack: Stack, httpserver: HTTPServer
) -> None:
    # GIVEN a malformed work message the work function dead-lettered at once, with its reason
    bad = sqs_record(json.dumps({"kind": "tool", "task_id": "not valid"}), message_id="m-bad")
    assert background_work.handler({"Records": [bad]}, FakeLambdaContext()) == {"batchItemFailures": []}
    # AND a background tool's work message SQS moved there after its receives (its server was down)
    httpserver.expect_request("/lookup").respond_with_json({"value": 5})
    tool = {
        "type": "http",
        "name": "lookup",
        "description": "Look a key up.",
        "url": httpserver.url_for("/lookup"),
        "method": "GET",
    }
    seed_session(stack.store, "s-work", tools=[tool])
    session = stack.store.records.get_session("s-work")
    assert session is not None
    task = start_for_session(bootstrap.tasks(), session, kind="tool", name="lookup", args={}, task_id="t-moved")
    (work,) = drain(stack.res.work_queue_url)
    stack.sqs.delete_message(QueueUrl=stack.res.work_queue_url, ReceiptHandle=work["ReceiptHandle"])
    stack.sqs.send_message(QueueUrl=stack.res.work_dlq_url, MessageBody=work["Body"])
    # AND a background subagent's work message, whose run the listing names
    subagent = WorkMessage(kind="subagent", task_id="t-sub", session_id="s-work", name="researcher")
    stack.sqs.send_message(QueueUrl=stack.res.work_dlq_url, MessageBody=subagent.model_dump_json())

    # WHEN the work DLQ is listed
    rows = {
        r["message_id"] if r["kind"] == "invalid" else r["task_id"]: r
        for r in cli_json(cli, "dlq", "list", "--queue", "work")
    }
    # THEN each says what it is and, for the one the function dead-lettered, why
    invalid = next(r for r in rows.values() if r["kind"] == "invalid")
    assert invalid["error_type"] == "InvalidMessage" and "not a valid background-work message" in invalid["error"]
    assert rows["t-moved"]["kind"] == "work:tool" and rows["t-moved"]["session_id"] == "s-work"
    assert rows["t-sub"]["kind"] == "work:subagent" and rows["t-sub"]["run_id"] == subagent_run_id("t-sub")
    # AND `--queue all` lists them beside the other DLQs
    assert {r["message_id"] for r in cli_json(cli, "dlq", "list")} >= {r["message_id"] for r in rows.values()}

    # WHEN the tool's message is redriven
    cli("dlq", "redrive", "--id", rows["t-moved"]["message_id"])
    # THEN it is back on BackgroundWorkQueue and gone from the DLQ; the work function runs it once
    (back,) = drain(stack.res.work_queue_url)
    assert WorkMessage.parse_body(back["Body"]).task_id == task.task_id
    event = {"Records": [sqs_record(back["Body"], message_id=back["MessageId"])]}
    assert background_work.handler(event, FakeLambdaContext()) == {"batchItemFailures": []}
    (done,) = [BackgroundResultMessage.parse_body(m["Body"]) for m in drain(stack.res.queue_url)]
    assert (done.task_id, done.status) == ("t-moved", "succeeded") and len(httpserver.log) == 1
    assert {r["task_id"] for r in cli_json(cli, "dlq", "list", "--queue", "work") if r["kind"] != "invalid"} == {
        "t-sub"
    }
