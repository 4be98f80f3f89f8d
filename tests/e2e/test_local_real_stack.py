"""The REAL template.yaml and the REAL handlers, end to end on the embedded local AWS (DESIGN §1, §3, §5).

One ``LocalStackRuntime`` for the module: a moto server on 127.0.0.1 provisioned from template.yaml,
Lambda's SQS poller (partial batch responses; the queue's own redrive policy dead-letters) and
Lambda's asynchronous invoker (retries, then the on-failure destination). Failed SQS records come
back at once (``visibility_timeout_override=0``) and async retries do not wait (``async_retry_delays=0``).

Isolation: every test uses its own session/task/job ids, and the stack's queues are emptied before
each test. The ``agentwake invoke`` tests use the fixed ids of the files in events/ and nothing else does.
Limits (MaxReceiveCount, CronMaximumRetryAttempts) are read from the template, never assumed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentwake.domain.models import Task
from agentwake.product.tasks import TasksService
from agentwake.store.dynamo import DynamoStore
from agentwake.store.history import MARKER_TEXT
from agentwake.store.queues import ATTR_ERROR_TYPE, ATTR_ORIGINAL_ID, ATTR_REASON
from agentwake_local.poller import PollResult
from agentwake_local.stack import LocalStackRuntime, read_state
from agentwake_ops.cli import app
from tests.support.builders import FAILING_PROVIDERS, seed_job, seed_session
from tests.support.tasks import token_hash_for

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"
EVENTS = ROOT / "events"
AGENTWAKE_BIN = Path(sys.executable).parent / "agentwake"

RESULT_QUEUE = "BackgroundResultQueue"
RESULT_DLQ = "BackgroundResultDLQ"
CRON_FAILURES = "CronFailureQueue"
SCHEDULED_TIME = "2026-11-30T06:00:00Z"
MALFORMED_BODY = '{"task_id": 42'  # as in events/background-result-mixed-batch.json
ALL_FAIL = "All chat models failed"


# --- the stack ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Limits:
    """The retry limits the provisioned stack enforces, read from template.yaml."""

    max_receive_count: int
    cron_retries: int


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("agentwake-home")


@pytest.fixture(scope="module")
def local(home: Path) -> Iterator[LocalStackRuntime]:
    """template.yaml on a fresh moto server; its state file in ``home`` so ``agentwake invoke`` finds it."""
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
    table = local.outputs["AgentTableName"]
    assert table == local.stack.ref("AgentTable") == local.functions["CronWakeFunction"].environment["AGENTWAKE_TABLE"]
    return DynamoStore(table, client=local.client("dynamodb"))


@pytest.fixture(scope="module")
def limits(local: LocalStackRuntime) -> Limits:
    """MaxReceiveCount / CronMaximumRetryAttempts: the template's defaults, as provisioned."""
    params = local.stack.template.body["Parameters"]
    max_receive = int(params["MaxReceiveCount"]["Default"])
    cron_retries = int(params["CronMaximumRetryAttempts"]["Default"])
    # what the local AWS actually enforces is what the template says
    redrive = json.loads(
        local.client("sqs").get_queue_attributes(
            QueueUrl=local.stack.queue_url(RESULT_QUEUE), AttributeNames=["RedrivePolicy"]
        )["Attributes"]["RedrivePolicy"]
    )
    assert redrive == {"deadLetterTargetArn": local.stack.get_att(RESULT_DLQ, "Arn"), "maxReceiveCount": max_receive}
    cron = local.functions["CronWakeFunction"].async_config
    assert cron.maximum_retry_attempts == cron_retries
    assert cron.on_failure is not None and cron.on_failure.logical_id == CRON_FAILURES
    return Limits(max_receive_count=max_receive, cron_retries=cron_retries)


@pytest.fixture(autouse=True)
def empty_queues(local: LocalStackRuntime) -> None:
    """Each test starts with the stack's queues empty (PurgeQueue is limited to once a minute)."""
    for logical_id in (RESULT_QUEUE, RESULT_DLQ, CRON_FAILURES, "SchedulerDLQ"):
        clear(local, logical_id)


# --- helpers --------------------------------------------------------------------------------------


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def producer(local: LocalStackRuntime, store: DynamoStore) -> TasksService:
    """What a background-task runner uses: register the task, then send its result to the queue."""
    return TasksService(store, local.outputs["BackgroundResultQueueUrl"], sqs=local.client("sqs"))


