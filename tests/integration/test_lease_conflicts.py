"""Writes that meet on the session's lease item (DynamoDB rejects a write to an item a transaction
is writing, and cancels the transaction): a waiting result marks the holder's lease
(``waiter_parked``) while the holder commits, or a live turn appends. moto never conflicts, so the
client below answers the way DynamoDB does, once, and then lets the call through.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from botocore.exceptions import ReadTimeoutError

from agentwake.product.sessions import SessionsService
from agentwake.session import handoff
from agentwake.session.copies import ATTR_HANDED_AT
from agentwake.session.lease import RESERVATION_S, Waiter
from agentwake.store.codec import key
from agentwake.store.dynamo import DynamoStore
from agentwake.store.keys import RUN_SK, lease_key
from agentwake.store.session_lease import RESERVED_FOR
from agentwake.wake.background import Done
from agentwake.wake.invocation import on_background_record
from agentwake.wake.spec import WakeDeps
from tests.integration.test_handoff_here import before_commit, plain_record, record_of, run_status
from tests.integration.test_handoff_waiters import park, seed
from tests.support.aws import Resources
from tests.support.receiver import CountingReceiver
from tests.support.store_writes import acquire_lease, lease_holder

PLENTY_MS = 600_000


class Conflicting:
    """The DynamoDB client, with the next calls named in ``faults`` answered as DynamoDB answers a
    write that meets another one on the same item."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.exceptions = client.exceptions
        self.faults: list[str] = []
        self.met: list[str] = []
        #: the transaction a conflicting update meets, done as it is refused (None: nothing lands)
        self.during: Callable[[], Any] | None = None
        #: the items of a transaction a ``transaction`` fault says another write was writing
        self.conflict_on: Callable[[dict[str, Any]], bool] = _is_lease

    def transact_write_items(self, **kw: Any) -> Any:
        if "transaction" in self.faults:
            self.faults.remove("transaction")
            self.met.append("transaction")
            reasons = [
                {"Code": "TransactionConflict"} if self.conflict_on(i) else {"Code": "None"}
                for i in kw["TransactItems"]
            ]
            raise self._client.exceptions.TransactionCanceledException(
                {
                    "Error": {"Code": "TransactionCanceledException", "Message": "Transaction cancelled"},
                    "CancellationReasons": reasons,
                },
                "TransactWriteItems",
            )
        answer = self._client.transact_write_items(**kw)
        if "answer lost" in self.faults:
            self.faults.remove("answer lost")
            self.met.append("answer lost")
            raise ReadTimeoutError(endpoint_url="http://127.0.0.1")  # applied, the answer never came
        return answer

    def update_item(self, **kw: Any) -> Any:
        self._meet("update", kw["Key"], "UpdateItem")
        return self._client.update_item(**kw)

    def put_item(self, **kw: Any) -> Any:
        if "put landed, then conflicts" in self.faults and _lease_sk(kw["Item"]):
            # the write lands, its answer is lost, and botocore's second try meets a transaction
            self.faults.remove("put landed, then conflicts")
            self.met.append("put landed, then conflicts")
            self._client.put_item(**kw)
            self.faults += ["put", "put"]  # ...and so does the caller's own second try
        self._meet("put", kw["Item"], "PutItem")
        answer = self._twice("put", self._client.put_item, kw)
        if "put answer lost" in self.faults and _lease_sk(kw["Item"]):
            self.faults.remove("put answer lost")
            self.met.append("put answer lost")
            raise ReadTimeoutError(endpoint_url="http://127.0.0.1")  # applied; botocore's tries spent
        return answer

    def delete_item(self, **kw: Any) -> Any:
        self._meet("delete", kw["Key"], "DeleteItem")
        return self._twice("delete", self._client.delete_item, kw)

    def _twice(self, fault: str, call: Callable[..., Any], kw: dict[str, Any]) -> Any:
        """``"{fault} retried"``: the write lands, its answer is lost, and botocore makes it again:
        what the caller gets is the second answer (a failed condition, on what the first wrote)."""
        if f"{fault} retried" in self.faults and _lease_sk(kw.get("Key") or kw["Item"]):
            self.faults.remove(f"{fault} retried")
            self.met.append(f"{fault} retried")
            call(**kw)
        return call(**kw)

    def _meet(self, fault: str, key: dict[str, Any], operation: str) -> None:
        """A write of the lease item refused as DynamoDB refuses one that meets a transaction."""
        if fault in self.faults and _lease_sk(key):
            self.faults.remove(fault)
            self.met.append(fault)
            if self.during is not None:
                self.during()
                self.during = None
            raise self._client.exceptions.TransactionConflictException(
                {"Error": {"Code": "TransactionConflictException", "Message": "conflict"}}, operation
            )

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def _is_lease(item: dict[str, Any]) -> bool:
    body = next(iter(item.values()))
    return _lease_sk(body.get("Key") or body.get("Item") or {})


