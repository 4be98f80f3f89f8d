"""Background tools on the embedded local AWS, provisioned from the REAL template.yaml: the woken
agent's background tool call goes to BackgroundWorkQueue, the local SQS poller hands it to
BackgroundWorkFunction (as Lambda's event source mapping would), the tool is called once and its task
completed truthfully, and the completion wakes the agent through BackgroundResultFunction."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from agentwake.product.tasks import TasksService
from agentwake.store.dynamo import DynamoStore
from agentwake.wake.messages import BackgroundResultMessage
from agentwake.wake.start_task import task_id_for_call
from agentwake_local.stack import LocalStackRuntime
from tests.support.builders import local_stack_rules, seed_session

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStackRuntime]:
    home = tmp_path_factory.mktemp("agentwake-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AGENTWAKE_HOME", str(home))  # never a developer's own ~/.agentwake
        runtime = LocalStackRuntime(async_retry_delays=0, home=home)
        runtime.start(TEMPLATE, visibility_timeout_override=0)
        try:
            yield runtime
        finally:
            runtime.stop()


@pytest.fixture(scope="module")
def store(local: LocalStackRuntime) -> DynamoStore:
    return DynamoStore(local.outputs["AgentTableName"], client=local.client("dynamodb"))


def lookup_tool(url: str) -> dict[str, Any]:
    return {
        "type": "http",
        "name": "lookup",
        "description": "Look a key up (slow: runs in the background).",
        "parameters": {"type": "object", "properties": {"key": {"type": "string"}}},
        "url": url,
        "method": "GET",
        "background": True,
    }


def script(*steps: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"type": "scripted", "id": "p", "script": list(steps)}]


def peek(local: LocalStackRuntime, logical_id: str) -> list[dict[str, Any]]:
    response = local.client("sqs").receive_message(
        QueueUrl=local.stack.queue_url(logical_id), MaxNumberOfMessages=10, VisibilityTimeout=0
    )
    return list(response.get("Messages") or [])


def poll(local: LocalStackRuntime, function_id: str) -> tuple[list[str], list[str]]:
    """One poll of ``function_id``'s queue by the local stack's own SQS poller: (deleted, failed) ids."""
    result = local.poller(function_id).poll_once()
    return result.deleted, sorted(result.failed)


@pytest.mark.parametrize(
    ("answer", "status", "says"),
    [
        ({"body": '{"value": 42}', "status": 200}, "succeeded", '{"value": 42}'),
        ({"body": "down", "status": 503}, "failed", "HTTP 503"),
    ],
)
def test_a_background_tool_runs_on_the_work_function_and_its_completion_wakes_the_agent_once(
    local: LocalStackRuntime,
    store: DynamoStore,
    httpserver: HTTPServer,
    answer: dict[str, Any],
    status: str,
    says: str,
) -> None:
    # GIVEN a session of the local stack whose tool "lookup" runs in the background, and a producer's
    # task whose completion wakes its agent, which calls the tool
    session = f"s-{uuid.uuid4().hex[:8]}"
    httpserver.expect_request("/lookup").respond_with_data(answer["body"], status=answer["status"])
    started = script({"tool_calls": [{"name": "lookup", "arguments": {"key": "k"}}]}, {"text": "Started it."})
    tools = [lookup_tool(httpserver.url_for("/lookup"))]
    seed_session(store, session, providers=started, tools=tools, rules=local_stack_rules())
    producer = TasksService(store, local.outputs["BackgroundResultQueueUrl"], sqs=local.client("sqs"))
    registered = producer.register_task(session, "web_research", {"q": "x"})
    producer.finish_task(registered.task_id, "succeeded", "the research", task_token=registered.task_token)
    # WHEN the result function runs the wake
    deleted, failed = poll(local, "BackgroundResultFunction")
    assert (len(deleted), failed) == (1, [])
    # THEN the call started a task and sent its work to BackgroundWorkQueue; nothing was called yet
    task_id = task_id_for_call(f"bg:{registered.task_id}#0#0")
    assert [json.loads(m["Body"])["task_id"] for m in peek(local, "BackgroundWorkQueue")] == [task_id]
    assert httpserver.log == []
    # WHEN the work function takes it
    deleted, failed = poll(local, "BackgroundWorkFunction")
    assert (len(deleted), failed) == (1, [])
    # THEN the tool was called once and the task completed with the right status and text
    assert len(httpserver.log) == 1
    (completion,) = peek(local, "BackgroundResultQueue")
    done = BackgroundResultMessage.parse_body(completion["Body"])
    assert (done.task_id, done.status) == (task_id, status) and says in done.result_text
    # AND the completion wakes the agent once (run bg:{task}), the session's agent now only answering
    config = store.records.get_session(session)
    assert config is not None
    answering = config.model_copy(update={"providers": script({"text": "Told the user how it went."})})
    store.records.put_session(answering, rules=local_stack_rules())
    deleted, failed = poll(local, "BackgroundResultFunction")
    assert (len(deleted), failed) == (1, [])
    run = store.records.get_run(f"bg:{task_id}")
    assert run is not None and run.status == "succeeded"
    notes = [e for e in store.history.history(session) if e.kind == "note" and e.run_id == f"bg:{task_id}"]
    assert len(notes) == 1
    assert peek(local, "BackgroundWorkDLQ") == [] and peek(local, "BackgroundWorkQueue") == []