#: task id -> the token register_task returned (the producer keeps it to finish the task)
TOKENS: dict[str, str] = {}


def finished_task(tasks: TasksService, session_id: str, result: str = "the result") -> tuple[str, str]:
    """A task of ``session_id`` that finished: (task id, SQS message id of its result)."""
    registered = tasks.register_task(session_id, "web_research", {"query": "q"})
    task_id = registered.task_id
    TOKENS[task_id] = registered.task_token
    return task_id, tasks.finish_task(
        task_id, "succeeded", result, task_token=registered.task_token, summary_name=f"Research {task_id}"
    )


def send_raw(local: LocalStackRuntime, body: str) -> str:
    return str(
        local.client("sqs").send_message(QueueUrl=local.stack.queue_url(RESULT_QUEUE), MessageBody=body)["MessageId"]
    )


def counts(local: LocalStackRuntime, logical_id: str) -> tuple[int, int]:
    """(visible, in flight) messages of a queue."""
    attributes = local.client("sqs").get_queue_attributes(
        QueueUrl=local.stack.queue_url(logical_id),
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]), int(attributes["ApproximateNumberOfMessagesNotVisible"])


def peek(local: LocalStackRuntime, logical_id: str) -> list[dict[str, Any]]:
    """Every message of a queue (up to 10), left visible."""
    response = local.client("sqs").receive_message(
        QueueUrl=local.stack.queue_url(logical_id),
        MaxNumberOfMessages=10,
        VisibilityTimeout=0,
        AttributeNames=["All"],
        MessageAttributeNames=["All"],
    )
    return list(response.get("Messages") or [])


def clear(local: LocalStackRuntime, logical_id: str) -> None:
    sqs, url = local.client("sqs"), local.stack.queue_url(logical_id)
    while messages := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages"):
        sqs.delete_message_batch(
            QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)]
        )


def attr(message: dict[str, Any], name: str) -> str | None:
    value = (message.get("MessageAttributes") or {}).get(name)
    return value["StringValue"] if value else None


def poll(local: LocalStackRuntime) -> PollResult:
    """One poll of BackgroundResultFunction's event source mapping: one batch, one invocation."""
    return local.poller("BackgroundResultFunction").poll_once()


def receives(results: list[PollResult], message_id: str) -> list[PollResult]:
    """The polls (= handler invocations) that were given ``message_id``."""
    return [r for r in results if message_id in r.received]


def notes(store: DynamoStore, session_id: str, run_id: str | None = None) -> list[Any]:
    return [e for e in store.history.history(session_id) if e.kind == "note" and run_id in (None, e.run_id)]


# --- 1. an ERROR run: MaxReceiveCount receives, then the DLQ --------------------------------------


def test_error_run_is_received_max_receive_count_times_then_sits_in_the_dlq(
    local: LocalStackRuntime, store: DynamoStore, limits: Limits
) -> None:
    # GIVEN a session whose every provider fails, and a finished task of it whose result is on the queue
    session = uid("session-failing")
    seed_session(store, session, FAILING_PROVIDERS)
    task_id, message_id = finished_task(producer(local, store), session)

    # WHEN Lambda's poller runs until the queue is empty
    results = local.drain()

    # THEN the handler was given the message exactly MaxReceiveCount times and failed it every time
    # (alone in its batch, the failed record makes Powertools raise: the whole invocation fails, same effect)
    given = receives(results, message_id)
    assert len(given) == limits.max_receive_count
    assert all(r.failed == [message_id] and r.deleted == [] for r in given)
    run = store.records.get_run(f"bg:{task_id}")
    assert run is not None and run.status == "failed" and run.attempts == limits.max_receive_count
    # AND then the queue's redrive policy moved it, unchanged, to BackgroundResultDLQ
    assert counts(local, RESULT_QUEUE) == (0, 0)
    [dead] = peek(local, RESULT_DLQ)
    assert dead["MessageId"] == message_id
    assert json.loads(dead["Body"])["task_id"] == task_id
    # AND the conversation got no note, no marker, nothing at all (the reference bug wrote "finished")
    assert store.history.history(session) == []
    # AND one failure record per attempt, each with the runner's error text naming both providers
    failures = store.ends.failures(f"bg:{task_id}")
    assert [f.attempt for f in failures] == list(range(1, limits.max_receive_count + 1))
    for failure in failures:
        assert failure.error_type == "AllProvidersFailed"
        assert failure.detail.startswith(ALL_FAIL)
        assert set(failure.provider_errors) == {"primary", "fallback"}
    task = store.records.get_task(task_id)
    assert task is not None and task.status == "failed" and (task.last_error or "").startswith(ALL_FAIL)


