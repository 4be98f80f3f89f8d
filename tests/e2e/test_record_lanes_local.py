"""Records of different sessions side by side in one invocation, on the local stack (issue 37, "Must be
shown"; docs/durability.md, "Records side by side").

The REAL template.yaml (its defaults: BatchSize 10, BackgroundRecordConcurrency 10) and the REAL
handler on the embedded local AWS; one poll of BackgroundResultFunction's event source mapping is one
invocation with the batch it received. Each session's model is an OpenAI-compatible server on
127.0.0.1 (tests/support/model_server.py) that holds each wake's first call for a model's latency
(2 s) and until every first call the batch should have in flight is (a bound of 60 s, inside the
function's timeout, releases them otherwise): the most calls in flight at once shows the records ran
side by side, without timing anything. The batch's wall time is printed beside the serial figure (ten
holds), never asserted. Deliveries arrive at a webhook receiver on 127.0.0.1, counted by delivery id.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentwake.store.dynamo import DynamoStore
from agentwake_local.poller import PollResult
from agentwake_local.stack import LocalStackRuntime
from tests.e2e.test_local_real_stack import RESULT_DLQ, RESULT_QUEUE, clear, counts, finished_task, producer, uid
from tests.support.builders import local_stack_rules, seed_session
from tests.support.model_server import FINAL, SENT, HoldingModelServer
from tests.support.receiver import CountingReceiver

TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"
#: a model call's latency, held by the model server
HOLD_S = 2.0


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStackRuntime]:
    home = tmp_path_factory.mktemp("agentwake-home")
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
    return DynamoStore(local.outputs["AgentTableName"], client=local.client("dynamodb"))


@pytest.fixture(scope="module")
def model() -> Iterator[HoldingModelServer]:
    server = HoldingModelServer(hold_s=HOLD_S)
    yield server
    server.close()


@pytest.fixture
def receiver() -> Iterator[CountingReceiver]:
    with CountingReceiver() as r:
        yield r


@pytest.fixture(autouse=True)
def empty_queues(local: LocalStackRuntime) -> None:
    for logical_id in (RESULT_QUEUE, RESULT_DLQ):
        clear(local, logical_id)


def session(store: DynamoStore, name: str, model: HoldingModelServer, receiver: CountingReceiver) -> str:
    """A session whose model is the holding server's, delivering to the receiver."""
    session_id = uid(name)
    seed_session(
        store,
        session_id,
        providers=[{"type": "openai", "id": "held", "base_url": model.url, "model": session_id}],
        delivery={"type": "webhook", "url": receiver.url},
        rules=local_stack_rules(),
    )
    return session_id


def poll(local: LocalStackRuntime) -> tuple[PollResult, float]:
    started = time.monotonic()
    result = local.poller("BackgroundResultFunction").poll_once()
    return result, time.monotonic() - started


def assert_woken_once(store: DynamoStore, session_id: str, run_ids: list[str]) -> None:
    """The session's history: per run, its delivery, then the marker and exactly one note, in order."""
    history = store.history.history(session_id)
    assert [e.kind for e in history] == ["delivery", "marker", "note"] * len(run_ids), [e.kind for e in history]
    assert [e.run_id for e in history if e.kind == "note"] == run_ids
    assert all(SENT.format(session=session_id) in e.content for e in history if e.kind == "delivery")
    assert all(FINAL.format(session=session_id) in e.content for e in history if e.kind == "note")


def test_a_batch_of_ten_sessions_waits_on_its_ten_models_at_once(
    local: LocalStackRuntime, store: DynamoStore, model: HoldingModelServer, receiver: CountingReceiver
) -> None:
    # GIVEN ten sessions, each with a finished task whose result is on the queue, and a model that
    # holds each first call until all ten are in flight
    tasks = producer(local, store)
    sessions = [session(store, f"lane{i}", model, receiver) for i in range(10)]
    sent = {sid: finished_task(tasks, sid) for sid in sessions}
    model.arm(expect=10)
    # WHEN Lambda's poller takes one batch: one invocation
    result, wall = poll(local)
    print(f"\nbatch of 10 sessions: {wall:.2f} s; serial would be at least 10 x {HOLD_S:.0f} s = {10 * HOLD_S:.0f} s")
    # THEN the ten records came in one batch, all ten model calls were in flight at once
    assert sorted(result.received) == sorted(m for _, m in sent.values())
    assert model.most == 10, model.most
    # AND every record succeeded and was deleted: an empty partial batch answer
    assert (result.failed, result.error, result.response) == ([], None, {"batchItemFailures": []})
    assert sorted(result.deleted) == sorted(result.received)
    assert counts(local, RESULT_QUEUE) == (0, 0) and counts(local, RESULT_DLQ) == (0, 0)
    # AND every delivery arrived once, and every session has exactly its one note
    deliveries = receiver.by_delivery_id()
    assert len(deliveries) == 10 and set(deliveries.values()) == {1}, deliveries
    for sid, (task_id, _) in sent.items():
        assert_woken_once(store, sid, [f"bg:{task_id}"])


