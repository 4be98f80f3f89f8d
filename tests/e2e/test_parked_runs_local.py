"""A parked run on the local stack (issue 35, "must be shown"): it consumes no invocation while it
waits, and the session meanwhile serves live turns and other wakes.

The REAL template.yaml and handlers on the embedded local AWS in its "up" mode (SQS pollers, async
invocations, schedules, the product API on 127.0.0.1), as tests/e2e/test_busy_sessions.py runs it
(its helpers reused). The gated tool is an HTTP server on 127.0.0.1 counting its calls
(tests/integration/test_approvals.py's ToolServer); the user's channel a webhook receiver on
127.0.0.1. Invocations are counted per function at the local runtime's one invocation hook
(``LocalStackRuntime.on_invocation``: every poller, async, schedule and API invocation goes through it).

The wait is AGENTWAKE_PARK_WAIT_S seconds (30 in `make test`; `make soak` sets 600, the issue's 10
minutes). The request's first expiry check is delayed 900 s, so nothing is due in the wait.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from agentwake.domain.models import SessionConfig
from agentwake.product.tasks import TasksService
from agentwake.store.dynamo import DynamoStore
from agentwake_client import ProductApiClient
from agentwake_local.server import LOCAL_CALLER_ARN, boto3_session
from agentwake_local.stack import LocalStackRuntime
from tests.e2e.test_busy_sessions import messages_of, queue_empty, run_spans, uid, wait_until
from tests.integration.test_approvals import ToolServer, ticket_tool
from tests.support.builders import OK_SCRIPT, local_stack_rules
from tests.support.local_stack import local_stack, stack_store
from tests.support.receiver import CountingReceiver

PARAMETERS = {"QueueVisibilityTimeout": 30, "SessionWaitMaxDelay": 4}
#: how long the parked run waits with its invocations counted (make soak: 600)
PARK_WAIT_S = float(os.environ.get("AGENTWAKE_PARK_WAIT_S", "30"))
#: completions around the parked run (make load's AGENTWAKE_BURST too)
BURST = int(os.environ.get("AGENTWAKE_BURST", "8"))
#: the functions that wake an agent (a parked run must invoke none of them while it waits)
WAKE_FUNCTIONS = ("BackgroundResultFunction", "BackgroundWorkFunction", "CronWakeFunction")
#: step 0 files a ticket (gated: the run parks), step 1 messages the user, step 2 ends
FILES_A_TICKET = [
    {"tool_calls": [{"name": "create_ticket", "arguments": {"amount": 500, "customer": "acme"}}]},
    {"tool_calls": [{"name": "send_message_to_user", "arguments": {"text": "The ticket is handled."}}]},
    {"text": "Handled the ticket."},
]


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStackRuntime]:
    home = tmp_path_factory.mktemp("agentwake-home")
    with local_stack(home, PARAMETERS, background=True, async_retry_delays=0, poll_interval=0.5) as runtime:
        yield runtime


@pytest.fixture(scope="module")
def store(local: LocalStackRuntime) -> DynamoStore:
    return stack_store(local)


@pytest.fixture(scope="module")
def api(local: LocalStackRuntime) -> ProductApiClient:
    assert local.api_url
    return ProductApiClient(
        local.api_url, region=local.region, credentials=boto3_session(local.region).get_credentials()
    )


@pytest.fixture
def receiver() -> Iterator[CountingReceiver]:
    with CountingReceiver() as r:
        yield r


@pytest.fixture
def tool() -> Iterator[ToolServer]:
    server = ToolServer()
    yield server
    server.close()


class Invocations:
    """Invocations per function (logical id), counted at the runtime's invocation hook."""

    def __init__(self, local: LocalStackRuntime) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._local, self._before = local, local.on_invocation

        def counting(function: Any, event: Any) -> Any:
            with self._lock:
                self.counts[function.logical_id] += 1
            return self._before(function, event) if self._before is not None else (lambda _invocation: None)

        local.on_invocation = counting

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)

    def close(self) -> None:
        self._local.on_invocation = self._before


