"""A fault at every DynamoDB call of a wake, of every kind: no delivery twice, one note, no session
left locked (issue 21, items 3 and 4; docs/durability.md, "The fault matrix").

The wake is built as deployed, by the composition root (``agentwake.bootstrap.wake_deps``): with
the result queue, so its release reads the session's wait list for the hand-off, and that Query is
faulted like every other call. Each point injects one fault at the botocore level
(``tests/support/faults.py``'s ``CallFaults``: the ``before-call`` event answers in place of the
service, or ``after-call`` loses the answer of a call that landed) at the n-th call of a wake that
runs clean with the calls ``CLEAN_CALLS`` lists, then the trigger retries as SQS would (the use
case called again, up to maxReceiveCount). The webhook is a real HTTP receiver on 127.0.0.1 that
counts arrivals by delivery id.

The whole matrix (two wakes × every call × five kinds: 85 points) runs with
``AGENTWAKE_FAULT_MATRIX=full`` (``make soak``); by default, 55 of them: every kind at the start's
two writes (the lease, the attempt), at the writes after the send, and at the read of the wait list.

The wake's other calls, to the model, are faulted too (``ModelFaults``: every model call of both
wakes, a transient and a permanent error, 6 points, always run): the chain absorbs a transient
fault; a permanent one fails every provider of the attempt, which is one failed receive with its
failure recorded and no note, never a success.

A live turn's begin over the product API is faulted the same way (every call × every kind, 10
points, always run), retried as a chat app retries a 500 or a 409: it gets the turn, and no lease is
left that nobody holds the token of (issue 32).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from agentwake import bootstrap
from agentwake.errors import RunFailed, SessionBusy
from agentwake.store.dynamo import DynamoStore
from agentwake.store.keys import lease_key
from agentwake.wake.background import wake_for_background_result
from agentwake.wake.spec import WakeDeps, WakeOutcome
from tests.support.builders import OK_SCRIPT, message, seed_session, seed_task
from tests.support.faults import FAULT_KINDS, MODEL_FAULT_KINDS, CallFaults, ModelFaults
from tests.support.probes import DynamoCalls
from tests.support.product_api import call, fresh_services
from tests.support.receiver import CountingReceiver
from tests.support.store_writes import lease_holder

#: the template's MaxReceiveCount: receives before SQS moves the record to the DLQ
MAX_RECEIVES = 5

#: the two wakes of the matrix: a tool delivery (send_message_to_user at step 0, an answer at step
#: 1) and deliver_final's answer of a one-step run
SCRIPTS: dict[str, list[dict[str, Any]]] = {
    "tool_delivery": OK_SCRIPT,
    "deliver_final": [{"text": "The research is done: Aurora costs $0.12 per ACU-hour."}],
}
#: the DynamoDB calls each makes when nothing fails (checked by test_the_matrix_covers_every_call)
CLEAN_CALLS: dict[str, list[str]] = {
    "tool_delivery": [
        "BatchGetItem",  # run, task, session config
        "PutItem",  # the session's lease (one plain conditional write)
        "UpdateItem",  # the attempt, counted on the run under the lease
        "Query",  # history window
        "PutItem",  # 000.reply, which calls send_message_to_user: journaled before its tool runs
        "TransactWriteItems",  # 000.tool.00 with the delivery's marker and history entry
        "Query",  # the session's wait list, read before the release (the hand-off)
        "TransactWriteItems",  # the commit: 001.reply, note with its marker, run, task
        "DeleteItem",  # the lease's release, after the commit (one plain conditional write)
    ],
    "deliver_final": [
        "BatchGetItem",
        "PutItem",  # the lease
        "UpdateItem",  # the attempt
        "Query",
        "PutItem",  # 000.reply, journaled before the final answer is sent
        "Query",  # the wait list
        "TransactWriteItems",  # the commit, with final.delivery and the delivery's record
        "DeleteItem",  # the lease's release
    ],
}
#: the points run by default (``make test``): every kind at the start's two writes, at the writes
#: after the send and at the read of the wait list; ``AGENTWAKE_FAULT_MATRIX=full`` (``make soak``)
#: runs every call
DEFAULT_CALLS = {"tool_delivery": {2, 3, 6, 7, 8, 9}, "deliver_final": {2, 3, 6, 7, 8}}
FULL = os.environ.get("AGENTWAKE_FAULT_MATRIX") == "full"
#: the model calls each makes when nothing fails, by step (all of them run by default)
MODEL_CALLS: dict[str, list[int]] = {"tool_delivery": [0, 1], "deliver_final": [0]}


def _points() -> Iterator[Any]:
    for wake, calls in CLEAN_CALLS.items():
        for n, operation in enumerate(calls, start=1):
            if not FULL and n not in DEFAULT_CALLS[wake]:
                continue
            for kind in FAULT_KINDS:
                yield pytest.param(wake, n, kind, id=f"{wake}-{n}-{operation}-{kind}")


def _model_points() -> Iterator[Any]:
    for wake, steps in MODEL_CALLS.items():
        for n, step in enumerate(steps, start=1):
            for kind in MODEL_FAULT_KINDS:
                yield pytest.param(wake, n, kind, id=f"{wake}-{n}-model-step{step}-{kind}")


@pytest.fixture
def receiver() -> Iterator[CountingReceiver]:
    with CountingReceiver() as r:
        yield r


def _setup(store: DynamoStore, receiver: CountingReceiver, wake: str) -> WakeDeps:
    """The session and its finished task, and the wake's dependencies as the deployed function
    builds them (its own DynamoDB client: the one ``CallFaults`` is given)."""
    seed_session(
        store,
        "s1",
        providers=[{"type": "scripted", "id": "p", "script": SCRIPTS[wake]}],
        delivery={"type": "webhook", "url": receiver.url},
    )
    seed_task(store, "t1", "s1")
    deps = bootstrap.wake_deps()
    assert deps.result_queue is not None and deps.result_queue.url, "the deployed wake hands off through its queue"
    return deps


def _db(deps: WakeDeps) -> Any:
    """The DynamoDB client the wake's store calls through."""
    return deps.store.table.db  # type: ignore[attr-defined]


