"""A run's start as two plain writes (issue 37: the lease, then the attempt): a lost answer on the
lease's write is read back, and an attempt refused after the lease was taken gives the lease back
through the one release path, which hands the session to the next waiter, who is started.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentwake.errors import SessionBusy
from agentwake.store.codec import key
from agentwake.store.dynamo import DynamoStore
from agentwake.store.keys import run_key
from agentwake.wake.background import Done, wake_for_background_result
from agentwake.wake.invocation import on_background_record
from tests.integration.test_handoff_here import plain_record, record_of, run_status
from tests.integration.test_handoff_waiters import park, seed
from tests.integration.test_lease_conflicts import PLENTY_MS, conflicting_store
from tests.support.aws import Resources
from tests.support.builders import message
from tests.support.faults import around
from tests.support.receiver import CountingReceiver
from tests.support.store_writes import acquire_lease, begin_attempt, lease_holder


@pytest.mark.parametrize(
    ("fault", "met"),
    [
        ("put retried", ["put retried"]),
        ("put answer lost", ["put answer lost"]),
        ("put landed, then conflicts", ["put landed, then conflicts", "put", "put"]),
    ],
)
def test_a_lost_answer_to_the_lease_write_is_read_back_and_the_run_goes_on(
    resources: Resources, store: DynamoStore, fault: str, met: list[str]
) -> None:
    """``put retried``: the lease's write lands, its answer is lost and botocore makes it again: the
    second one's condition fails on the lease the first wrote (its own token). ``put answer lost``:
    botocore's tries are spent, the answer never came. ``put landed, then conflicts``: it lands, its
    answer is lost, and every later try meets a transaction on the lease (another writer): one
    consistent read says. Each way the lease is the run's own: it is adopted, not taken for another
    run's (SessionBusy, a receive spent, the run's own lease left to expire)."""
    with CountingReceiver() as receiver:
        plain = seed(resources, store, receiver, ("a",))
        racing, client = conflicting_store(store)
        deps = plain.__class__(store=racing, settings=plain.settings, result_queue=plain.result_queue)
        client.faults.append(fault)
        # WHEN a's record runs, its lease write's answer lost
        result = on_background_record(plain_record("a"), deps, time_left=lambda: PLENTY_MS)
        # THEN it ran at once, on its first attempt, and released the session
        assert client.met == met
        assert result == Done("succeeded")
        run = store.records.get_run("bg:a")
        assert run is not None and run.status == "succeeded" and run.attempts == 1
        assert lease_holder(store, "s") is None


def _another_copy_started(store: DynamoStore) -> None:
    begin_attempt(store, "bg:a", kind="background", session_id="s")


def _another_copy_succeeded(store: DynamoStore) -> None:
    begin_attempt(store, "bg:a", kind="background", session_id="s")
    store.table.db.update_item(
        TableName=store.table.name,
        Key=key(*run_key("bg:a")),
        UpdateExpression="SET #s = :s",
        ExpressionAttributeNames={"#s": "status"},
        ExpressionAttributeValues={":s": {"S": "succeeded"}},
    )


@pytest.mark.parametrize("meanwhile", [_another_copy_started, _another_copy_succeeded])
def test_an_attempt_refused_after_the_lease_was_taken_gives_it_to_the_next_waiter(
    resources: Resources, store: DynamoStore, meanwhile: Any
) -> None:
    """Between a's lease and its attempt, another copy of a counts an attempt (or has succeeded):
    a's attempt write is refused. The lease a took is given back at once, reserved for x (waiting
    on the list), and x's copy is sent: x runs, nobody waits for the lease to expire."""
    with CountingReceiver() as receiver:
        # GIVEN x waiting for the session, which is free again (its holder released to nobody)
        deps = seed(resources, store, receiver, ("a", "x"))
        token = acquire_lease(store, "s", "bg:holder", 600)
        assert token is not None
        park(deps, "x")
        store.leases.release("s", token)
        deps.result_queue.sent.clear()  # type: ignore[attr-defined]

        def take_then_race(take: Any, *args: Any, **kw: Any) -> Any:
            landed = take(*args, **kw)
            if kw["holder"] == "bg:a":  # a's lease is taken; its attempt not yet written
                meanwhile(store)
            return landed

        around(store.leases, "take", take_then_race)
        # WHEN a's record runs, its attempt refused after its lease was taken
        try:
            outcome = wake_for_background_result(message("a", "s"), deps)
        except SessionBusy:
            outcome = None
        assert outcome is None or outcome.status == "already_succeeded", outcome
        # THEN the session is reserved for x, and x's copy was sent at once
        held = lease_holder(store, "s")
        assert held is not None and held[0] == "bg:x", held
        sent = deps.result_queue.sent  # type: ignore[attr-defined]
        assert [kw["delay_s"] for kw in sent] == [0], sent
        # AND x, run from that copy, starts and succeeds; the session is free after it
        result = on_background_record(record_of(sent[0], "msg-x-handed"), deps, time_left=lambda: PLENTY_MS)
        assert result == Done("succeeded")
        assert run_status(store, "bg:x") == "succeeded"
        assert lease_holder(store, "s") is None and store.leases.waiters("s") == []
