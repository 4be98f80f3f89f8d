"""Every task ends, with one truthful outcome (docs/durability.md, "Task outcomes"): the claim before
the send (product/tasks.py), the deadline (wake/task_deadline.py), cancel, late completions and the
second outcome after a redrive — each shown by the wakes that reach the background-result function."""

from __future__ import annotations

import copy
import json
import time
import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest

from agentwake.domain.models import Task, task_token_hash
from agentwake.errors import TaskAlreadyEnded
from agentwake.handlers import background_result
from agentwake.product.tasks import TasksService
from agentwake.settings import Settings
from agentwake.store.dynamo import DynamoStore
from agentwake.store.queues import WorkQueue
from agentwake.wake.messages import WorkMessage
from agentwake.wake.spec import WakeDeps
from agentwake.wake.task_deadline import check_deadline
from tests.support.aws import REGION, FakeLambdaContext, Resources
from tests.support.builders import seed_session
from tests.support.clock import FakeClock
from tests.support.faults import CallFaults

EVENTS = Path(__file__).resolve().parents[2] / "events"


class RecordingSqs:
    """The real (moto) SQS client, with every send_message recorded (the deadline checks are delayed,
    so a receive would not see them yet)."""

    def __init__(self, fail_sends: int = 0) -> None:
        self.client = boto3.client("sqs", region_name=REGION)
        self.sent: list[dict[str, Any]] = []
        self.fail_sends = fail_sends

    def send_message(self, **kw: Any) -> dict[str, Any]:
        if self.fail_sends:
            self.fail_sends -= 1
            raise ConnectionError("injected: the sender crashed before the message was sent")
        self.sent.append(kw)
        return self.client.send_message(**kw)

    def to(self, url: str) -> list[dict[str, Any]]:
        return [s for s in self.sent if s["QueueUrl"] == url]


def service(store: DynamoStore, resources: Resources, sqs: RecordingSqs) -> TasksService:
    return TasksService(store, resources.queue_url, sqs=sqs, work_queue=WorkQueue(resources.work_queue_url, client=sqs))


def deadline_message(sqs: RecordingSqs, resources: Resources) -> WorkMessage:
    sent = sqs.to(resources.work_queue_url)
    assert sent, "no deadline check was sent"
    return WorkMessage.parse_body(sent[-1]["MessageBody"])


def check_at(check: WorkMessage, wall: float, store: DynamoStore, resources: Resources, sqs: RecordingSqs) -> None:
    """The deadline check as the background-work function runs it, its clock at ``wall``."""
    tasks = service(store, resources, sqs)
    deps = WakeDeps(store=store, settings=Settings.from_env(), clock=FakeClock(start=wall), tasks=tasks)
    check_deadline(check, deps, remaining_ms=60_000, receive_count=1)


def deliver_results(resources: Resources) -> list[dict[str, Any]]:
    """Every visible completion on the result queue through BackgroundResultFunction's handler (then
    deleted, as the poller does); returns the bodies delivered."""
    sqs = boto3.client("sqs", region_name=REGION)
    template = json.loads((EVENTS / "background-result-success.json").read_text())["Records"][0]
    bodies: list[dict[str, Any]] = []
    while True:
        got = sqs.receive_message(QueueUrl=resources.queue_url, MaxNumberOfMessages=10, VisibilityTimeout=60)
        msgs = got.get("Messages", [])
        if not msgs:
            return bodies
        records = []
        for m in msgs:
            record = copy.deepcopy(template)
            record.update(messageId=str(uuid.uuid4()), body=m["Body"])
            records.append(record)
            bodies.append(json.loads(m["Body"]))
        response = background_result.handler({"Records": records}, FakeLambdaContext())
        assert response == {"batchItemFailures": []}, response
        for m in msgs:
            sqs.delete_message(QueueUrl=resources.queue_url, ReceiptHandle=m["ReceiptHandle"])