def _as_sqs_would(deps: WakeDeps) -> tuple[WakeOutcome | None, list[BaseException]]:
    """The record received until it is handled, at most MAX_RECEIVES times: a raise is a batch item
    failure (received again); a busy session re-sends it (counted here too, to bound the loop)."""
    errors: list[BaseException] = []
    for _ in range(MAX_RECEIVES):
        try:
            return wake_for_background_result(message("t1", "s1"), deps), errors
        except Exception as exc:  # noqa: BLE001 -- whatever the fault became, the trigger retries it
            errors.append(exc)
    return None, errors


@pytest.mark.parametrize("wake", list(SCRIPTS))
def test_the_matrix_covers_every_call(wake: str, store: DynamoStore, receiver: CountingReceiver) -> None:
    # GIVEN a wake of the matrix, with no fault
    deps = _setup(store, receiver, wake)
    counter = DynamoCalls(_db(deps))
    # WHEN it runs
    calls = counter.during(lambda: wake_for_background_result(message("t1", "s1"), deps))
    # THEN it makes exactly the calls the matrix injects faults at (the round-trip budget's calls)
    assert calls == CLEAN_CALLS[wake], calls
    assert list(receiver.by_delivery_id().values()) == [1]


@pytest.mark.parametrize(("wake", "at", "kind"), list(_points()))
def test_a_fault_at_any_call_sends_nothing_twice(
    wake: str, at: int, kind: str, store: DynamoStore, receiver: CountingReceiver
) -> None:
    # GIVEN a wake with one delivery, and one fault armed at its at-th DynamoDB call
    deps = _setup(store, receiver, wake)
    faults = CallFaults(_db(deps))
    faults.arm(at, kind)
    # WHEN the record is received, and received again after each failure, as SQS would
    outcome, errors = _as_sqs_would(deps)
    # THEN the fault fired where it was aimed
    assert faults.fired is not None and faults.fired[1] == CLEAN_CALLS[wake][at - 1], faults.fired
    # AND the run succeeded within the retries, after one failed receive at most
    assert outcome is not None, [f"{type(e).__name__}: {e}" for e in errors]
    assert len(errors) <= 1, [f"{type(e).__name__}: {e}" for e in errors]
    _assert_delivered_once_with_one_note(store, receiver, wake)


@pytest.mark.parametrize(("wake", "at", "kind"), list(_model_points()))
def test_a_fault_at_any_model_call_is_a_recorded_failure_or_nothing(
    wake: str, at: int, kind: str, store: DynamoStore, receiver: CountingReceiver
) -> None:
    # GIVEN a wake with one delivery, and one fault armed at its at-th model call
    deps = _setup(store, receiver, wake)
    faults = ModelFaults(deps.provider_factory)
    deps = replace(deps, provider_factory=faults)
    faults.arm(at, kind)
    # WHEN the record is received, and received again after each failure, as SQS would
    outcome, errors = _as_sqs_would(deps)
    # THEN the fault fired where it was aimed
    assert faults.fired is not None and faults.fired[1] == MODEL_CALLS[wake][at - 1], faults.fired
    failures = [f.error_type for f in store.ends.failures("bg:t1")]
    if kind == "auth":
        # AND every provider of that attempt failed: that receive failed, its failure recorded
        assert [type(e) for e in errors] == [RunFailed], [f"{type(e).__name__}: {e}" for e in errors]
        assert failures == ["AllProvidersFailed"], failures
    else:
        # AND the chain asked the provider again within the attempt: nothing failed
        assert errors == [] and failures == [], (errors, failures)
    # AND the run succeeded once, on the receive after the failure if there was one
    assert outcome is not None and outcome.status == "succeeded" and outcome.attempt == 1 + len(errors), outcome
    _assert_delivered_once_with_one_note(store, receiver, wake)


