"""A release that hands the session to a waiter runs that waiter in the same invocation when time
is left (``wake.background.run_waiters_here``): no queue round trip between two runs of a session.
The waiter's delayed copy stays in the queue untouched, so a run here that does not happen or does
not finish leaves the run to that copy (docs/durability.md, "The hand-off").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from agentwake.session.copies import ATTR_HANDED_AT, ATTR_WAIT_GEN
from agentwake.store.dynamo import DynamoStore
from agentwake.store.keys import LEASE_SK, wait_key
from agentwake.store.queues import ATTR_ATTEMPTS_SPENT
from agentwake.wake.background import Done
from agentwake.wake.invocation import CHAIN_RESERVE_RUNS, on_background_record
from agentwake.wake.spec import WakeDeps
from tests.integration.test_handoff_waiters import message, message_of, park, seed
from tests.support.aws import Resources
from tests.support.faults import around
from tests.support.receiver import CountingReceiver
from tests.support.store_writes import acquire_lease, lease_holder

PLENTY_MS = 600_000


def record_of(sent: dict[str, Any], message_id: str) -> SQSRecord:
    """A message the wake sent to the result queue, as SQS would deliver it."""
    attributes = {
        name: {"dataType": value.get("DataType", "String"), "stringValue": value["StringValue"]}
        for name, value in sent["attributes"].items()
    }
    attributes.update({name: {"dataType": "Number", "stringValue": value} for name, value in sent["wait"].items()})
    return SQSRecord(
        {
            "messageId": message_id,
            "body": sent["body"],
            "attributes": {"ApproximateReceiveCount": "1"},
            "messageAttributes": attributes,
            "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:results",
        }
    )


def plain_record(task_id: str) -> SQSRecord:
    return SQSRecord(
        {
            "messageId": f"msg-{task_id}",
            "body": message(task_id).model_dump_json(),
            "attributes": {"ApproximateReceiveCount": "1"},
            "messageAttributes": {},
            "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:results",
        }
    )


class Setup:
    """Session ``s`` with tasks a, x, y; x and y wait for the session (on its wait list, each with
    its delayed copy in the queue), which is free again after a release that handed nothing over."""

    def __init__(self, resources: Resources, store: Any, receiver: CountingReceiver) -> None:
        self.deps = seed(resources, store, receiver, ("a", "x", "y"))
        self.queue, self.settings = self.deps.result_queue, self.deps.settings
        token = acquire_lease(store, "s", "bg:intruder", 600)
        assert token is not None
        park(self.deps, "x")
        park(self.deps, "y")
        store.leases.release("s", token)
        self.fallbacks = list(self.queue.sent)  # the delayed copies of x and y
        assert [message_of(kw) for kw in self.fallbacks] == ["x", "y"]
        self.queue.sent.clear()


def run_status(store: DynamoStore, run_id: str) -> str | None:
    run = store.records.get_run(run_id)
    return run.status if run is not None else None


def test_a_release_with_time_left_runs_its_waiters_here_in_the_order_they_came(
    resources: Resources, store: DynamoStore
) -> None:
    with CountingReceiver() as receiver:
        setup = Setup(resources, store, receiver)
        # WHEN a's record runs with the whole invocation left
        result = on_background_record(plain_record("a"), setup.deps, time_left=lambda: PLENTY_MS)
        # THEN a, then x, then y ran in this invocation, each once
        assert result == Done("succeeded", ran_after=2)
        assert [run_status(store, r) for r in ("bg:a", "bg:x", "bg:y")] == ["succeeded"] * 3
        runs = [store.records.get_run(r) for r in ("bg:a", "bg:x", "bg:y")]
        starts = [r.started_at for r in runs if r is not None]
        assert starts == sorted(starts), starts
        # AND nothing was re-sent: no copy stands between two runs of the session
        assert setup.queue.sent == []
        # AND the wait list is empty and the session free
        assert store.leases.waiters("s") == []
        assert store.table.read_item(*wait_key("s", "bg:x")) is None
        assert lease_holder(store, "s") is None
        # AND x and y say they were handed the session
        x = store.records.get_run("bg:x")
        assert x is not None and x.idle_before_s is not None and x.waited_s is not None
        sent_before = dict(receiver.by_delivery_id())
        # WHEN the delayed copies come back later
        for n, kw in enumerate(setup.fallbacks):
            again = on_background_record(record_of(kw, f"fallback-{n}"), setup.deps, time_left=lambda: PLENTY_MS)
            # THEN they find their runs done: nothing runs or is sent again
            assert again == Done("already_succeeded")
        assert dict(receiver.by_delivery_id()) == sent_before
        assert all(count == 1 for count in receiver.by_delivery_id().values()), receiver.by_delivery_id()


class Recording:
    """The DynamoDB client, recording each call's operation and what it wrote to the lease item."""

    WRITES = ("transact_write_items", "put_item", "update_item", "delete_item")

    def __init__(self, client: Any) -> None:
        self._client = client
        self.exceptions = client.exceptions
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        call = getattr(self._client, name)
        if name not in (*self.WRITES, "batch_get_item", "get_item", "query"):
            return call

        def recorded(**kw: Any) -> Any:
            self.calls.append((name, kw))
            return call(**kw)

        return recorded


