"""``local up``'s one line per wake, and ``agentwake invoke``'s verdict, on the REAL template.yaml.

What a person reads in the terminal says what happened in words: a failed wake names its error
type and reason (never a traceback), a wake whose session is busy says it is waiting, a record
dead-lettered says so with its reason however many messages the DLQ holds, a refused live turn is
not "ok". The lines are the ones ``agentwake local up`` prints (``activity.WakeLines`` on the
runtime's ``on_invocation``); the runtime is the real one, the handlers are the real ones.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentwake.product.tasks import TasksService
from agentwake.store.dynamo import DynamoStore
from agentwake_local import activity
from agentwake_local.http_api import http_api_event
from agentwake_local.sigv4 import iam_identity
from agentwake_local.stack import LocalStackRuntime
from agentwake_ops.cli import app
from tests.support.builders import FAILING_PROVIDERS, PRODUCT_CALLER, seed_job, seed_session

ROOT = Path(__file__).resolve().parents[2]
RESULT_QUEUE = "BackgroundResultQueue"
RESULT_DLQ = "BackgroundResultDLQ"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("agentwake-home")


@pytest.fixture(scope="module")
def local(home: Path) -> Iterator[LocalStackRuntime]:
    """template.yaml on a fresh moto server, its state in ``home`` so ``agentwake invoke`` finds it."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AGENTWAKE_HOME", str(home))
        runtime = LocalStackRuntime(async_retry_delays=0, home=home)
        runtime.start(ROOT / "template.yaml", visibility_timeout_override=0)
        try:
            yield runtime
        finally:
            runtime.stop()


@pytest.fixture(scope="module")
def store(local: LocalStackRuntime) -> DynamoStore:
    return DynamoStore(local.outputs["AgentTableName"], client=local.client("dynamodb"))


@pytest.fixture
def lines(local: LocalStackRuntime) -> Iterator[io.StringIO]:
    """What ``local up`` prints for each invocation, as it prints it."""
    out = io.StringIO()
    local.on_invocation = activity.WakeLines(local, out)
    try:
        yield out
    finally:
        local.on_invocation = None


@pytest.fixture(autouse=True)
def empty_queues(local: LocalStackRuntime) -> None:
    for logical_id in (RESULT_QUEUE, RESULT_DLQ):
        sqs, url = local.client("sqs"), local.stack.queue_url(logical_id)
        while messages := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages"):
            entries = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)]
            sqs.delete_message_batch(QueueUrl=url, Entries=entries)


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def finish_task(local: LocalStackRuntime, store: DynamoStore, session_id: str) -> str:
    tasks = TasksService(store, local.outputs["BackgroundResultQueueUrl"], sqs=local.client("sqs"))
    registered = tasks.register_task(session_id, "web_research", {"query": "q"})
    tasks.finish_task(registered.task_id, "succeeded", "the result", task_token=registered.task_token)
    return registered.task_id


def fill_dlq(local: LocalStackRuntime, count: int) -> None:
    sqs, url = local.client("sqs"), local.stack.queue_url(RESULT_DLQ)
    for start in range(0, count, 10):
        entries = [
            {"Id": str(i), "MessageBody": json.dumps({"task_id": f"older-{start + i}"})}
            for i in range(min(10, count - start))
        ]
        sqs.send_message_batch(QueueUrl=url, Entries=entries)


def printed(out: io.StringIO) -> list[str]:
    return out.getvalue().splitlines()


def test_a_failed_wake_line_names_the_error_type_and_reason_and_no_traceback(
    local: LocalStackRuntime, store: DynamoStore, lines: io.StringIO
) -> None:
    # GIVEN a session whose every provider fails, and a finished task of it
    session = uid("s-failing")
    seed_session(store, session, FAILING_PROVIDERS)
    task_id = finish_task(local, store, session)
    # WHEN the poller gives the record to the function once
    local.poller("BackgroundResultFunction").poll_once()
    # THEN local up prints one line: the run, "failed", the error type and its reason, what comes next
    [line] = printed(lines)
    assert f"BackgroundResultFunction bg:{task_id} failed: AllProvidersFailed: All chat models failed" in line
    assert "(attempt 1, retried)" in line
    assert "Traceback" not in line and "BatchProcessingError" not in line and 'File "' not in line


