"""Asking before acting (issue 35): a gated tool call parks its run, the decision is written once and
resumes the run, which calls the tool exactly once on approval and never otherwise.

Real moto, the real wake and handlers; the gated tool is an HTTP server on 127.0.0.1 counting its
calls by ``Idempotency-Key``; the user's channel is a webhook receiver on 127.0.0.1 counting deliveries."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError

from agentwake import bootstrap
from agentwake.domain.approvals import Approval, approval_id, new_token, token_sha256
from agentwake.domain.models import utcnow_iso
from agentwake.domain.run_models import RunRecord
from agentwake.domain.steps import approval_delivery_id, decision_key, tool_key
from agentwake.errors import ApprovalAlreadyDecided, ForgedDecision, UnknownApproval
from agentwake.handlers import background_result, background_work
from agentwake.product.approvals import ApprovalsService
from agentwake.product.tasks import TasksService
from agentwake.settings import Settings
from agentwake.store.dynamo import DynamoStore
from agentwake.store.keys import run_key
from agentwake.store.queues import ResultQueue, WorkQueue
from agentwake.store.schedules import Schedules
from agentwake.wake.approval_check import check_approval
from agentwake.wake.messages import WorkMessage
from agentwake.wake.spec import WakeDeps
from agentwake_local.poller import lambda_sqs_record
from agentwake_ops.sqs_scan import queue_counts
from tests.integration.test_task_lifecycle import RecordingSqs
from tests.integration.test_wake_handlers import result_body, sqs_record
from tests.support.aws import REGION, FakeLambdaContext, Resources
from tests.support.builders import PRODUCT_CALLER, seed_session, seed_task
from tests.support.clock import FakeClock
from tests.support.receiver import CountingReceiver

RUN = "bg:t1"
APPROVAL = approval_id(RUN, 0, 0)
RESULTS_ARN = "arn:aws:sqs:us-east-1:123456789012:results"
WORK_ARN = "arn:aws:sqs:us-east-1:123456789012:agentwake-BackgroundWorkQueue"
SCHEDULER_ROLE = "arn:aws:iam::123456789012:role/agentwake-scheduler"
CRON_FUNCTION = "arn:aws:lambda:us-east-1:123456789012:function:agentwake-cron:live"


class ToolServer:
    """The gated tool: a real HTTP server on 127.0.0.1 counting its calls by ``Idempotency-Key``
    (``{run}#{step}#{index}``); ``on_call`` sees each key as it is called (the state machine's check)."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.on_call: Any = lambda key: None
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                key = self.headers.get("Idempotency-Key", "?")
                outer.calls[key] += 1
                outer.on_call(key)
                body = b'{"ticket": "T-1"}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/tickets"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def ticket_tool(url: str, approval: Any = "always") -> dict[str, Any]:
    return {
        "type": "http",
        "name": "create_ticket",
        "description": "File a ticket for a customer.",
        "parameters": {"type": "object", "properties": {"amount": {"type": "number"}, "customer": {"type": "string"}}},
        "url": url,
        "method": "POST",
        "approval": approval,
    }


#: step 0 files a ticket (gated), step 1 answers with what the tool said
FILES_A_TICKET = [
    {"tool_calls": [{"name": "create_ticket", "arguments": {"amount": 500, "customer": "acme"}}]},
    {"text": "Handled the ticket."},
]


class Stack:
    """The functions as the stack runs them, over moto: the background-result and work handlers with
    these deps (their work-queue sends recorded: a check is delayed, so no receive would see it)."""

    def __init__(self, store: DynamoStore, resources: Resources) -> None:
        self.store = store
        self.resources = resources
        self.sqs = RecordingSqs()
        self.work_queue = WorkQueue(resources.work_queue_url, client=self.sqs)
        self.settings = Settings.from_env()
        self.approvals = ApprovalsService(store, self.work_queue)
        self.deps = self.deps_at(None)

    def deps_at(self, wall: float | None) -> WakeDeps:
        """The wake's deps; ``wall``: a clock standing at that time (the expiry's tests)."""
        extra: dict[str, Any] = {} if wall is None else {"clock": FakeClock(start=wall)}
        return WakeDeps(
            store=self.store,
            settings=self.settings,
            result_queue=ResultQueue(self.resources.queue_url),
            tasks=TasksService(self.store, self.resources.queue_url, work_queue=self.work_queue),
            approvals=ApprovalsService(self.store, self.work_queue),
            schedules=Schedules(self.resources.schedule_group, client=boto3.client("scheduler", region_name=REGION)),
            **extra,
        )

    def wake(self, task_id: str = "t1") -> dict[str, Any]:
        """The producer's completion of ``task_id`` through BackgroundResultFunction."""
        return background_result.handler({"Records": [sqs_record(result_body(task_id, "s1"))]}, FakeLambdaContext())

    def results(self) -> list[dict[str, Any]]:
        """Every visible result-queue message (a handed copy) through BackgroundResultFunction, deleted
        once handled as the event source mapping does; the handler's answers."""
        sqs = boto3.client("sqs", region_name=REGION)
        answers = []
        while True:
            got = sqs.receive_message(
                QueueUrl=self.resources.queue_url,
                MaxNumberOfMessages=1,
                AttributeNames=["All"],
                MessageAttributeNames=["All"],
            ).get("Messages", [])
            if not got:
                return answers
            try:
                answer = background_result.handler(
                    {"Records": [lambda_sqs_record(got[0], RESULTS_ARN, REGION)]}, FakeLambdaContext()
                )
            except BatchProcessingError:  # the whole batch (this one record) failed: Lambda retries it
                answer = {"batchItemFailures": [{"itemIdentifier": got[0]["MessageId"]}]}
            answers.append(answer)
            if answer["batchItemFailures"]:
                # received again at once (its visibility timeout made zero), on the caller's next round
                sqs.change_message_visibility(
                    QueueUrl=self.resources.queue_url, ReceiptHandle=got[0]["ReceiptHandle"], VisibilityTimeout=0
                )
                return answers
            sqs.delete_message(QueueUrl=self.resources.queue_url, ReceiptHandle=got[0]["ReceiptHandle"])

    def work_sent(self) -> list[WorkMessage]:
        return [WorkMessage.parse_body(s["MessageBody"]) for s in self.sqs.to(self.resources.work_queue_url)]

    def checks(self) -> list[WorkMessage]:
        return [m for m in self.work_sent() if m.kind == "approval" and not m.nudge]

    def nudges(self) -> list[WorkMessage]:
        return [m for m in self.work_sent() if m.kind == "approval" and m.nudge]

    def work(self) -> list[dict[str, Any]]:
        """Every visible work-queue message (a nudge) through BackgroundWorkFunction, deleted once handled."""
        sqs = boto3.client("sqs", region_name=REGION)
        answers = []
        while True:
            got = sqs.receive_message(
                QueueUrl=self.resources.work_queue_url, MaxNumberOfMessages=1, AttributeNames=["All"]
            ).get("Messages", [])
            if not got:
                return answers
            answer = background_work.handler(
                {"Records": [lambda_sqs_record(got[0], WORK_ARN, REGION)]}, FakeLambdaContext()
            )
            answers.append(answer)
            sqs.delete_message(QueueUrl=self.resources.work_queue_url, ReceiptHandle=got[0]["ReceiptHandle"])

    def check(self, message: WorkMessage, *, at: float | None = None) -> None:
        """A check as BackgroundWorkFunction runs it, its clock at ``at``."""
        check_approval(message, self.deps_at(at), remaining_ms=60_000, receive_count=1)

    def approval(self) -> Approval:
        found = self.store.approvals.get(APPROVAL)
        assert found is not None
        return found

    def notes(self) -> list[str]:
        return [e.content for e in self.store.history.history("s1") if e.kind == "note"]

    def dlqs_empty(self) -> bool:
        sqs = boto3.client("sqs", region_name=REGION)
        return not any(sum(queue_counts(sqs, url)) for url in (self.resources.dlq_url, self.resources.work_dlq_url))


@pytest.fixture
def tool() -> Iterator[ToolServer]:
    server = ToolServer()
    yield server
    server.close()


@pytest.fixture
def receiver() -> Iterator[CountingReceiver]:
    with CountingReceiver() as r:
        yield r


@pytest.fixture
def stack(store: DynamoStore, resources: Resources, monkeypatch: pytest.MonkeyPatch) -> Stack:
    # as deployed: a decided cron run's copy is a one-time schedule invoking the cron function
    monkeypatch.setenv("AGENTWAKE_SCHEDULER_ROLE_ARN", SCHEDULER_ROLE)
    monkeypatch.setenv("AGENTWAKE_CRON_FUNCTION_ARN", CRON_FUNCTION)
    made = Stack(store, resources)
    # the handlers' composition root, given these deps (its work queue's sends recorded)
    monkeypatch.setattr(bootstrap.root(), "wake_deps", made.deps)
    return made


def gated_session(
    store: DynamoStore,
    tool: ToolServer,
    receiver: CountingReceiver,
    *,
    approval: Any = "always",
    script: list[dict[str, Any]] | None = None,
) -> None:
    seed_session(
        store,
        "s1",
        providers=[{"type": "scripted", "id": "p", "script": script or FILES_A_TICKET}],
        tools=[ticket_tool(tool.url, approval)],
        delivery={"type": "webhook", "url": receiver.url},
    )
    seed_task(store, "t1", "s1")


def parked(stack: Stack, tool: ToolServer, receiver: CountingReceiver, **kw: Any) -> Approval:
    """A run parked on its gated call: the producer's completion woke it, the model called the tool."""
    gated_session(stack.store, tool, receiver, **kw)
    assert stack.wake() == {"batchItemFailures": []}
    run = stack.store.records.get_run(RUN)
    assert run is not None and run.status == "parked", run
    return stack.approval()


def resume_all(stack: Stack) -> None:
    """Deliver what a decision sets going: its nudge (the work function), then the handed copy (the
    result function)."""
    assert all(a == {"batchItemFailures": []} for a in stack.work())
    assert all(a == {"batchItemFailures": []} for a in stack.results())


# --- the park, then a decision ----------------------------------------------------------------


def test_approved_the_gated_tool_runs_once_and_the_run_succeeds(
    stack: Stack, tool: ToolServer, receiver: CountingReceiver
) -> None:
    # GIVEN a run parked on its gated call
    approval = parked(stack, tool, receiver)
    # THEN nothing was called, no note exists, nothing is in a DLQ, the session is free
    assert tool.calls == Counter() and stack.notes() == [] and stack.dlqs_empty()
    assert stack.store.leases.waiters("s1") == []
    assert (approval.state, approval.tool, approval.arguments) == (
        "pending",
        "create_ticket",
        {"amount": 500, "customer": "acme"},
    )
    assert approval.asked_at is not None
    # AND the user was asked once, the token only in the delivery's payload
    assert receiver.by_delivery_id() == Counter({approval_delivery_id(RUN, 0, 0): 1})
    (asked,) = receiver.received
    token = asked["approval"]["token"]
    assert token_sha256(token) == approval.token_sha256
    assert token not in asked["text"] and APPROVAL in asked["text"]
    assert token not in json.dumps(stack.store.journals.journal_entries(RUN))
    assert all(token not in e.content for e in stack.store.history.history("s1"))
    # AND the expiry's first check was sent, delayed at most 900 s
    (first,) = stack.checks()
    assert first.approval_id == APPROVAL and first.after_check is None
    assert [s["DelaySeconds"] for s in stack.sqs.to(stack.resources.work_queue_url)] == [900]
    # WHEN the holder of the token approves it, and what the decision sets going runs
    decided = stack.approvals.decide(APPROVAL, "approve", by="bob", via="api", token=token)
    assert decided.state == "approved" and len(stack.nudges()) == 1
    resume_all(stack)
    # THEN the tool ran exactly once, with the call's key, and the run succeeded with one note
    assert tool.calls == Counter({f"{RUN}#0#0": 1})
    run = stack.store.records.get_run(RUN)
    assert run is not None and run.status == "succeeded" and run.attempts == 2
    assert len(stack.notes()) == 1
    step = stack.store.journals.journal_entries(RUN)[tool_key(0, 0)]
    assert (step["approval_id"], step["decided_by"]) == (APPROVAL, "bob")
    # AND the request says which attempt resumed on it; the run waits for nothing any more
    assert stack.approval().resumed_attempt == 2 and run.waiting_for is None
    assert run.parked_at is not None and run.parked_s > 0
    # AND the request was delivered once, nothing is in a DLQ
    assert receiver.by_delivery_id()[approval_delivery_id(RUN, 0, 0)] == 1
    assert stack.dlqs_empty()


def test_rejected_the_model_reads_who_rejected_it_and_why(
    stack: Stack, tool: ToolServer, receiver: CountingReceiver
) -> None:
    parked(stack, tool, receiver)
    stack.approvals.decide(APPROVAL, "reject", by=None, via="api", reason="wrong customer", principal=PRODUCT_CALLER)
    resume_all(stack)
    assert tool.calls == Counter()
    run = stack.store.records.get_run(RUN)
    assert run is not None and run.status == "succeeded"
    step = stack.store.journals.journal_entries(RUN)[tool_key(0, 0)]
    # (the owner's principal is stored with the decision, never read by the model, which may repeat it)
    assert step["content"] == 'not run: the session\'s owner rejected this call: "wrong customer"'
    assert PRODUCT_CALLER in stack.approval().decided_by
    assert len(stack.notes()) == 1 and stack.dlqs_empty()


def test_a_copy_of_a_parked_run_before_the_decision_does_nothing(
    stack: Stack, tool: ToolServer, receiver: CountingReceiver
) -> None:
    # GIVEN a parked run WHEN the producer's message comes again (an SQS duplicate)
    parked(stack, tool, receiver)
    assert stack.wake() == {"batchItemFailures": []}
    # THEN nothing ran: one attempt, nobody asked twice, nothing called, no second check
    run = stack.store.records.get_run(RUN)
    assert run is not None and (run.status, run.attempts) == ("parked", 1)
    assert len(receiver.received) == 1 and tool.calls == Counter() and len(stack.checks()) == 1


# --- time decides when nobody does --------------------------------------------------------------


@pytest.mark.parametrize("on_expiry", ["reject", "approve"])
def test_nobody_decides_the_expiry_decides_as_configured_once(
    stack: Stack, tool: ToolServer, receiver: CountingReceiver, on_expiry: str
) -> None:
    # GIVEN a run parked on a call whose rule expires after an hour
    approval = parked(stack, tool, receiver, approval={"expires_in_s": 3600, "on_expiry": on_expiry})
    (first,) = stack.checks()
    # WHEN its check comes before the expiry
    stack.check(first, at=time.time() + 900)
    # THEN it is still pending and the check sent its successor, delayed by what is left
    assert stack.approval().state == "pending"
    successor = stack.checks()[-1]
    assert successor.after_check == first.check_id and successor.check_id != first.check_id
    # WHEN the successor comes at the expiry, and again (SQS delivers it twice)
    stack.check(successor, at=approval.expiry_epoch + 1)
    decided = stack.approval()
    stack.check(successor, at=approval.expiry_epoch + 2)
    # THEN the expiry decided once, as configured, and the run resumed through its re-queue
    assert stack.approval() == decided
    assert (decided.state, decided.decided_by, decided.decided_via, decided.expired) == (
        {"reject": "rejected", "approve": "approved"}[on_expiry],
        "expiry",
        "expiry",
        True,
    )
    assert all(a == {"batchItemFailures": []} for a in stack.results())
    run = stack.store.records.get_run(RUN)
    assert run is not None and run.status == "succeeded"
    step = stack.store.journals.journal_entries(RUN)[tool_key(0, 0)]
    if on_expiry == "approve":
        assert tool.calls == Counter({f"{RUN}#0#0": 1})
    else:
        assert tool.calls == Counter()
        assert step["content"] == "not run: nobody decided within 3600 s, so it was rejected by default"
    assert len(stack.notes()) == 1 and stack.dlqs_empty()


def test_a_pending_requests_check_reports_its_age_for_the_waiting_alarm(
    stack: Stack,
    tool: ToolServer,
    receiver: CountingReceiver,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import os
    import subprocess
    import sys

    from cfnlint.decode.cfn_yaml import loads

    from agentwake.observability import metrics
    from tests.support.aws import TEMPLATE_PATH

    # GIVEN a run parked on a request that expires in a day
    approval = parked(stack, tool, receiver, approval={"expires_in_s": 86400})
    (first,) = stack.checks()
    requested = datetime.fromisoformat(approval.requested_at.replace("Z", "+00:00")).timestamp()
    # WHEN its chain's first check comes 5000.5 s after the request, through BackgroundWorkFunction
    monkeypatch.setattr(bootstrap.root(), "wake_deps", stack.deps_at(requested + 5000.5))
    capsys.readouterr()
    record = sqs_record(first.model_dump_json(exclude_defaults=True))
    record["eventSourceARN"] = WORK_ARN
    assert background_work.handler({"Records": [record]}, FakeLambdaContext()) == {"batchItemFailures": []}
    # THEN its EMF line (Powertools metrics, flushed at the handler's end) reports ApprovalPendingAge:
    # the request's age in seconds, in the stack's namespace with the service dimension
    emf = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    reported = [e for e in emf if "ApprovalPendingAge" in e]
    assert len(reported) == 1, emf
    (line,) = reported
    (directive,) = line["_aws"]["CloudWatchMetrics"]
    assert directive["Metrics"] == [{"Name": "ApprovalPendingAge", "Unit": "Seconds"}]
    assert line["ApprovalPendingAge"] == [pytest.approx(5000.5, abs=0.01)]  # one value: the one request
    assert directive["Namespace"] == metrics.namespace
    # (the namespace and the service dimension are POWERTOOLS_METRICS_NAMESPACE and POWERTOOLS_SERVICE_NAME
    # as a function's process starts: this process read them before the test's environment was set, so
    # they are shown in a process started with them, as Lambda starts one, serializing the same metric)
    started = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json; from agentwake.observability import metrics; "
            "metrics.add_metric(name='ApprovalPendingAge', unit='Seconds', value=5000.5); "
            "print(json.dumps(metrics.serialize_metric_set()))",
        ],
        env={**os.environ, "POWERTOOLS_METRICS_NAMESPACE": "AgentwakeStackX", "POWERTOOLS_SERVICE_NAME": "agentwake"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    fresh = json.loads(started.stdout)
    (fresh_directive,) = fresh["_aws"]["CloudWatchMetrics"]
    assert fresh_directive["Namespace"] == "AgentwakeStackX"
    assert fresh_directive["Dimensions"] == [["service"]] and fresh["service"] == "agentwake"
    assert stack.approval().state == "pending"  # not due: the check only reported and sent its successor
    # AND the alarm watches that metric: its name and namespace (the functions' POWERTOOLS_METRICS_NAMESPACE
    # is the same parameter), the service dimension, its threshold the ApprovalAgeAlarmSeconds parameter
    template = loads(TEMPLATE_PATH.read_text(), str(TEMPLATE_PATH))
    alarm = template["Resources"]["ApprovalWaitingAlarm"]["Properties"]
    env = template["Globals"]["Function"]["Environment"]["Variables"]
    assert alarm["MetricName"] == "ApprovalPendingAge"
    assert alarm["Namespace"] == env["POWERTOOLS_METRICS_NAMESPACE"] == {"Ref": "MetricsNamespace"}
    assert alarm["Dimensions"] == [{"Name": "service", "Value": env["POWERTOOLS_SERVICE_NAME"]}]
    assert alarm["Threshold"] == {"Ref": "ApprovalAgeAlarmSeconds"} and alarm["Statistic"] == "Maximum"
    assert "ApprovalAgeAlarmSeconds" in template["Parameters"]


@pytest.mark.parametrize("first", ["person_first", "expiry_first"])
def test_a_decision_racing_the_expiry_leaves_one_decision(
    stack: Stack, tool: ToolServer, receiver: CountingReceiver, first: str
) -> None:
    # GIVEN a parked run whose request is due
    approval = parked(stack, tool, receiver, approval={"expires_in_s": 60})
    (check,) = stack.checks()
    due = approval.expiry_epoch + 1

    def person() -> None:
        stack.approvals.decide(APPROVAL, "approve", by=None, via="api", principal=PRODUCT_CALLER)

    # WHEN a person approves and the expiry's check comes in the same second, in either order
    if first == "person_first":
        person()
        stack.check(check, at=due)
    else:
        stack.check(check, at=due)
        with pytest.raises(ApprovalAlreadyDecided, match="rejected by expiry"):
            person()
    # THEN exactly one decision stands, the first, and the journal holds that one
    decided = stack.approval()
    winner = ("approved", PRODUCT_CALLER) if first == "person_first" else ("rejected", "expiry")
    assert (decided.state, decided.decided_by) == winner
    step = stack.store.journals.journal_entries(RUN)[decision_key(0, 0)]
    assert (step["decision"], step["by"]) == winner
    resume_all(stack)
    assert tool.calls == (Counter({f"{RUN}#0#0": 1}) if first == "person_first" else Counter())
    assert stack.store.records.get_run(RUN).status == "succeeded"  # type: ignore[union-attr]


def test_a_persons_approval_after_the_expiry_is_refused_and_time_decides_even_when_the_check_is_late(
    stack: Stack, tool: ToolServer, receiver: CountingReceiver
) -> None:
    # GIVEN a parked run whose request expired an hour ago, its expiry check not yet run (a busy queue)
    approval = parked(stack, tool, receiver, approval={"expires_in_s": 60})
    late = ApprovalsService(stack.store, stack.work_queue, clock=lambda: approval.expiry_epoch + 3600)
    # WHEN the owner approves THEN it is refused: time decided, as the request said (reject)
    with pytest.raises(ApprovalAlreadyDecided, match="rejected by expiry"):
        late.decide(APPROVAL, "approve", by=None, via="api", principal=PRODUCT_CALLER)
    decided = stack.approval()
    assert (decided.state, decided.decided_by, decided.expired) == ("rejected", "expiry", True)
    # AND the run resumes with the rejection: the gated tool is never called
    resume_all(stack)
    assert tool.calls == Counter()
    assert stack.store.records.get_run(RUN).status == "succeeded"  # type: ignore[union-attr]


def test_an_approval_whose_write_crosses_the_expiry_is_refused_by_the_store_and_time_decides(
    stack: Stack, tool: ToolServer, receiver: CountingReceiver
) -> None:
    # GIVEN a parked run, and a person's decision read one second before the expiry and written after it
    approval = parked(stack, tool, receiver, approval={"expires_in_s": 60})
    times = iter([approval.expiry_epoch - 1, approval.expiry_epoch + 1])
    crossing = ApprovalsService(stack.store, stack.work_queue, clock=lambda: next(times, approval.expiry_epoch + 1))
    # WHEN the owner approves THEN the write's own condition refuses it and the expiry decides
    with pytest.raises(ApprovalAlreadyDecided, match="rejected by expiry"):
        crossing.decide(APPROVAL, "approve", by=None, via="api", principal=PRODUCT_CALLER)
    assert (stack.approval().state, stack.approval().decided_by) == ("rejected", "expiry")
    resume_all(stack)
    assert tool.calls == Counter()


def test_a_late_approval_that_finds_the_same_decision_landed_meanwhile_answers_as_that_decision(
    stack: Stack, tool: ToolServer, receiver: CountingReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a parked run; Bob approves just in time, while Ann (late) had read the request still pending
    approval = parked(stack, tool, receiver, approval={"expires_in_s": 60})
    stack.approvals.decide(APPROVAL, "approve", by="bob", via="api", principal=PRODUCT_CALLER)
    late = ApprovalsService(stack.store, stack.work_queue, clock=lambda: approval.expiry_epoch + 1)
    reads = iter([approval])  # Ann's read: the request as it was before Bob's decision
    real_get = stack.store.approvals.get
    monkeypatch.setattr(stack.store.approvals, "get", lambda approval_id: next(reads, None) or real_get(approval_id))
    # WHEN Ann approves too THEN she is answered with the decision that stands, the one she wanted
    answered = late.decide(APPROVAL, "approve", by="ann", via="api", principal=PRODUCT_CALLER)
    assert (answered.state, answered.expired) == ("approved", False)
    assert "bob" in (stack.approval().decided_by or "")


# --- the session while a run is parked ----------------------------------------------------------


def test_a_parked_run_holds_no_lease_live_turns_and_other_wakes_run(
    stack: Stack, tool: ToolServer, receiver: CountingReceiver
) -> None:
    from agentwake.product.sessions import SessionsService

    # GIVEN a parked run
    parked(stack, tool, receiver)
    # WHEN a live turn begins at once, and another task's completion wakes the agent meanwhile
    sessions = SessionsService(stack.store, ResultQueue(stack.resources.queue_url))
    with sessions.live_turn("s1", wait_s=0):
        pass
    seed_task(stack.store, "t2", "s1")
    assert stack.wake("t2") == {"batchItemFailures": []}
    # THEN both ran without waiting for the parked run (the other wake parked on its own gated call)
    other = stack.store.records.get_run("bg:t2")
    assert other is not None and other.status == "parked" and other.attempts == 1
    assert stack.store.records.get_run(RUN).status == "parked"  # type: ignore[union-attr]
    assert stack.store.leases.waiters("s1") == []
    assert tool.calls == Counter() and stack.notes() == [] and stack.dlqs_empty()


def test_a_decision_during_a_live_turn_resumes_when_the_turn_ends(
    stack: Stack, tool: ToolServer, receiver: CountingReceiver
) -> None:
    from agentwake.product.sessions import SessionsService

    # GIVEN a parked run, and a live turn holding the session
    parked(stack, tool, receiver)
    sessions = SessionsService(stack.store, ResultQueue(stack.resources.queue_url))
    turn = sessions.begin_live_turn("s1", wait_s=0)
    # WHEN the request is approved and its nudge runs while the turn holds the session
    stack.approvals.decide(APPROVAL, "approve", by=None, via="api", principal=PRODUCT_CALLER)
    assert all(a == {"batchItemFailures": []} for a in stack.work())
    # THEN the run waits on the session's list: it has not started, nothing was called
    assert stack.results() == []
    assert [w.run_id for w in stack.store.leases.waiters("s1")] == [RUN]
    run = stack.store.records.get_run(RUN)
    assert run is not None and (run.status, run.attempts) == ("parked", 1) and tool.calls == Counter()
    # WHEN the turn ends
    assert sessions.end_live_turn(turn) == RUN
    # THEN its end handed the session to the run, which resumed and called the tool once
    assert all(a == {"batchItemFailures": []} for a in stack.results())
    assert tool.calls == Counter({f"{RUN}#0#0": 1})
    assert stack.store.records.get_run(RUN).status == "succeeded"  # type: ignore[union-attr]


def test_a_decision_before_the_park_lands_goes_on_in_place(
    stack: Stack, tool: ToolServer, receiver: CountingReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentwake.store.run_end import RunEnds

    # GIVEN a person who approves the request the moment it is delivered, before the park lands
    park = RunEnds.record_park

    def decided_first(self: RunEnds, **kw: Any) -> Any:
        token = receiver.received[-1]["approval"]["token"]
        stack.approvals.decide(APPROVAL, "approve", by="bob", via="api", token=token)
        return park(self, **kw)

    monkeypatch.setattr(RunEnds, "record_park", decided_first)
    gated_session(stack.store, tool, receiver)
    # WHEN the run parks
    assert stack.wake() == {"batchItemFailures": []}
    # THEN it went on in place: the tool ran once, the run succeeded in its first attempt
    run = stack.store.records.get_run(RUN)
    assert run is not None and (run.status, run.attempts) == ("succeeded", 1)
    assert tool.calls == Counter({f"{RUN}#0#0": 1}) and len(stack.notes()) == 1
    # AND the decision's nudge finds nothing to re-queue; the request was delivered once
    assert all(a == {"batchItemFailures": []} for a in stack.work())
    assert stack.results() == []
    assert receiver.by_delivery_id()[approval_delivery_id(RUN, 0, 0)] == 1


def test_a_decision_between_the_park_and_the_release_resumes_at_once(
    stack: Stack, tool: ToolServer, receiver: CountingReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lease is released after the park transaction (a write of its own): a decision whose nudge
    runs in between re-queues the run while it still holds the session and marks its own lease. Its
    release must hand the session to it, as the holder's release hands it to any waiter, not skip it
    (the run would wait for the approval chain's fallback check, 60 s or more)."""
    from agentwake.store.run_end import RunEnds

    park = RunEnds.record_park

    def decided_after(self: RunEnds, **kw: Any) -> Any:
        landed = park(self, **kw)
        # GIVEN the park landed; a person approves and the nudge runs before the lease's release
        token = receiver.received[-1]["approval"]["token"]
        stack.approvals.decide(APPROVAL, "approve", by="bob", via="api", token=token)
        assert all(a == {"batchItemFailures": []} for a in stack.work())
        return landed

    monkeypatch.setattr(RunEnds, "record_park", decided_after)
    gated_session(stack.store, tool, receiver)
    # WHEN the run parks and releases the session
    assert stack.wake() == {"batchItemFailures": []}
    # THEN the release handed the session to the decided run: it resumed (here or through its
    # handed copy), called the tool once and succeeded, with no fallback check needed
    stack.results()
    run = stack.store.records.get_run(RUN)
    assert run is not None and run.status == "succeeded", run
    assert tool.calls == Counter({f"{RUN}#0#0": 1}) and len(stack.notes()) == 1
    assert stack.store.leases.waiters("s1") == []


# --- a resume that fails ------------------------------------------------------------------------


def test_an_approved_run_failing_after_its_tool_is_redriven_decision_kept_tool_once(
    stack: Stack, tool: ToolServer, receiver: CountingReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN an approved parked run whose model breaks after the tool step (every provider fails)
    approval = parked(stack, tool, receiver)
    stack.approvals.decide(APPROVAL, "approve", by=None, via="api", principal=PRODUCT_CALLER)
    session = stack.store.records.get_session("s1")
    assert session is not None
    failing_after_tool = [{"type": "scripted", "id": "p", "script": [FILES_A_TICKET[0], {"error": "auth"}]}]
    stack.store.records.put_session(session.model_copy(update={"providers": failing_after_tool}))
    assert all(a == {"batchItemFailures": []} for a in stack.work())
    # WHEN the resumed run fails (its handed copy's batch item fails: SQS retries it, then dead-letters it)
    assert [len(a["batchItemFailures"]) for a in stack.results()] == [1]
    run = stack.store.records.get_run(RUN)
    assert run is not None and run.status == "failed", run
    assert tool.calls == Counter({f"{RUN}#0#0": 1})
    # WHEN the model is fixed and the run is redriven (the producer's message, from the DLQ)
    stack.store.records.put_session(session)
    assert stack.wake() == {"batchItemFailures": []}
    # THEN the decision was kept and the tool was not called again; the run succeeded with one note
    run = stack.store.records.get_run(RUN)
    assert run is not None and run.status == "succeeded"
    assert tool.calls == Counter({f"{RUN}#0#0": 1}) and len(stack.notes()) == 1
    assert stack.approval().state == "approved" and stack.approval().decided_by == PRODUCT_CALLER
    assert approval.state == "pending"  # as parked; decided once since


# --- the request reaches the person once ---------------------------------------------------------


def test_a_request_not_delivered_fails_the_attempt_and_the_retry_asks_once(
    stack: Stack, tool: ToolServer, receiver: CountingReceiver
) -> None:
    # GIVEN a gated session whose webhook refuses every request for now
    gated_session(stack.store, tool, receiver)
    receiver.fail_next = 1000
    # WHEN the run parks: the request cannot be delivered
    with pytest.raises(BatchProcessingError):
        stack.wake()
    # THEN the attempt failed (retried: nobody was asked), the run is not parked
    run = stack.store.records.get_run(RUN)
    assert run is not None and (run.status, run.last_error_type) == ("failed", "DeliveryFailed")
    assert receiver.received == [] and stack.store.records.get_run(RUN).waiting_for is None  # type: ignore[union-attr]
    # WHEN the receiver is back and the record is retried
    receiver.fail_next = 0
    assert stack.wake() == {"batchItemFailures": []}
    # THEN the run parked, the person asked once, with the token the request holds now
    (asked,) = receiver.received
    assert stack.store.records.get_run(RUN).status == "parked"  # type: ignore[union-attr]
    assert token_sha256(asked["approval"]["token"]) == stack.approval().token_sha256
    assert len(stack.checks()) == 1  # one chain: the retry found its request and sent no second check


def test_a_hard_kill_after_the_request_was_sent_resends_one_id_with_a_newer_token(
    stack: Stack, tool: ToolServer, receiver: CountingReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentwake.store.run_end import RunEnds

    # GIVEN a run whose process dies after the request's send, before anything records it
    gated_session(stack.store, tool, receiver)
    park, fail = RunEnds.record_park, RunEnds.record_failure

    def killed(self: RunEnds, *args: Any, **kw: Any) -> Any:
        raise ConnectionError("injected: the process died")

    monkeypatch.setattr(RunEnds, "record_park", killed)
    monkeypatch.setattr(RunEnds, "record_failure", killed)
    with pytest.raises(BatchProcessingError):
        stack.wake()
    (first,) = receiver.received
    # WHEN the record is retried (the process is well again)
    monkeypatch.setattr(RunEnds, "record_park", park)
    monkeypatch.setattr(RunEnds, "record_failure", fail)
    assert stack.wake() == {"batchItemFailures": []}
    # THEN the same delivery id was sent again with a newer token (receivers drop the copy, keep the token)
    second = receiver.received[-1]
    assert second["delivery_id"] == first["delivery_id"] == approval_delivery_id(RUN, 0, 0)
    assert (first["approval"]["token_gen"], second["approval"]["token_gen"]) == (1, 2)
    assert len(receiver.received) == 2
    # AND only the newer token decides
    with pytest.raises(ForgedDecision):
        stack.approvals.decide(APPROVAL, "approve", by="bob", via="api", token=first["approval"]["token"])
    assert stack.approvals.decide(
        APPROVAL, "approve", by="bob", via="api", token=second["approval"]["token"]
    ).state == ("approved")
    resume_all(stack)
    assert tool.calls == Counter({f"{RUN}#0#0": 1})


# --- a fault at every AWS call of the park ----------------------------------------------------------

#: the calls a park makes when nothing fails (test_a_park_costs_...): DynamoDB, and the check's SQS send
PARK_CALLS = [
    "BatchGetItem",  # run, task, session config
    "PutItem",  # the session's lease
    "UpdateItem",  # the attempt, under the lease
    "Query",  # history window
    "PutItem",  # 000.reply, which calls the gated tool
    "SendMessage",  # the expiry's first check (before the request: no request without its chain)
    "TransactWriteItems",  # the request: approval item + its journal step
    "Query",  # the wait list, read before the release (the hand-off)
    "TransactWriteItems",  # the park: run parked, asked step + delivery, asked_at
    "DeleteItem",  # the lease's release after the park (one plain conditional write)
]


#: by default (``make test``) a point fails nothing-applied once (``timeout_before``: throttling and a
#: 500 answered before the request take the same path), applied-but-unanswered and conditional;
#: ``AGENTWAKE_FAULT_MATRIX=full`` (``make soak``) runs every kind
DEFAULT_KINDS = ("timeout_before", "timeout_after", "conditional")


def default_kinds(kinds: tuple[str, ...], full: bool) -> tuple[str, ...]:
    return kinds if full else tuple(k for k in kinds if k in DEFAULT_KINDS)


#: run by default (``make test``): every kind at the calls the park adds (the check's send, the request,
#: the park transaction) and at the release after it; ``AGENTWAKE_FAULT_MATRIX=full`` (``make soak``)
#: runs every call of the wake
PARK_DEFAULT_CALLS = {6, 7, 9, 10}


def _park_points() -> Iterator[Any]:
    import os

    from tests.support.faults import FAULT_KINDS

    full = os.environ.get("AGENTWAKE_FAULT_MATRIX") == "full"
    for n, operation in enumerate(PARK_CALLS, start=1):
        if not full and n not in PARK_DEFAULT_CALLS:
            continue
        for kind in default_kinds(FAULT_KINDS, full):
            if operation == "SendMessage" and kind == "conditional":
                continue  # SQS has no conditions
            yield pytest.param(n, kind, id=f"{n}-{operation}-{kind}")


@pytest.mark.parametrize(("at", "kind"), list(_park_points()))
def test_a_fault_at_any_call_of_the_park(
    stack: Stack, tool: ToolServer, receiver: CountingReceiver, at: int, kind: str
) -> None:
    from agentwake.wake.background import wake_for_background_result
    from tests.support.builders import message
    from tests.support.faults import CallFaults

    # GIVEN a gated session, and one fault armed at the at-th AWS call of its park
    gated_session(stack.store, tool, receiver)
    faults = CallFaults(stack.store.table.db)
    faults.also(stack.sqs.client, "sqs")
    faults.arm(at, kind)
    # WHEN the record is received, and again after each failure, as SQS would
    errors: list[BaseException] = []
    for _ in range(5):
        try:
            outcome = wake_for_background_result(message("t1", "s1"), stack.deps)
        except Exception as exc:  # noqa: BLE001 -- whatever the fault became, the trigger retries it
            errors.append(exc)
            continue
        break
    # THEN the fault fired where it was aimed, and the run parked within the retries
    assert faults.fired is not None and faults.fired[1] == PARK_CALLS[at - 1], faults.fired
    assert outcome.status == "parked" and len(errors) <= 1, [f"{type(e).__name__}: {e}" for e in errors]
    # AND the person was asked once (by delivery id), nothing was called, no note, nothing in a DLQ,
    # the session is free
    assert receiver.by_delivery_id() == Counter({approval_delivery_id(RUN, 0, 0): 1})
    assert tool.calls == Counter() and stack.notes() == [] and stack.dlqs_empty()
    assert stack.store.table.read_item("SESSION#s1", "LEASE") is None
    # WHEN the token the person holds approves it
    token = receiver.received[-1]["approval"]["token"]
    stack.approvals.decide(APPROVAL, "approve", by="bob", via="api", token=token)
    resume_all(stack)
    # THEN the tool ran exactly once and the run succeeded with one note
    assert tool.calls == Counter({f"{RUN}#0#0": 1})
    assert stack.store.records.get_run(RUN).status == "succeeded"  # type: ignore[union-attr]
    assert len(stack.notes()) == 1


# --- a fault at every AWS call of the re-queue and the resume ------------------------------------

#: the calls of the decision's nudge (wake/approval_check.py) when nothing fails: the request, the
#: run, the wait list's room, the run onto the list, the lease marked (none: the session is free), the
#: oldest waiter read, the session reserved for it, its handed copy sent, the waiter marked handed
CHECK_CALLS = [
    "GetItem",
    "GetItem",
    "Query",
    "UpdateItem",
    "PutItem",
    "UpdateItem",
    "UpdateItem",
    "Query",
    "GetItem",
    "PutItem",
    "SendMessage",
    "TransactWriteItems",
]
#: the resumed wake's calls: batch read, start (the lease; then the attempt with the request marked
#: resumed and the waiter started), its journal, the history window, the gated tool's step, the final
#: reply, the wait list, the commit, the release
RESUME_CALLS = [
    "BatchGetItem",
    "PutItem",
    "TransactWriteItems",
    "Query",
    "Query",
    "PutItem",
    "PutItem",
    "Query",
    "TransactWriteItems",
    "DeleteItem",
]
#: run by default: the hand-off's send and mark, the resume's two start writes and its commit; every
#: call with ``AGENTWAKE_FAULT_MATRIX=full``
RESUME_DEFAULT = {"check": {11, 12}, "resume": {2, 3, 9}}
#: the resume's call that writes the gated tool's own step (after the tool ran)
RESUME_TOOL_STEP = 6


def _resume_points() -> Iterator[Any]:
    import os

    from tests.support.faults import FAULT_KINDS

    full = os.environ.get("AGENTWAKE_FAULT_MATRIX") == "full"
    for phase, calls in (("check", CHECK_CALLS), ("resume", RESUME_CALLS)):
        for n, operation in enumerate(calls, start=1):
            if not full and n not in RESUME_DEFAULT[phase]:
                continue
            for kind in default_kinds(FAULT_KINDS, full):
                if operation == "SendMessage" and kind == "conditional":
                    continue
                yield pytest.param(phase, n, kind, id=f"{phase}-{n}-{operation}-{kind}")


@pytest.mark.parametrize(("phase", "at", "kind"), list(_resume_points()))
def test_a_fault_at_any_call_of_the_requeue_and_the_resume(
    stack: Stack, tool: ToolServer, receiver: CountingReceiver, phase: str, at: int, kind: str
) -> None:
    from tests.support.faults import CallFaults

    # GIVEN an approved parked run, and one fault armed at the at-th call of its re-queue or resume
    parked(stack, tool, receiver)
    stack.approvals.decide(APPROVAL, "approve", by="bob", via="cli")
    (nudge,) = stack.nudges()
    faults = CallFaults(stack.store.table.db)
    assert stack.deps.result_queue is not None
    faults.also(stack.deps.result_queue.client, "sqs")
    faults.arm(at, kind) if phase == "check" else faults.arm(None)
    # WHEN the nudge is received, and again after each failure, as SQS would
    errors: list[BaseException] = []
    for _ in range(5):
        try:
            stack.check(nudge)
        except Exception as exc:  # noqa: BLE001 -- whatever the fault became, the trigger retries it
            errors.append(exc)
            continue
        break
    # AND the handed copy is received until it is handled (a copy that found its session busy comes
    # back delayed: polled, with a generous bound); a hand-off that was lost is the chain's to carry:
    # its check comes (at the latest 900 s later) and re-queues the run
    if phase == "resume":
        faults.arm(at, kind)
    chain: WorkMessage | None = stack.checks()[0]
    deadline = time.monotonic() + 60
    while True:
        handled = stack.results()  # first: the armed fault counts the resume's calls from its first
        status = stack.store.records.get_run(RUN).status  # type: ignore[union-attr]
        if status == "succeeded":
            break
        assert time.monotonic() < deadline, "the run did not resume"
        if not handled and status == "parked" and chain is not None:
            stack.check(chain)
            chain = None
        time.sleep(0.2)
    # THEN the fault fired where it was aimed, and cost one retry at most
    expected = (CHECK_CALLS if phase == "check" else RESUME_CALLS)[at - 1]
    assert faults.fired is not None and faults.fired[1] == expected, faults.fired
    assert len(errors) <= 1, [f"{type(e).__name__}: {e}" for e in errors]
    # AND the tool ran exactly once, the run succeeded with one note, the request was delivered
    # once, nothing is in a DLQ. The one edge (docs/durability.md, side effects): the tool's own step
    # not written after its call is redone with the same Idempotency-Key, which its server drops
    assert list(tool.calls) == [f"{RUN}#0#0"]
    if (phase, at) != ("resume", RESUME_TOOL_STEP):
        assert tool.calls[f"{RUN}#0#0"] == 1
    assert stack.store.records.get_run(RUN).status == "succeeded"  # type: ignore[union-attr]
    assert len(stack.notes()) == 1 and stack.dlqs_empty()
    assert receiver.by_delivery_id()[approval_delivery_id(RUN, 0, 0)] == 1


# --- a fault at every AWS call of the decision, the chain's re-queue and a cron run's re-queue ---

#: the decision's calls (ApprovalsService.decide, an operator's): the request read, the one decision
#: transaction (request, journal step, run), the nudge's send to the work queue
DECIDE_CALLS = ["GetItem", "TransactWriteItems", "SendMessage"]
#: the chain's check re-queueing a decided run whose nudge was lost: the request, its place in the
#: chain, the run, the wait list's room, the run onto the list, the lease marked (none: the session is
#: free), the oldest waiter read, the session reserved, its handed copy sent, the waiter marked
#: handed, then the chain's own fallback check sent (it carries the re-queue until the run resumed)
CHAIN_CALLS = [
    "GetItem",
    "UpdateItem",
    "GetItem",
    "Query",
    "UpdateItem",
    "PutItem",
    "UpdateItem",
    "UpdateItem",
    "Query",
    "GetItem",
    "PutItem",
    "SendMessage",
    "TransactWriteItems",
    "SendMessage",
]
#: a decided cron run's nudge: the re-queue's calls, its handed copy a one-time EventBridge Scheduler
#: schedule invoking the cron function (CreateSchedule) in place of the result queue's send
CRON_CALLS = [*CHECK_CALLS[:10], "CreateSchedule", "TransactWriteItems"]
#: run by default: the decision's transaction (approve and reject) and the nudge's send, the chain's
#: place and its fallback send, the cron copy's schedule, the resumed cron wake's commit (the schedule
#: fired: Lambda's async retries invoke it again with the same event); every call with
#: AGENTWAKE_FAULT_MATRIX=full
DECISION_DEFAULT = {
    ("decide", "approve"): {2, 3},
    ("decide", "reject"): {2},
    ("chain", "approve"): {2, 14},
    ("chain", "reject"): set(),
    ("cron", "approve"): {11},
    ("cron", "reject"): set(),
    ("cronresume", "approve"): {9},
    ("cronresume", "reject"): set(),
}
_PHASE_CALLS = {"decide": DECIDE_CALLS, "chain": CHAIN_CALLS, "cron": CRON_CALLS, "cronresume": RESUME_CALLS}


def _decision_points() -> Iterator[Any]:
    import os

    from tests.support.faults import FAULT_KINDS

    full = os.environ.get("AGENTWAKE_FAULT_MATRIX") == "full"
    for phase, calls in _PHASE_CALLS.items():
        for decision in ("approve", "reject"):
            for n, operation in enumerate(calls, start=1):
                if not full and n not in DECISION_DEFAULT[(phase, decision)]:
                    continue
                for kind in default_kinds(FAULT_KINDS, full):
                    if operation in ("SendMessage", "CreateSchedule") and kind == "conditional":
                        continue  # SQS and Scheduler have no conditions
                    if (phase, n, kind) == ("chain", 2, "conditional"):
                        # the chain's place refused means another check of the request holds it and
                        # carries the chain (the check retires, by design): no such check exists here
                        continue
                    yield pytest.param(phase, decision, n, kind, id=f"{phase}-{decision}-{n}-{operation}-{kind}")


class Landed:
    """The work-queue messages that reached SQS, in order (a send a fault stopped before the service is
    not among them; one whose answer was lost is): botocore's events of the client's SendMessage calls."""

    def __init__(self, client: Any, url: str) -> None:
        self.url = url
        self.messages: list[WorkMessage] = []
        self._asked: dict[str, Any] | None = None
        client.meta.events.register("before-parameter-build.sqs.SendMessage", self._ask)
        client.meta.events.register("after-call.sqs.SendMessage", self._landed)

    def _ask(self, params: dict[str, Any], **_: Any) -> None:
        self._asked = dict(params)

    def _landed(self, **_: Any) -> None:
        asked, self._asked = self._asked, None
        if asked is not None and asked.get("QueueUrl") == self.url:
            self.messages.append(WorkMessage.parse_body(asked["MessageBody"]))

    def checks(self) -> list[WorkMessage]:
        return [m for m in self.messages if m.kind == "approval" and not m.nudge]


def _cron_parked(stack: Stack, tool: ToolServer, receiver: CountingReceiver) -> str:
    """A job's run parked on its gated call (the schedule invoked the cron function): its run id."""
    from agentwake.domain.run_models import Job
    from agentwake.handlers import cron_wake

    gated_session(stack.store, tool, receiver)
    stack.store.records.put_job(
        Job(job_id="j1", session_id="s1", name="Nightly", schedule_expression="cron(0 6 * * ? *)")
    )
    event = {"job_id": "j1", "scheduled_time": "2026-12-03T06:00:00Z", "session_id": "s1"}
    assert cron_wake.handler(event, FakeLambdaContext())["status"] == "parked"
    return "cron:j1:2026-12-03T06:00:00Z"


def _retried(action: Any) -> list[BaseException]:
    """``action`` until it returns, as its trigger retries it (a person or the CLI, SQS): the errors."""
    errors: list[BaseException] = []
    for _ in range(5):
        try:
            action()
        except Exception as exc:  # noqa: BLE001 -- whatever the fault became, the trigger retries it
            errors.append(exc)
            continue
        return errors
    raise AssertionError(f"still failing after 5 tries: {[f'{type(e).__name__}: {e}' for e in errors]}")


def _visible_work(stack: Stack) -> list[WorkMessage]:
    """The work queue's visible messages (the nudges: the checks are delayed), received and deleted."""
    sqs = boto3.client("sqs", region_name=REGION)
    got: list[WorkMessage] = []
    while True:
        batch = sqs.receive_message(QueueUrl=stack.resources.work_queue_url, MaxNumberOfMessages=10).get("Messages", [])
        if not batch:
            return got
        for m in batch:
            got.append(WorkMessage.parse_body(m["Body"]))
            sqs.delete_message(QueueUrl=stack.resources.work_queue_url, ReceiptHandle=m["ReceiptHandle"])


@pytest.mark.parametrize(("phase", "decision", "at", "kind"), list(_decision_points()))
def test_a_fault_at_any_call_of_the_decision_the_chain_and_a_cron_requeue(
    stack: Stack, tool: ToolServer, receiver: CountingReceiver, phase: str, decision: str, at: int, kind: str
) -> None:
    from agentwake.handlers import cron_wake
    from tests.support.faults import CallFaults

    # GIVEN a parked run (a job's for the cron phase), every AWS call counted from here: the table,
    # the work queue (nudges, checks), the result queue (handed copies), the Scheduler (cron copies)
    cron = phase.startswith("cron")
    run_id = _cron_parked(stack, tool, receiver) if cron else parked(stack, tool, receiver).run_id
    request_id = approval_id(run_id, 0, 0)
    landed = Landed(stack.sqs.client, stack.resources.work_queue_url)
    faults = CallFaults(stack.store.table.db)
    faults.also(stack.sqs.client, "sqs")
    assert stack.deps.result_queue is not None and stack.deps.schedules is not None
    if stack.deps.result_queue.client is not stack.sqs.client:
        faults.also(stack.deps.result_queue.client, "sqs")
    faults.also(stack.deps.schedules.client, "scheduler")
    parked_checks = [m for m in stack.checks() if m.approval_id == request_id]  # the chain's first, sent by the park
    delivered: list[WorkMessage] = []

    def next_check() -> WorkMessage:
        """The chain's next check not yet delivered, as SQS delivers it once its delay is over."""
        due = [m for m in parked_checks + landed.checks() if m.approval_id == request_id and m not in delivered]
        assert due, "nothing left to re-queue the parked run"
        delivered.append(due[0])
        return due[0]

    wanted = {"approve": "approved", "reject": "rejected"}[decision]

    def check(message: WorkMessage) -> None:
        check_approval(message, stack.deps, remaining_ms=60_000, receive_count=1)

    def decide() -> None:
        stack.approvals.decide(request_id, decision, by="bob", via="cli", reason="as asked")

    scheduler = boto3.client("scheduler", region_name=REGION)
    group = stack.resources.schedule_group
    fired: set[str] = set()

    def fire(name: str) -> Any:
        """A one-time schedule fires: the cron function invoked with its input."""
        fired.add(name)
        event = json.loads(scheduler.get_schedule(Name=name, GroupName=group)["Target"]["Input"])
        return cron_wake.handler(event, FakeLambdaContext())

    # WHEN the operator decides (retrying what failed), with the fault armed in the decision's calls,
    # or, decided, the chain's check or a cron run's nudge runs with it armed (SQS retrying a failed one)
    if phase == "decide":
        faults.arm(at, kind)
        errors = _retried(decide)
    else:
        decide()
        nudges = [m for m in _visible_work(stack) if m.nudge]
        assert len(nudges) == 1
        faults.arm(at, kind)
        if phase == "chain":
            # the nudge was lost: the chain's first check (the park sent it, due within 900 s) re-queues
            first = next_check()
            errors = _retried(lambda: check(first))
        elif phase == "cron":
            errors = _retried(lambda: check(nudges[0]))
        else:
            # the nudge re-queued the cron run: its copy is a one-time schedule, which fires
            faults.arm(None)
            check(nudges[0])
            (name,) = [x["Name"] for x in scheduler.list_schedules(GroupName=group)["Schedules"]]
            faults.arm(at, kind)
            errors = _retried(lambda: fire(name))
    # THEN the fault fired where it was aimed, and cost one retry at most
    assert faults.fired is not None and faults.fired[1] == _PHASE_CALLS[phase][at - 1], (faults.fired, faults.calls)
    assert len(errors) <= 1, [f"{type(e).__name__}: {e}" for e in errors]
    # AND one decision stands, the request's and the journal's alike; nothing called, no note, no DLQ yet
    approval = stack.store.approvals.get(request_id)
    assert approval is not None and (approval.state, approval.decided_by) == (wanted, "operator (as bob)")
    step = stack.store.journals.journal_entries(run_id)[decision_key(0, 0)]
    assert (step["decision"], step["by"]) == (wanted, "operator (as bob)")
    if phase != "cronresume":  # (that phase's fault was in the resume itself)
        assert tool.calls == Counter() and stack.notes() == [] and stack.dlqs_empty()
    # WHEN what the decision set going is delivered until the run is done: nudges (the work function),
    # handed copies (the result function), cron copies (a schedule invoking the cron function, fired
    # here: moto's Scheduler never fires one); and when none is left while the run is still parked,
    # the chain's next check, as SQS delivers it once its delay is over (a lost nudge or hand-off)
    deadline = time.monotonic() + 120
    while True:
        handled: list[Any] = []
        for nudge in _visible_work(stack):
            _retried(lambda nudge=nudge: check(nudge))
            handled.append(nudge)
        handled += stack.results()
        for name in sorted(x["Name"] for x in scheduler.list_schedules(GroupName=group)["Schedules"]):
            if name not in fired:
                handled.append(fire(name))
        run = stack.store.records.get_run(run_id)
        assert run is not None
        if run.status == "succeeded":
            break
        assert time.monotonic() < deadline, f"the run did not resume: {run.status}"
        if not handled and run.status == "parked":
            assert stack.notes() == [] and stack.dlqs_empty()  # parked: no note, nothing dead-lettered
            _retried(lambda due=next_check(): check(due))
        time.sleep(0.2)
    # THEN the gated tool ran exactly once on approval and never on rejection; the run succeeded with
    # one note; the request was delivered once; the decision stands as written; nothing is in a DLQ.
    # The one edge (docs/durability.md, side effects): the tool's own step not written after its call
    # is redone with the same Idempotency-Key, which its server drops
    if (phase, at) == ("cronresume", RESUME_TOOL_STEP) and decision == "approve":
        assert list(tool.calls) == [f"{run_id}#0#0"]
    else:
        assert tool.calls == (Counter({f"{run_id}#0#0": 1}) if decision == "approve" else Counter())
    assert len(stack.notes()) == 1 and stack.dlqs_empty()
    assert receiver.by_delivery_id()[approval_delivery_id(run_id, 0, 0)] == 1
    final = stack.store.approvals.get(request_id)
    assert final is not None and final.resumed_at is not None
    assert (final.state, final.decided_by, final.decided_at) == (wanted, approval.decided_by, approval.decided_at)


def test_a_crash_between_the_decision_and_its_nudge_leaves_the_chain_to_requeue(
    stack: Stack, tool: ToolServer, receiver: CountingReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a parked run, and a decision whose process dies after its transaction, before the nudge
    parked(stack, tool, receiver)
    (first,) = stack.checks()
    nudge = ApprovalsService.nudge

    def killed(self: ApprovalsService, approval: Approval) -> None:
        raise ConnectionError("injected: the process died")

    monkeypatch.setattr(ApprovalsService, "nudge", killed)
    with pytest.raises(ConnectionError):
        stack.approvals.decide(APPROVAL, "approve", by="bob", via="cli")
    # WHEN the operator, told nothing, decides again (the process is well again)
    monkeypatch.setattr(ApprovalsService, "nudge", nudge)
    assert stack.approvals.decide(APPROVAL, "approve", by="bob", via="cli").state == "approved"
    # THEN the first decision stands, answered as stored, and no nudge was sent: the run is still
    # parked, with no note, nothing in a DLQ, nothing called
    assert stack.nudges() == [] and stack.work() == []
    assert stack.store.records.get_run(RUN).status == "parked"  # type: ignore[union-attr]
    assert tool.calls == Counter() and stack.notes() == [] and stack.dlqs_empty()
    # WHEN the chain's check comes (the park sent it, due within 900 s)
    stack.check(first)
    assert all(a == {"batchItemFailures": []} for a in stack.results())
    # THEN it re-queued the run, which resumed and called the tool once
    assert tool.calls == Counter({f"{RUN}#0#0": 1})
    assert stack.store.records.get_run(RUN).status == "succeeded"  # type: ignore[union-attr]
    assert len(stack.notes()) == 1 and stack.dlqs_empty()


# --- what a park costs, and the cron trigger ----------------------------------------------------


def test_a_park_costs_its_reads_its_request_and_one_park_transaction(
    stack: Stack, tool: ToolServer, receiver: CountingReceiver
) -> None:
    from tests.support.probes import DynamoCalls

    # GIVEN a session whose agent calls a gated tool at step 0
    gated_session(stack.store, tool, receiver)
    counter = DynamoCalls(stack.store.table.db)
    sends_before = len(stack.sqs.sent)
    # WHEN the producer's completion wakes it and it parks
    calls = counter.during(stack.wake)
    # THEN the wake's batch read, its start (the lease, then the attempt), the history window, the
    # reply (it calls a tool), the request, the wait list's read for the hand-off and the park: one
    # transaction each; then the lease's release
    assert calls == [
        "BatchGetItem",
        "PutItem",
        "UpdateItem",
        "Query",
        "PutItem",
        "TransactWriteItems",
        "Query",
        "TransactWriteItems",
        "DeleteItem",
    ], calls
    # AND one SQS send (the expiry's first check) and one delivery (the request)
    assert len(stack.sqs.sent) - sends_before == 1 and len(receiver.received) == 1


def test_a_cron_run_that_parks_returns_success_spending_no_retry(
    stack: Stack, tool: ToolServer, receiver: CountingReceiver
) -> None:
    from agentwake.domain.run_models import Job
    from agentwake.handlers import cron_wake

    # GIVEN a job whose run calls a gated tool
    gated_session(stack.store, tool, receiver)
    stack.store.records.put_job(
        Job(job_id="j1", session_id="s1", name="Nightly", schedule_expression="cron(0 6 * * ? *)")
    )
    event = {"job_id": "j1", "scheduled_time": "2026-12-03T06:00:00Z", "session_id": "s1"}
    # WHEN the schedule invokes the cron function
    answer = cron_wake.handler(event, FakeLambdaContext())
    # THEN the invocation succeeded, saying the run parked (no Lambda retry, no on-failure record)
    run_id = "cron:j1:2026-12-03T06:00:00Z"
    assert answer["status"] == "parked" and answer["run_id"] == run_id
    run = stack.store.records.get_run(run_id)
    assert run is not None and run.status == "parked" and run.waiting_for == approval_id(run_id, 0, 0)
    job = stack.store.records.get_job("j1")
    assert job is not None and job.status == "parked" and job.consecutive_failures == 0
    request = stack.store.approvals.get(approval_id(run_id, 0, 0))
    assert request is not None and request.kind == "cron" and request.resume is not None
    assert json.loads(request.resume["body"])["job_id"] == "j1"
    assert tool.calls == Counter() and stack.notes() == []
    # WHEN it is approved and the decision's nudge runs
    stack.approvals.decide(request.approval_id, "approve", by="ops", via="cli")
    assert all(a == {"batchItemFailures": []} for a in stack.work())
    # THEN its copy is a one-time schedule invoking the function the run came through (moto's
    # scheduler stores it and never fires it)
    client = boto3.client("scheduler", region_name=REGION)
    names = [x["Name"] for x in client.list_schedules(GroupName=stack.resources.schedule_group)["Schedules"]]
    (handed,) = [client.get_schedule(Name=n, GroupName=stack.resources.schedule_group) for n in names]
    assert handed["Target"]["Arn"] == FakeLambdaContext.invoked_function_arn  # the function it came through
    # WHEN it fires: the run resumes, calls the tool once and succeeds
    answer = cron_wake.handler(json.loads(handed["Target"]["Input"]), FakeLambdaContext())
    assert answer["status"] == "succeeded", answer
    assert tool.calls == Counter({f"{run_id}#0#0": 1}) and len(stack.notes()) == 1


# --- the decision service -----------------------------------------------------------------------


def _pending(store: DynamoStore, run_id: str = "bg:t1", session_id: str = "s1") -> tuple[Approval, str]:
    """A pending request of tool call 0 of step 0 of ``run_id``, as the park writes it, and its token."""
    store.table.db.put_item(
        TableName=store.table.name,
        Item=store.table.item(RunRecord(run_id=run_id, kind="background", session_id=session_id), *run_key(run_id)),
    )
    token = new_token()
    approval = Approval(
        approval_id=approval_id(run_id, 0, 0),
        run_id=run_id,
        session_id=session_id,
        step=0,
        call_index=0,
        tool="create_ticket",
        arguments={"amount": 500},
        requested_at=utcnow_iso(),
        expiry_at="2099-01-01T00:00:00Z",
        expiry_epoch=4070908800.0,
        token_sha256=token_sha256(token),
    )
    assert store.approvals.request(approval, {"approval_id": approval.approval_id}).token_current
    return approval, token


def _work_messages(resources: Resources) -> list[dict[str, Any]]:
    sqs = boto3.client("sqs", region_name=REGION)
    got = sqs.receive_message(QueueUrl=resources.work_queue_url, MaxNumberOfMessages=10).get("Messages", [])
    return [json.loads(m["Body"]) for m in got]


@pytest.fixture
def service(store: DynamoStore, resources: Resources) -> ApprovalsService:
    seed_session(store, "s1")
    return ApprovalsService(store, WorkQueue(resources.work_queue_url))


def test_a_second_different_decision_is_refused_saying_what_was_decided(
    store: DynamoStore, service: ApprovalsService, resources: Resources
) -> None:
    # GIVEN a pending request
    approval, _ = _pending(store)
    # WHEN its session's owner rejects it, then someone approves it
    decided = service.decide(
        approval.approval_id, "reject", by=None, via="api", reason="wrong customer", principal=PRODUCT_CALLER
    )
    with pytest.raises(ApprovalAlreadyDecided) as refused:
        service.decide(approval.approval_id, "approve", by="ops", via="cli")
    # THEN the second is refused naming what, who, when and why; the same decision again answers as stored
    assert decided.state == "rejected"
    said = str(refused.value)
    assert "rejected" in said and PRODUCT_CALLER in said and decided.decided_at in said and "wrong customer" in said
    again = service.decide(approval.approval_id, "reject", by="ops", via="cli")
    assert again.decided_by == PRODUCT_CALLER and again.reason == "wrong customer"
    # and the journal holds the one decision, the run names it, one nudge went to the work queue
    step = store.journals.journal_entries("bg:t1")[decision_key(0, 0)]
    assert (step["decision"], step["by"], step["reason"]) == ("rejected", PRODUCT_CALLER, "wrong customer")
    run = store.table.read_item(*run_key("bg:t1"))
    assert run is not None and run["decided"]["S"] == approval.approval_id
    nudges = [m for m in _work_messages(resources) if m.get("nudge")]
    assert [(m["kind"], m["approval_id"]) for m in nudges] == [("approval", approval.approval_id)]


def test_the_token_decides_and_a_forged_token_does_not(store: DynamoStore, service: ApprovalsService) -> None:
    approval, token = _pending(store)
    with pytest.raises(ForgedDecision):
        service.decide(approval.approval_id, "approve", by="mallory", via="api", token=new_token())
    assert store.approvals.get(approval.approval_id).state == "pending"  # type: ignore[union-attr]
    decided = service.decide(approval.approval_id, "approve", by="bob", via="api", token=token)
    assert (decided.state, decided.decided_by, decided.decided_via) == ("approved", "bob", "api-token")


def test_another_principal_is_told_the_request_does_not_exist(store: DynamoStore, service: ApprovalsService) -> None:
    approval, _ = _pending(store)
    with pytest.raises(UnknownApproval):
        service.decide(
            approval.approval_id, "approve", by=None, via="api", principal="arn:aws:iam::123456789012:role/other"
        )
    with pytest.raises(UnknownApproval):
        service.decide("apr-000000000000000000000000", "approve", by=None, via="cli")


def test_the_service_lists_a_sessions_requests_by_state(store: DynamoStore, service: ApprovalsService) -> None:
    # (who may list them is the router's owner check: test_product_api_approvals.py refuses a stranger)
    approval, _ = _pending(store)
    page, cursor = service.session_approvals("s1", state="pending")
    assert [a.approval_id for a in page] == [approval.approval_id] and cursor is None
    assert service.session_approvals("s1", state="approved")[0] == []
    assert [a.approval_id for a in store.approvals.all_approvals(state="pending")] == [approval.approval_id]