# --- 2. a success: deleted, exactly one note --------------------------------------------------------


def test_successful_record_is_deleted_and_has_exactly_one_note(local: LocalStackRuntime, store: DynamoStore) -> None:
    # GIVEN a healthy session and a finished task of it whose result is on the queue
    session = uid("session-ok")
    seed_session(store, session)
    tasks = producer(local, store)
    task_id, message_id = finished_task(tasks, session, "Aurora costs $0.12 per ACU-hour.")

    # WHEN the poller takes one batch
    result = poll(local)

    # THEN the record succeeded and was deleted: the queue and the DLQ are empty
    assert (result.received, result.deleted, result.failed, result.error) == ([message_id], [message_id], [], None)
    assert result.response == {"batchItemFailures": []}
    assert counts(local, RESULT_QUEUE) == (0, 0) and counts(local, RESULT_DLQ) == (0, 0)
    # AND history holds the delivery, then the marker and exactly one note
    history = store.history.history(session)
    assert [e.kind for e in history] == ["delivery", "marker", "note"]
    assert history[1].content == MARKER_TEXT
    [note] = notes(store, session)
    assert note.run_id == f"bg:{task_id}"
    assert note.content.startswith(
        f"[BackgroundTask] Research {task_id} (task_id={task_id}) finished. Result: Aurora costs $0.12 per ACU-hour."
    )
    run, task = store.records.get_run(f"bg:{task_id}"), store.records.get_task(task_id)
    assert run is not None and (run.status, run.attempts) == ("succeeded", 1)
    assert task is not None and task.status == "woken"

    # WHEN the producer sends the same result again (at-least-once delivery)
    duplicate = tasks.finish_task(task_id, "succeeded", "Aurora costs $0.12 per ACU-hour.", task_token=TOKENS[task_id])
    again = local.drain()

    # THEN the copy is handled and deleted, and there is still exactly one note and one attempt
    assert [(r.received, r.deleted) for r in again] == [([duplicate], [duplicate])]
    assert len(notes(store, session)) == 1
    assert store.records.get_run(f"bg:{task_id}").attempts == 1  # type: ignore[union-attr]


# --- 3. a handler crash returns the whole batch ----------------------------------------------------


def test_handler_crash_returns_the_whole_batch(local: LocalStackRuntime, store: DynamoStore) -> None:
    # GIVEN a batch on the queue: two healthy sessions' results and a malformed body
    sessions = [uid("session-ok"), uid("session-ok")]
    tasks = producer(local, store)
    sent: dict[str, str] = {}  # message id -> task id ("" for the malformed one)
    for session in sessions:
        seed_session(store, session)
        task_id, message_id = finished_task(tasks, session)
        sent[message_id] = task_id
    malformed_id = send_raw(local, MALFORMED_BODY)
    sent[malformed_id] = ""
    function = local.functions["BackgroundResultFunction"]

    # WHEN one invocation runs with the function's AGENTWAKE_TABLE lost (a broken configuration):
    # the handler itself raises at cold start, before it looks at any record
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(function.environment, "AGENTWAKE_TABLE", "")
        crashed = poll(local)

    # THEN the invocation failed as a whole: Lambda deletes nothing
    assert crashed.error is not None and crashed.error["errorType"] == "ConfigError"
    assert "AGENTWAKE_TABLE" in crashed.error["errorMessage"]
    assert sorted(crashed.received) == sorted(sent) and crashed.deleted == []
    assert sorted(crashed.failed) == sorted(sent)
    # AND every record of the batch is still on the queue, even the malformed one (nobody dead-lettered it)
    assert counts(local, RESULT_QUEUE) == (len(sent), 0)
    assert sorted(m["MessageId"] for m in peek(local, RESULT_QUEUE)) == sorted(sent)
    assert counts(local, RESULT_DLQ) == (0, 0)
    # AND nothing was written for any of them
    for session in sessions:
        assert store.history.history(session) == []
    for task_id in filter(None, sent.values()):
        assert store.records.get_run(f"bg:{task_id}") is None

    # WHEN the configuration is back and the poller runs again
    local.drain()

    # THEN the same messages are handled as usual: one note each, the malformed one dead-lettered
    for session, task_id in zip(sessions, filter(None, sent.values()), strict=True):
        assert [n.run_id for n in notes(store, session)] == [f"bg:{task_id}"]
    assert counts(local, RESULT_QUEUE) == (0, 0)
    [dead] = peek(local, RESULT_DLQ)
    assert attr(dead, ATTR_ORIGINAL_ID) == malformed_id and attr(dead, ATTR_ERROR_TYPE) == "InvalidMessage"


