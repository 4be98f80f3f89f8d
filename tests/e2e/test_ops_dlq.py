"""The operator's DLQ loop end to end on moto: list why → show every attempt → fix → redrive → the
run resumes where it stopped (DESIGN §3 durable steps, §4 operators and the DLQ)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from agentwake.domain.run_models import Job
from agentwake.errors import RunFailed
from agentwake.handlers import cron_wake
from agentwake_ops import sqs_scan
from agentwake_ops.cli_common import CliState
from agentwake_ops.context import resolve_context
from agentwake_ops.dlq import act
from agentwake_ops.dlq.select import Selection
from tests.e2e.conftest import Cli, Stack, cli_json
from tests.support.aws import FakeLambdaContext

#: step 0 tells the user something, step 1 fails on every attempt: the delivery must never repeat
DELIVERS_THEN_FAILS = [
    {
        "type": "scripted",
        "id": "p",
        "script": [
            {"tool_calls": [{"name": "send_message_to_user", "arguments": {"text": "Working on your research."}}]},
            {"error": "auth"},
        ],
    }
]
ALWAYS_FAILS = [{"type": "scripted", "id": "p", "script": [{"error": "auth"}]}]
#: the fix: a provider whose reply for step 1 ends the run
FIXED = {
    "type": "scripted",
    "id": "p2",
    "script": [{"text": "(step 0 is replayed from the journal)"}, {"text": "All done."}],
}


def make_failed_background_run(cli: Cli, stack: Stack, session: str, providers: list[dict[str, Any]]) -> str:
    """A session, a task, its completion message, and polls until the message is dead-lettered."""
    cli("sessions", "put", session, *[a for p in providers for a in ("--provider", json.dumps(p))])
    registered = json.loads(cli("tasks", "register", "--session", session, "--tool", "web_research", "--json").stdout)
    task_id = registered["task_id"]
    cli(
        "tasks",
        "finish",
        task_id,
        "--token",
        registered["task_token"],
        "--status",
        "succeeded",
        "--result",
        "3 offers found",
        "--summary",
        "Research",
    )
    return task_id


def dead_letter_unknown_task(stack: Stack, session: str) -> None:
    """A completion message for a task nobody registered: the handler dead-letters it at once."""
    body = {
        "task_id": "task-nobody-registered",
        "session_id": session,
        "tool_name": "web_research",
        "tool_args": {},
        "status": "succeeded",
        "result_text": "x",
        "note": "",
        "summary_name": "Research",
        "finished_at": "2026-11-30T05:00:00Z",
    }
    stack.sqs.send_message(QueueUrl=stack.res.queue_url, MessageBody=json.dumps(body))
    ok, failed = stack.poll()
    assert len(ok) == 1 and failed == []  # handled: no retries burned


def test_failed_run_is_triaged_fixed_and_redriven_without_a_second_delivery(
    cli: Cli, stack: Stack, model_calls: Counter[str]
) -> None:
    # GIVEN a background run whose provider delivers once, then fails on every attempt until dead-lettered
    task_id = make_failed_background_run(cli, stack, "s-research", DELIVERS_THEN_FAILS)
    failed = stack.poll_until_dead_lettered()
    assert len(failed) == 2  # two attempts, then SQS moved it on the next receive
    assert stack.counts(stack.res.dlq_url) == (1, 0)

    # WHEN the operator lists the DLQ (twice: listing must not consume anything)
    rows = cli_json(cli, "dlq", "list")
    assert [r["message_id"] for r in cli_json(cli, "dlq", "list")] == [r["message_id"] for r in rows]
    # THEN the message is there once, with its run, session, attempts and reason
    [row] = rows
    assert row["queue"] == "results" and row["kind"] == "background"
    assert row["run_id"] == f"bg:{task_id}" and row["session_id"] == "s-research"
    assert row["attempts"] == 2
    assert row["error_type"] == "AllProvidersFailed"
    assert row["error"].startswith("All chat models failed: p: AccessDenied")
    assert row["first_failure_at"] < row["last_failure_at"]
    assert stack.counts(stack.res.dlq_url) == (1, 0), "the listing left the message invisible"
    table = cli("dlq", "list").stdout
    assert row["message_id"][:8] in table and "AllProvidersFailed" in table and "All chat models failed" in table

    # WHEN it is shown in full (by the short id the table shows)
    shown = cli("dlq", "show", row["message_id"][:8]).stdout
    full = cli_json(cli, "dlq", "show", row["message_id"][:8])
    # THEN every failed attempt, the journaled steps and the delivery already made are there
    assert [f["attempt"] for f in full["failures"]] == [1, 2]
    assert all(f["provider_errors"] == {"p": "AccessDenied: invalid credentials (scripted)"} for f in full["failures"])
    assert [d["text"] for d in full["deliveries"]] == ["Working on your research."]
    assert any(s["key"] == "000.reply" for s in full["steps"])
    assert json.loads(full["body"])["task_id"] == task_id
    assert "failed attempts (2)" in shown and "Working on your research." in shown and "AccessDenied" in shown

    # WHEN the operator fixes the session's provider and redrives that one message
    cli("sessions", "put", "s-research", "--provider", json.dumps(FIXED))
    out = cli("dlq", "redrive", "--id", row["message_id"][:8]).stdout
    # THEN it moved back to the results queue and left the DLQ
    assert "moved 1, failed 0" in out
    assert stack.counts(stack.res.dlq_url) == (0, 0)
    assert stack.counts(stack.res.queue_url) == (1, 0)

    # WHEN the redriven message is handled
    ok, failed = stack.poll()
    # THEN the run succeeds: one note, and the user's message is not sent a second time
    assert len(ok) == 1 and failed == []
    history = stack.store.history.history("s-research")
    assert [e.kind for e in history] == ["delivery", "marker", "note"]
    assert history[2].content.startswith(f"[BackgroundTask] Research (task_id={task_id}) finished.")
    assert history[2].content.endswith(
        "All done.\n\n[the user was sent 1 message from this run; this final answer was not sent to them]"
    )
    assert stack.store.records.get_run(f"bg:{task_id}").status == "succeeded"  # type: ignore[union-attr]
    assert model_calls["p2"] == 1  # step 0 came from the journal: not billed again
    assert cli_json(cli, "runs", "show", f"bg:{task_id}")["run"]["attempts"] == 3
    assert cli_json(cli, "dlq", "list") == []


def test_selective_redrive_moves_only_the_selected_messages(cli: Cli, stack: Stack) -> None:
    # GIVEN three DLQ messages: failing runs of sessions s-a and s-b, and an unknown task of s-b
    task_a = make_failed_background_run(cli, stack, "s-a", ALWAYS_FAILS)
    task_b = make_failed_background_run(cli, stack, "s-b", ALWAYS_FAILS)
    stack.poll_until_dead_lettered()
    dead_letter_unknown_task(stack, "s-b")
    rows = cli_json(cli, "dlq", "list")
    assert sorted((r["session_id"], r["error_type"]) for r in rows) == [
        ("s-a", "AllProvidersFailed"),
        ("s-b", "AllProvidersFailed"),
        ("s-b", "UnknownTask"),
    ]
    invalid = next(r for r in rows if r["kind"] == "invalid")
    assert invalid["run_id"] is None and "task-nobody-registered" in invalid["error"]
    assert cli_json(cli, "dlq", "list", "--session", "s-b", "--error-type", "UnknownTask")[0]["kind"] == "invalid"

    # WHEN a dry run selects by error type
    planned = cli_json(cli, "dlq", "redrive", "--error-type", "UnknownTask", "--dry-run")
    # THEN it names that one message and nothing moves
    assert [p["message_id"] for p in planned["planned"]] == [invalid["message_id"]]
    assert stack.counts(stack.res.dlq_url) == (3, 0) and stack.counts(stack.res.queue_url) == (0, 0)

    # WHEN the redrive selects by error type
    cli("dlq", "redrive", "--error-type", "UnknownTask")
    # THEN only that message moved, without agentwake's dead-letter attributes
    moved = stack.sqs.receive_message(QueueUrl=stack.res.queue_url, MessageAttributeNames=["All"])["Messages"]
    assert len(moved) == 1 and "task-nobody-registered" in moved[0]["Body"]
    assert not any(k.startswith("agentwake-") for k in moved[0].get("MessageAttributes", {}))
    stack.sqs.delete_message(QueueUrl=stack.res.queue_url, ReceiptHandle=moved[0]["ReceiptHandle"])
    assert sorted(r["run_id"] for r in cli_json(cli, "dlq", "list")) == sorted([f"bg:{task_a}", f"bg:{task_b}"])

    # WHEN the redrive selects by session
    cli("dlq", "redrive", "--session", "s-a")
    # THEN only s-a's message moved; s-b's stays in the DLQ
    [left] = cli_json(cli, "dlq", "list")
    assert left["run_id"] == f"bg:{task_b}"
    [back] = stack.sqs.receive_message(QueueUrl=stack.res.queue_url)["Messages"]
    assert json.loads(back["Body"])["task_id"] == task_a


def test_an_interrupted_move_loses_nothing(cli: Cli, stack: Stack) -> None:
    # GIVEN a dead-lettered run, and an SQS endpoint whose DeleteMessage fails
    task_id = make_failed_background_run(cli, stack, "s-x", ALWAYS_FAILS)
    stack.poll_until_dead_lettered()
    context = resolve_context(invoke_async=stack.invoke_async)

    def refuse_delete(**_: Any) -> None:
        raise ConnectionError("the network went away")

    context.sqs.meta.events.register("before-call.sqs.DeleteMessage", refuse_delete)
    # WHEN a bulk redrive runs (StartMessageMoveTask is not in moto: it falls back to moving one by one)
    result = cli("dlq", "redrive", "--all", "--queue", "results", obj=CliState(context=context), expect=1)
    # THEN it says what happened, and the message is both back on the results queue and still in the DLQ
    assert "StartMessageMoveTask is not available" in result.stdout
    assert "moved 0, failed 1" in result.stdout and "not deleted from the DLQ" in result.stdout
    assert stack.counts(stack.res.queue_url) == (1, 0)
    [row] = cli_json(cli, "dlq", "list")
    assert row["run_id"] == f"bg:{task_id}"

    # WHEN the operator fixes the cause and redrives again (DeleteMessage works now)
    cli("sessions", "put", "s-x", "--provider", json.dumps({"type": "scripted", "id": "ok"}))
    cli("dlq", "redrive", "--all", "--queue", "results")
    assert stack.counts(stack.res.dlq_url) == (0, 0)
    # THEN both copies are handled and the run has exactly one outcome
    ok, failed = stack.poll()
    assert len(ok) == 2 and failed == []
    # (its plain-text final answer delivered once under deliver_final=if_nothing_sent, the default)
    assert [e.kind for e in stack.store.history.history("s-x")] == ["delivery", "marker", "note"]


def test_delete_and_purge_refuse_without_confirmation(cli: Cli, stack: Stack) -> None:
    # GIVEN two dead-lettered messages
    dead_letter_unknown_task(stack, "s-1")
    dead_letter_unknown_task(stack, "s-2")
    first, second = (r["message_id"] for r in cli_json(cli, "dlq", "list"))
    # WHEN purge and delete run without --yes, with nobody at a terminal
    purge = cli("dlq", "purge", "results", expect=None)
    delete = cli("dlq", "delete", first, expect=None)
    # THEN both refuse, say why, and nothing is gone
    assert purge.exit_code != 0 and "refusing to purge" in purge.stderr and "--yes" in purge.stderr
    assert delete.exit_code != 0 and "refusing to delete" in delete.stderr
    assert stack.counts(stack.res.dlq_url) == (2, 0)
    # WHEN confirmed
    cli("dlq", "delete", first[:10], "--yes")
    # THEN exactly that message is gone
    assert [r["message_id"] for r in cli_json(cli, "dlq", "list")] == [second]
    cli("dlq", "purge", "results", "--yes")
    assert stack.counts(stack.res.dlq_url) == (0, 0)
    # AND an unknown id is a one-line error, not a traceback
    missing = cli("dlq", "delete", "nope", "--yes", expect=1)
    assert missing.stderr.startswith("error: no DLQ message with id 'nope'") and missing.exception is not None


def test_export_writes_one_json_line_per_message_with_its_failures(cli: Cli, stack: Stack) -> None:
    # GIVEN a failed run and a permanent input error in the DLQ
    task_id = make_failed_background_run(cli, stack, "s-e", ALWAYS_FAILS)
    stack.poll_until_dead_lettered()
    dead_letter_unknown_task(stack, "s-e")
    out = stack.tmp / "dlq.jsonl"
    # WHEN exported
    cli("dlq", "export", "--out", str(out))
    # THEN one JSON line per message, with the joined view, the failure records and the raw message
    header, *lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert header[act.EXPORT_HEADER] == 1 and header["holds_task_tokens"] is True and header["messages"] == 2
    assert len(lines) == 2
    by_kind = {line["kind"]: line for line in lines}
    run = by_kind["background"]
    assert run["run_id"] == f"bg:{task_id}" and run["error_type"] == "AllProvidersFailed"
    assert [f["attempt"] for f in run["failures"]] == [1, 2] and run["failures"][0]["detail"]
    assert json.loads(run["body"])["task_id"] == task_id and "SentTimestamp" in run["attributes"]
    invalid = by_kind["invalid"]
    assert invalid["failures"] == [] and invalid["message_attributes"]["agentwake-error-type"]["StringValue"] == (
        "UnknownTask"
    )
    # AND exporting did not consume anything
    assert stack.counts(stack.res.dlq_url) == (2, 0)


def destination_record(job_id: str, scheduled_time: str, error: dict[str, Any]) -> str:
    """Lambda's on-failure destination record for an asynchronous invocation."""
    return json.dumps(
        {
            "version": "1.0",
            "timestamp": "2026-11-30T06:03:00.000Z",
            "requestContext": {
                "requestId": "req-1",
                "functionArn": "arn:aws:lambda:us-east-1:123456789012:function:agentwake-CronWakeFunction:live",
                "condition": "RetriesExhausted",
                "approximateInvokeCount": 3,
            },
            "requestPayload": {"job_id": job_id, "scheduled_time": scheduled_time},
            "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
            "responsePayload": error,
        }
    )


