"""Both wake functions on moto, driven by the payloads in events/ (DESIGN §1, §3; the reference bug)."""

from __future__ import annotations

import copy
import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError

from agentwake.errors import CommitConflict, RunFailed
from agentwake.handlers import background_result, cron_wake
from agentwake.store.dynamo import DynamoStore
from agentwake.store.history import MARKER_TEXT
from tests.support.aws import REGION, FakeLambdaContext, Resources, drain
from tests.support.builders import FAILING_PROVIDERS, seed_job, seed_session, seed_task
from tests.support.probes import count_history_reads
from tests.support.store_writes import begin_attempt
from tests.support.tasks import token_for

EVENTS = Path(__file__).resolve().parents[2] / "events"


def load_event(name: str) -> dict[str, Any]:
    return json.loads((EVENTS / name).read_text())


def sqs_record(body: str, message_id: str | None = None) -> dict[str, Any]:
    template = load_event("background-result-success.json")["Records"][0]
    record = copy.deepcopy(template)
    record["messageId"] = message_id or str(uuid.uuid4())
    record["body"] = body
    return record


def result_body(task_id: str, session_id: str, **over: Any) -> str:
    body = {
        "task_id": task_id,
        "session_id": session_id,
        "task_token": token_for(task_id),
        "tool_name": "web_research",
        "tool_args": {"query": "q"},
        "status": "succeeded",
        "result_text": f"result of {task_id}",
        "note": "",
        "summary_name": f"Research {task_id}",
        "finished_at": "2026-11-30T05:00:00Z",
    }
    body.update(over)
    return json.dumps(body)


def invoke_background(event: dict[str, Any]) -> dict[str, Any]:
    return background_result.handler(event, FakeLambdaContext())


def invoke_cron(event: dict[str, Any]) -> dict[str, Any]:
    return cron_wake.handler(event, FakeLambdaContext())


def all_history_text(store: DynamoStore, *session_ids: str) -> str:
    return "\n".join(e.content for s in session_ids for e in store.history.history(s))


# --- the reference regression, on both entrypoints --------------------------------------------


@pytest.mark.parametrize("entrypoint", ["background", "cron"])
def test_error_run_raises_and_never_records_a_success(entrypoint: str, store: DynamoStore) -> None:
    # GIVEN a session whose every provider fails, and a task / a job bound to it
    seed_session(store, "session-failing", providers=FAILING_PROVIDERS)
    # WHEN the wake runs
    if entrypoint == "background":
        seed_task(store, "task-fail-1", "session-failing")
        event = load_event("background-result-mixed-batch.json")
        event["Records"] = [r for r in event["Records"] if "task-fail-1" in r["body"]]
        # the only record fails, so Powertools raises for the whole batch: Lambda retries it
        with pytest.raises(BatchProcessingError):
            invoke_background(event)
        run_id, status = "bg:task-fail-1", store.records.get_task("task-fail-1")
    else:
        seed_job(store, "job-nightly", "session-failing")
        with pytest.raises(RunFailed) as info:
            invoke_cron(load_event("cron-wake.json"))
        assert "All chat models failed" in info.value.completion_text
        run_id, status = "cron:job-nightly:2026-11-30T06:00:00Z", store.records.get_job("job-nightly")

    # THEN no note and no "finished" text anywhere in history
    history = store.history.history("session-failing")
    assert [e for e in history if e.kind in ("note", "marker")] == []
    assert "finished" not in all_history_text(store, "session-failing")
    # AND the failure record holds the runner's error text, naming each provider
    failures = store.ends.failures(run_id)
    assert len(failures) == 1
    assert failures[0].detail.startswith("All chat models failed:")
    assert "primary: ServerError" in failures[0].detail and "fallback: AccessDenied" in failures[0].detail
    assert set(failures[0].provider_errors) == {"primary", "fallback"}
    # AND the task / job is failed with last_error
    assert status is not None and status.status == "failed"
    assert status.last_error is not None and status.last_error.startswith("All chat models failed:")
    assert store.records.get_run(run_id).status == "failed"  # type: ignore[union-attr]