def test_store_outage_fails_the_records_that_need_it_and_never_dead_letters_them(
    local: LocalStackRuntime, store: DynamoStore
) -> None:
    # GIVEN a healthy session's result and a malformed body on the queue
    session = uid("session-ok")
    seed_session(store, session)
    task_id, message_id = finished_task(producer(local, store), session)
    malformed_id = send_raw(local, MALFORMED_BODY)
    function = local.functions["BackgroundResultFunction"]

    # WHEN one invocation finds its agent table missing (the store is unavailable)
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(function.environment, "AGENTWAKE_TABLE", f"{local.stack_name}-NoSuchTable")
        outage = poll(local)

    # THEN the record that needs the store is a batch item failure (a transient error, retried) and is
    # not mistaken for an unknown task; the malformed one never needed the store and is dead-lettered
    assert outage.error is None
    assert outage.response == {"batchItemFailures": [{"itemIdentifier": message_id}]}
    assert (outage.failed, outage.deleted) == ([message_id], [malformed_id])
    [dead] = peek(local, RESULT_DLQ)
    assert attr(dead, ATTR_ORIGINAL_ID) == malformed_id and attr(dead, ATTR_ERROR_TYPE) == "InvalidMessage"
    assert counts(local, RESULT_QUEUE) == (1, 0)

    # WHEN the table is back
    local.drain()

    # THEN the retried record succeeds with one note
    assert [n.run_id for n in notes(store, session)] == [f"bg:{task_id}"]
    assert counts(local, RESULT_QUEUE) == (0, 0)


# --- 4. a mixed batch through the real queue -------------------------------------------------------


def test_mixed_batch_deletes_only_its_successes(local: LocalStackRuntime, store: DynamoStore, limits: Limits) -> None:
    # GIVEN on the queue, like events/background-result-mixed-batch.json: a success, an agent ERROR
    # (a session whose providers all fail) and a malformed body
    ok_session, failing_session = uid("session-ok"), uid("session-failing")
    seed_session(store, ok_session)
    seed_session(store, failing_session, FAILING_PROVIDERS)
    tasks = producer(local, store)
    ok_task, ok_id = finished_task(tasks, ok_session)
    err_task, err_id = finished_task(tasks, failing_session)
    bad_id = send_raw(local, MALFORMED_BODY)

    # WHEN the poller takes them as one batch
    first = poll(local)

    # THEN only the ERROR record is reported as a batch item failure; the other two are deleted
    assert sorted(first.received) == sorted([ok_id, err_id, bad_id])
    assert first.error is None
    assert first.response == {"batchItemFailures": [{"itemIdentifier": err_id}]}
    assert first.failed == [err_id] and sorted(first.deleted) == sorted([ok_id, bad_id])
    # AND the success has its note
    assert [n.run_id for n in notes(store, ok_session)] == [f"bg:{ok_task}"]
    # AND the malformed one is in the DLQ at once, with the reason attached
    [dead] = peek(local, RESULT_DLQ)
    assert dead["Body"] == MALFORMED_BODY
    assert attr(dead, ATTR_ERROR_TYPE) == "InvalidMessage"
    assert "not valid JSON" in (attr(dead, ATTR_REASON) or "")
    assert attr(dead, ATTR_ORIGINAL_ID) == bad_id
    # AND the ERROR record is back on the queue, its failure recorded, no note
    assert counts(local, RESULT_QUEUE) == (1, 0)
    assert len(store.ends.failures(f"bg:{err_task}")) == 1 and notes(store, failing_session) == []

    # WHEN the poller keeps going until the queue is empty
    rest = local.drain()

    # THEN only the ERROR record came back, until it had been received MaxReceiveCount times in all
    assert all(r.received == [err_id] for r in rest)
    assert 1 + len(rest) == limits.max_receive_count
    # AND it now sits in the DLQ too (moved by SQS, so without agentwake's attributes)
    dlq = {m["MessageId"]: m for m in peek(local, RESULT_DLQ)}
    assert set(dlq) == {dead["MessageId"], err_id}
    assert attr(dlq[err_id], ATTR_ERROR_TYPE) is None
    assert counts(local, RESULT_QUEUE) == (0, 0)
    # AND still exactly one note for the success, none for the ERROR run, one failure per receive
    assert len(notes(store, ok_session)) == 1 and store.history.history(failing_session) == []
    assert len(store.ends.failures(f"bg:{err_task}")) == limits.max_receive_count