def test_cron_and_scheduler_failures_are_listed_and_redriven_through_invoke_async(cli: Cli, stack: Stack) -> None:
    # GIVEN a cron run that failed (its failure record is in the store) and its destination record
    cli("sessions", "put", "s-cron", "--provider", json.dumps(ALWAYS_FAILS[0]))
    stack.store.records.put_job(
        Job(job_id="job-nightly", session_id="s-cron", name="Nightly", schedule_expression="cron(0 6 * * ? *)")
    )
    with pytest.raises(RunFailed) as info:
        cron_wake.handler({"job_id": "job-nightly", "scheduled_time": "2026-11-30T06:00:00Z"}, FakeLambdaContext())
    error = {"errorMessage": str(info.value), "errorType": "RunFailed", "stackTrace": []}
    stack.sqs.send_message(
        QueueUrl=stack.res.cron_failure_url,
        MessageBody=destination_record("job-nightly", "2026-11-30T06:00:00Z", error),
    )
    # AND a record of a run the store knows nothing about (only Lambda's error payload says why)
    stack.sqs.send_message(
        QueueUrl=stack.res.cron_failure_url,
        MessageBody=destination_record(
            "job-gone",
            "2026-11-29T06:00:00Z",
            {"errorMessage": "Task timed out after 120.00 seconds\nmore", "errorType": "Sandbox.Timedout"},
        ),
    )
    # AND a schedule that could not invoke the function at all
    stack.sqs.send_message(
        QueueUrl=stack.res.scheduler_dlq_url,
        MessageBody=json.dumps({"job_id": "job-nightly", "scheduled_time": "2026-11-28T06:00:00Z"}),
        MessageAttributes={
            "ERROR_CODE": {"DataType": "String", "StringValue": "AWS.Lambda.TooManyRequestsException"},
            "ERROR_MESSAGE": {"DataType": "String", "StringValue": "Rate exceeded"},
            "RETRY_ATTEMPTS": {"DataType": "Number", "StringValue": "2"},
        },
    )

    # WHEN the cron and scheduler queues are listed
    rows = {r["run_id"]: r for r in cli_json(cli, "dlq", "list", "--queue", "cron")}
    [sched] = cli_json(cli, "dlq", "list", "--queue", "scheduler")
    # THEN each says why: the store's failure record first, else Lambda's errorMessage, else Scheduler's attributes
    known = rows["cron:job-nightly:2026-11-30T06:00:00Z"]
    assert known["kind"] == "cron" and known["session_id"] == "s-cron" and known["attempts"] == 1
    assert known["error_type"] == "AllProvidersFailed" and known["error_source"] == "failure-record"
    gone = rows["cron:job-gone:2026-11-29T06:00:00Z"]
    assert gone["error_type"] == "Sandbox.Timedout"
    assert gone["error"] == "Task timed out after 120.00 seconds\nmore"  # --json: the whole text
    assert gone["attempts"] == 3 and gone["error_source"] == "destination-record"
    assert sched["error_type"] == "AWS.Lambda.TooManyRequestsException" and sched["error"] == "Rate exceeded"
    assert sched["attempts"] == 3 and sched["session_id"] == "s-cron"
    assert "Task timed out after 120.00 seconds" in cli("dlq", "list", "--queue", "cron").stdout

    # WHEN they are redriven
    cli("dlq", "redrive", "--all", "--queue", "cron")
    cli("dlq", "redrive", "--id", sched["message_id"])
    # THEN CronWakeFunction was invoked asynchronously with each original input, and the queues are empty
    assert sorted(stack.invocations, key=lambda i: i[1]["scheduled_time"]) == [
        ("CronWakeFunction", {"job_id": "job-nightly", "scheduled_time": "2026-11-28T06:00:00Z"}),
        ("CronWakeFunction", {"job_id": "job-gone", "scheduled_time": "2026-11-29T06:00:00Z"}),
        ("CronWakeFunction", {"job_id": "job-nightly", "scheduled_time": "2026-11-30T06:00:00Z"}),
    ]
    assert stack.counts(stack.res.cron_failure_url) == (0, 0)
    assert stack.counts(stack.res.scheduler_dlq_url) == (0, 0)