def _assert_delivered_once_with_one_note(store: DynamoStore, receiver: CountingReceiver, wake: str) -> None:
    """What the user and the operator see after the retries: the run succeeded, each delivery
    arrived once, history holds it once and then one note with the model's answer, and the
    session is free."""
    run = store.records.get_run("bg:t1")
    assert run is not None and run.status == "succeeded"
    # the receiver got each delivery exactly once, by delivery id
    received = receiver.by_delivery_id()
    assert len(received) == 1 and set(received.values()) == {1}, received
    # history holds that delivery once, then exactly one note, which carries the model's answer
    history = store.history.history("s1")
    assert [e.kind for e in history] == ["delivery", "marker", "note"], [e.kind for e in history]
    assert [e.delivery_id for e in history if e.kind == "delivery"] == list(received)
    assert SCRIPTS[wake][-1]["text"] in history[-1].content, history[-1].content
    # no session is left locked past the retry
    assert lease_holder(store, "s1") is None


@pytest.mark.parametrize(("at", "operation"), [(2, "PutItem"), (3, "UpdateItem")])
@pytest.mark.parametrize("wake", list(SCRIPTS))
def test_a_lost_answer_to_a_start_write_is_resolved_not_waited_out(
    wake: str, at: int, operation: str, store: DynamoStore, receiver: CountingReceiver
) -> None:
    # GIVEN one of the start's writes (the lease, the attempt) lands, and its answer is lost (a read timeout)
    deps = _setup(store, receiver, wake)
    faults = CallFaults(_db(deps))
    faults.arm(at, "timeout_after")
    # WHEN the record is received once
    try:
        outcome = wake_for_background_result(message("t1", "s1"), deps)
    except SessionBusy as busy:  # the run found its own lease and took it for another run's
        pytest.fail(f"the run waited for its own lease: {busy}")
    # THEN the run re-read and adopted the lease and the attempt it holds, and ran at once
    assert outcome.status == "succeeded" and outcome.attempt == 1
    assert faults.fired == (at, operation, "timeout_after")
    run = store.records.get_run("bg:t1")
    assert run is not None and run.status == "succeeded" and run.attempts == 1
    assert lease_holder(store, "s1") is None


def test_a_lost_answer_to_the_tool_step_is_read_again_and_the_run_goes_on(
    store: DynamoStore, receiver: CountingReceiver
) -> None:
    # GIVEN the tool step's transaction after send_message_to_user sent lands, and its answer is lost
    deps = _setup(store, receiver, "tool_delivery")
    faults = CallFaults(_db(deps))
    faults.arm(6, "timeout_after")
    # WHEN the record is received once
    outcome = wake_for_background_result(message("t1", "s1"), deps)
    # THEN the run read back what it wrote, found its step and its delivery there, and finished
    assert outcome.status == "succeeded" and outcome.attempt == 1
    assert list(receiver.by_delivery_id().values()) == [1]
    assert [e.kind for e in store.history.history("s1")] == ["delivery", "marker", "note"]


@pytest.mark.parametrize("kind", ["throttling", "server_error", "timeout_before", "conditional"])
def test_a_tool_step_that_is_not_written_is_recorded_by_the_failure(
    kind: str, store: DynamoStore, receiver: CountingReceiver
) -> None:
    # GIVEN the tool step's transaction after send_message_to_user sent fails and does not land
    deps = _setup(store, receiver, "tool_delivery")
    faults = CallFaults(_db(deps))
    faults.arm(6, kind)
    # WHEN the record is received once, and fails
    with pytest.raises(Exception):  # noqa: B017 -- the fault, as the wake saw it
        wake_for_background_result(message("t1", "s1"), deps)
    # THEN the failure transaction recorded the delivery as the tool step would have: its marker,
    # its history entry and the tool result that reports it, so a retry replays and sends nothing
    from agentwake_ops.runs import run_summary

    summary = run_summary(store, "bg:t1")
    assert [s["key"] for s in summary.steps] == ["000.reply", "000.tool.00"]
    assert len(summary.deliveries) == 1
    assert [e.kind for e in store.history.history("s1")] == ["delivery"]
    assert lease_holder(store, "s1") is None


class HardKill(BaseException):
    """The Lambda is killed (timeout, out of memory): no except clause runs, no failure is recorded."""