def lease_put_in(kw: dict[str, Any]) -> dict[str, Any] | None:
    """The lease item a write puts (a start's take in its transaction, a release's reservation on
    its own), or None."""
    for put in [kw.get("Item", {}), *(item.get("Put", {}).get("Item", {}) for item in kw.get("TransactItems", []))]:
        if put.get("sk", {}).get("S") == LEASE_SK:
            return put
    return None


def test_nothing_is_written_between_a_release_and_the_start_of_the_waiter_run_here(
    resources: Resources, store: DynamoStore
) -> None:
    """Issue 37 item 5: the session is idle from the release to the next start; every call in
    between adds to it (most under load). The start itself marks the waiter started and takes its
    place off the list: a separate write marking it handed first only delayed it."""
    with CountingReceiver() as receiver:
        setup = Setup(resources, store, receiver)
        recording = Recording(store.table.db)
        setup.deps.store = DynamoStore(store.table.name, client=recording)  # type: ignore[arg-type]
        # WHEN a's record runs with the whole invocation left (its commit hands the session to x)
        result = on_background_record(plain_record("a"), setup.deps, time_left=lambda: PLENTY_MS)
        assert result == Done("succeeded", ran_after=2)
        # THEN between the release that reserved the session for x and x's start, one batch read
        lease_puts = [(n, lease_put_in(kw)) for n, (_, kw) in enumerate(recording.calls)]
        handed = next(n for n, put in lease_puts if put and put.get("reserved_for", {}).get("S") == "bg:x")
        started = next(
            n
            for n, put in lease_puts
            if put and put["holder"]["S"] == "bg:x" and not put["token"]["S"].startswith("reserved-")
        )
        assert [name for name, _ in recording.calls[handed + 1 : started]] == ["batch_get_item"]
        # AND x and y ran, each once, the list empty
        assert [run_status(store, r) for r in ("bg:a", "bg:x", "bg:y")] == ["succeeded"] * 3
        assert store.leases.waiters("s") == [] and lease_holder(store, "s") is None


def test_with_too_little_time_left_the_waiter_is_handed_through_the_queue(
    resources: Resources, store: DynamoStore
) -> None:
    with CountingReceiver() as receiver:
        setup = Setup(resources, store, receiver)
        short = CHAIN_RESERVE_RUNS * setup.settings.min_run_budget_ms - 1
        # WHEN a runs with less left than a run here would need (its own budget and the batch's)
        result = on_background_record(plain_record("a"), setup.deps, time_left=lambda: short)
        # THEN only a ran; x got the session through a newer copy re-sent at once, y still waits
        assert result == Done("succeeded")
        assert [run_status(store, r) for r in ("bg:a", "bg:x", "bg:y")] == ["succeeded", None, None]
        handed = [kw for kw in setup.queue.sent if ATTR_HANDED_AT in kw["wait"]]
        assert [message_of(kw) for kw in handed] == ["x"]
        assert handed[0]["wait"][ATTR_WAIT_GEN] == "1" and handed[0]["delay_s"] == 0
        held = lease_holder(store, "s")
        assert held is not None and held[0] == "bg:x"
        assert [w.run_id for w in store.leases.waiters("s")] == ["bg:y"]


class FailingBegin:
    """The store, with one run's lease write failing once (an outage at the worst moment)."""

    def __init__(self, store: DynamoStore, run_id: str) -> None:
        self._run_id = run_id
        self.failed = 0
        around(store.runs, "begin_run", self._begin_run)
        self.store = store

    def _begin_run(self, begin: Any, **kw: Any) -> Any:
        if kw["run_id"] == self._run_id and not self.failed:
            self.failed += 1
            raise RuntimeError("the table did not answer")
        return begin(**kw)


def test_a_waiter_that_cannot_run_here_is_left_to_its_delayed_copy_and_nothing_is_lost(
    resources: Resources, store: DynamoStore
) -> None:
    with CountingReceiver() as receiver:
        setup = Setup(resources, store, receiver)
        faulty = FailingBegin(store, "bg:x")
        deps = WakeDeps(store=faulty.store, settings=setup.settings, result_queue=setup.queue)
        # WHEN a runs, and x's start fails in this invocation
        result = on_background_record(plain_record("a"), deps, time_left=lambda: PLENTY_MS)
        # THEN a's own record is done; x and y did not run here, and nothing was re-sent
        assert result == Done("succeeded")
        assert faulty.failed == 1
        assert [run_status(store, r) for r in ("bg:x", "bg:y")] == [None, None]
        assert setup.queue.sent == []
        # AND x's delayed copy, when it comes back, takes the session reserved for it and runs x,
        # then y here
        x_copy, y_copy = setup.fallbacks
        again = on_background_record(record_of(x_copy, "fallback-x"), deps, time_left=lambda: PLENTY_MS)
        assert again == Done("succeeded", ran_after=1)
        assert [run_status(store, r) for r in ("bg:a", "bg:x", "bg:y")] == ["succeeded"] * 3
        assert on_background_record(record_of(y_copy, "fallback-y"), deps) == Done("already_succeeded")
        assert all(count == 1 for count in receiver.by_delivery_id().values()), receiver.by_delivery_id()
        assert len(receiver.by_delivery_id()) == 3, receiver.counts