def test_a_failed_invoke_leaves_the_record_in_the_queue(cli: Cli, stack: Stack) -> None:
    # GIVEN a cron failure record, and an invoke that fails
    stack.sqs.send_message(
        QueueUrl=stack.res.cron_failure_url,
        MessageBody=destination_record(
            "job-1", "2026-11-30T06:00:00Z", {"errorType": "RunFailed", "errorMessage": "x"}
        ),
    )

    def broken(_logical_id: str, _payload: dict[str, Any]) -> None:
        raise RuntimeError("lambda unreachable")

    # WHEN it is redriven
    result = cli("dlq", "redrive", "--all", "--queue", "cron", obj=CliState(invoke_async=broken), expect=1)
    # THEN it reports the failure and the record stays, visible
    assert "lambda unreachable" in result.stdout
    assert stack.counts(stack.res.cron_failure_url) == (1, 0)


def test_peek_pages_through_more_than_one_batch(stack: Stack) -> None:
    # GIVEN 23 messages in the scheduler DLQ (more than one ReceiveMessage batch of 10)
    for i in range(23):
        stack.sqs.send_message(
            QueueUrl=stack.res.scheduler_dlq_url, MessageBody=json.dumps({"job_id": f"j{i}", "scheduled_time": "t"})
        )
    # WHEN peeked twice
    first = sqs_scan.peek(stack.sqs, stack.res.scheduler_dlq_url).messages()
    second = sqs_scan.peek(stack.sqs, stack.res.scheduler_dlq_url).messages()
    # THEN every message is seen once each time, and all stay visible
    assert len({m["MessageId"] for m in first}) == len(first) == 23
    assert {m["MessageId"] for m in second} == {m["MessageId"] for m in first}
    assert stack.counts(stack.res.scheduler_dlq_url) == (23, 0)