def _is_run(item: dict[str, Any]) -> bool:
    body = next(iter(item.values()))
    return (body.get("Key") or body.get("Item") or {}).get("sk", {}).get("S") == RUN_SK


def _lease_sk(key: dict[str, Any]) -> bool:
    return key.get("sk", {}).get("S") == lease_key("s")[1]


def conflicting_store(store: DynamoStore) -> tuple[DynamoStore, Conflicting]:
    client = Conflicting(store.table.db)
    return DynamoStore(store.table.name, client=client), client  # type: ignore[arg-type]


def test_a_commit_cancelled_by_a_conflict_on_the_run_item_is_made_again_and_succeeds(
    resources: Resources, store: DynamoStore
) -> None:
    """The commit writes no lease (it is released after it, by a plain write whose conflicts are
    the release tests' below); a transaction on the run item (another copy's start) cancels it."""
    with CountingReceiver() as receiver:
        deps = seed(resources, store, receiver, ("a",))
        racing, client = conflicting_store(store)
        client.conflict_on = _is_run
        deps.store = racing
        # the start transaction goes through; the commit meets a write of the run item once
        before_commit(racing, "bg:a", lambda: client.faults.append("transaction"))
        result = on_background_record(plain_record("a"), deps, time_left=lambda: PLENTY_MS)
        # THEN the run succeeded on its first attempt: no failure recorded, no retry spent
        assert client.met == ["transaction"]
        assert result.status == "succeeded"  # type: ignore[union-attr]
        run = store.records.get_run("bg:a")
        assert run is not None and run.status == "succeeded" and run.attempts == 1
        assert store.ends.failures("bg:a") == []
        assert lease_holder(store, "s") is None


def test_a_waiter_whose_mark_meets_a_transaction_on_a_held_lease_marks_it_again_and_spends_no_receive(
    resources: Resources, store: DynamoStore
) -> None:
    with CountingReceiver() as receiver:
        deps = seed(resources, store, receiver, ("x",))
        racing, client = conflicting_store(store)
        deps.store = racing
        token = acquire_lease(store, "s", "bg:holder", 600)
        assert token is not None
        client.faults.append("update")
        # WHEN x finds the session busy and its mark of the lease meets a transaction on it that
        # leaves the lease held
        park(deps, "x")  # raises if x did not come back as a Resend
        # THEN x is on the wait list, the lease marked (its second try), its delayed copy sent with
        # the fallback pause: the holder's release hands the session to x
        assert client.met == ["update"]
        assert [w.run_id for w in store.leases.waiters("s")] == ["bg:x"]
        assert [kw["delay_s"] for kw in deps.result_queue.sent] == [10.0]  # type: ignore[attr-defined]
        assert not store.leases.release("s", token, unless_parked=True)  # a release to nobody fails


def test_a_waiter_whose_mark_meets_the_holders_release_to_nobody_comes_straight_back(
    resources: Resources, store: DynamoStore
) -> None:
    """Issue 37 item 5: the holder read the wait list before x joined it (nobody waited), and the
    transaction x's mark meets is the holder's release to nobody. Before, the refused mark counted as
    made: x waited its whole fallback pause (10 s) on a free session."""
    with CountingReceiver() as receiver:
        deps = seed(resources, store, receiver, ("x",))
        racing, client = conflicting_store(store)
        deps.store = racing
        token = acquire_lease(store, "s", "bg:holder", 600)
        assert token is not None
        client.faults.append("update")
        client.during = lambda: store.leases.release("s", token, unless_parked=True)
        # WHEN x finds the session busy, joins the list, and its mark meets the release to nobody
        park(deps, "x")
        assert client.met == ["update"] and lease_holder(store, "s") is None
        assert [w.run_id for w in store.leases.waiters("s")] == ["bg:x"]
        # THEN x's copy comes straight back, not after the fallback pause
        [copy] = deps.result_queue.sent  # type: ignore[attr-defined]
        assert copy["delay_s"] == 0
        # AND it runs x on the free session, once
        result = on_background_record(record_of(copy, "copy-x"), deps, time_left=lambda: PLENTY_MS)
        assert result == Done("succeeded")
        assert run_status(store, "bg:x") == "succeeded" and store.leases.waiters("s") == []
        assert receiver.by_delivery_id() == {"bg:x#0#0": 1}


