"""A busy session makes wakes wait, never dead-letters them for it (issue 11; docs/durability.md).

The REAL template.yaml and handlers on the embedded local AWS in its "up" mode: Lambda's SQS
poller runs as many invocations at once as the event source's MaximumConcurrency (5 in the
template), async invocations run concurrently, one-time schedules fire. The webhook is a real
HTTP server on 127.0.0.1 answering in about a second. The visibility timeout is short (30 s
instead of 720 s) and a wake's pause between tries at most 4 s (SessionWaitMaxDelay), so that
the test takes about a minute or two; every wait below is a condition with a generous bound.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from agentwake.domain.models import SessionConfig
from agentwake.domain.run_models import Job
from agentwake.product.tasks import TasksService
from agentwake.store.dynamo import DynamoStore
from agentwake.store.queues import ATTR_ERROR_TYPE, ATTR_REASON
from agentwake_local.stack import LocalStackRuntime, read_state
from agentwake_ops.cli import app
from agentwake_ops.cli_common import CliState
from agentwake_ops.context import OpsOptions, build_context, discover
from agentwake_ops.runs import run_summary
from tests.support.builders import OK_SCRIPT, local_stack_rules
from tests.support.local_stack import local_stack, stack_store
from tests.support.receiver import CountingReceiver
from tests.support.store_writes import acquire_lease, lease_holder

PARAMETERS = {"QueueVisibilityTimeout": 30, "SessionWaitMaxDelay": 4}
#: completions in the burst test: 12 in `make test`, 50 under `make load` (a minute of webhook time alone).
#: More than one batch (BatchSize 10) on purpose: a second consumer then receives while the first
#: invocation is still busy (a second a delivery), so the runs must wait for each other. (Each run
#: holds the session a second or more: 20 cost the suite a minute on two busy cores, 12 show the same.)
BURST = int(os.environ.get("AGENTWAKE_BURST", "12"))
SCHEDULED_TIME = "2026-11-30T06:00:00Z"


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStackRuntime]:
    home = tmp_path_factory.mktemp("agentwake-home")
    with local_stack(home, PARAMETERS, background=True, async_retry_delays=0, poll_interval=0.5) as runtime:
        yield runtime


@pytest.fixture(scope="module")
def store(local: LocalStackRuntime) -> DynamoStore:
    return stack_store(local)


@pytest.fixture
def receiver() -> Iterator[CountingReceiver]:
    with CountingReceiver() as r:
        yield r


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def seed_session(store: DynamoStore, session_id: str, receiver: CountingReceiver) -> None:
    store.records.put_session(
        SessionConfig(
            session_id=session_id,
            providers=[{"type": "scripted", "id": "scripted", "script": OK_SCRIPT}],
            delivery={"type": "webhook", "url": receiver.url, "timeout": 90},
            retry_base_delay_ms=0,
        ),
        local_stack_rules(),  # written from this process, checked by the local stack's rules
    )


def cli_state(local: LocalStackRuntime) -> CliState:
    """The CLI on this module's local stack, found through its state file as `agentwake` finds it
    (without the liveness probe, which is not what these tests are about)."""
    state = read_state(local.home, check=False)
    assert state is not None and state["endpoint_url"] == local.endpoint_url
    return CliState(context=build_context(discover(OpsOptions(), {}, read_local_state=lambda: state)))


def wait_until(condition: Callable[[], Any], timeout: float, what: str, interval: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout:.0f} s: {what}")
        time.sleep(interval)


def queue_empty(local: LocalStackRuntime, logical_id: str) -> bool:
    attributes = local.client("sqs").get_queue_attributes(
        QueueUrl=local.stack.queue_url(logical_id),
        AttributeNames=[
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ],
    )["Attributes"]
    return all(int(v) == 0 for v in attributes.values())


def messages_of(local: LocalStackRuntime, logical_id: str, session_id: str) -> list[dict[str, Any]]:
    """Every message of a queue whose body names ``session_id`` (left visible)."""
    sqs, url = local.client("sqs"), local.stack.queue_url(logical_id)
    found, seen = [], set()
    for _ in range(20):
        batch = sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=2, MessageAttributeNames=["All"]
        ).get("Messages", [])
        for m in batch:
            if m["MessageId"] not in seen and session_id in m["Body"]:
                found.append(m)
            seen.add(m["MessageId"])
        if not batch:
            break
    for m in found:
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0)
    return found


def run_spans(store: DynamoStore, run_ids: list[str]) -> list[tuple[str, str, str]]:
    """(first, last, run id) of every run's journaled steps, recorded deliveries and end, in time
    order (the end: its commit's time; a succeeded run's last reply is not journaled)."""
    spans = []
    for run_id in run_ids:
        summary = run_summary(store, run_id)
        times = [s["at"] for s in summary.steps] + [d["at"] for d in summary.deliveries]
        times += [summary.run.ended_at] if summary.run is not None and summary.run.ended_at else []
        assert times, f"{run_id} journaled nothing"
        spans.append((min(times), max(times), run_id))
    return sorted(spans)


# --- a session held past the limit -------------------------------------------------------------


def test_a_session_held_past_the_limit_dead_letters_as_session_busy_and_redrives_once_free(
    local: LocalStackRuntime, store: DynamoStore, receiver: CountingReceiver
) -> None:
    # GIVEN a session leased by a long run (bg:holder-...) and a wait limit of 5 seconds
    session, holder = uid("session-held"), f"bg:{uid('holder')}"
    seed_session(store, session, receiver)
    token = acquire_lease(store, session, holder, 600)
    assert token is not None
    function = local.functions["BackgroundResultFunction"]
    tasks = TasksService(store, local.outputs["BackgroundResultQueueUrl"], sqs=local.client("sqs"))

    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(function.environment, "AGENTWAKE_SESSION_WAIT_LIMIT_S", "5")
        # WHEN a task of that session finishes and its result keeps finding the session busy
        registered = tasks.register_task(session, "web_research", {"query": "q"})
        task_id = registered.task_id
        tasks.finish_task(task_id, "succeeded", "the result", task_token=registered.task_token, summary_name="Research")
        [dead] = wait_until(
            lambda: messages_of(local, "BackgroundResultDLQ", session), 120, "the result is dead-lettered"
        )

    # THEN it is in the DLQ as SessionBusy, the reason naming the holder's run id
    attributes = {k: v["StringValue"] for k, v in dead["MessageAttributes"].items()}
    assert attributes[ATTR_ERROR_TYPE] == "SessionBusy"
    assert holder in attributes[ATTR_REASON] and attributes["agentwake-holder-run-id"] == holder
    # AND the run never started, but its failure is recorded; nothing was delivered or noted
    run_id = f"bg:{task_id}"
    run = store.records.get_run(run_id)
    assert run is not None and (run.status, run.attempts, run.last_error_type) == ("failed", 0, "SessionBusy")
    [failure] = store.ends.failures(run_id)
    assert failure.error_type == "SessionBusy" and failure.detail.startswith("never ran:") and holder in failure.detail
    assert store.history.history(session) == [] and receiver.received == []

    # AND `agentwake dlq list` / `dlq show` say it never ran because the session was busy
    runner = CliRunner()
    listed = runner.invoke(app, ["dlq", "list", "--queue", "results", "--json"], obj=cli_state(local))
    assert listed.exit_code == 0, listed.stdout + listed.stderr
    [row] = [r for r in json.loads(listed.stdout) if r["message_id"] == dead["MessageId"]]
    assert (row["run_id"], row["error_type"], row["attempts"]) == (run_id, "SessionBusy", 0)
    assert row["error"].startswith("never ran:") and holder in row["error"]
    shown = runner.invoke(app, ["dlq", "show", dead["MessageId"]], env={"COLUMNS": "250"}, obj=cli_state(local))
    assert shown.exit_code == 0, shown.stdout + shown.stderr
    assert "SessionBusy" in shown.stdout and "never ran" in shown.stdout and holder in shown.stdout

    # WHEN the holder finishes and the operator redrives the message
    store.leases.release(session, token)
    redrive = runner.invoke(
        app, ["dlq", "redrive", "--id", dead["MessageId"], "--queue", "results"], obj=cli_state(local)
    )
    assert redrive.exit_code == 0, redrive.stdout + redrive.stderr

    # THEN the run succeeds with its note and its delivery, and the DLQ holds nothing of it
    wait_until(
        lambda: (r := store.records.get_run(run_id)) is not None and r.status == "succeeded", 120, "redriven run"
    )
    assert [e.run_id for e in store.history.history(session) if e.kind == "note"] == [run_id]
    assert receiver.by_delivery_id() == {f"{run_id}#0#0": 1}
    assert messages_of(local, "BackgroundResultDLQ", session) == []


# --- a cron wake while a background run holds the session --------------------------------------


def test_a_cron_wake_on_a_busy_session_runs_after_the_holder_not_on_the_failure_queue(
    local: LocalStackRuntime, store: DynamoStore, receiver: CountingReceiver
) -> None:
    # GIVEN a job and a background task of one session; the task's run is in its delivery (held)
    session, job_id = uid("session-cron"), uid("job")
    seed_session(store, session, receiver)
    store.records.put_job(
        Job(
            job_id=job_id,
            session_id=session,
            name="Nightly report",
            description="summarise yesterday's sign-ups",
            schedule_expression="cron(0 6 * * ? *)",
        )
    )
    receiver.hold = hold = threading.Event()
    tasks = TasksService(store, local.outputs["BackgroundResultQueueUrl"], sqs=local.client("sqs"))
    registered = tasks.register_task(session, "web_research", {"query": "q"})
    task_id = registered.task_id
    tasks.finish_task(task_id, "succeeded", "the result", task_token=registered.task_token, summary_name="Research")
    bg_run = f"bg:{task_id}"
    wait_until(lambda: receiver.received, 120, "the background run is delivering")
    assert (lease_holder(store, session) or ("",))[0] == bg_run

    # WHEN the job's schedule fires meanwhile (an asynchronous invocation of the cron alias)
    first = local.invoke_async(
        local.outputs["CronWakeFunctionAliasArn"], {"job_id": job_id, "scheduled_time": SCHEDULED_TIME}
    ).wait(timeout=120)

    # THEN that invocation succeeded without running: it scheduled itself for later, no retry spent
    assert first.ok and len(first.attempts) == 1
    cron_run = f"cron:{job_id}:{SCHEDULED_TIME}"
    assert first.attempts[0].response == {"run_id": cron_run, "status": "waiting"}
    assert store.records.get_run(cron_run) is None
    scheduled = local.client("scheduler").list_schedules(GroupName=local.outputs["ScheduleGroupName"])["Schedules"]
    assert [s["Name"] for s in scheduled if re.match(r"wait-[0-9a-f]{32}-1$", s["Name"])]

    # WHEN the background run finishes
    hold.set()

    # THEN the cron wake runs after it, once, and succeeds; nothing is on CronFailureQueue
    wait_until(lambda: (r := store.records.get_run(cron_run)) is not None and r.status == "succeeded", 120, "cron run")
    run = store.records.get_run(cron_run)
    assert run is not None and run.attempts == 1 and store.ends.failures(cron_run) == []
    assert queue_empty(local, "CronFailureQueue")
    job = store.records.get_job(job_id)
    assert job is not None and job.status == "completed"
    # AND its journal starts after the background run's ends; history follows that order
    (bg_first, bg_last, first_run), (cron_first, _, second_run) = run_spans(store, [bg_run, cron_run])
    assert (first_run, second_run) == (bg_run, cron_run) and bg_last < cron_first
    assert [e.run_id for e in store.history.history(session) if e.kind == "note"] == [bg_run, cron_run]

    # AND the one-time schedule (now only the fallback: the release handed the session over) fires,
    # finds the run done, and deletes itself
    def fallback_gone() -> bool:
        left = local.client("scheduler").list_schedules(GroupName=local.outputs["ScheduleGroupName"])["Schedules"]
        return not [s for s in left if s["Name"].startswith("wait-")]

    wait_until(fallback_gone, 120, "the fallback schedule fired and deleted itself")
    assert store.records.get_run(cron_run).attempts == 1  # type: ignore[union-attr]


# --- a burst for one session ------------------------------------------------------------------


def test_a_burst_of_completions_for_one_session_all_run_one_at_a_time(
    local: LocalStackRuntime, store: DynamoStore, receiver: CountingReceiver, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN five concurrent consumers of the result queue (the template's MaximumConcurrency) and a
    # session whose webhook takes about a second per delivery
    assert local.poller("BackgroundResultFunction").concurrency == 5
    session = uid("session-burst")
    seed_session(store, session, receiver)
    receiver.slow_next, receiver.slow_seconds = 10**6, 1.0
    tasks = TasksService(store, local.outputs["BackgroundResultQueueUrl"], sqs=local.client("sqs"))

    # WHEN BURST background tasks of that session finish at once (more than the five consumers)
    registered = [tasks.register_task(session, "web_research", {"query": f"q{n}"}) for n in range(BURST)]
    task_ids = [r.task_id for r in registered]
    for r in registered:
        tasks.finish_task(
            r.task_id,
            "succeeded",
            f"result of {r.task_id}",
            task_token=r.task_token,
            summary_name=f"Research {r.task_id}",
        )
    run_ids = [f"bg:{t}" for t in task_ids]

    # THEN every run succeeds, and no copy is left on the queue (waiting copies included)
    def done() -> bool:
        return all((run := store.records.get_run(r)) is not None and run.status == "succeeded" for r in run_ids)

    wait_until(done, 600, f"all {BURST} runs succeeded", interval=2.0)
    wait_until(lambda: queue_empty(local, "BackgroundResultQueue"), 120, "the result queue is empty")
    # AND exactly one note per run, none for anyone else
    notes = [e for e in store.history.history(session) if e.kind == "note"]
    assert sorted(e.run_id for e in notes) == sorted(run_ids)
    # AND each run's delivery reached the webhook exactly once
    assert receiver.by_delivery_id() == {f"{r}#0#0": 1 for r in run_ids}
    # AND the runs never overlapped: each one's journal lies wholly after the previous one's
    spans = run_spans(store, run_ids)
    for (_, last, before), (first, _, after) in zip(spans, spans[1:], strict=False):
        assert last < first, f"{before} (until {last}) overlaps {after} (from {first})"
    # AND none of them failed or was dead-lettered; each ran exactly once
    assert all(store.ends.failures(r) == [] for r in run_ids)
    assert all(store.records.get_run(r).attempts == 1 for r in run_ids)  # type: ignore[union-attr]
    assert messages_of(local, "BackgroundResultDLQ", session) == []
    # AND they did wait for each other: busy findings and waiting times were emitted as metrics
    out = capsys.readouterr().out
    assert '"SessionBusy"' in out and '"SessionWait"' in out