def test_done_run_writes_exactly_the_two_entries(store: DynamoStore) -> None:
    # GIVEN a healthy session and a registered task
    seed_session(store, "session-demo")
    seed_task(store, "task-ok-1", "session-demo")
    # WHEN its result arrives
    response = invoke_background(load_event("background-result-success.json"))
    # THEN the record succeeded
    assert response == {"batchItemFailures": []}
    history = store.history.history("session-demo")
    # AND history holds the delivery (written when delivered) then the marker and the note
    assert [e.kind for e in history] == ["delivery", "marker", "note"]
    assert history[1].content == MARKER_TEXT and history[1].role == "user"
    note = history[2].content
    assert note.startswith("[BackgroundTask] Aurora pricing research (task_id=task-ok-1) finished. Result: ")
    assert "I told the user the research is done." in note
    # AND the note says, in plain words, that the user got the agent's message and not this answer
    assert note.endswith("[the user was sent 1 message from this run; this final answer was not sent to them]")
    assert "not delivered" not in note
    assert store.records.get_task("task-ok-1").status == "woken"  # type: ignore[union-attr]
    assert store.records.get_run("bg:task-ok-1").status == "succeeded"  # type: ignore[union-attr]


def test_commit_is_atomic(store: DynamoStore) -> None:
    # GIVEN a run whose commit cannot complete (the task item vanished between load and commit)
    seed_session(store, "session-demo")
    seed_task(store, "task-ok-1", "session-demo")
    begin_attempt(store, "bg:task-ok-1", kind="background", session_id="session-demo")
    store.table.db.delete_item(TableName=store.table.name, Key=store.table.key("TASK#task-ok-1", "TASK"))
    # WHEN the commit is attempted THEN it fails, saying why (the task's condition cancelled it)
    with pytest.raises(CommitConflict, match="task task-ok-1 of bg:task-ok-1 is not registered any more"):
        store.ends.commit_success(
            run_id="bg:task-ok-1", session_id="session-demo", note="n", steps=1, task_id="task-ok-1"
        )
    # THEN neither history entry landed and the run is not marked succeeded
    assert store.history.history("session-demo") == []
    assert store.records.get_run("bg:task-ok-1").status == "running"  # type: ignore[union-attr]


def test_mixed_batch_of_ten(store: DynamoStore, resources: Resources) -> None:
    # GIVEN ten records: successes, ERROR runs and malformed bodies at mixed positions
    seed_session(store, "session-demo")
    seed_session(store, "session-failing", providers=FAILING_PROVIDERS)
    kinds = ["ok", "err", "bad", "ok", "ok", "bad", "err", "ok", "bad", "ok"]
    records, expected_failures = [], []
    for i, kind in enumerate(kinds):
        mid = f"msg-{i}"
        if kind == "ok":
            seed_task(store, f"task-ok-{i}", "session-demo")
            body = result_body(f"task-ok-{i}", "session-demo")
        elif kind == "err":
            seed_task(store, f"task-err-{i}", "session-failing")
            body = result_body(f"task-err-{i}", "session-failing")
            expected_failures.append(mid)
        else:
            body = ["{not json", json.dumps({"task_id": "t"}), json.dumps([1, 2])][i % 3]
        records.append(sqs_record(body, mid))
    # WHEN the batch is handled
    response = invoke_background({"Records": records})
    # THEN exactly the ERROR records are batch item failures
    assert sorted(f["itemIdentifier"] for f in response["batchItemFailures"]) == sorted(expected_failures)
    # AND each successful record has exactly one note
    notes = [e for e in store.history.history("session-demo") if e.kind == "note"]
    assert sorted(n.run_id for n in notes) == sorted(f"bg:task-ok-{i}" for i, k in enumerate(kinds) if k == "ok")
    assert [e for e in store.history.history("session-failing") if e.kind == "note"] == []
    # AND the malformed ones are in the DLQ with their reason attached
    dead = drain(resources.dlq_url)
    assert sorted(m["MessageAttributes"]["agentwake-original-message-id"]["StringValue"] for m in dead) == [
        "msg-2",
        "msg-5",
        "msg-8",
    ]
    for m in dead:
        assert m["MessageAttributes"]["agentwake-error-type"]["StringValue"] == "InvalidMessage"
        assert m["MessageAttributes"]["agentwake-reason"]["StringValue"]