def test_a_waiter_whose_mark_keeps_meeting_transactions_comes_straight_back(
    resources: Resources, store: DynamoStore
) -> None:
    with CountingReceiver() as receiver:
        deps = seed(resources, store, receiver, ("x",))
        racing, client = conflicting_store(store)
        deps.store = racing
        assert acquire_lease(store, "s", "bg:holder", 600) is not None
        client.faults += ["update", "update"]
        # WHEN both of x's tries to mark the lease meet a transaction on it
        park(deps, "x")
        # THEN nobody is sure to hand x the session: its copy comes straight back (and, the session
        # still held, waits on the list again like any busy finding)
        assert client.met == ["update", "update"]
        assert [kw["delay_s"] for kw in deps.result_queue.sent] == [0]  # type: ignore[attr-defined]


def test_an_append_that_meets_a_write_of_the_lease_is_appended_and_the_turn_not_lost(
    resources: Resources, store: DynamoStore
) -> None:
    with CountingReceiver() as receiver:
        seed(resources, store, receiver, ())
        racing, client = conflicting_store(store)
        sessions = SessionsService(racing)
        turn = sessions.begin_live_turn("s", wait_s=0)
        client.faults.append("transaction")
        appended = sessions.append(turn, [("user", "hello")], idempotency_key="k1")
        assert client.met == ["transaction"]
        assert appended.written
        assert [e.content for e in sessions.read_conversation("s").entries if e.kind == "live"] == ["hello"]
        sessions.end_live_turn(turn)


def test_a_lost_answer_to_the_commit_after_a_waiter_joined_still_hands_the_session_over(
    resources: Resources, store: DynamoStore
) -> None:
    with CountingReceiver() as receiver:
        plain = seed(resources, store, receiver, ("a", "x"))
        racing, client = conflicting_store(store)
        deps = plain.__class__(store=racing, settings=plain.settings, result_queue=plain.result_queue)

        def join_and_lose_the_answer() -> None:
            # x joins the list after a read it (nobody) and marks the lease; the answer to the
            # commit is lost
            park(plain, "x")
            client.faults.append("answer lost")

        before_commit(racing, "bg:a", join_and_lose_the_answer)
        result = on_background_record(plain_record("a"), deps, time_left=lambda: PLENTY_MS)
        # THEN the commit is read back as landed, and the release to nobody fails on x's mark: the
        # list is read again and the session released to x
        assert client.met == ["answer lost"]
        assert result.status == "succeeded"  # type: ignore[union-attr]
        assert [run_status(store, r) for r in ("bg:a", "bg:x")] == ["succeeded", "succeeded"]
        assert lease_holder(store, "s") is None and store.leases.waiters("s") == []


@pytest.mark.parametrize("fault", ["put", "put answer lost"])
def test_a_release_after_the_commit_that_meets_a_start_or_loses_its_answer_is_made_again_and_hands_over(
    resources: Resources, store: DynamoStore, fault: str
) -> None:
    """The release after a commit is a write of its own. ``put``: it met another copy's start on
    the lease (issue 37 item 5: it raised, the session stayed held by a finished run until its lease
    expired, its waiters waited their fallback pauses). ``put answer lost``: the reservation for x
    landed, the caller was told nothing; the second write recognises the reservation the first one
    wrote (its token derives from the released lease's). Either way the run makes it again once,
    and x is handed the session and runs next here, not after its fallback pause."""
    with CountingReceiver() as receiver:
        plain = seed(resources, store, receiver, ("a", "x"))
        racing, client = conflicting_store(store)
        deps = plain.__class__(store=racing, settings=plain.settings, result_queue=plain.result_queue)

        def join_then_fault_the_release() -> None:
            # x joins after a read the list (nobody): the release to nobody after the commit fails
            # on x's mark, and the release to x that follows meets the fault
            park(plain, "x")
            client.faults.append(fault)

        before_commit(racing, "bg:a", join_then_fault_the_release)
        result = on_background_record(plain_record("a"), deps, time_left=lambda: PLENTY_MS)
        # THEN the release is made again, to x, and x runs next in this invocation
        assert client.met == [fault]
        assert result == Done("succeeded", ran_after=1)
        assert [run_status(store, r) for r in ("bg:a", "bg:x")] == ["succeeded", "succeeded"]
        assert lease_holder(store, "s") is None and store.leases.waiters("s") == []