def test_the_last_attempt_says_sqs_moves_the_record_to_the_dlq(
    local: LocalStackRuntime, store: DynamoStore, lines: io.StringIO
) -> None:
    # GIVEN a failing session's finished task, and the results queue's MaxReceiveCount
    redrive = local.client("sqs").get_queue_attributes(
        QueueUrl=local.stack.queue_url(RESULT_QUEUE), AttributeNames=["RedrivePolicy"]
    )["Attributes"]["RedrivePolicy"]
    limit = int(json.loads(redrive)["maxReceiveCount"])
    session = uid("s-spent")
    seed_session(store, session, FAILING_PROVIDERS)
    task_id = finish_task(local, store, session)
    # WHEN the poller gives it to the function MaxReceiveCount times
    for _ in range(limit):
        local.poller("BackgroundResultFunction").poll_once()
    # THEN every line but the last says it is retried, and the last says where it goes now
    said = [line.rsplit(" ", 1)[0] for line in printed(lines)]  # without the duration
    assert len(said) == limit
    assert all(f"bg:{task_id} failed: AllProvidersFailed: " in text for text in said)
    assert [text.endswith(f"(attempt {n}, retried)") for n, text in enumerate(said, 1)] == [True] * (limit - 1) + [
        False
    ]
    assert said[-1].endswith(f"(attempt {limit}, the last: SQS moves it to {RESULT_DLQ})")