def wake_runs(store: DynamoStore, task_id: str) -> dict[str, str]:
    """The wake runs of a task's outcomes that exist: run id → status."""
    out = {}
    for run_id in (f"bg:{task_id}", f"bg:{task_id}:2", f"bg:{task_id}:3"):
        run = store.records.get_run(run_id)
        if run is not None:
            out[run_id] = run.status
    return out


def notes(store: DynamoStore, session_id: str) -> list[str]:
    """The heads of the session's background notes (before the agent's final answer)."""
    entries = store.history.history(session_id)
    return [e.content.split("\n\n")[0] for e in entries if e.content.startswith("[BackgroundTask]")]


def test_registering_sends_a_deadline_check_delayed_until_due_at_most_900_s(
    store: DynamoStore, resources: Resources
) -> None:
    # GIVEN a session whose tasks end after 2 hours, and a producer that gives one task 120 s
    seed_session(store, "s1", task_deadline_s=7200)
    sqs = RecordingSqs()
    tasks = service(store, resources, sqs)
    # WHEN it registers a task with the session's deadline and one with its own
    long = tasks.register_task("s1", "research")
    before = time.monotonic()
    short = tasks.register_task("s1", "research", deadline_s=120)
    took = time.monotonic() - before  # the machine's time between its deadline and its send, bounded here
    # THEN each task carries its deadline, and a deadline check waits on the work queue: at most
    # SQS's 900 s for the long one, exactly until due for the short one
    sent = sqs.to(resources.work_queue_url)
    assert sent[0]["DelaySeconds"] == 900
    assert 120 - took - 1 <= sent[1]["DelaySeconds"] <= 120, (sent[1]["DelaySeconds"], took)
    first = WorkMessage.parse_body(sent[0]["MessageBody"])
    assert (first.kind, first.task_id, first.session_id) == ("deadline", long.task_id, "s1")
    stored = store.records.get_task(long.task_id)
    assert stored is not None and stored.deadline_at == first.deadline_at
    assert store.records.get_task(short.task_id).deadline_at < stored.deadline_at  # type: ignore[union-attr,operator]


def test_a_check_before_the_deadline_sends_itself_again_with_the_next_delay(
    store: DynamoStore, resources: Resources
) -> None:
    # GIVEN a task due in an hour
    seed_session(store, "s1")
    sqs = RecordingSqs()
    reg = service(store, resources, sqs).register_task("s1", "research", deadline_s=3600)
    check = deadline_message(sqs, resources)
    due = time.time() + 3600
    # WHEN its check comes 900 s in, and the check it sent comes 300 s before it is due
    check_at(check, due - 2700, store, resources, sqs)
    check_at(deadline_message(sqs, resources), due - 300, store, resources, sqs)
    # THEN each sent the check again, delayed by what is left (at most 900 s), and the task still runs
    client = boto3.client("sqs", region_name=REGION)
    attrs = client.get_queue_attributes(QueueUrl=resources.work_queue_url, AttributeNames=["All"])["Attributes"]
    assert int(attrs["ApproximateNumberOfMessagesDelayed"]) == 3
    task = store.records.get_task(reg.task_id)
    assert task is not None and task.status == "running" and task.outcome is None
    assert client.receive_message(QueueUrl=resources.queue_url).get("Messages") is None  # no completion


def checks_sent(sqs: RecordingSqs, resources: Resources) -> list[WorkMessage]:
    return [WorkMessage.parse_body(s["MessageBody"]) for s in sqs.to(resources.work_queue_url)]