@pytest.mark.parametrize("fault", ["delete", "delete retried"])
def test_a_reservation_given_back_while_a_transaction_writes_the_lease_goes_to_the_next_waiter(
    resources: Resources, store: DynamoStore, fault: str
) -> None:
    """Issue 37 item 5: the delete that gives back a reservation met a transaction on the lease (a
    start refused by the reservation) and counted as done: the next waiter's reservation then found
    the session not free, and the session stayed reserved for a run that would not take it until
    ``RESERVATION_S`` passed, every waiter left to its fallback pause. ``delete retried``: its answer
    was lost and botocore made it again; the second delete's condition failed on the item the first
    one deleted, and the give-back read as not made (x waited for its fallback pause)."""
    with CountingReceiver() as receiver:
        deps = seed(resources, store, receiver, ("a", "x"))
        park_behind_a_holder(deps, store, "x")
        # GIVEN the session reserved for a (a release handed it to a), x waiting on the list
        assert store.leases.reserve("s", "bg:a", RESERVATION_S)
        racing, client = conflicting_store(store)
        client.faults.append(fault)
        # WHEN a does not take it (its run had succeeded) and its give-back meets a transaction once
        # (or its answer is lost)
        handoff.decline(racing.leases, deps.result_queue, "s", "bg:a")
        # THEN the reservation is given back and the session handed to x at once: x's copy sent now,
        # the lease reserved for x, not for a
        assert client.met == [fault]
        assert reserved_for(store) == "bg:x"
        [copy] = [kw for kw in deps.result_queue.sent if kw["delay_s"] == 0]  # type: ignore[attr-defined]
        assert ATTR_HANDED_AT in copy["wait"]


def test_a_reservation_that_meets_a_start_taking_the_session_is_not_counted_as_made(
    resources: Resources, store: DynamoStore
) -> None:
    """The put that reserves a free session met the transaction of a start that took it: before,
    the refused put counted as a reservation, so x was taken off the list and sent a copy while
    another run held the session (x found it busy again, and the holder's release, not knowing x,
    freed the session instead of handing it over)."""
    with CountingReceiver() as receiver:
        deps = seed(resources, store, receiver, ("x",))
        park_behind_a_holder(deps, store, "x")
        racing, client = conflicting_store(store)
        client.faults.append("put")
        client.during = lambda: acquire_lease(store, "s", "bg:other", 600)
        # WHEN the session is offered to x and the reservation meets the start of another run
        handed = handoff.offer(racing.leases, deps.result_queue, "s")
        # THEN nothing is handed: x stays first on the list, for the new holder's release
        assert client.met == ["put"] and handed is None
        assert lease_holder(store, "s") is not None and reserved_for(store) is None
        assert [w.run_id for w in store.leases.waiters("s")] == ["bg:x"]
        assert [kw for kw in deps.result_queue.sent if kw["delay_s"] == 0] == []  # type: ignore[attr-defined]


@pytest.mark.parametrize("fault", ["put", "put retried"])
def test_a_reservation_that_meets_a_transaction_leaving_the_session_free_is_made_again(
    resources: Resources, store: DynamoStore, fault: str
) -> None:
    """``put retried``: botocore makes a write again when its answer is lost; the second put's
    condition (the session free) fails on the reservation the first one wrote. Before, that read as
    "taken meanwhile": nothing was sent, and x waited for the reservation to lapse and its fallback."""
    with CountingReceiver() as receiver:
        deps = seed(resources, store, receiver, ("x",))
        park_behind_a_holder(deps, store, "x")
        racing, client = conflicting_store(store)
        client.faults.append(fault)
        # WHEN the reservation meets a transaction that leaves the session free (a start cancelled),
        # or its answer is lost
        handed = handoff.offer(racing.leases, deps.result_queue, "s")
        # THEN it is made (again): the session reserved for x and x's copy sent now
        assert client.met == [fault] and handed == "bg:x"
        assert reserved_for(store) == "bg:x"
        [copy] = [kw for kw in deps.result_queue.sent if kw["delay_s"] == 0]  # type: ignore[attr-defined]
        assert ATTR_HANDED_AT in copy["wait"]