# --- 5. a cron ERROR: retries, then one on-failure record ------------------------------------------


def test_cron_error_ends_as_one_on_failure_record_after_the_retries(
    local: LocalStackRuntime, store: DynamoStore, limits: Limits
) -> None:
    # GIVEN a job whose session's providers all fail
    session, job_id = uid("session-failing"), uid("job-nightly")
    seed_session(store, session, FAILING_PROVIDERS)
    seed_job(store, job_id, session)
    event = {"job_id": job_id, "scheduled_time": SCHEDULED_TIME}
    alias_arn = local.outputs["CronWakeFunctionAliasArn"]  # what every Scheduler schedule targets

    # WHEN the Scheduler's input arrives as an asynchronous invocation of the alias
    outcome = local.invoke_async(alias_arn, event).wait(timeout=30)

    # THEN Lambda invoked it CronMaximumRetryAttempts + 1 times, each attempt raising RunFailed
    expected_invokes = limits.cron_retries + 1
    assert outcome.condition == "RetriesExhausted"
    assert len(outcome.attempts) == expected_invokes
    assert all(a.error is not None and a.error["errorType"] == "RunFailed" for a in outcome.attempts)
    run_id = f"cron:{job_id}:{SCHEDULED_TIME}"
    run = store.records.get_run(run_id)
    assert run is not None and (run.status, run.attempts) == ("failed", expected_invokes)
    assert len(store.ends.failures(run_id)) == expected_invokes
    # AND exactly one record is on CronFailureQueue, carrying the event and the error
    [message] = peek(local, CRON_FAILURES)
    record = json.loads(message["Body"])
    assert record["requestContext"]["condition"] == "RetriesExhausted"
    assert record["requestContext"]["approximateInvokeCount"] == expected_invokes
    assert record["requestContext"]["functionArn"] == alias_arn
    assert record["requestPayload"] == event
    assert record["responseContext"]["functionError"] == "Unhandled"
    assert record["responsePayload"]["errorType"] == "RunFailed"
    assert ALL_FAIL in record["responsePayload"]["errorMessage"]
    # AND the job is failed with the error, and the conversation got nothing
    job = store.records.get_job(job_id)
    assert job is not None and job.status == "failed" and (job.last_error or "").startswith(ALL_FAIL)
    assert store.history.history(session) == []