def test_a_check_delivered_twice_keeps_one_chain_of_checks(store: DynamoStore, resources: Resources) -> None:
    # GIVEN a task due in an hour
    seed_session(store, "s1")
    sqs = RecordingSqs()
    reg = service(store, resources, sqs).register_task("s1", "research", deadline_s=3600)
    (first,) = checks_sent(sqs, resources)
    due = time.time() + 3600
    # WHEN SQS delivers its first check twice (at least once), 900 s in
    check_at(first, due - 2700, store, resources, sqs)
    check_at(first, due - 2690, store, resources, sqs)
    # THEN each copy sent a successor (the second cannot know the first did not crash before its send)
    a, b = checks_sent(sqs, resources)[1:]
    assert a.after_check == b.after_check == first.check_id
    # WHEN both successors come: the first takes the chain's place and goes on, the other retires
    check_at(a, due - 1800, store, resources, sqs)
    check_at(b, due - 1790, store, resources, sqs)
    (c,) = checks_sent(sqs, resources)[3:]
    assert c.after_check == a.check_id
    # WHEN the chain's check comes once more and both of its copies' successors come
    check_at(c, due - 900, store, resources, sqs)
    check_at(c, due - 890, store, resources, sqs)
    d, e = checks_sent(sqs, resources)[4:]
    check_at(e, due - 300, store, resources, sqs)
    check_at(d, due - 290, store, resources, sqs)
    # THEN one chain goes on: of the five early checks after the first, each sent at most one
    # successor, and only one successor of each check sent one
    assert [m.after_check for m in checks_sent(sqs, resources)[6:]] == [e.check_id]
    task = store.records.get_task(reg.task_id)
    assert task is not None and task.outcome is None
    # WHEN a retired check is delivered after the deadline THEN it ends the task all the same (a due
    # check with the task's token ends it whatever its place), once: the chain's last check changes nothing
    check_at(d, due + 1, store, resources, sqs)
    check_at(checks_sent(sqs, resources)[-1], due + 2, store, resources, sqs)
    assert [b["status"] for b in deliver_results(resources)] == ["failed"]
    assert wake_runs(store, reg.task_id) == {f"bg:{reg.task_id}": "succeeded"}


def test_a_retried_start_after_the_chain_moved_on_begins_a_new_chain_that_ends_the_task(
    store: DynamoStore, resources: Resources
) -> None:
    # GIVEN a task whose chain of checks has moved on once
    seed_session(store, "s1")
    sqs = RecordingSqs()
    tasks = service(store, resources, sqs)
    reg = tasks.register_task("s1", "research", deadline_s=3600)
    due = time.time() + 3600
    check_at(checks_sent(sqs, resources)[0], due - 2700, store, resources, sqs)
    old_chain = checks_sent(sqs, resources)[-1]
    # WHEN a retried start gives the task a new token and sends its first check (as wake/start_task does)
    token = f"awt_{uuid.uuid4().hex}"
    assert store.records.rotate_task_token(reg.task_id, task_token_hash(token))
    rotated = store.records.get_task(reg.task_id)
    assert rotated is not None
    tasks.send_deadline_check(rotated, token)
    new_chain = checks_sent(sqs, resources)[-1]
    # THEN the old chain's check retires, and the new one goes on to end the task at its deadline, once
    sends = len(sqs.to(resources.work_queue_url))
    check_at(old_chain, due - 1800, store, resources, sqs)
    assert len(sqs.to(resources.work_queue_url)) == sends
    check_at(new_chain, due - 1790, store, resources, sqs)
    assert checks_sent(sqs, resources)[-1].after_check == new_chain.check_id
    check_at(checks_sent(sqs, resources)[-1], due + 1, store, resources, sqs)
    assert [b["status"] for b in deliver_results(resources)] == ["failed"]
    assert wake_runs(store, reg.task_id) == {f"bg:{reg.task_id}": "succeeded"}