@pytest.fixture
def invocations(local: LocalStackRuntime) -> Iterator[Invocations]:
    counter = Invocations(local)
    yield counter
    counter.close()


def put_session(store: DynamoStore, session_id: str, receiver: CountingReceiver, tool: ToolServer, script: Any) -> None:
    store.records.put_session(
        SessionConfig(
            session_id=session_id,
            providers=[{"type": "scripted", "id": "scripted", "script": script}],
            delivery={"type": "webhook", "url": receiver.url, "timeout": 90},
            tools=[ticket_tool(tool.url)],
            retry_base_delay_ms=0,
            live_turn_wait_s=0,  # a live turn refused at once if anything held the session
            owners=[LOCAL_CALLER_ARN],  # the product API's caller on the local stack
        ),
        local_stack_rules(),
    )


def tasks_of(local: LocalStackRuntime, store: DynamoStore) -> TasksService:
    return TasksService(store, local.outputs["BackgroundResultQueueUrl"], sqs=local.client("sqs"))


def finish(tasks: TasksService, session_id: str, n: int = 1) -> list[str]:
    """``n`` tasks of the session registered and finished at once: their run ids."""
    registered = [tasks.register_task(session_id, "web_research", {"query": f"q{i}"}) for i in range(n)]
    for r in registered:
        tasks.finish_task(r.task_id, "succeeded", f"result of {r.task_id}", task_token=r.task_token, summary_name="R")
    return [f"bg:{r.task_id}" for r in registered]


def status(store: DynamoStore, run_id: str) -> str | None:
    run = store.records.get_run(run_id)
    return None if run is None else run.status


def parked_run(local: LocalStackRuntime, store: DynamoStore, api: ProductApiClient, session_id: str) -> tuple[str, str]:
    """A task of the session finished; its run parked on the gated tool: (run id, approval id)."""
    [run_id] = finish(tasks_of(local, store), session_id)
    wait_until(lambda: status(store, run_id) == "parked", 120, f"{run_id} parked")
    [request] = api.list_approvals(session_id, state="pending")["approvals"]
    assert request["run_id"] == run_id and request["tool"] == "create_ticket"
    return run_id, str(request["approval_id"])


def live_turn(api: ProductApiClient, session_id: str, text: str) -> dict[str, Any]:
    """One live turn (begin with no wait, append, end): refused at once if anything holds the session."""
    with api.live_turn(session_id, wait_s=0) as turn:
        return api.append(turn, [("user", text), ("assistant", f"You said: {text}")], idempotency_key=uid("msg"))


def test_a_parked_run_consumes_no_invocation_while_it_waits(
    local: LocalStackRuntime,
    store: DynamoStore,
    api: ProductApiClient,
    receiver: CountingReceiver,
    tool: ToolServer,
    invocations: Invocations,
) -> None:
    # GIVEN a run parked on a gated tool, its request delivered, and every queue done with it
    session = uid("session-parked")
    put_session(store, session, receiver, tool, FILES_A_TICKET)
    run_id, approval_id = parked_run(local, store, api, session)
    wait_until(lambda: queue_empty(local, "BackgroundResultQueue"), 120, "the result queue is done")
    assert [d for d in receiver.by_delivery_id() if d.endswith("#approval")] == [f"{run_id}#0#0#approval"]
    before = invocations.snapshot()
    assert before.get("BackgroundResultFunction", 0) >= 1, before  # the hook counted the run that parked
    # (the request's first expiry check waits on the work queue, delayed past the wait)
    attributes = local.client("sqs").get_queue_attributes(
        QueueUrl=local.stack.queue_url("BackgroundWorkQueue"), AttributeNames=["ApproximateNumberOfMessagesDelayed"]
    )["Attributes"]
    assert int(attributes["ApproximateNumberOfMessagesDelayed"]) >= 1

    # WHEN nobody decides for PARK_WAIT_S seconds
    # THEN no function that wakes an agent is invoked meanwhile (checked every second, failing at once)
    deadline = time.monotonic() + PARK_WAIT_S
    while time.monotonic() < deadline:
        now = invocations.snapshot()
        woke = {f: now.get(f, 0) - before.get(f, 0) for f in WAKE_FUNCTIONS if now.get(f, 0) != before.get(f, 0)}
        assert not woke, f"invoked while parked: {woke}"
        time.sleep(1.0)
    assert invocations.snapshot() == before, (before, invocations.snapshot())
    # AND the run is still parked, its request pending, nothing was called and nothing dead-lettered
    assert status(store, run_id) == "parked" and not tool.calls
    assert api.get_approval(approval_id)["state"] == "pending"
    assert messages_of(local, "BackgroundResultDLQ", session) == []

    # WHEN the owner approves THEN the run resumes (now invocations happen), calls the tool once, succeeds
    api.decide_approval(approval_id, "approve", decided_by="the test")
    wait_until(lambda: status(store, run_id) == "succeeded", 120, f"{run_id} resumed and succeeded")
    assert list(tool.calls.values()) == [1]
    after = invocations.snapshot()
    assert after.get("BackgroundResultFunction", 0) > before.get("BackgroundResultFunction", 0)
    assert receiver.by_delivery_id()[f"{run_id}#1#0"] == 1


