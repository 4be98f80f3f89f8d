"""A busy session drains at full speed: each release hands the session to the next waiter at once
(issue 22; docs/durability.md, "Waiting for the session").

The REAL template.yaml with its default parameters on the embedded local AWS in its "up" mode: five
concurrent consumers of the result queue, a webhook on 127.0.0.1 answering in a second, two model
steps and one delivery per run. Before the hand-off, 50 such completions kept the session busy 15 %
of the drain time (waiters came back on their own backoff); now the next run starts as the
previous one ends. Every wait below is a condition with a generous bound.

``make load`` runs it with 50 completions (AGENTWAKE_BURST=50) and 10 sessions x 20.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.client import BaseClient
from typer.testing import CliRunner

from agentwake.domain.models import SessionConfig
from agentwake.errors import SessionBusy
from agentwake.product.sessions import SessionsService
from agentwake.product.tasks import TasksService
from agentwake.session.lease import ON_THE_LIST_DELAY_S
from agentwake.store.dynamo import DynamoStore
from agentwake.store.keys import LEASE_SK
from agentwake.store.queues import ResultQueue
from agentwake_local.stack import LocalStackRuntime
from agentwake_ops.cli import app
from agentwake_ops.runs import session_drain
from tests.e2e.test_busy_sessions import cli_state, messages_of, run_spans, wait_until
from tests.support.builders import OK_SCRIPT, local_stack_rules
from tests.support.local_stack import local_stack, stack_store
from tests.support.model_calls import record_model_requests
from tests.support.receiver import CountingReceiver

#: completions for one session: 12 in `make test` (more than one batch of 10, as 20 were: each run
#: holds the session a second or more, and the suite keeps near 10 minutes), 50 under `make load`
BURST = int(os.environ.get("AGENTWAKE_BURST", "12"))
#: sessions x completions of the many-sessions burst (10 x 20 under `make load`)
MANY = tuple(int(n) for n in os.environ.get("AGENTWAKE_BURST_MANY", "3x6").split("x"))
#: the session must be busy this much of the drain time (first start to last end), under `make load`
BUSY_FLOOR = 0.90
LOAD = "AGENTWAKE_BURST" in os.environ


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStackRuntime]:
    # the template's defaults
    with local_stack(tmp_path_factory.mktemp("agentwake-home"), background=True, async_retry_delays=0) as runtime:
        yield runtime


@pytest.fixture(scope="module")
def store(local: LocalStackRuntime) -> DynamoStore:
    return stack_store(local)


@pytest.fixture
def receiver() -> Iterator[CountingReceiver]:
    with CountingReceiver() as r:
        r.slow_next, r.slow_seconds = 10**6, 1.0  # every delivery takes about a second
        yield r


def burst(local: LocalStackRuntime, store: DynamoStore, receiver: CountingReceiver, session: str, n: int) -> list[str]:
    """``n`` background tasks of ``session`` registered, then all finished at once: their run ids."""
    store.records.put_session(
        SessionConfig(
            session_id=session,
            providers=[{"type": "scripted", "id": "scripted", "script": OK_SCRIPT}],
            delivery={"type": "webhook", "url": receiver.url, "timeout": 90},
            retry_base_delay_ms=0,
        ),
        local_stack_rules(),
    )
    tasks = TasksService(store, local.outputs["BackgroundResultQueueUrl"], sqs=local.client("sqs"))
    registered = [tasks.register_task(session, "web_research", {"query": f"q{i}"}) for i in range(n)]
    for r in registered:
        tasks.finish_task(r.task_id, "succeeded", f"result of {r.task_id}", task_token=r.task_token)
    return [f"bg:{r.task_id}" for r in registered]


@contextlib.contextmanager
def arriving_at_once(local: LocalStackRuntime) -> Iterator[None]:
    """The consumers stop while a burst is sent, so that every completion waits in the queue when
    the first run starts (as in ``bench/burst.py``): the drain measured is the stack's, not the
    pace at which this test can register and finish tasks."""
    local.stop_background()
    try:
        yield
    finally:
        local.start_background()


class LeaseWrites:
    """The writes of a session's lease outside a transaction seen, and the operations refused."""

    def __init__(self) -> None:
        self.seen = 0
        self.met: list[str] = []


@contextlib.contextmanager
def lease_writes_meeting_transactions(every: int = 3) -> Iterator[LeaseWrites]:
    """Every ``every``-th write of a session's lease outside a transaction (a waiter's mark, a
    reservation, its give-back, a plain release), by anyone in this process, is refused as DynamoDB
    refuses a write that meets a transaction on the same item (moto never does): nothing applied.
    The next lease write of the same thread (its retry) goes through."""
    writes = LeaseWrites()
    retry = threading.local()
    lock = threading.Lock()
    original = BaseClient._make_api_call

    def call(client: Any, operation: str, params: dict[str, Any]) -> Any:
        target = params.get("Key") or params.get("Item") or {}
        if operation in ("PutItem", "UpdateItem", "DeleteItem") and target.get("sk", {}).get("S") == LEASE_SK:
            with lock:
                writes.seen += 1
                refuse = not getattr(retry, "due", False) and writes.seen % every == 0
            retry.due = refuse
            if refuse:
                writes.met.append(operation)
                raise client.exceptions.TransactionConflictException(
                    {"Error": {"Code": "TransactionConflictException", "Message": "conflict"}}, operation
                )
        return original(client, operation, params)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(BaseClient, "_make_api_call", call)
        yield writes