def test_a_task_past_its_deadline_completes_failed_once_and_wakes_once(
    store: DynamoStore, resources: Resources
) -> None:
    # GIVEN a task registered with a 60 s deadline that nobody completes
    seed_session(store, "s1")
    sqs = RecordingSqs()
    tasks = service(store, resources, sqs)
    reg = tasks.register_task("s1", "Research", deadline_s=60)
    check = deadline_message(sqs, resources)
    # WHEN its check comes past the deadline, twice (SQS delivers at least once)
    past = time.time() + 61
    check_at(check, past, store, resources, sqs)
    check_at(check, past, store, resources, sqs)
    delivered = deliver_results(resources)
    # THEN one failed completion "timed out" was sent, and it woke the agent once, saying it failed
    assert [(b["status"], b["result_text"]) for b in delivered] == [("failed", "timed out: no completion within 60 s")]
    assert wake_runs(store, reg.task_id) == {f"bg:{reg.task_id}": "succeeded"}
    assert notes(store, "s1") == [
        f"[BackgroundTask] Research (task_id={reg.task_id}) failed: timed out: no completion within 60 s"
    ]
    task = store.records.get_task(reg.task_id)
    assert task is not None and (task.outcome, task.outcomes, task.status) == ("failed", 1, "woken")
    assert task.timed_out_at is not None
    # AND the real completion arriving later changes nothing: the caller is told, it is counted as late
    with pytest.raises(TaskAlreadyEnded, match="timed out"):
        tasks.finish_task(reg.task_id, "succeeded", "done at last", task_token=reg.task_token)
    assert deliver_results(resources) == []
    assert store.records.get_task(reg.task_id).late_completions == 1  # type: ignore[union-attr]


@pytest.mark.parametrize("first", ["deadline", "completion"])
def test_a_completion_racing_the_deadline_in_the_same_second_leaves_one_outcome_and_one_wake(
    first: str, store: DynamoStore, resources: Resources
) -> None:
    # GIVEN a task whose deadline has just passed, and its real completion arriving in the same second
    seed_session(store, "s1")
    sqs = RecordingSqs()
    tasks = service(store, resources, sqs)
    reg = tasks.register_task("s1", "Research", deadline_s=60)
    check = deadline_message(sqs, resources)
    past = time.time() + 60

    def deadline() -> None:
        check_at(check, past, store, resources, sqs)

    def completion() -> None:
        try:
            tasks.finish_task(reg.task_id, "succeeded", "the answer", task_token=reg.task_token)
        except TaskAlreadyEnded:
            pass

    # WHEN both run, in either order
    for step in (deadline, completion) if first == "deadline" else (completion, deadline):
        step()
    delivered = deliver_results(resources)
    # THEN the first one's outcome is the task's, sent once, and it woke the agent once
    want = "failed" if first == "deadline" else "succeeded"
    assert [b["status"] for b in delivered] == [want]
    assert wake_runs(store, reg.task_id) == {f"bg:{reg.task_id}": "succeeded"}
    task = store.records.get_task(reg.task_id)
    assert task is not None and (task.outcome, task.outcomes) == (want, 1)
    assert task.late_completions == (1 if first == "deadline" else 0)
    [note] = notes(store, "s1")
    assert ("failed: timed out" in note) == (first == "deadline")
    assert ("finished. Result: the answer" in note) == (first == "completion")


def test_a_cancelled_task_never_wakes_and_a_later_completion_is_recorded_as_late(
    store: DynamoStore, resources: Resources
) -> None:
    # GIVEN a running task
    seed_session(store, "s1")
    sqs = RecordingSqs()
    tasks = service(store, resources, sqs)
    reg = tasks.register_task("s1", "Research", deadline_s=60)
    check = deadline_message(sqs, resources)
    # WHEN it is cancelled (twice: a retried cancel) and its work then completes, both through
    # finish_task and straight onto the result queue, and its deadline passes
    cancelled = tasks.cancel_task(reg.task_id, by="operator")
    assert tasks.cancel_task(reg.task_id, by="operator").cancelled_at == cancelled.cancelled_at
    with pytest.raises(TaskAlreadyEnded, match="was cancelled"):
        tasks.finish_task(reg.task_id, "succeeded", "done", task_token=reg.task_token)
    direct = {
        "task_id": reg.task_id,
        "session_id": "s1",
        "task_token": reg.task_token,
        "status": "succeeded",
        "result_text": "done",
        "finished_at": "2026-11-30T05:00:00Z",
    }
    boto3.client("sqs", region_name=REGION).send_message(QueueUrl=resources.queue_url, MessageBody=json.dumps(direct))
    deliver_results(resources)
    check_at(check, time.time() + 61, store, resources, sqs)
    # THEN nothing woke the agent: no run, no note; the task is cancelled, failed, with two late completions
    assert wake_runs(store, reg.task_id) == {}
    assert notes(store, "s1") == []
    assert deliver_results(resources) == []  # the deadline sent nothing either
    task = store.records.get_task(reg.task_id)
    assert task is not None
    assert (task.status, task.outcome, task.outcome_reason) == ("cancelled", "failed", "cancelled by operator")
    assert task.late_completions == 2 and task.timed_out_at is None


