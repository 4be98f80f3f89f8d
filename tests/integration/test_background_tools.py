"""Background tools on moto, through the three functions: a wake's agent calls a tool the session
marks ``background``; the call returns "started task T" at once; BackgroundWorkFunction calls the
tool and completes the task truthfully (``succeeded`` with the output, ``failed`` with the reason);
the completion wakes the agent once (``bg:{task}``). Starting and completing are exactly once."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from agentwake import bootstrap
from agentwake.domain.models import Task
from agentwake.domain.steps import WORK_RESULT_KEY, work_journal_id
from agentwake.errors import InvalidMessage, TaskExists
from agentwake.handlers import background_result, background_work
from agentwake.settings import Settings
from agentwake.store.dynamo import DynamoStore
from agentwake.wake.messages import BackgroundResultMessage, WorkMessage
from agentwake.wake.start_task import start_for_session, task_id_for_call
from agentwake.wake.task_deadline import deadline_seconds
from tests.integration.test_session_tools import TEST_TOOLS
from tests.integration.test_wake_handlers import result_body, sqs_record
from tests.support.aws import FakeLambdaContext, Resources, drain
from tests.support.builders import seed_session, seed_task
from tests.support.faults import around
from tests.support.process_state import forget_python_tools

#: the producer's task whose wake starts the background tool, and the run that wakes for it
STARTER_TASK = "t0"
STARTER_RUN = "bg:t0"


def lookup_tool(url: str, **over: Any) -> dict[str, Any]:
    return {
        "type": "http",
        "name": "lookup",
        "description": "Look a key up (slow: runs in the background).",
        "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
        "url": url,
        "method": "GET",
        "background": True,
        **over,
    }


def calls_then_answers(tool: str, args: dict[str, Any]) -> list[dict[str, Any]]:
    """Step 0 calls the background tool, step 1 answers."""
    return [{"tool_calls": [{"name": tool, "arguments": args}]}, {"text": "I started it; I will report back."}]


def answers_only() -> list[dict[str, Any]]:
    return [{"text": "Reported the task's outcome to the user."}]


def work_event(message: dict[str, Any]) -> dict[str, Any]:
    """An SQS event of one message received from the work queue, as the poller hands it over."""
    record = sqs_record(message["Body"], message_id=message["MessageId"])
    record["attributes"]["ApproximateReceiveCount"] = message["Attributes"].get("ApproximateReceiveCount", "1")
    record["eventSourceARN"] = "arn:aws:sqs:us-east-1:123456789012:agentwake-BackgroundWorkQueue"
    return {"Records": [record]}


def run_work(resources: Resources) -> list[dict[str, Any]]:
    """Every work message now on the queue, handed to BackgroundWorkFunction: its answers."""
    return [background_work.handler(work_event(m), FakeLambdaContext()) for m in drain(resources.work_queue_url)]


def completions(resources: Resources) -> list[BackgroundResultMessage]:
    return [BackgroundResultMessage.parse_body(m["Body"]) for m in drain(resources.queue_url)]


def start_in_a_wake(store: DynamoStore, tool: dict[str, Any], args: dict[str, Any]) -> Task:
    """A session with background tool ``tool``; a producer's task wakes its agent, which calls the
    tool: the started task (the wake's run succeeded, nothing called yet)."""
    seed_session(
        store,
        "s1",
        providers=[{"type": "scripted", "id": "p", "script": calls_then_answers(tool["name"], args)}],
        tools=[tool],
    )
    seed_task(store, STARTER_TASK, "s1")
    answer = background_result.handler({"Records": [sqs_record(result_body(STARTER_TASK, "s1"))]}, FakeLambdaContext())
    assert answer == {"batchItemFailures": []}
    run = store.records.get_run(STARTER_RUN)
    assert run is not None and run.status == "succeeded"
    task = store.records.get_task(task_id_for_call(f"{STARTER_RUN}#0#0"))
    assert task is not None
    return task


def wake_for(store: DynamoStore, completion: BackgroundResultMessage) -> None:
    """The completion handed to BackgroundResultFunction, the agent now only answering."""
    session = store.records.get_session("s1")
    assert session is not None
    providers = [{"type": "scripted", "id": "p", "script": answers_only()}]
    store.records.put_session(session.model_copy(update={"providers": providers}))
    answer = background_result.handler({"Records": [sqs_record(completion.model_dump_json())]}, FakeLambdaContext())
    assert answer == {"batchItemFailures": []}


def wake_notes(store: DynamoStore, run_id: str) -> list[str]:
    return [e.content for e in store.history.history("s1") if e.kind == "note" and e.run_id == run_id]


@pytest.fixture
def tools_package_installed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.syspath_prepend(str(TEST_TOOLS))
    forget_python_tools()
    yield
    forget_python_tools()


# --- the four completions --------------------------------------------------------------------


def test_a_background_tool_returns_at_once_and_its_success_wakes_the_agent_once(
    store: DynamoStore, resources: Resources, httpserver: HTTPServer
) -> None:
    # GIVEN a session whose GET tool "lookup" runs in the background
    httpserver.expect_request("/lookup", query_string="key=k1").respond_with_json({"value": 42})
    task = start_in_a_wake(store, lookup_tool(httpserver.url_for("/lookup")), {"key": "k1"})
    # THEN the model's call returned "started task T" at once, and the tool was not called in the run
    tool_result = store.journals.journal_entries(STARTER_RUN)["000.tool.00"]["content"]
    assert tool_result.startswith(f"started task {task.task_id} (lookup in the background")
    assert httpserver.log == []
    # AND the task is registered as this call's: a background tool, started by the run and call
    assert (task.kind, task.tool_name, task.tool_args) == ("tool", "lookup", {"key": "k1"})
    assert (task.started_by, task.started_by_call) == (STARTER_RUN, f"{STARTER_RUN}#0#0")
    assert task.deadline_at is not None and task.status == "running"
    # WHEN BackgroundWorkFunction takes the work message
    assert run_work(resources) == [{"batchItemFailures": []}]
    # THEN the tool was called once, and the task completed succeeded with its output
    assert len(httpserver.log) == 1
    (done,) = completions(resources)
    assert (done.task_id, done.status) == (task.task_id, "succeeded")
    assert json.loads(done.result_text) == {"value": 42}
    # AND the completion wakes the agent once: run bg:{task} succeeded with one note
    wake_for(store, done)
    run = store.records.get_run(f"bg:{task.task_id}")
    assert run is not None and run.status == "succeeded"
    assert len(wake_notes(store, f"bg:{task.task_id}")) == 1


def test_a_tool_that_raises_completes_its_task_failed_with_the_exception(
    store: DynamoStore, resources: Resources, tools_package_installed: None
) -> None:
    # GIVEN a background Python tool whose backend is down
    tool = {"type": "python", "name": "broken_lookup", "background": True}
    task = start_in_a_wake(store, tool, {"key": "k2"})
    # WHEN the work runs
    assert run_work(resources) == [{"batchItemFailures": []}]
    # THEN the task completed failed, the reason naming the exception; never succeeded with an error text
    (done,) = completions(resources)
    assert done.status == "failed"
    assert "RuntimeError: the lookup service is down (key k2)" in done.result_text
    # AND the agent is woken once for it
    wake_for(store, done)
    assert store.records.get_run(f"bg:{task.task_id}").status == "succeeded"  # type: ignore[union-attr]
    assert len(wake_notes(store, f"bg:{task.task_id}")) == 1


def test_a_non_2xx_answer_completes_the_task_failed_with_the_status(
    store: DynamoStore, resources: Resources, httpserver: HTTPServer
) -> None:
    httpserver.expect_request("/lookup").respond_with_data("backend exploded", status=503)
    task = start_in_a_wake(store, lookup_tool(httpserver.url_for("/lookup")), {"key": "k3"})
    assert run_work(resources) == [{"batchItemFailures": []}]
    (done,) = completions(resources)
    assert (done.task_id, done.status) == (task.task_id, "failed")
    assert "HTTP 503" in done.result_text and "backend exploded" in done.result_text


def test_a_tool_that_times_out_completes_its_task_failed_timed_out(
    store: DynamoStore, resources: Resources, httpserver: HTTPServer
) -> None:
    # GIVEN a tool whose server answers only after the tool's 1 s timeout (it waits on an event the
    # test sets once the work is done, bounded in case it never is)
    released = threading.Event()

    def slow(request: Request) -> Response:
        released.wait(30)
        return Response("too late")

    httpserver.expect_request("/lookup").respond_with_handler(slow)
    task = start_in_a_wake(store, lookup_tool(httpserver.url_for("/lookup"), timeout=1), {"key": "k4"})
    try:
        assert run_work(resources) == [{"batchItemFailures": []}]
    finally:
        released.set()
    # THEN the task completed failed: timed out, after the tool's own timeout
    (done,) = completions(resources)
    assert (done.task_id, done.status) == (task.task_id, "failed")
    assert done.result_text.startswith("timed out:") and "timed out after 1s" in done.result_text
    wake_for(store, done)
    assert len(wake_notes(store, f"bg:{task.task_id}")) == 1


def test_a_refused_url_completes_the_task_failed_refused_and_sends_nothing(
    store: DynamoStore, resources: Resources, httpserver: HTTPServer, deployed_outbound_policy: None
) -> None:
    # GIVEN the deployed outbound policy, and a tool whose name resolves to loopback (it passes the
    # config check; the call's own check refuses it)
    url = httpserver.url_for("/lookup").replace("http://", "https://").replace("127.0.0.1", "localhost")
    task = start_in_a_wake(store, lookup_tool(url), {"key": "k5"})
    # WHEN the work runs
    assert run_work(resources) == [{"batchItemFailures": []}]
    # THEN nothing was sent, and the task completed failed, saying the URL was refused
    assert httpserver.log == []
    (done,) = completions(resources)
    assert (done.task_id, done.status) == (task.task_id, "failed")
    assert done.result_text.startswith("refused:") and "loopback" in done.result_text
    wake_for(store, done)
    assert len(wake_notes(store, f"bg:{task.task_id}")) == 1


# --- exactly once ----------------------------------------------------------------------------


def test_a_crash_after_the_work_before_the_completion_sends_exactly_one_completion(
    store: DynamoStore, resources: Resources, httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a started background tool, and a work function that dies right after the tool's result
    # is kept, before its completion is sent
    httpserver.expect_request("/lookup").respond_with_json({"value": 7})
    task = start_in_a_wake(store, lookup_tool(httpserver.url_for("/lookup")), {"key": "k6"})
    (message,) = drain(resources.work_queue_url)
    tasks = bootstrap.tasks()
    armed = [True]

    def dies_before_sending(finish: Any, *args: Any, **kw: Any) -> Any:
        if armed[0]:
            armed[0] = False
            raise RuntimeError("the function died before the completion was sent")
        return finish(*args, **kw)

    around(tasks, "finish_task", dies_before_sending)
    # WHEN the record fails (the batch's only record: Powertools raises, SQS delivers it again)
    with pytest.raises(BatchProcessingError, match="died before the completion was sent"):
        background_work.handler(work_event(message), FakeLambdaContext())
    assert completions(resources) == []
    message["Attributes"]["ApproximateReceiveCount"] = "2"
    second = background_work.handler(work_event(message), FakeLambdaContext())
    # AND once more, as a duplicate delivery after success
    third = background_work.handler(work_event(message), FakeLambdaContext())
    # THEN the tool was called once (the retry sent the kept result), and exactly one completion was sent
    assert second == third == {"batchItemFailures": []}
    assert len(httpserver.log) == 1
    (done,) = completions(resources)
    assert (done.task_id, done.status, json.loads(done.result_text)) == (task.task_id, "succeeded", {"value": 7})
    kept = store.journals.journal_entries(work_journal_id(task.task_id))[WORK_RESULT_KEY]
    assert kept["status"] == "succeeded"


def test_a_completion_unsent_by_the_last_receive_is_sent_once_by_the_redrive_of_its_record(
    store: DynamoStore, resources: Resources, httpserver: HTTPServer
) -> None:
    # GIVEN a started background tool whose completion cannot be sent (the result queue refuses)
    httpserver.expect_request("/lookup").respond_with_json({"value": 9})
    task = start_in_a_wake(store, lookup_tool(httpserver.url_for("/lookup")), {"key": "k9"})
    (message,) = drain(resources.work_queue_url)
    tasks = bootstrap.tasks()
    broken = [True]

    def result_queue(send: Any, **kw: Any) -> Any:
        if broken[0] and kw.get("QueueUrl") == resources.queue_url:
            raise ConnectionError("injected: the result queue is unreachable")
        return send(**kw)

    around(tasks.sqs, "send_message", result_queue)
    # WHEN every receive up to the last (MaxReceiveCount) fails to send it: SQS dead-letters the record
    for receive in (1, Settings.from_env().max_receive_count):
        message["Attributes"]["ApproximateReceiveCount"] = str(receive)
        with pytest.raises(BatchProcessingError, match="result queue is unreachable"):
            background_work.handler(work_event(message), FakeLambdaContext())
    assert completions(resources) == []
    stored = store.records.get_task(task.task_id)
    assert stored is not None and (stored.status, stored.outcome) == ("running", "succeeded")  # claimed, unsent
    # WHEN the operator fixes the queue and redrives the record, and SQS delivers it twice
    broken[0] = False
    message["Attributes"]["ApproximateReceiveCount"] = "1"
    for _ in range(2):
        assert background_work.handler(work_event(message), FakeLambdaContext()) == {"batchItemFailures": []}
    # THEN the kept result is sent, once, the tool called once, and the agent woken once for it
    (done,) = completions(resources)
    assert (done.status, json.loads(done.result_text)) == ("succeeded", {"value": 9})
    assert len(httpserver.log) == 1
    wake_for(store, done)
    assert len(wake_notes(store, f"bg:{task.task_id}")) == 1


def crashing_after_the_start(store: DynamoStore, httpserver: HTTPServer) -> dict[str, Any]:
    """A wake whose background tool call started its task, then died before the call's result was
    journaled (the step is redone on retry): the wake's event, to retry it with."""
    httpserver.expect_request("/lookup").respond_with_json({"value": 1})
    seed_session(
        store,
        "s1",
        providers=[{"type": "scripted", "id": "p", "script": calls_then_answers("lookup", {"key": "k7"})}],
        tools=[lookup_tool(httpserver.url_for("/lookup"))],
    )
    seed_task(store, STARTER_TASK, "s1")
    armed = [True]

    def dies_after_the_start(put: Any, run_id: str, key: str, value: dict[str, Any], **kw: Any) -> None:
        if key == "000.tool.00" and armed[0]:
            armed[0] = False
            raise RuntimeError("died after the start, before its journal")
        put(run_id, key, value, **kw)

    around(bootstrap.store().journals, "journal_put", dies_after_the_start)
    event = {"Records": [sqs_record(result_body(STARTER_TASK, "s1"))]}
    with pytest.raises(BatchProcessingError, match="died after the start"):
        background_result.handler(event, FakeLambdaContext())
    return event


def test_a_run_retried_after_the_start_before_its_journal_starts_one_task_run_once(
    store: DynamoStore, resources: Resources, httpserver: HTTPServer
) -> None:
    # GIVEN a wake that died after starting its task, before the call's journal; its work not begun
    event = crashing_after_the_start(store, httpserver)
    # WHEN the run is retried (the step, and so the start, is redone)
    assert background_result.handler(event, FakeLambdaContext()) == {"batchItemFailures": []}
    # THEN there is one task for the call, and two work messages: the first with a token the retry rotated
    task_id = task_id_for_call(f"{STARTER_RUN}#0#0")
    messages = drain(resources.work_queue_url)
    assert [WorkMessage.parse_body(m["Body"]).task_id for m in messages] == [task_id, task_id]
    # AND executing both (in either order of arrival) runs the tool once and completes the task once
    for m in reversed(messages):
        assert background_work.handler(work_event(m), FakeLambdaContext()) == {"batchItemFailures": []}
    for m in messages:
        assert background_work.handler(work_event(m), FakeLambdaContext()) == {"batchItemFailures": []}
    assert len(httpserver.log) == 1
    (done,) = completions(resources)
    assert (done.task_id, done.status) == (task_id, "succeeded")
    task = store.records.get_task(task_id)
    assert task is not None and task.work_claimed is not None


@pytest.mark.parametrize("claimed", ["before the retry read the task", "between the retry's read and its rotation"])
def test_a_start_retried_after_its_work_began_sends_no_second_message(
    claimed: str, store: DynamoStore, resources: Resources, httpserver: HTTPServer
) -> None:
    # GIVEN a wake that died after starting its task, and the work function that took the first
    # message (claimed the work, called the tool, completed the task) before the wake's retry
    event = crashing_after_the_start(store, httpserver)
    (first,) = drain(resources.work_queue_url)
    assert background_work.handler(work_event(first), FakeLambdaContext()) == {"batchItemFailures": []}
    if claimed.startswith("between"):
        # the retry's read sees the work unclaimed: the claim lands right after it
        def read_before_the_claim(get: Any, task_id: str) -> Task | None:
            task = get(task_id)
            unclaimed = {"work_claimed": None, "status": "running", "outcome": None}
            return task.model_copy(update=unclaimed) if task is not None else None

        around(bootstrap.store().records, "get_task", read_before_the_claim)
    # WHEN the wake is retried (the start is redone)
    assert background_result.handler(event, FakeLambdaContext()) == {"batchItemFailures": []}
    # THEN the retried start found the work claimed and sent nothing: one message was ever executed
    assert drain(resources.work_queue_url) == []
    assert len(httpserver.log) == 1
    assert [c.status for c in completions(resources)] == ["succeeded"]
    # AND the retried call told the model the same task
    task_id = task_id_for_call(f"{STARTER_RUN}#0#0")
    assert store.journals.journal_entries(STARTER_RUN)["000.tool.00"]["content"].startswith(f"started task {task_id}")


def test_a_malformed_work_message_goes_to_the_work_dlq_at_once_with_its_reason(resources: Resources) -> None:
    # GIVEN a batch of one malformed work message
    record = sqs_record(json.dumps({"kind": "tool", "task_id": "no spaces allowed"}), message_id="m-bad")
    # WHEN the work function takes it
    answer = background_work.handler({"Records": [record]}, FakeLambdaContext())
    # THEN the record is handled (no retry can help) and is on BackgroundWorkDLQ with its reason
    assert answer == {"batchItemFailures": []}
    (dead,) = drain(resources.work_dlq_url)
    attrs = {k: v["StringValue"] for k, v in dead["MessageAttributes"].items()}
    assert attrs["agentwake-error-type"] == "InvalidMessage"
    assert "not a valid background-work message" in attrs["agentwake-reason"]
    assert attrs["agentwake-original-message-id"] == "m-bad"
    assert drain(resources.dlq_url) == []  # never on the result function's DLQ


def test_an_uncertain_side_effect_is_retried_with_its_key_and_on_the_last_receive_the_task_ends_failed(
    store: DynamoStore, resources: Resources, httpserver: HTTPServer
) -> None:
    # GIVEN a side-effecting background tool whose server takes the request and answers too late
    released = threading.Event()
    answered: list[bool] = []

    def slow_then_fixed(request: Request) -> Response:
        if not answered:
            released.wait(30)
            return Response("too late")
        return Response('{"ticket": "T-1"}', content_type="application/json")

    httpserver.expect_request("/tickets", method="POST").respond_with_handler(slow_then_fixed)
    tool = lookup_tool(httpserver.url_for("/tickets"), method="POST", timeout=1, side_effect=True)
    task = start_in_a_wake(store, tool, {"key": "k8"})
    (message,) = drain(resources.work_queue_url)
    # WHEN its first receive times out after sending (the outcome is uncertain)
    try:
        with pytest.raises(BatchProcessingError, match="did not finish"):
            background_work.handler(work_event(message), FakeLambdaContext())
        # THEN the record is retried, and the task is not completed yet
        assert completions(resources) == []
        # WHEN its last receive (MaxReceiveCount) times out too
        message["Attributes"]["ApproximateReceiveCount"] = "5"
        with pytest.raises(BatchProcessingError, match="did not finish"):
            background_work.handler(work_event(message), FakeLambdaContext())
    finally:
        released.set()
    # THEN the task was completed failed with the reason before SQS dead-letters the record
    (done,) = completions(resources)
    assert (done.task_id, done.status) == (task.task_id, "failed")
    assert "may have acted" in done.result_text and "after 5 attempts" in done.result_text
    # AND a redrive (the server fixed) calls the tool again with the same key, and completes it succeeded
    answered.append(True)
    message["Attributes"]["ApproximateReceiveCount"] = "1"
    assert background_work.handler(work_event(message), FakeLambdaContext()) == {"batchItemFailures": []}
    (again,) = completions(resources)
    assert again.status == "succeeded" and json.loads(again.result_text) == {"ticket": "T-1"}
    keys = {r.headers["Idempotency-Key"] for r, _ in httpserver.log}
    assert keys == {f"{STARTER_RUN}#0#0"} and len(httpserver.log) == 3


def test_the_products_start_checks_the_tool_and_its_arguments_and_a_repeat_runs_once(
    store: DynamoStore, resources: Resources, httpserver: HTTPServer
) -> None:
    # GIVEN a session with a tool, started by the product API (no run, no call)
    httpserver.expect_request("/lookup").respond_with_json({"value": 3})
    tool = lookup_tool(httpserver.url_for("/lookup"), background=False)
    seed_session(store, "s1", tools=[tool])
    session = store.records.get_session("s1")
    assert session is not None
    tasks = bootstrap.tasks()
    # WHEN it names a tool the session lacks, or arguments the tool refuses THEN nothing is registered or sent
    with pytest.raises(InvalidMessage, match="has no tool 'nope' \\(it has: lookup\\)"):
        start_for_session(tasks, session, kind="tool", name="nope", args={}, task_id="p-1")
    with pytest.raises(InvalidMessage, match="do not match its schema"):
        start_for_session(tasks, session, kind="tool", name="lookup", args={"key": 5}, task_id="p-1")
    with pytest.raises(InvalidMessage, match="has no subagent 'researcher'"):
        start_for_session(tasks, session, kind="subagent", name="researcher", args={}, task_id="p-1")
    assert store.records.get_task("p-1") is None and drain(resources.work_queue_url) == []
    # WHEN it starts the tool, and repeats the request (its answer was lost)
    first = start_for_session(tasks, session, kind="tool", name="lookup", args={"key": "k9"}, task_id="p-1")
    again = start_for_session(tasks, session, kind="tool", name="lookup", args={"key": "k9"}, task_id="p-1")
    # THEN one task, the product's (no run started it), with the session's default deadline
    assert first.task_id == again.task_id == "p-1"
    assert (first.kind, first.started_by, first.started_by_call) == ("tool", None, None)
    # AND whichever of the two messages arrives first, the tool runs once and the task completes once
    messages = drain(resources.work_queue_url)
    assert len(messages) == 2
    for m in messages:
        assert background_work.handler(work_event(m), FakeLambdaContext()) == {"batchItemFailures": []}
    assert len(httpserver.log) == 1
    assert [(c.task_id, c.status) for c in completions(resources)] == [("p-1", "succeeded")]
    # AND the same id for another start is refused
    with pytest.raises(TaskExists, match="taken by another start"):
        start_for_session(tasks, session, kind="tool", name="lookup", args={"key": "other"}, task_id="p-1")


def test_the_products_start_of_a_subagent_checks_its_task_and_mode_as_the_hand_off_tool_does(
    store: DynamoStore, resources: Resources
) -> None:
    # GIVEN a session with a researcher (foreground or background) and a helper (foreground only)
    subagents = [
        {"name": "researcher", "persona": "You research.", "mode": "both", "time_budget_s": 120},
        {"name": "helper", "persona": "You help.", "mode": "foreground"},
    ]
    seed_session(store, "s1", subagents=subagents, task_deadline_s=60)
    session = store.records.get_session("s1")
    assert session is not None
    tasks = bootstrap.tasks()
    # WHEN the product starts one with no task, an unknown argument, a task longer than the hand-off
    # tool takes, or a foreground-only subagent THEN each is refused saying why, nothing registered or sent
    refusals = [
        ("researcher", {}, 'must be {"task": "..."}: task: Field required'),
        ("researcher", {"task": "aurora", "q": 1}, "q: Extra inputs are not permitted"),
        ("researcher", {"task": "x" * 20_001}, "task: String should have at most"),
        ("helper", {"task": "aurora"}, "runs only in the foreground"),
        ("nobody", {"task": "aurora"}, "has no subagent 'nobody' \\(it has: researcher, helper\\)"),
    ]
    for name, args, why in refusals:
        with pytest.raises(InvalidMessage, match=why):
            start_for_session(tasks, session, kind="subagent", name=name, args=args, task_id="p-2")
    assert store.records.get_task("p-2") is None and drain(resources.work_queue_url) == []
    # WHEN it starts the researcher with a task THEN the task keeps what the hand-off tool keeps, and
    # its deadline is the session's or the subagent's budget, whichever is longer
    task = start_for_session(tasks, session, kind="subagent", name="researcher", args={"task": "aurora"}, task_id="p-2")
    assert (task.kind, task.subagent, task.tool_args) == ("subagent", "researcher", {"task": "aurora"})
    assert deadline_seconds(task) == pytest.approx(120, abs=2)  # the researcher's 120 s, not the session's 60
    work = [WorkMessage.parse_body(m["Body"]) for m in drain(resources.work_queue_url)]
    assert [(w.kind, w.args) for w in work if w.kind == "subagent"] == [("subagent", {"task": "aurora"})]


#: the DynamoDB calls of a wake that starts one background tool (bench/bench_wake.py prints them):
#: BatchGetItem, TransactWriteItems (start), Query (history), PutItem (reply), PutItem (the task),
#: PutItem (the call's result), PutItem (the final reply, before deliver_final's send), TransactWriteItems (commit)
START_WAKE_CALLS = 8


@pytest.mark.parametrize("kind", ["throttling", "server_error", "timeout_before", "timeout_after"])
def test_a_fault_at_every_aws_call_of_the_starting_wake_leaves_one_task_run_once(
    kind: str, store: DynamoStore, resources: Resources, httpserver: HTTPServer
) -> None:
    from tests.support.faults import CallFaults

    httpserver.expect_request("/lookup").respond_with_json({"value": 1})
    faults = CallFaults(bootstrap.store().table.db)
    # the work queue's send too: as the (N+1)-th call, it fails once before it is sent
    tasks = bootstrap.tasks()
    assert tasks.work_queue is not None
    for at in range(1, START_WAKE_CALLS + 2):
        # GIVEN a fresh session and producer's task whose wake starts the background tool
        session, starter = f"s-{kind}-{at}", f"t-{kind}-{at}"
        script = calls_then_answers("lookup", {"key": "k"})
        seed_session(
            store,
            session,
            providers=[{"type": "scripted", "id": "p", "script": script}],
            tools=[lookup_tool(httpserver.url_for("/lookup"))],
        )
        seed_task(store, starter, session)
        event = {"Records": [sqs_record(result_body(starter, session))]}
        send_fails = [at == START_WAKE_CALLS + 1]

        def send_once_failing(send: Any, *args: Any, send_fails: list[bool] = send_fails, **kw: Any) -> Any:
            if send_fails[0]:
                send_fails[0] = False
                raise ConnectionError("injected: the queue was unreachable")
            return send(*args, **kw)

        around(tasks.work_queue, "send", send_once_failing)
        # WHEN the fault hits the at-th call of the wake, and SQS retries the record until it succeeds
        faults.arm(at if at <= START_WAKE_CALLS else None, kind)
        outcomes = []
        for _ in range(4):
            try:
                outcomes.append(background_result.handler(event, FakeLambdaContext()))
                break
            except BatchProcessingError:
                outcomes.append("retried")
        fired = faults.fired
        faults.arm(None)
        del tasks.work_queue.send  # the instance attribute `around` set: the class's method again
        assert outcomes[-1] == {"batchItemFailures": []}, (at, fired, outcomes)
        # (the fault did fire, at that call; the send's failure made the wake retry)
        assert (fired is not None and fired[0] == at) if at <= START_WAKE_CALLS else outcomes[0] == "retried"
        # THEN the call started one task, and the work messages sent for it (more than one if a retry
        # could not know whether the first was sent) run the tool once and complete the task once
        task_id = task_id_for_call(f"bg:{starter}#0#0")
        messages = drain(resources.work_queue_url)
        assert messages and {WorkMessage.parse_body(m["Body"]).task_id for m in messages} == {task_id}, at
        for m in messages:
            assert background_work.handler(work_event(m), FakeLambdaContext()) == {"batchItemFailures": []}
        assert [(c.task_id, c.status) for c in completions(resources)] == [(task_id, "succeeded")], (at, kind)
    assert len(httpserver.log) == START_WAKE_CALLS + 1  # once per case


def test_work_this_deployment_cannot_run_goes_to_the_work_dlq_at_once_saying_so(
    resources: Resources, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentwake.wake import work

    # GIVEN a deployment without the module of a kind of work (as before its code was deployed)
    monkeypatch.setitem(work.ROUTES, "deadline", ("agentwake.wake.no_such_module", "check_deadline"))
    body = WorkMessage(kind="deadline", task_id="t-9", session_id="s1").model_dump_json()
    # WHEN a well-formed message of that kind comes
    answer = background_work.handler({"Records": [sqs_record(body, message_id="m-deadline")]}, FakeLambdaContext())
    # THEN it is handled without a retry and is on BackgroundWorkDLQ, its reason naming what is missing
    assert answer == {"batchItemFailures": []}
    (dead,) = drain(resources.work_dlq_url)
    attrs = {k: v["StringValue"] for k, v in dead["MessageAttributes"].items()}
    assert attrs["agentwake-error-type"] == "WorkNotRunnable"
    assert "cannot run 'deadline' work (agentwake.wake.no_such_module is not installed)" in attrs["agentwake-reason"]


def test_a_tool_work_message_without_its_token_is_dead_lettered_and_calls_nothing(
    store: DynamoStore, resources: Resources, httpserver: HTTPServer
) -> None:
    # GIVEN a started background tool, and a copy of its work message with the token taken out
    httpserver.expect_request("/lookup").respond_with_json({"value": 1})
    task = start_in_a_wake(store, lookup_tool(httpserver.url_for("/lookup")), {"key": "k10"})
    (message,) = drain(resources.work_queue_url)
    body = json.loads(message["Body"])
    body.pop("task_token")
    # WHEN the work function takes it
    answer = background_work.handler({"Records": [sqs_record(json.dumps(body))]}, FakeLambdaContext())
    # THEN it is on BackgroundWorkDLQ saying why; the tool was not called, the task not completed
    assert answer == {"batchItemFailures": []}
    (dead,) = drain(resources.work_dlq_url)
    assert "carries no task_token" in dead["MessageAttributes"]["agentwake-reason"]["StringValue"]
    assert httpserver.log == [] and completions(resources) == []
    # AND the genuine message still runs the tool and completes the task
    assert background_work.handler(work_event(message), FakeLambdaContext()) == {"batchItemFailures": []}
    assert [(c.task_id, c.status) for c in completions(resources)] == [(task.task_id, "succeeded")]