def park_behind_a_holder(deps: WakeDeps, store: DynamoStore, task_id: str) -> None:
    """``task_id`` finds the session busy and joins its wait list; then the holder is gone (its
    lease deleted, as a crashed holder's lease expires): the session is free, with a waiter."""
    token = acquire_lease(store, "s", "bg:holder", 600)
    assert token is not None
    park(deps, task_id)
    store.table.db.delete_item(TableName=store.table.name, Key=key(*lease_key("s")))


def reserved_for(store: DynamoStore) -> str | None:
    item = store.table.read_item(*lease_key("s")) or {}
    return item.get(RESERVED_FOR, {}).get("S")


def test_a_decided_run_whose_mark_keeps_meeting_transactions_on_a_held_lease_marks_it_again(
    resources: Resources, store: DynamoStore
) -> None:
    """A decided run (issue 35) re-queued while the session is held, both tries of its mark meeting
    a transaction on the lease: the offer finds the session held, and before, the run was left to
    its approval chain's next check although the holder, unmarked, would release to nobody."""
    with CountingReceiver() as receiver:
        deps = seed(resources, store, receiver, ("x",))
        token = acquire_lease(store, "s", "bg:holder", 600)
        assert token is not None
        racing, client = conflicting_store(store)
        client.faults += ["update", "update"]
        waiter = Waiter(session_id="s", run_id="bg:x", arrived=store.table.now(), state="waiting", gen=1)
        # WHEN x is re-queued and both tries of its mark meet a transaction on the held lease
        handed = handoff.requeue(racing.leases, deps.result_queue, waiter, ttl_s=600)
        # THEN nothing is handed now, and the lease is marked: its holder's release to nobody fails,
        # so it reads the list again and hands the session to x
        assert client.met == ["update", "update"] and handed is None
        assert [w.run_id for w in store.leases.waiters("s")] == ["bg:x"]
        assert not store.leases.release("s", token, unless_parked=True)


def test_a_reservation_found_made_by_another_release_is_not_counted_as_this_ones(
    resources: Resources, store: DynamoStore
) -> None:
    """The same failed condition on a reservation for the same run that another write made (its own
    token) is not this write's: nothing is sent from here."""
    with CountingReceiver() as receiver:
        deps = seed(resources, store, receiver, ("x",))
        park_behind_a_holder(deps, store, "x")
        assert store.leases.reserve("s", "bg:x", RESERVATION_S)
        # WHEN the session is offered to x again: its reservation's condition (free) fails
        handed = handoff.offer(store.leases, deps.result_queue, "s")
        # THEN nothing is handed from here: the reservation found is another write's
        assert handed is None
        assert [kw for kw in deps.result_queue.sent if kw["delay_s"] == 0] == []  # type: ignore[attr-defined]


def test_a_release_to_the_next_waiter_whose_answer_was_lost_sends_the_waiter_its_copy(
    resources: Resources, store: DynamoStore
) -> None:
    with CountingReceiver() as receiver:
        deps = seed(resources, store, receiver, ("x",))
        token = acquire_lease(store, "s", "bg:holder", 600)
        assert token is not None
        park(deps, "x")
        racing, client = conflicting_store(store)
        client.faults.append("put retried")
        # WHEN the holder releases, reserving the session for x, and the answer is lost
        handed = handoff.hand_off(racing.leases, deps.result_queue, "s", token)
        # THEN the release counts as made: the session reserved for x and x's copy sent
        assert client.met == ["put retried"] and handed == "bg:x"
        assert reserved_for(store) == "bg:x"
        assert [kw["delay_s"] for kw in deps.result_queue.sent].count(0) == 1  # type: ignore[attr-defined]


def test_a_release_to_nobody_whose_answer_was_lost_counts_as_made(resources: Resources, store: DynamoStore) -> None:
    token = acquire_lease(store, "s", "bg:holder", 600)
    assert token is not None
    racing, client = conflicting_store(store)
    client.faults.append("delete retried")
    assert racing.leases.release("s", token, unless_parked=True)
    assert client.met == ["delete retried"] and lease_holder(store, "s") is None


def test_a_release_refused_by_a_waiters_mark_is_still_refused(resources: Resources, store: DynamoStore) -> None:
    """What a failed condition returns is not mistaken for a landed write: a lease the holder
    still holds, marked by a run that joined the list, is not released to nobody."""
    token = acquire_lease(store, "s", "bg:holder", 600)
    assert token is not None
    assert store.leases.mark_parked("s")
    assert not store.leases.release("s", token, unless_parked=True)
    assert lease_holder(store, "s")[0] == "bg:holder"  # type: ignore[index]