def test_a_paced_redrive_keeps_to_its_rate(cli: Cli, stack: Stack) -> None:
    # GIVEN seven scheduler failures
    for i in range(7):
        stack.sqs.send_message(
            QueueUrl=stack.res.scheduler_dlq_url, MessageBody=json.dumps({"job_id": f"j{i}", "scheduled_time": "t"})
        )
    context = resolve_context(invoke_async=stack.invoke_async)
    now = [0.0]
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    # WHEN they are redriven at 2 per second (on a clock that only the sleeps move)
    report = act.redrive(
        context, Selection(everything=True), queue="scheduler", rate=2, sleep=sleep, clock=lambda: now[0]
    )
    # THEN all moved, and the move took (n - 1) / rate seconds
    assert len(report.moved) == 7 and report.ok
    assert sum(sleeps) == pytest.approx(3.0)
    assert len(stack.invocations) == 7
    # AND through the CLI (stderr is not a terminal here: no progress bar) a bulk move prints a summary
    for i in range(7):
        stack.sqs.send_message(
            QueueUrl=stack.res.scheduler_dlq_url, MessageBody=json.dumps({"job_id": f"k{i}", "scheduled_time": "t"})
        )
    result = cli("dlq", "redrive", "--all", "--queue", "scheduler")
    assert "moved 7, failed 0" in result.stdout and result.stderr == ""