def all_succeeded(store: DynamoStore, run_ids: list[str]) -> bool:
    return all((run := store.records.get_run(r)) is not None and run.status == "succeeded" for r in run_ids)


def test_a_burst_for_one_session_keeps_the_session_busy(
    local: LocalStackRuntime, store: DynamoStore, receiver: CountingReceiver
) -> None:
    # GIVEN the template's defaults (SessionWaitMaxDelay 300 s) and a one-second webhook
    session = f"handoff-{uuid.uuid4().hex[:8]}"
    # WHEN BURST completions of one session arrive at once
    with arriving_at_once(local):
        run_ids = burst(local, store, receiver, session, BURST)
    wait_until(lambda: all_succeeded(store, run_ids), 60 + 20 * BURST, f"all {BURST} runs succeeded", interval=1.0)
    # THEN each ran once, delivered once, and none overlapped another
    assert all(store.records.get_run(r).attempts == 1 for r in run_ids)  # type: ignore[union-attr]
    assert receiver.by_delivery_id() == {f"{r}#0#0": 1 for r in run_ids}
    spans = run_spans(store, run_ids)
    for (_, last, before), (first, _, after) in zip(spans, spans[1:], strict=False):
        assert last < first, f"{before} (until {last}) overlaps {after} (from {first})"
    # AND no run waited for its fallback copy: each started within a moment of the release before
    # it, handed the session (its idle time recorded) or finding it free as it registered
    runs = [store.records.get_run(r) for r in run_ids]
    handed = [r for r in runs if r.idle_before_s is not None]  # type: ignore[union-attr]
    drain = session_drain(store, run_ids)
    assert handed and drain.longest_gap_s < ON_THE_LIST_DELAY_S, str(drain)
    # AND `runs show` says so for a run that waited
    later = handed[-1]
    shown = CliRunner().invoke(app, ["runs", "show", later.run_id], env={"COLUMNS": "200"}, obj=cli_state(local))  # type: ignore[union-attr]
    assert shown.exit_code == 0 and "handed over" in shown.output, shown.output
    # AND the session was busy most of the drain (first start to last end): at least 90 % under
    # `make load` (measured, with the load average, in `make bench`); here it is printed
    print(
        f"\n{BURST} completions for one session: {drain}, {len(handed)} handed over; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    if LOAD:
        assert drain.busy_fraction >= BUSY_FLOOR, str(drain)
    # AND nothing is left waiting, nothing was dead-lettered
    assert store.leases.waiters(session) == []
    assert messages_of(local, "BackgroundResultDLQ", session) == []


def test_bursts_for_many_sessions_drain_side_by_side(
    local: LocalStackRuntime, store: DynamoStore, receiver: CountingReceiver
) -> None:
    # GIVEN several sessions, each with a burst of completions arriving at once
    sessions_n, per_session = MANY
    bursts = {f"many-{n}-{uuid.uuid4().hex[:6]}": [] for n in range(sessions_n)}  # session -> run ids
    # AND the lease's writes outside transactions meeting transactions now and then, as DynamoDB's
    # do while another run's start or commit writes the lease (issue 37: a refused write counted as
    # made, or raised, left a session reserved for nobody or held by a finished run)
    with lease_writes_meeting_transactions() as writes:
        with arriving_at_once(local):
            for session in bursts:
                bursts[session] = burst(local, store, receiver, session, per_session)
        every = [r for runs in bursts.values() for r in runs]
        wait_until(
            lambda: all_succeeded(store, every), 60 + 10 * len(every), f"all {len(every)} runs succeeded", interval=1.0
        )
    assert writes.seen < 3 or writes.met, "no write of a lease met a transaction"
    # THEN each ran once and delivered once, no two runs of one session overlapped, and no session
    # waited for a fallback copy between two of its runs: no gap as long as a fallback pause, and
    # none while one of its runs waited for it (issue 37: 10 x 20 under `make load`, which
    # `bench/burst.py` measures against a second)
    assert receiver.by_delivery_id() == {f"{r}#0#0": 1 for r in every}
    drains = {}
    for session, run_ids in bursts.items():
        spans = run_spans(store, run_ids)
        for (_, last, before), (first, _, after) in zip(spans, spans[1:], strict=False):
            assert last < first, f"{before} (until {last}) overlaps {after} (from {first})"
        drains[session] = session_drain(store, run_ids)
        assert drains[session].longest_gap_s < ON_THE_LIST_DELAY_S, f"{session}: {drains[session]}"
        assert drains[session].longest_ready_idle_s < ON_THE_LIST_DELAY_S, f"{session}: {drains[session]}"
    # AND each session was busy most of its own drain, at least 90 % under `make load`; and the
    # stack's concurrency (5 runs at once) was used: the sum of all run times over min(sessions, 5)
    # x the whole drain (printed: the start and the end of the drain, when fewer sessions than
    # consumers have work left, keep it below the sessions' own figure)
    overall = session_drain(store, every)
    slots = min(sessions_n, local.poller("BackgroundResultFunction").concurrency)
    start = min(_t(store.records.get_run(r).started_at) for r in every)  # type: ignore[union-attr]
    end = max(_t(store.records.get_run(r).ended_at) for r in every)  # type: ignore[union-attr]
    utilisation = overall.busy_s / (slots * (end - start))
    print(
        f"\n{sessions_n} sessions x {per_session}: utilisation {100 * utilisation:.0f} % of {slots} slots over "
        f"{end - start:.1f} s; per session busy "
        f"{min(d.busy_fraction for d in drains.values()):.0%}..{max(d.busy_fraction for d in drains.values()):.0%}, "
        f"longest idle with a run waiting {max(d.longest_ready_idle_s for d in drains.values()):.2f} s; "
        f"{len(writes.met)} of {writes.seen} writes of a lease outside a transaction met one; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    if LOAD:
        assert all(d.busy_fraction >= BUSY_FLOOR for d in drains.values()), {s: str(d) for s, d in drains.items()}


def test_live_turns_and_wakes_interleaved_never_overlap_and_the_agent_sees_the_turns(
    local: LocalStackRuntime, store: DynamoStore, receiver: CountingReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a session whose agent sees its whole history, and the product's live turns and 20
    # completions arriving while they go on (the runtime's own APIs, the local stack's concurrency)
    receiver.slow_next = 0
    session = f"interleaved-{uuid.uuid4().hex[:8]}"
    n = 20
    run_ids = burst(local, store, receiver, session, 0)  # the session config only
    store.records.put_session(
        store.records.get_session(session).model_copy(update={"history_window": 200}), local_stack_rules()
    )  # type: ignore[union-attr]
    requests = record_model_requests(monkeypatch)
    api = SessionsService(store, ResultQueue(local.outputs["BackgroundResultQueueUrl"], client=local.client("sqs")))
    tasks = TasksService(store, local.outputs["BackgroundResultQueueUrl"], sqs=local.client("sqs"))
    turns: list[tuple[float, float, int]] = []
    errors: list[BaseException] = []

    def chat() -> None:
        try:
            for i in range(n):
                while True:
                    try:
                        turn = api.begin_live_turn(session, wait_s=25)
                        break
                    except SessionBusy:
                        continue  # busy for 25 s: try again, as a chat app would
                began = time.time()
                api.append(
                    turn, [("user", f"user says {i}"), ("assistant", f"live reply {i}")], idempotency_key=f"t{i}"
                )
                ended = time.time()
                api.end_live_turn(turn)
                turns.append((began, ended, i))
        except BaseException as exc:  # noqa: BLE001 -- reported below
            errors.append(exc)

    chatting = threading.Thread(target=chat)
    chatting.start()
    for i in range(n):
        r = tasks.register_task(session, "web_research", {"query": f"q{i}"})
        tasks.finish_task(r.task_id, "succeeded", f"result {i}", task_token=r.task_token)
        run_ids.append(f"bg:{r.task_id}")
        time.sleep(0.05)  # spread over the chat, not all at once
    chatting.join(600)
    assert not errors and len(turns) == n, errors
    wait_until(lambda: all_succeeded(store, run_ids), 600, f"all {n} runs succeeded", interval=1.0)

    # THEN no live turn overlapped a run
    runs = {r: store.records.get_run(r) for r in run_ids}
    spans = [(_t(run.started_at), _t(run.ended_at), r) for r, run in runs.items()]  # type: ignore[union-attr]
    for began, ended, i in turns:
        for start, end, run_id in spans:
            assert ended <= start or began >= end, f"live turn {i} overlapped {run_id}"
    # AND the history is the order the session was held: each writer's entries form one block
    writers = [_writer(e) for e in store.history.history(session)]
    blocks = [w for k, w in enumerate(writers) if k == 0 or writers[k - 1] != w]
    assert len(blocks) == len(set(blocks)), "a writer's entries were interleaved with another's"
    # AND every wake's first model request holds the live turns that ended before the run began
    first_request = {}
    for messages in requests:
        system = messages[0][1]
        for run_id in run_ids:
            if f'"task_id": "{run_id[3:]}"' in system and run_id not in first_request:
                first_request[run_id] = messages
    seen_turns = 0
    for start, _, run_id in spans:
        seen = {content for _, content in first_request[run_id]}
        before = {f"user says {i}" for _, ended, i in turns if ended < start}
        assert before <= seen, f"{run_id} did not see {sorted(before - seen)}"
        seen_turns += len(before)
    assert seen_turns > 0  # the runs and the turns did interleave


def _t(iso: str | None) -> float:
    from datetime import datetime

    assert iso is not None
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _writer(entry: Any) -> str:
    """Who wrote a history entry: its run, or the live turn whose number its text carries."""
    if entry.run_id:
        return str(entry.run_id)
    return "turn " + entry.content.rsplit(" ", 1)[-1]