def test_a_function_that_fails_before_any_run_names_its_error_type_and_reason(
    local: LocalStackRuntime, store: DynamoStore, lines: io.StringIO
) -> None:
    # GIVEN a finished task of a healthy session, and the function's table setting lost (a broken config)
    session = uid("s-config")
    seed_session(store, session)
    task_id = finish_task(local, store, session)
    function = local.functions["BackgroundResultFunction"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(function.environment, "AGENTWAKE_TABLE", "")
        # WHEN the poller gives the record to the function
        local.poller("BackgroundResultFunction").poll_once()
    # THEN the line says the wake failed with ConfigError and why, in one line, no traceback
    [line] = printed(lines)
    assert f"BackgroundResultFunction bg:{task_id} failed: ConfigError: " in line and "AGENTWAKE_TABLE" in line
    assert "Traceback" not in line


def test_a_wake_whose_session_is_busy_says_it_is_waiting(
    local: LocalStackRuntime, store: DynamoStore, lines: io.StringIO
) -> None:
    # GIVEN a session a live turn holds, and a finished task of it
    session = uid("s-busy")
    seed_session(store, session)
    token, _ = store.leases.take_live_turn(session, "turn-1", 600, hold_s=600)
    try:
        task_id = finish_task(local, store, session)
        # WHEN the poller gives the record to the function
        local.poller("BackgroundResultFunction").poll_once()
    finally:
        store.leases.release(session, token)
    # THEN its line says it waits for its session (not "not started", which reads as a fault)
    [line] = printed(lines)
    assert f"BackgroundResultFunction bg:{task_id} waiting for its session " in line
    assert "not started" not in line


def test_a_poison_body_nested_2000_deep_is_described_as_dead_lettered(
    local: LocalStackRuntime, lines: io.StringIO
) -> None:
    # GIVEN a body nested 2,000 deep on the results queue, and 50 other messages on the DLQ
    fill_dlq(local, 50)
    deep = "[" * 2000 + "]" * 2000
    local.client("sqs").send_message(QueueUrl=local.stack.queue_url(RESULT_QUEUE), MessageBody=deep)
    # WHEN the poller gives it to the function
    local.poller("BackgroundResultFunction").poll_once()
    # THEN the line says it was dead-lettered, and why (no "RecursionError while describing it")
    [line] = printed(lines)
    assert "BackgroundResultFunction - dead-lettered to BackgroundResultDLQ: InvalidMessage: " in line
    assert "nests deeper than" in line and "RecursionError" not in line


def test_a_body_naming_a_huge_task_id_gets_a_bounded_line(local: LocalStackRuntime, lines: io.StringIO) -> None:
    # GIVEN a result whose task id is 100,000 characters long
    body = json.dumps({"task_id": "t" * 100_000, "status": "succeeded"})
    local.client("sqs").send_message(QueueUrl=local.stack.queue_url(RESULT_QUEUE), MessageBody=body)
    # WHEN the poller gives it to the function
    local.poller("BackgroundResultFunction").poll_once()
    # THEN its line says it was dead-lettered, in one bounded line
    [line] = printed(lines)
    assert "dead-lettered to BackgroundResultDLQ: InvalidMessage: " in line and len(line) < 600


def test_a_live_turn_refused_with_409_is_not_logged_ok(
    local: LocalStackRuntime, store: DynamoStore, lines: io.StringIO
) -> None:
    # GIVEN a session another live turn holds
    session = uid("s-live")
    seed_session(store, session)
    token, _ = store.leases.take_live_turn(session, "turn-1", 600, hold_s=600)
    try:
        # WHEN a second live turn asks for it without waiting
        path = f"/sessions/{session}/live-turns"
        event = http_api_event(
            "POST",
            path,
            body=json.dumps({"wait_s": 0}),
            headers={"content-type": "application/json"},
            route_key="POST /sessions/{session_id}/live-turns",
            path_parameters={"session_id": session},
            iam=iam_identity(PRODUCT_CALLER),  # the session's owner, as the HTTP API verified it
        )
        answer = local.invoke("ProductApiFunction", event)
    finally:
        store.leases.release(session, token)
    # THEN the function refused it with 409, and the line says 409 and why, not "ok"
    assert answer.response["statusCode"] == 409
    [line] = printed(lines)
    assert f"ProductApiFunction POST {path} 409: " in line and "busy" in line
    assert " ok " not in line and "succeeded" not in line


def test_invoke_reports_a_dead_lettered_record_among_50_other_dlq_messages(
    local: LocalStackRuntime, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the running local stack's DLQ already holding 50 messages
    monkeypatch.setenv("AGENTWAKE_HOME", str(home))
    fill_dlq(local, 50)
    # AND the result of a task nobody registered (the function dead-letters it: no retry can help)
    task_id = uid("task-unknown")
    event = json.loads((ROOT / "events" / "background-result-success.json").read_text())
    body = json.loads(event["Records"][0]["body"])
    event["Records"][0]["body"] = json.dumps({**body, "task_id": task_id})
    event["Records"][0]["messageId"] = str(uuid.uuid4())
    path = tmp_path / "event.json"
    path.write_text(json.dumps(event))
    # WHEN it is invoked
    result = CliRunner().invoke(app, ["invoke", "BackgroundResultFunction", "-e", str(path)])
    # THEN the command exits 1 and says the record was dead-lettered, and why
    assert result.exit_code == 1, result.output
    assert "error: dead-lettered to BackgroundResultDLQ: " in result.stderr
    assert task_id in result.stderr.split("dead-lettered to BackgroundResultDLQ: ")[1]
    # AND its one line for the wake says so too (it never became a run: not "waiting")
    [line] = [text for text in result.stderr.splitlines() if f"BackgroundResultFunction bg:{task_id} " in text]
    assert f"bg:{task_id} dead-lettered to BackgroundResultDLQ: UnknownTask: " in line and "waiting" not in line
    # AND the 51 messages are all still on the DLQ (the scan consumed none)
    attrs = local.client("sqs").get_queue_attributes(
        QueueUrl=local.stack.queue_url(RESULT_DLQ), AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    assert attrs["ApproximateNumberOfMessages"] == "51"


# --- the CLI's own runs, in real processes: one line per wake, the JSON logs in a file -------------

AGENTWAKE = str(Path(sys.executable).parent / "agentwake")


def agentwake(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTWAKE_", "AWS_"))}
    env = {**clean, "AGENTWAKE_HOME": str(home), "COLUMNS": "200"}
    return subprocess.run([AGENTWAKE, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)


def json_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.lstrip().startswith("{")]


def test_jobs_trigger_and_backfill_print_wake_lines_and_no_json_logs(home: Path, store: DynamoStore) -> None:
    # GIVEN a job of a healthy session on the running local stack
    session, job_id = uid("s-jobs"), uid("job")
    seed_session(store, session)
    seed_job(store, job_id, session)
    # WHEN the operator triggers one fire, then backfills two days, from another terminal
    trigger = agentwake(home, "jobs", "trigger", job_id, "--time", "2026-11-03T06:00:00Z")
    backfill = agentwake(
        home, "jobs", "backfill", job_id, "--from", "2026-11-01T00:00:00Z", "--to", "2026-11-02T23:59:59Z", "--yes"
    )
    # THEN each prints local up's one line per run, then its summary, and no JSON log line
    for result, times in ((trigger, ["2026-11-03"]), (backfill, ["2026-11-01", "2026-11-02"])):
        assert result.returncode == 0, result.stderr
        assert json_lines(result.stdout + result.stderr) == [], result.stdout + result.stderr
        for day in times:
            assert f"CronWakeFunction cron:{job_id}:{day}T06:00:00Z succeeded " in result.stderr
        assert f"the functions' JSON logs: {home / 'functions.log'}" in result.stderr
    assert "Invoked CronWakeFunction" in trigger.stdout and "Invoked 2:" in backfill.stdout
    # AND the logs are in the file it named
    assert '"message":"run succeeded"' in (home / "functions.log").read_text()


def test_a_triggered_cron_wake_whose_retries_are_spent_says_where_it_went(
    home: Path, local: LocalStackRuntime, store: DynamoStore
) -> None:
    # GIVEN a job of a session whose every provider fails, and Lambda's retry count for the cron function
    session, job_id = uid("s-cron-fail"), uid("job")
    seed_session(store, session, FAILING_PROVIDERS)
    seed_job(store, job_id, session)
    tries = local.functions["CronWakeFunction"].async_config.maximum_retry_attempts + 1
    # WHEN the operator triggers one fire from another terminal
    result = agentwake(home, "jobs", "trigger", job_id, "--time", "2026-11-04T06:00:00Z")
    # THEN each attempt has its line saying it failed and why, and a last line says where the event went
    run = f"cron:{job_id}:2026-11-04T06:00:00Z"
    attempts = [
        line for line in result.stderr.splitlines() if f"CronWakeFunction {run} failed: AllProvidersFailed" in line
    ]
    assert len(attempts) == tries, result.stderr
    assert (
        f"CronWakeFunction {run} dead-lettered to CronFailureQueue: RetriesExhausted after {tries} attempt(s): "
        "AllProvidersFailed: All chat models failed"
    ) in result.stderr
    assert json_lines(result.stdout + result.stderr) == [] and "Traceback" not in result.stderr


def test_invoke_prints_the_response_and_one_line_not_the_json_logs(home: Path, local: LocalStackRuntime) -> None:
    # GIVEN the running local stack, seeded as local up seeds it
    local.seed()
    # WHEN the sample event is invoked from another terminal
    result = agentwake(
        home, "invoke", "BackgroundResultFunction", "-e", str(ROOT / "events" / "background-result-success.json")
    )
    # THEN stdout is the response, stderr one line for the wake and where the logs are, and no JSON log line
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"batchItemFailures": []}
    assert json_lines(result.stderr) == [], result.stderr
    assert "BackgroundResultFunction bg:task-ok-1 succeeded " in result.stderr
    assert "UserWarning" not in result.stderr