def test_session_mismatch_is_rejected_and_writes_nothing(store: DynamoStore, resources: Resources) -> None:
    # GIVEN a task registered for session A, and a completion message that names session B
    seed_session(store, "session-a")
    seed_session(store, "session-b")
    seed_task(store, "task-1", "session-a")
    event = {"Records": [sqs_record(result_body("task-1", "session-b"), "msg-x")]}
    # WHEN it is handled
    response = invoke_background(event)
    # THEN it does not burn retries (reported handled) and sits in the DLQ with the reason
    assert response == {"batchItemFailures": []}
    [dead] = drain(resources.dlq_url)
    assert dead["MessageAttributes"]["agentwake-error-type"]["StringValue"] == "SessionMismatch"
    assert "session-a" in dead["MessageAttributes"]["agentwake-reason"]["StringValue"]
    # AND nothing was written to either session, and the task is untouched
    assert store.history.history("session-a") == [] and store.history.history("session-b") == []
    assert store.records.get_task("task-1").status == "running"  # type: ignore[union-attr]
    assert store.records.get_run("bg:task-1") is None


def test_unknown_task_goes_to_the_dlq(store: DynamoStore, resources: Resources) -> None:
    seed_session(store, "session-demo")
    response = invoke_background({"Records": [sqs_record(result_body("nope", "session-demo"), "m1")]})
    assert response == {"batchItemFailures": []}
    [dead] = drain(resources.dlq_url)
    assert dead["MessageAttributes"]["agentwake-error-type"]["StringValue"] == "UnknownTask"
    assert dead["Body"] == result_body("nope", "session-demo")


@pytest.mark.parametrize("length", [10, 5000])
def test_wake_reads_a_bounded_window(store: DynamoStore, length: int) -> None:
    # GIVEN a conversation of `length` entries
    seed_session(store, "session-long", history_window=20)
    seed_task(store, "task-long", "session-long")
    table = boto3.resource("dynamodb", region_name=REGION).Table(store.table.name)
    with table.batch_writer() as batch:
        for i in range(length):
            batch.put_item(
                Item={
                    "pk": "SESSION#session-long",
                    "sk": f"MSG#{i:020d}#x",
                    "session_id": "session-long",
                    "role": "user" if i % 2 == 0 else "assistant",
                    "content": f"message {i}",
                    "kind": "message",
                    "created_at": "2026-01-01T00:00:00Z",
                }
            )
    # WHEN a wake reads its history window
    window = store.history.history_window("session-long", 20)
    # THEN it reads the same number of items whatever the length: one page of at most the window
    assert count_history_reads(store, "session-long", 20) == min(length, 20)
    assert len(window) == min(length, 20)
    assert window[-1].content == f"message {length - 1}"  # newest last
    # AND the wake itself succeeds on the long conversation
    invoke_background({"Records": [sqs_record(result_body("task-long", "session-long"))]})
    assert store.records.get_run("bg:task-long").status == "succeeded"  # type: ignore[union-attr]


# --- cron ---------------------------------------------------------------------------------------


def test_cron_done_writes_the_note_and_completes_the_job(store: DynamoStore) -> None:
    seed_session(store, "session-demo")
    seed_job(store, "job-nightly", "session-demo")
    out = invoke_cron(load_event("cron-wake.json"))
    assert out["status"] == "succeeded"
    notes = [e for e in store.history.history("session-demo") if e.kind == "note"]
    assert len(notes) == 1
    assert notes[0].content.startswith(
        "[CronJob] Nightly report: summarise yesterday's sign-ups triggered at 2026-11-30T06:00:00Z, "
        "I finished this job, here is the result: "
    )
    job = store.records.get_job("job-nightly")
    assert job is not None and job.status == "completed" and job.last_run_at and job.enabled


def test_cron_missing_or_disabled_job_writes_nothing(store: DynamoStore) -> None:
    seed_session(store, "session-demo")
    seed_job(store, "job-off", "session-demo", enabled=False)
    assert invoke_cron(load_event("cron-wake-missing-job.json"))["status"] == "skipped"
    assert invoke_cron({"job_id": "job-off", "scheduled_time": "2026-11-30T06:00:00Z"})["status"] == "skipped"
    assert store.history.history("session-demo") == []
    assert store.records.get_run("cron:job-off:2026-11-30T06:00:00Z") is None