def test_a_parked_run_amid_a_burst_and_a_live_turn_holds_nobody_up_then_resumes_on_approval(
    local: LocalStackRuntime, store: DynamoStore, api: ProductApiClient, receiver: CountingReceiver, tool: ToolServer
) -> None:
    # GIVEN a run of the session parked on its gated tool
    session = uid("session-amid")
    put_session(store, session, receiver, tool, FILES_A_TICKET)
    parked, approval_id = parked_run(local, store, api, session)
    # (the session's other wakes only message the user: the parked run keeps its own journaled call)
    put_session(store, session, receiver, tool, OK_SCRIPT)

    # WHEN a live turn begins while it is parked THEN it is not refused (the parked run holds no lease)
    assert live_turn(api, session, "before the burst")["written"] is True

    # WHEN a burst of completions for the same session comes, slow deliveries (about a second each)
    receiver.slow_next, receiver.slow_seconds = 10**6, 1.0
    tasks = tasks_of(local, store)
    first = finish(tasks, session, BURST // 2)
    # AND the owner approves the parked run in the middle of the burst, the rest of it then coming
    wait_until(lambda: any(status(store, r) == "succeeded" for r in first), 180, "the burst's first run")
    api.decide_approval(approval_id, "approve", decided_by="the test")
    rest = finish(tasks, session, BURST - BURST // 2)
    burst = first + rest

    # THEN every run of the burst succeeds, once each, never overlapping (the session taken in turn)
    def done() -> bool:
        return all(status(store, r) == "succeeded" for r in [*burst, parked])

    wait_until(done, 600, f"the {BURST} runs and the parked one succeeded", interval=2.0)
    assert all(store.records.get_run(r).attempts == 1 for r in burst)  # type: ignore[union-attr]
    assert all(store.ends.failures(r) == [] for r in [*burst, parked])
    spans = run_spans(store, burst)
    for (_, last, before), (start, _, after) in zip(spans, spans[1:], strict=False):
        assert last < start, f"{before} (until {last}) overlaps {after} (from {start})"
    # AND the parked run resumed on the approval: the gated tool called exactly once, its second
    # attempt the resume, one note for each run
    assert list(tool.calls.values()) == [1]
    resumed = store.records.get_run(parked)
    assert resumed is not None and resumed.attempts == 2
    notes = [e.run_id for e in store.history.history(session) if e.kind == "note"]
    assert sorted(notes) == sorted([*burst, parked])
    # AND each burst run's delivery reached the webhook once; the request once; nothing dead-lettered
    delivered = receiver.by_delivery_id()
    assert all(delivered[f"{r}#0#0"] == 1 for r in burst)
    assert delivered[f"{parked}#0#0#approval"] == 1
    wait_until(lambda: queue_empty(local, "BackgroundResultQueue"), 120, "the result queue is empty")
    assert messages_of(local, "BackgroundResultDLQ", session) == []
    # AND the session still serves a live turn now
    assert live_turn(api, session, "after the burst")["written"] is True