def before_commit(store: DynamoStore, run_id: str, action: Callable[[], None]) -> None:
    """Do ``action`` as ``run_id``'s commit begins (after its read of the wait list)."""
    original = store.ends.commit_success

    def commit(**kw: Any) -> Any:
        if kw["run_id"] == run_id:
            action()
        return original(**kw)

    store.ends.commit_success = commit  # type: ignore[method-assign]


def test_a_result_that_joins_the_list_after_the_holder_read_it_is_still_handed_the_session(
    resources: Resources, store: DynamoStore
) -> None:
    with CountingReceiver() as receiver:
        plain = seed(resources, store, receiver, ("a", "x"))
        queue, settings = plain.result_queue, plain.settings
        joined: list[bool] = []
        racing = DynamoStore(store.table.name, client=store.table.db)
        before_commit(racing, "bg:a", lambda: joined.append(park(plain, "x") is None))
        deps = WakeDeps(store=racing, settings=settings, result_queue=queue)
        # WHEN a runs alone, and x finds the session busy and joins its wait list between a's
        # reading of the list (nobody) and a's commit
        result = on_background_record(plain_record("a"), deps, time_left=lambda: PLENTY_MS)
        # THEN a's release did not leave x to its delayed copy: x ran next, here
        assert joined == [True]
        assert result == Done("succeeded", ran_after=1)
        assert [run_status(store, r) for r in ("bg:a", "bg:x")] == ["succeeded", "succeeded"]
        assert [message_of(kw) for kw in queue.sent] == ["x"]  # its delayed copy, sent as it parked
        assert store.leases.waiters("s") == [] and lease_holder(store, "s") is None


def test_attempts_a_release_ran_here_count_toward_max_receive_count_of_the_waiters_copy(
    resources: Resources, store: DynamoStore
) -> None:
    """Issue 36: a waiter run in the releasing invocation that fails made an attempt its delayed
    copy's receives do not know of; the run counts it, so the run gets MaxReceiveCount attempts in
    all, not one more per attempt made here."""
    from agentwake.errors import RunFailed
    from agentwake.wake.background import DeadLetter

    with CountingReceiver() as receiver:
        setup = Setup(resources, store, receiver)
        most = setup.settings.max_receive_count
        original = store.ends.commit_success

        def commit(**kw: Any) -> Any:
            if kw["run_id"] == "bg:x":
                raise RunFailed("bg:x", "every provider failed (injected)")
            return original(**kw)

        store.ends.commit_success = commit  # type: ignore[method-assign]
        # WHEN a runs with time left: x, handed the session, runs here and fails (attempt 1)
        on_background_record(plain_record("a"), setup.deps, time_left=lambda: PLENTY_MS)
        x = store.records.get_run("bg:x")
        assert x is not None and x.attempts == 1 and x.message_attempts == 1
        # (x's failure handed the session on to y, through a copy sent at once: y runs)
        (y_handed,) = [kw for kw in setup.queue.sent if message_of(kw) == "y"]
        assert on_background_record(record_of(y_handed, "handed-y"), setup.deps) == Done("succeeded")
        # AND x's delayed copy comes back, failing on each receive SQS gives it
        x_copy = setup.fallbacks[0]
        outcomes: list[Any] = []
        for receive in range(1, most + 1):
            record = record_of(x_copy, "fallback-x")
            record.raw_event["attributes"]["ApproximateReceiveCount"] = str(receive)
            try:
                result = on_background_record(record, setup.deps, time_left=lambda: PLENTY_MS)
            except RunFailed:
                outcomes.append("retried")
                continue
            outcomes.append(result)
            break
        # THEN its last attempt is the run's MaxReceiveCount-th: the copy is dead-lettered then
        x = store.records.get_run("bg:x")
        assert x is not None and x.attempts == most, (x.attempts, outcomes)
        assert outcomes[:-1] == ["retried"] * (most - 2)
        dead = outcomes[-1]
        assert isinstance(dead, DeadLetter), outcomes
        assert dead.receive_count == str(most)
        assert "1 run for it by a release of its session" in dead.reason
        assert dead.extra == {ATTR_ATTEMPTS_SPENT: str(most)}
        # WHEN another copy of x comes after that (SQS delivers at least once)
        late = on_background_record(record_of(x_copy, "fallback-x-again"), setup.deps, time_left=lambda: PLENTY_MS)
        # THEN it makes no attempt more and is dead-lettered as the spent copy was: the run's count,
        # the attribute dlq describe reads
        assert isinstance(late, DeadLetter) and late.error_type == "AttemptsSpent", late
        assert (late.receive_count, late.extra) == (str(most), {ATTR_ATTEMPTS_SPENT: str(most)})
        x = store.records.get_run("bg:x")
        assert x is not None and x.attempts == most