def test_one_sessions_three_records_run_in_batch_order_without_overlap_beside_seven_others(
    local: LocalStackRuntime, store: DynamoStore, model: HoldingModelServer, receiver: CountingReceiver
) -> None:
    # GIVEN three finished tasks of session A and one of each of seven other sessions, on the queue,
    # and a model holding first calls until A's first and the seven others' are in flight
    tasks = producer(local, store)
    mine = session(store, "laneA", model, receiver)
    others = [session(store, f"laneB{i}", model, receiver) for i in range(7)]
    order = [others[0], mine, others[1], others[2], mine, others[3], mine, others[4], others[5], others[6]]
    sent = [(sid, *finished_task(tasks, sid)) for sid in order]
    model.arm(expect=8)
    # WHEN one batch holds them all
    result, wall = poll(local)
    print(f"\nbatch of 3 + 7: {wall:.2f} s; serial would be at least 10 x {HOLD_S:.0f} s = {10 * HOLD_S:.0f} s")
    assert sorted(result.received) == sorted(m for _, _, m in sent)
    # THEN every record succeeded, and A's lane overlapped the others
    assert (result.failed, result.response) == ([], {"batchItemFailures": []})
    assert model.most == 8, model.most
    # AND A's runs ran in the batch's order, their model calls one after another, never two at once
    by_message = {m: task_id for sid, task_id, m in sent if sid == mine}
    in_batch_order = [f"bg:{by_message[m]}" for m in result.received if m in by_message]
    assert_woken_once(store, mine, in_batch_order)
    calls = model.of(mine)
    assert len(calls) == 6 and all(a.ended < b.started for a, b in zip(calls, calls[1:], strict=False)), calls
    for sid in others:
        assert len(model.of(sid)) == 2
    deliveries = receiver.by_delivery_id()
    assert len(deliveries) == 10 and set(deliveries.values()) == {1}, deliveries


def test_one_failing_record_leaves_the_others_answers_intact(
    local: LocalStackRuntime, store: DynamoStore, model: HoldingModelServer, receiver: CountingReceiver
) -> None:
    # GIVEN ten sessions' results on the queue, one whose model refuses its key (the run fails)
    tasks = producer(local, store)
    sessions = [session(store, f"lane{i}", model, receiver) for i in range(9)] + [
        session(store, "fail-lane", model, receiver)
    ]
    sent = {sid: finished_task(tasks, sid) for sid in sessions}
    model.arm(expect=10)
    # WHEN one batch holds them all
    result, _ = poll(local)
    # THEN the partial batch answer names exactly the failed record; the other nine are deleted
    failing = sent[sessions[-1]][1]
    assert sorted(result.received) == sorted(m for _, m in sent.values())
    assert result.response == {"batchItemFailures": [{"itemIdentifier": failing}]}
    assert result.failed == [failing]
    assert sorted(result.deleted) == sorted(m for sid, (_, m) in sent.items() if sid != sessions[-1])
    assert model.most == 10, model.most
    # AND the nine were woken once each; the failed run wrote no note, its failure is recorded
    for sid in sessions[:-1]:
        assert_woken_once(store, sid, [f"bg:{sent[sid][0]}"])
    assert store.history.history(sessions[-1]) == []
    run = store.records.get_run(f"bg:{sent[sessions[-1]][0]}")
    assert run is not None and run.status == "failed"
    deliveries = receiver.by_delivery_id()
    assert len(deliveries) == 9 and set(deliveries.values()) == {1}, deliveries