def test_a_completed_task_cannot_be_cancelled(store: DynamoStore, resources: Resources) -> None:
    # GIVEN a task whose completion was sent
    seed_session(store, "s1")
    tasks = service(store, resources, RecordingSqs())
    reg = tasks.register_task("s1", "Research")
    tasks.finish_task(reg.task_id, "succeeded", "done", task_token=reg.task_token)
    # WHEN it is cancelled THEN the caller is told it already completed, and nothing changed
    with pytest.raises(TaskAlreadyEnded, match="already completed: succeeded"):
        tasks.cancel_task(reg.task_id, by="operator")
    task = store.records.get_task(reg.task_id)
    assert task is not None and (task.status, task.outcome, task.cancelled_at) == ("finished", "succeeded", None)


def _worker_task(store: DynamoStore, task_id: str, kind: str = "tool") -> str:
    token = f"awt_worker-{task_id}"
    store.records.put_task(
        Task(
            task_id=task_id,
            session_id="s1",
            tool_name="Research",
            token_sha256=task_token_hash(token),
            kind=kind,  # type: ignore[arg-type]
            started_by="cron:j1:2026-11-30T05:00:00Z",
        )
    )
    return token


def test_a_success_after_a_redrive_of_a_failed_worker_wakes_bg_task_2_once(
    store: DynamoStore, resources: Resources
) -> None:
    # GIVEN a background tool's task whose worker failed on its last attempt (completed failed), and
    # the agent woken for it
    seed_session(store, "s1")
    tasks = service(store, resources, RecordingSqs())
    token = _worker_task(store, "t-redrive")
    tasks.finish_task("t-redrive", "failed", "the tool raised TimeoutError", task_token=token)
    deliver_results(resources)
    # WHEN the worker is redriven and succeeds, and (its retry) completes succeeded once more
    tasks.finish_task("t-redrive", "succeeded", "the answer", task_token=token)
    tasks.finish_task("t-redrive", "succeeded", "the answer", task_token=token)
    delivered = deliver_results(resources)
    # THEN the second outcome was sent (twice: the same claim), and woke bg:t-redrive:2 exactly once
    assert [(b["status"], b["outcome"]) for b in delivered] == [("succeeded", 2), ("succeeded", 2)]
    assert wake_runs(store, "t-redrive") == {"bg:t-redrive": "succeeded", "bg:t-redrive:2": "succeeded"}
    assert notes(store, "s1") == [
        "[BackgroundTask] Research (task_id=t-redrive) failed: the tool raised TimeoutError",
        "[BackgroundTask] Research (task_id=t-redrive) succeeded after a redrive. Result: the answer",
    ]
    task = store.records.get_task("t-redrive")
    assert task is not None and (task.outcome, task.outcomes, task.run_id) == ("succeeded", 2, "bg:t-redrive:2")
    # AND a failure reported after that changes nothing (never a third outcome)
    with pytest.raises(TaskAlreadyEnded, match="already completed: succeeded"):
        tasks.finish_task("t-redrive", "failed", "again", task_token=token)
    assert deliver_results(resources) == []


def test_a_producers_task_has_one_outcome_whatever_it_sends_later(store: DynamoStore, resources: Resources) -> None:
    # GIVEN a producer's task completed failed
    seed_session(store, "s1")
    tasks = service(store, resources, RecordingSqs())
    token = _worker_task(store, "t-prod", kind="producer")
    tasks.finish_task("t-prod", "failed", "it broke", task_token=token)
    # WHEN the producer then says it succeeded
    with pytest.raises(TaskAlreadyEnded, match="already completed: failed"):
        tasks.finish_task("t-prod", "succeeded", "it works", task_token=token)
    # THEN one outcome, one wake: only a background tool's or subagent's redriven worker makes a second
    deliver_results(resources)
    assert wake_runs(store, "t-prod") == {"bg:t-prod": "succeeded"}
    assert store.records.get_task("t-prod").late_completions == 1  # type: ignore[union-attr]