@pytest.mark.parametrize(
    "session_change",
    [
        {"providers": [{"type": "no-such-provider"}]},  # unknown provider type
        None,  # no session config at all
    ],
)
def test_cron_agent_build_failure_raises(store: DynamoStore, session_change: dict | None) -> None:
    # GIVEN a job whose session cannot build an agent
    if session_change is not None:
        seed_session(store, "session-broken")
        store.table.db.update_item(
            TableName=store.table.name,
            Key=store.table.key("SESSION#session-broken", "CONFIG"),
            UpdateExpression="SET providers = :p",
            ExpressionAttributeValues={":p": {"S": json.dumps(session_change["providers"])}},
        )
    seed_job(store, "job-b", "session-broken")
    # WHEN it fires: a raise, never a silent return
    with pytest.raises(RunFailed) as info:
        invoke_cron({"job_id": "job-b", "scheduled_time": "2026-11-30T06:00:00Z"})
    assert info.value.failure_type == "ConfigError"
    job = store.records.get_job("job-b")
    assert job is not None and job.status == "failed" and job.last_error
    assert store.ends.failures("cron:job-b:2026-11-30T06:00:00Z")[0].error_type == "ConfigError"


# --- a permanent cron failure reaches CronFailureQueue after one invocation ------------------------

#: step 0 costs 100 tokens, step 1 another 200: a 250-token run budget is exceeded at step 2 (index 1)
OVER_BUDGET_AT_STEP_2 = [
    {"tool_calls": [{"name": "lookup", "arguments": {"q": "a"}}], "input_tokens": 80, "output_tokens": 20},
    {"tool_calls": [{"name": "lookup", "arguments": {"q": "b"}}], "input_tokens": 180, "output_tokens": 20},
    {"text": "done", "input_tokens": 10, "output_tokens": 5},
]
BUDGET_EVENT = {"job_id": "job-budget", "scheduled_time": "2026-11-30T06:00:00Z"}
BUDGET_RUN = "cron:job-budget:2026-11-30T06:00:00Z"


def seed_over_budget_job(store: DynamoStore) -> None:
    seed_session(
        store, "s-budget", [{"type": "scripted", "id": "p", "script": OVER_BUDGET_AT_STEP_2}], max_tokens_per_run=250
    )
    seed_job(store, "job-budget", "s-budget")


def cron_failure_records(resources: Resources) -> list[tuple[dict[str, Any], dict[str, str]]]:
    """(the record, its message attributes) of every message on CronFailureQueue."""
    return [
        (json.loads(m["Body"]), {k: v["StringValue"] for k, v in (m.get("MessageAttributes") or {}).items()})
        for m in drain(resources.cron_failure_url)
    ]


def test_a_token_budget_exceeded_goes_to_the_cron_failure_queue_after_one_invocation(
    store: DynamoStore, resources: Resources, model_calls: Counter[str]
) -> None:
    # GIVEN a job whose session has a 250-token run budget, and a model that spends 100 then 200 tokens
    seed_over_budget_job(store)
    context = FakeLambdaContext()

    # WHEN the schedule invokes the cron function once
    result = cron_wake.handler(dict(BUDGET_EVENT), context)

    # THEN the handler did not raise (Lambda spends no retry) and says the run failed for good
    assert result == {"run_id": BUDGET_RUN, "status": "failed_permanently", "error_type": "BudgetExceeded"}
    assert model_calls["p"] == 2
    # AND exactly one record is on CronFailureQueue, shaped like Lambda's, carrying BudgetExceeded and why
    [(record, attributes)] = cron_failure_records(resources)
    assert record["requestContext"] == {
        "requestId": context.aws_request_id,
        "functionArn": context.invoked_function_arn,
        "condition": "PermanentFailure",
    }
    assert record["requestPayload"] == BUDGET_EVENT
    assert record["responsePayload"]["errorType"] == "BudgetExceeded"
    reason = record["responsePayload"]["errorMessage"]
    assert "token budget exceeded at step 1" in reason and "used 300 tokens" in reason and "budget is 250" in reason
    assert attributes["agentwake-error-type"] == "BudgetExceeded" and attributes["agentwake-reason"] == reason
    assert attributes["agentwake-dead-lettered-at"].endswith("Z")
    # AND the run's failure is recorded, and the job says why it failed
    [failure] = store.ends.failures(BUDGET_RUN)
    assert (failure.attempt, failure.error_type) == (1, "BudgetExceeded")
    job = store.records.get_job("job-budget")
    assert job is not None and job.status == "failed" and "budget is 250" in (job.last_error or "")
    assert store.history.history("s-budget") == []

    # WHEN it is invoked again (a redrive) without raising the budget
    again = cron_wake.handler(dict(BUDGET_EVENT), context)

    # THEN the model is not called again; the run stops at once and its record is on the queue again
    assert again["status"] == "failed_permanently" and model_calls["p"] == 2
    [(record, _)] = cron_failure_records(resources)
    assert record["responsePayload"]["errorType"] == "BudgetExceeded"
    assert [f.error_type for f in store.ends.failures(BUDGET_RUN)] == ["BudgetExceeded", "BudgetExceeded"]