def test_redrive_verify_scans_the_dlq_once_and_redrives_what_it_verified(cli: Cli, stack: Stack) -> None:
    # GIVEN a dead-lettered run whose session is fixed, and a count of every time a DLQ receive returns it
    make_failed_background_run(cli, stack, "s-once", ALWAYS_FAILS)
    stack.poll_until_dead_lettered()
    cli("sessions", "put", "s-once", "--provider", json.dumps({"type": "scripted", "id": "ok"}))
    [row] = cli_json(cli, "dlq", "list")
    context = resolve_context(invoke_async=stack.invoke_async)
    received: list[str] = []

    def count(parsed: dict[str, Any], **_: Any) -> None:
        received.extend(m["MessageId"] for m in parsed.get("Messages", []))

    context.sqs.meta.events.register("after-call.sqs.ReceiveMessage", count)

    # WHEN it is redriven with --verify, first as a dry run
    planned = cli(
        "dlq", "redrive", "--id", row["message_id"][:8], "--verify", "--dry-run", obj=CliState(context=context)
    )
    # THEN the replay passed and the plan names it, from one scan: the message was received once
    assert "--verify: replayed 1 run(s)" in planned.stdout and "DONE" in planned.stdout
    assert "1 message(s) would be redriven" in planned.stdout
    assert received.count(row["message_id"]) == 1
    assert stack.counts(stack.res.dlq_url) == (1, 0)

    # WHEN it is redriven with --verify for real
    received.clear()
    moved = cli("dlq", "redrive", "--id", row["message_id"][:8], "--verify", obj=CliState(context=context))
    # THEN the message it verified moved, out of the same single scan
    assert "Redrive: moved 1, failed 0." in moved.stdout
    assert received.count(row["message_id"]) == 1
    assert stack.counts(stack.res.dlq_url) == (0, 0) and stack.counts(stack.res.queue_url) == (1, 0)


def test_the_cli_does_not_recheck_the_sqs_parameters_its_own_code_builds(stack: Stack) -> None:
    """A DLQ scan of 10,000 messages is 2,000 SQS calls; botocore's type check of each call's
    parameters was 15 % of its CPU. The CLI's SQS client skips it (SQS checks them)."""
    from botocore.validate import ParamValidationDecorator

    context = resolve_context(invoke_async=stack.invoke_async)
    # botocore checks parameters in a decorator around the client's serializer
    assert not isinstance(context.sqs._serializer, ParamValidationDecorator)
    assert isinstance(context.store.table.db._serializer, ParamValidationDecorator)  # DynamoDB keeps it
    # and keeps the rest of the CLI's client configuration
    assert (context.sqs.meta.config.retries["mode"], context.sqs.meta.config.read_timeout) == ("standard", 20)