def test_a_sender_that_crashed_after_its_claim_sends_on_retry_and_the_agent_wakes_once(
    store: DynamoStore, resources: Resources
) -> None:
    # GIVEN a completion whose send fails after the outcome was claimed
    seed_session(store, "s1")
    sqs = RecordingSqs()
    tasks = service(store, resources, sqs)
    reg = tasks.register_task("s1", "Research")
    sqs.fail_sends = 1
    with pytest.raises(ConnectionError):
        tasks.finish_task(reg.task_id, "succeeded", "the answer", task_token=reg.task_token)
    claimed = store.records.get_task(reg.task_id)
    assert claimed is not None and claimed.outcome == "succeeded" and claimed.status == "running"
    # WHEN the producer retries the same completion
    tasks.finish_task(reg.task_id, "succeeded", "the answer", task_token=reg.task_token)
    # THEN it was sent, and the agent woke once
    assert [b["status"] for b in deliver_results(resources)] == ["succeeded"]
    assert wake_runs(store, reg.task_id) == {f"bg:{reg.task_id}": "succeeded"}


@pytest.mark.parametrize(
    "text", ["a" * 250_000, "\u0001" * 150_000, "\U0001f600" * 90_000], ids=["too-long", "escaped", "4-byte"]
)
def test_a_result_too_large_for_one_sqs_message_is_cut_to_fit_and_wakes_the_agent_once(
    text: str, store: DynamoStore, resources: Resources
) -> None:
    # GIVEN a task whose worker (a subagent's answer, a tool's output) completes it with a text that
    # is longer than a result may be, or whose JSON is larger than one SQS message (256 KiB)
    seed_session(store, "s1")
    sqs = RecordingSqs()
    tasks = service(store, resources, sqs)
    reg = tasks.register_task("s1", "Research")
    # WHEN it completes the task
    tasks.finish_task(reg.task_id, "succeeded", text, task_token=reg.task_token)
    # THEN the completion was sent, within 256 KiB, its text cut with the visible marker, and the agent woke once
    (sent,) = sqs.to(resources.queue_url)
    assert len(sent["MessageBody"].encode()) <= 256 * 1024
    (body,) = deliver_results(resources)
    assert body["status"] == "succeeded" and "…[truncated " in body["result_text"]
    assert wake_runs(store, reg.task_id) == {f"bg:{reg.task_id}": "succeeded"}


def test_a_deadline_claim_whose_send_crashed_is_sent_by_the_retried_check(
    store: DynamoStore, resources: Resources
) -> None:
    # GIVEN a deadline check that claimed the timeout and then failed to send the completion
    seed_session(store, "s1")
    sqs = RecordingSqs()
    reg = service(store, resources, sqs).register_task("s1", "Research", deadline_s=60)
    check = deadline_message(sqs, resources)
    store.records.claim_task_outcome(
        reg.task_id, number=1, outcome="failed", reason="timed out", at="2026-11-30T05:00:00Z", by="deadline"
    )
    # WHEN SQS delivers the check again
    check_at(check, time.time() + 61, store, resources, sqs)
    # THEN the timed-out completion is sent now, and wakes the agent once
    assert [b["status"] for b in deliver_results(resources)] == ["failed"]
    assert wake_runs(store, reg.task_id) == {f"bg:{reg.task_id}": "succeeded"}


def test_a_deadline_check_with_an_older_token_retires_and_changes_nothing(
    store: DynamoStore, resources: Resources
) -> None:
    # GIVEN a task past its deadline, and a check carrying a token that is not (any more) the task's:
    # a retried start gave the task a new token and sent its own check
    seed_session(store, "s1")
    sqs = RecordingSqs()
    reg = service(store, resources, sqs).register_task("s1", "Research", deadline_s=60)
    stale = deadline_message(sqs, resources).model_copy(update={"task_token": "awt_not-it"})
    # WHEN it comes THEN it sends nothing, the task untouched (the newer check will end it)
    check_at(stale, time.time() + 61, store, resources, sqs)
    task = store.records.get_task(reg.task_id)
    assert task is not None and task.outcome is None and task.status == "running"
    assert deliver_results(resources) == []