def test_a_hard_kill_between_the_send_and_its_step_is_the_one_resend(
    store: DynamoStore, receiver: CountingReceiver
) -> None:
    # GIVEN a Lambda killed after send_message_to_user sent, before the tool step's write: no
    # failure transaction runs (the documented at-least-once edge, docs/durability.md)
    deps = _setup(store, receiver, "tool_delivery")
    wakes: Any = deps.store  # the store the wake writes through
    real = wakes.journals.journal_put

    def killed_once(run_id: str, key: str, value: dict[str, Any], **kw: Any) -> None:
        if ".tool." in key and wakes.journals.journal_put is killed_once:
            wakes.journals.journal_put = real
            raise HardKill(key)
        real(run_id, key, value, **kw)

    wakes.journals.journal_put = killed_once
    with pytest.raises(HardKill):
        wake_for_background_result(message("t1", "s1"), deps)
    # WHEN the trigger retries after the killed holder's lease expired
    store.table.db.delete_item(TableName=store.table.name, Key=store.table.key(*lease_key("s1")))
    outcome = wake_for_background_result(message("t1", "s1"), deps)
    # THEN the message is resent under the same delivery id (receivers drop it), and history holds it once
    assert outcome.status == "succeeded"
    assert list(receiver.by_delivery_id().values()) == [2]
    assert [e.kind for e in store.history.history("s1")] == ["delivery", "marker", "note"]


# --- the live turn's begin (product API): every call, every kind, no phantom hold ------------------

#: the DynamoDB calls of a live turn's begin when nothing fails
BEGIN_CALLS = [
    "GetItem",  # the session's config
    "PutItem",  # the lease, for the turn
]
#: begins a chat app makes before it gives up (the first, and a retry of a 500 or a 409)
BEGIN_TRIES = 3


def _begin_points() -> Iterator[Any]:
    for n, operation in enumerate(BEGIN_CALLS, start=1):
        for kind in FAULT_KINDS:
            yield pytest.param(n, kind, id=f"begin-{n}-{operation}-{kind}")


@pytest.fixture
def api(resources: Any, store: DynamoStore) -> Iterator[Any]:
    """The product API's own DynamoDB client (the one the faults are injected at), session s1 seeded."""
    fresh_services()
    seed_session(store, "s1")
    yield bootstrap.sessions().store.table.db
    fresh_services()


def test_the_begin_matrix_covers_every_call(api: Any) -> None:
    # GIVEN the API's client, counted WHEN a live turn begins with no fault
    faults = CallFaults(api)
    faults.arm(None)
    status, _ = call("POST", "/sessions/s1/live-turns", {"wait_s": 0})
    # THEN it makes exactly the calls the matrix injects faults at
    assert status == 201 and faults.calls == BEGIN_CALLS, faults.calls


@pytest.mark.parametrize(("at", "kind"), list(_begin_points()))
def test_a_fault_at_any_call_of_a_begin_leaves_no_phantom_turn(
    at: int, kind: str, api: Any, store: DynamoStore
) -> None:
    # GIVEN one fault armed at the at-th DynamoDB call of a live turn's begin
    faults = CallFaults(api)
    faults.arm(at, kind)
    # WHEN the chat app begins, and begins again after a 500 or a 409, as it would
    answers: list[tuple[int, dict[str, Any]]] = []
    while len(answers) < BEGIN_TRIES and (not answers or answers[-1][0] != 201):
        answers.append(call("POST", "/sessions/s1/live-turns", {"wait_s": 0}))
    # THEN the fault fired where it was aimed
    assert faults.fired is not None and faults.fired[1] == BEGIN_CALLS[at - 1], faults.fired
    # AND the app got a turn at the first or the second begin (a lost answer that landed is read
    # back: the first begin gets the turn it wrote), each failed begin a 500 without details or a 409
    assert len(answers) <= 2 and answers[-1][0] == 201, answers
    if kind == "timeout_after" and BEGIN_CALLS[at - 1] == "PutItem":
        assert len(answers) == 1, answers
    assert all(status in (409, 500) for status, _ in answers[:-1]), answers
    # AND the session is held by that turn alone: its token appends, its end frees the session
    turn = answers[-1][1]
    assert lease_holder(store, "s1")[0] == f"live:{turn['turn_id']}"  # type: ignore[index]
    append = {
        "turn_id": turn["turn_id"],
        "token": turn["token"],
        "messages": [{"role": "user", "content": "hi"}],
        "idempotency_key": "k1",
    }
    assert call("POST", "/sessions/s1/messages", append)[0] == 201
    ended = call(
        "DELETE", f"/sessions/s1/live-turns/{turn['turn_id']}", headers={"x-agentwake-turn-token": turn["token"]}
    )
    assert ended[0] == 200 and lease_holder(store, "s1") is None