def test_cron_budget_exceeded_reaches_the_failure_queue_after_one_invocation(
    local: LocalStackRuntime, store: DynamoStore, limits: Limits, model_calls: Counter[str]
) -> None:
    # GIVEN a job whose session has a 250-token run budget, and a model that spends 100 then 200 tokens
    session, job_id, provider = uid("session-budget"), uid("job-budget"), uid("p")
    script = [
        {"tool_calls": [{"name": "lookup", "arguments": {"q": "a"}}], "input_tokens": 80, "output_tokens": 20},
        {"tool_calls": [{"name": "lookup", "arguments": {"q": "b"}}], "input_tokens": 180, "output_tokens": 20},
        {"text": "done"},
    ]
    seed_session(store, session, [{"type": "scripted", "id": provider, "script": script}], max_tokens_per_run=250)
    seed_job(store, job_id, session)
    event = {"job_id": job_id, "scheduled_time": SCHEDULED_TIME}
    alias_arn = local.outputs["CronWakeFunctionAliasArn"]
    assert limits.cron_retries > 0  # retries exist, and a permanent failure must not spend them

    # WHEN the Scheduler's input arrives as an asynchronous invocation of the alias
    outcome = local.invoke_async(alias_arn, event).wait(timeout=30)

    # THEN Lambda invoked it once: the handler returned, so no retry was spent and Lambda sent nothing
    assert outcome.condition == "Success" and len(outcome.attempts) == 1
    assert outcome.attempts[0].response["status"] == "failed_permanently"
    assert outcome.record is None  # no on-success destination: the record below is the handler's own
    assert model_calls[provider] == 2
    # AND exactly one record is on CronFailureQueue, like Lambda's, saying it was dead-lettered at once
    [message] = peek(local, CRON_FAILURES)
    record = json.loads(message["Body"])
    assert record["requestContext"]["condition"] == "PermanentFailure"
    assert record["requestContext"]["functionArn"] == alias_arn
    assert record["requestPayload"] == event
    assert record["responsePayload"]["errorType"] == "BudgetExceeded"
    assert "budget is 250" in record["responsePayload"]["errorMessage"]
    # AND the failure is recorded once, and the conversation got nothing
    run_id = f"cron:{job_id}:{SCHEDULED_TIME}"
    assert [f.error_type for f in store.ends.failures(run_id)] == ["BudgetExceeded"]
    assert store.history.history(session) == []

    # WHEN the operator redrives it without raising the budget (the CLI re-invokes asynchronously)
    clear(local, CRON_FAILURES)
    again = local.invoke_async(alias_arn, event).wait(timeout=30)

    # THEN the model is not called again, and the record is back on the queue after one invocation
    assert again.condition == "Success" and len(again.attempts) == 1
    assert model_calls[provider] == 2
    [message] = peek(local, CRON_FAILURES)
    assert json.loads(message["Body"])["responsePayload"]["errorType"] == "BudgetExceeded"


# --- 6. `agentwake invoke LogicalId -e events/X.json` on the running local stack ---------------------

EVENT_FILES = {
    "background-result-success.json",
    "background-result-mixed-batch.json",
    "background-work-malformed.json",
    "cron-wake.json",
    "cron-wake-missing-job.json",
}


@pytest.fixture(scope="module")
def seeded(local: LocalStackRuntime, store: DynamoStore) -> DynamoStore:
    """What the files in events/ name, as events/README.md describes them."""
    seed_session(store, "session-demo")
    seed_session(store, "session-failing", FAILING_PROVIDERS)
    for task_id, session in (
        ("task-ok-1", "session-demo"),
        ("task-ok-2", "session-demo"),
        ("task-fail-1", "session-failing"),
    ):
        store.records.put_task(
            Task(
                task_id=task_id,
                session_id=session,
                tool_name="web_research",
                tool_args={"query": "q"},
                token_sha256=token_hash_for(task_id),
            )
        )
    seed_job(store, "job-nightly", "session-demo")
    seed_job(store, "job-nightly-failing", "session-failing")
    return store


@dataclass
class Invoked:
    exit_code: int
    response: Any
    stderr: str