def test_an_invalid_cron_event_goes_to_the_cron_failure_queue_at_once(resources: Resources) -> None:
    # GIVEN an event that is no cron wake, carrying a credential-shaped value
    event = {"hello": "world", "note": "api_key=sk-live-abcdefghijklmnop"}
    # WHEN it is invoked
    result = invoke_cron(event)
    # THEN the handler returns (an invalid event fails the same way every time: no retry)
    assert result == {"run_id": None, "status": "failed_permanently", "error_type": "InvalidMessage"}
    # AND one record is on CronFailureQueue with the reason, the credential redacted everywhere
    [(record, attributes)] = cron_failure_records(resources)
    assert record["requestContext"]["condition"] == "PermanentFailure"
    assert record["responsePayload"]["errorType"] == attributes["agentwake-error-type"] == "InvalidMessage"
    assert "job_id" in record["responsePayload"]["errorMessage"]
    assert record["requestPayload"]["hello"] == "world"
    assert "sk-live" not in json.dumps(record) and "sk-live" not in json.dumps(attributes)


def test_a_huge_reason_and_event_are_bounded_on_the_cron_failure_queue(resources: Resources) -> None:
    # GIVEN an invalid cron event whose job_id is 300,000 characters long
    event = {"job_id": "bad id with spaces " + "x" * 300_000, "scheduled_time": "2026-11-30T06:00:00Z"}
    # WHEN it is invoked
    assert invoke_cron(event)["status"] == "failed_permanently"
    # THEN the record fits SQS: the reason is cut to 1 KiB and the event to its cron keys with a note
    [(record, attributes)] = cron_failure_records(resources)
    assert len(record["responsePayload"]["errorMessage"].encode()) <= 1024
    assert len(attributes["agentwake-reason"].encode()) <= 1024
    payload = record["requestPayload"]
    assert payload["scheduled_time"] == "2026-11-30T06:00:00Z" and "job_id" not in payload
    assert "only its cron keys are kept" in payload["agentwakeTruncated"]


@pytest.mark.parametrize("case", ["invalid event", "budget exceeded"])
def test_a_permanent_failure_that_cannot_reach_the_queue_raises(
    case: str, store: DynamoStore, resources: Resources, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentwake import bootstrap
    from agentwake.errors import BudgetExceeded, InvalidMessage

    # GIVEN a CronFailureQueue that cannot be reached (it does not exist)
    monkeypatch.setenv("AGENTWAKE_CRON_FAILURE_QUEUE_URL", resources.cron_failure_url + "-gone")
    bootstrap.reset_caches()
    seed_over_budget_job(store)
    event, expected = (
        ({"hello": "world"}, InvalidMessage) if case == "invalid event" else (BUDGET_EVENT, BudgetExceeded)
    )
    # WHEN the cron function fails permanently
    # THEN it raises the original error: Lambda retries, and its own on-failure destination gets it
    with pytest.raises(expected):
        invoke_cron(dict(event))
    assert cron_failure_records(resources) == []


def test_a_duplicate_record_of_a_succeeded_run_does_nothing(store: DynamoStore) -> None:
    # GIVEN a batch holding the same result twice (SQS delivers at least once), and a redrive
    # of it later under a new messageId
    seed_session(store, "session-demo")
    seed_task(store, "task-dup", "session-demo")
    body = result_body("task-dup", "session-demo")
    # WHEN the batch is handled, then the redriven copy
    first = invoke_background({"Records": [sqs_record(body, "copy-1"), sqs_record(body, "copy-2")]})
    again = invoke_background({"Records": [sqs_record(body, "copy-3")]})
    # THEN no record failed, the run ran once, and there is exactly one note
    assert first["batchItemFailures"] == [] and again["batchItemFailures"] == []
    run = store.records.get_run("bg:task-dup")
    assert run is not None and run.status == "succeeded" and run.attempts == 1
    assert [e.kind for e in store.history.history("session-demo")].count("note") == 1