@pytest.mark.parametrize("kind", ["server_error", "timeout_before", "timeout_after", "conditional"])
@pytest.mark.parametrize("at", [1, 2, 3])
def test_a_fault_at_any_call_of_a_completion_then_a_retry_makes_one_outcome_and_one_wake(
    at: int, kind: str, store: DynamoStore, resources: Resources
) -> None:
    # GIVEN a running task, and a fault at the at-th DynamoDB call of its completion (the read, the
    # claim, the finished mark)
    seed_session(store, "s1")
    sqs = RecordingSqs()
    tasks = service(store, resources, sqs)
    reg = tasks.register_task("s1", "Research")
    faults = CallFaults(store.records.table.db)
    faults.arm(at, kind)
    # WHEN the producer completes it, and retries while it gets an error (as it should when unsure)
    for _ in range(3):
        try:
            tasks.finish_task(reg.task_id, "succeeded", "the answer", task_token=reg.task_token)
            break
        except Exception:  # noqa: BLE001 - the injected fault, whatever botocore made of it
            continue
    faults.arm(None)
    # THEN every completion sent says the one outcome, and the agent woke once
    delivered = deliver_results(resources)
    assert delivered and {(b["status"], b["outcome"]) for b in delivered} == {("succeeded", 1)}
    assert wake_runs(store, reg.task_id) == {f"bg:{reg.task_id}": "succeeded"}
    task = store.records.get_task(reg.task_id)
    assert task is not None and (task.outcome, task.outcomes, task.late_completions) == ("succeeded", 1, 0)


def test_a_cancel_during_the_wake_of_an_unclaimed_completion_leaves_no_note(
    store: DynamoStore, resources: Resources
) -> None:
    """A completion a producer sent straight to the queue runs without a claim (the wake's round trips
    stay as they are); a cancel that lands while that wake runs must still win: no note says the task
    finished, and the retry finds the outcome claimed and changes nothing."""
    from agentwake.errors import AgentwakeError
    from agentwake.wake.background import wake_for_background_result
    from agentwake.wake.messages import BackgroundResultMessage

    seed_session(store, "s1")
    sqs = RecordingSqs()
    tasks = service(store, resources, sqs)
    reg = tasks.register_task("s1", "Research", deadline_s=600)
    direct = {
        "task_id": reg.task_id,
        "session_id": "s1",
        "task_token": reg.task_token,
        "status": "succeeded",
        "result_text": "done",
        "finished_at": "2026-11-30T05:00:00Z",
    }
    msg = BackgroundResultMessage.parse_body(json.dumps(direct))
    deps = WakeDeps(store=store, settings=Settings.from_env(), tasks=tasks)
    commit = store.ends.commit_success

    def cancel_then_commit(**kw: Any) -> Any:
        tasks.cancel_task(reg.task_id, by="operator")  # lands between the wake's start and its commit
        return commit(**kw)

    store.ends.commit_success = cancel_then_commit  # type: ignore[method-assign]
    # WHEN the wake runs and the task is cancelled before its commit
    with pytest.raises(AgentwakeError):
        wake_for_background_result(msg, deps)
    store.ends.commit_success = commit  # type: ignore[method-assign]
    # THEN no note was written and the task stays cancelled (never woken)
    assert notes(store, "s1") == []
    task = store.records.get_task(reg.task_id)
    assert task is not None and (task.status, task.outcome) == ("cancelled", "failed")
    # AND the retry of the record changes nothing: late
    assert wake_for_background_result(msg, deps).status == "late"
    assert notes(store, "s1") == []
    assert store.records.get_run(f"bg:{reg.task_id}").status != "succeeded"  # type: ignore[union-attr]