def agentwake_invoke(*args: str) -> Invoked:
    """``agentwake invoke ARGS`` in-process. Like ``sam local invoke``, only the response is on stdout."""
    result = CliRunner().invoke(app, ["invoke", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    try:
        response = json.loads(result.stdout)
    except ValueError:
        pytest.fail(f"stdout is not just the response JSON:\n{result.stdout}\nstderr:\n{result.stderr}")
    return Invoked(result.exit_code, response, result.stderr)


def test_every_event_file_is_covered() -> None:
    # GIVEN the sample events shipped in events/  THEN each has its `agentwake invoke` test below
    assert {p.name for p in EVENTS.glob("*.json")} == EVENT_FILES


def test_invoke_finds_the_running_local_stack(local: LocalStackRuntime, home: Path) -> None:
    # GIVEN the module's running stack  WHEN the CLI looks for one  THEN it finds it through $AGENTWAKE_HOME
    state = read_state()
    assert state is not None and state["endpoint_url"] == local.endpoint_url
    assert (home / "local.json").is_file()


def test_invoke_background_result_success(local: LocalStackRuntime, seeded: DynamoStore) -> None:
    # GIVEN session-demo and task-ok-1 on the running local stack
    # WHEN `agentwake invoke BackgroundResultFunction -e events/background-result-success.json`
    out = agentwake_invoke("BackgroundResultFunction", "-e", str(EVENTS / "background-result-success.json"))

    # THEN it ran on that stack, exited 0 and printed a response without batch item failures
    assert out.exit_code == 0, out
    assert local.endpoint_url in out.stderr
    assert out.response == {"batchItemFailures": []}
    # AND the run is DONE: one note, the task woken
    [note] = notes(seeded, "session-demo", "bg:task-ok-1")
    assert note.content.startswith("[BackgroundTask] Aurora pricing research (task_id=task-ok-1) finished. Result: ")
    assert seeded.records.get_task("task-ok-1").status == "woken"  # type: ignore[union-attr]


def test_invoke_background_result_mixed_batch(local: LocalStackRuntime, seeded: DynamoStore) -> None:
    # GIVEN task-ok-2 (session-demo) and task-fail-1 (session-failing, every provider fails)
    path = EVENTS / "background-result-mixed-batch.json"
    records = json.loads(path.read_text())["Records"]
    [error_id] = [r["messageId"] for r in records if "task-fail-1" in r["body"]]
    [malformed_id] = [r["messageId"] for r in records if r["body"] == MALFORMED_BODY]

    # WHEN the mixed batch is invoked
    out = agentwake_invoke("BackgroundResultFunction", "-e", str(path))

    # THEN the response reports exactly the ERROR record (a partial batch response is not a function
    # error), and the command exits 1 naming the record the function dead-lettered itself
    assert out.exit_code == 1, out
    assert out.response == {"batchItemFailures": [{"itemIdentifier": error_id}]}
    assert "error: dead-lettered to BackgroundResultDLQ: " in out.stderr
    # AND task-ok-2 got its note; task-fail-1 a failure record and no note
    assert len(notes(seeded, "session-demo", "bg:task-ok-2")) == 1
    assert seeded.records.get_task("task-ok-2").status == "woken"  # type: ignore[union-attr]
    assert [f.attempt for f in seeded.ends.failures("bg:task-fail-1")] == [1]
    assert notes(seeded, "session-failing") == []
    assert seeded.records.get_task("task-fail-1").status == "failed"  # type: ignore[union-attr]
    # AND the malformed record is in the stack's DLQ with its reason, not reported as a failure
    [dead] = peek(local, RESULT_DLQ)
    assert dead["Body"] == MALFORMED_BODY
    assert attr(dead, ATTR_ORIGINAL_ID) == malformed_id
    assert attr(dead, ATTR_ERROR_TYPE) == "InvalidMessage" and attr(dead, ATTR_REASON)


def test_invoke_background_work_malformed(local: LocalStackRuntime) -> None:
    # GIVEN the sample work message whose task id is not a valid id
    path = EVENTS / "background-work-malformed.json"
    [record] = json.loads(path.read_text())["Records"]
    clear(local, "BackgroundWorkDLQ")
    # WHEN `agentwake invoke BackgroundWorkFunction -e events/background-work-malformed.json`
    out = agentwake_invoke("BackgroundWorkFunction", "-e", str(path))
    # THEN no record failed (no retry can help), the command names the record it dead-lettered, and
    # the message is in BackgroundWorkDLQ with its reason
    assert out.response == {"batchItemFailures": []}
    assert "dead-lettered to BackgroundWorkDLQ" in out.stderr, out
    [dead] = peek(local, "BackgroundWorkDLQ")
    assert dead["Body"] == record["body"] and attr(dead, ATTR_ORIGINAL_ID) == record["messageId"]
    assert attr(dead, ATTR_ERROR_TYPE) == "InvalidMessage" and "task_id" in (attr(dead, ATTR_REASON) or "")


def test_invoke_cron_wake(seeded: DynamoStore) -> None:
    # GIVEN job-nightly of session-demo
    # WHEN `agentwake invoke CronWakeFunction -e events/cron-wake.json`
    out = agentwake_invoke("CronWakeFunction", "-e", str(EVENTS / "cron-wake.json"))

    # THEN the handler returned normally with the run DONE
    run_id = f"cron:job-nightly:{SCHEDULED_TIME}"
    assert out.exit_code == 0, out
    assert out.response["run_id"] == run_id and out.response["status"] == "succeeded"
    # AND one note was appended and the job updated
    [note] = notes(seeded, "session-demo", run_id)
    assert note.content.startswith(
        f"[CronJob] Nightly report: summarise yesterday's sign-ups triggered at {SCHEDULED_TIME}"
    )
    job = seeded.records.get_job("job-nightly")
    assert job is not None and job.status == "completed" and job.last_run_at


def test_invoke_cron_wake_missing_job(seeded: DynamoStore) -> None:
    # GIVEN no job-does-not-exist
    # WHEN `agentwake invoke CronWakeFunction -e events/cron-wake-missing-job.json`
    out = agentwake_invoke("CronWakeFunction", "-e", str(EVENTS / "cron-wake-missing-job.json"))

    # THEN it is skipped with exit 0, no run was started and nothing written
    assert out.exit_code == 0, out
    assert out.response == {"run_id": f"cron:job-does-not-exist:{SCHEDULED_TIME}", "status": "skipped"}
    assert seeded.records.get_run(f"cron:job-does-not-exist:{SCHEDULED_TIME}") is None
    assert seeded.records.get_job("job-does-not-exist") is None
    assert notes(seeded, "session-demo", f"cron:job-does-not-exist:{SCHEDULED_TIME}") == []


def test_invoke_cron_error_exits_non_zero(
    local: LocalStackRuntime, seeded: DynamoStore, tmp_path: Path, limits: Limits
) -> None:
    # GIVEN cron-wake.json aimed at a job of session-failing
    event = {**json.loads((EVENTS / "cron-wake.json").read_text()), "job_id": "job-nightly-failing"}
    path = tmp_path / "cron-wake-failing.json"
    path.write_text(json.dumps(event))
    run_id = f"cron:job-nightly-failing:{SCHEDULED_TIME}"

    # WHEN it is invoked (RequestResponse)
    out = agentwake_invoke("CronWakeFunction", "-e", str(path))

    # THEN it exits non-zero and prints Lambda's error payload
    assert out.exit_code == 1
    assert out.response["errorType"] == "RunFailed" and ALL_FAIL in out.response["errorMessage"]
    job = seeded.records.get_job("job-nightly-failing")
    assert job is not None and job.status == "failed" and (job.last_error or "").startswith(ALL_FAIL)
    assert counts(local, CRON_FAILURES) == (0, 0)  # a synchronous invocation has no destination

    # WHEN it is invoked with --async
    out = agentwake_invoke("CronWakeFunction", "--async", "-e", str(path))

    # THEN the retries end on CronFailureQueue, and it exits non-zero too
    assert out.exit_code == 1
    assert out.response["condition"] == "RetriesExhausted"
    assert out.response["approximateInvokeCount"] == limits.cron_retries + 1
    assert out.response["destination"] == local.stack.get_att(CRON_FAILURES, "Arn")
    [message] = peek(local, CRON_FAILURES)
    assert json.loads(message["Body"])["requestPayload"] == event
    run = seeded.records.get_run(run_id)
    assert run is not None and run.attempts == 1 + limits.cron_retries + 1  # the sync attempt, then the async ones
    assert notes(seeded, "session-failing") == []


def test_invoke_prints_only_the_response_on_stdout(local: LocalStackRuntime, home: Path) -> None:
    # GIVEN the running local stack
    # WHEN the installed console script (another process) invokes a function whose handler logs a warning
    proc = subprocess.run(
        [str(AGENTWAKE_BIN), "invoke", "CronWakeFunction", "-e", str(EVENTS / "cron-wake-missing-job.json")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "AGENTWAKE_HOME": str(home)},
    )
    # THEN it found the running stack through $AGENTWAKE_HOME, and stdout is exactly the response JSON,
    # so `| jq` works; stderr says how the wake ended in one line, the function's logs are in a file
    assert proc.returncode == 0, proc.stderr
    assert local.endpoint_url in proc.stderr
    assert json.loads(proc.stdout) == {"run_id": f"cron:job-does-not-exist:{SCHEDULED_TIME}", "status": "skipped"}
    assert f"CronWakeFunction cron:job-does-not-exist:{SCHEDULED_TIME} skipped " in proc.stderr
    assert "job that does not exist" not in proc.stderr
    assert "job that does not exist" in (home / "functions.log").read_text()
    # AND with --verbose the function's logs are on stderr, as with `sam local invoke`
    verbose = subprocess.run(
        [str(AGENTWAKE_BIN), "invoke", "CronWakeFunction", "-e", str(EVENTS / "cron-wake-missing-job.json"), "-v"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "AGENTWAKE_HOME": str(home)},
    )
    assert verbose.returncode == 0 and "job that does not exist" in verbose.stderr
    assert json.loads(verbose.stdout)["status"] == "skipped"
