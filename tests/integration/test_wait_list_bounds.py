"""The session's wait list is bounded (issue 32; docs/durability.md, "The hand-off"): a release reads
what it needs to choose the next waiter — the list's first places and that one waiter's item — not
the other waiters' bodies, so a release before 1,000 waiters of 200 KB costs what one before a
single waiter does; and a session's list holds at most ``SessionWaitListMax`` waiting wakes: one
more is refused at once, dead-lettered as ``WaitListFull`` with a reason that says so. The real
store on moto, calls and bytes counted at the client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from agentwake.errors import SessionBusy, WaitListFull
from agentwake.session.handoff import hand_off
from agentwake.session.waiting import WaitState, wait_cron
from agentwake.settings import Settings
from agentwake.store.codec import key
from agentwake.store.dynamo import DynamoStore
from agentwake.store.keys import QUEUE_PREFIX, queue_key, session_pk, wait_key
from agentwake.wake.background import DeadLetter, Resend
from agentwake_ops.dlq.describe import describe
from tests.integration.test_handoff_waiters import Queue, seed, wait
from tests.integration.test_wake_handlers import invoke_background, result_body, sqs_record
from tests.support.aws import Resources, drain
from tests.support.builders import seed_session, seed_task
from tests.support.probes import DynamoTraffic
from tests.support.receiver import CountingReceiver
from tests.support.store_writes import acquire_lease, lease_holder

BODY_BYTES = 200_000
T0 = 1_796_000_000.0


def park_many(store: DynamoStore, session_id: str, n: int, *, first: str) -> None:
    """``n`` results waiting for the session, each with a 200 KB body: ``first`` arrived first,
    though its run id sorts last (the list's order is arrival, not run id). The first two join the
    list as any waiter does (``park_waiter``); the others are copies of the second's items (its
    waiter and its place, as stored) with their own run id and arrival, written 25 a call: 1,000
    parks through moto's expression engine would take minutes."""
    clock = store.table.now
    try:
        for i in range(min(n, 2)):
            store.table.now = lambda i=i: T0 + i  # type: ignore[method-assign]
            store.leases.park_waiter(
                session_id=session_id,
                run_id=first if i == 0 else waiter_id(i),
                gen=0,
                body=json.dumps({"result_text": "r" * BODY_BYTES}),
                attributes={},
                wait={},
                ttl_s=3600,
            )
    finally:
        store.table.now = clock  # type: ignore[method-assign]
    if n <= 2:
        return
    waiter = store.table.read_item(*wait_key(session_id, waiter_id(1)))
    [place] = [i for i in store.table.query(session_pk(session_id), QUEUE_PREFIX) if i["run_id"]["S"] == waiter_id(1)]
    assert waiter is not None
    items = []
    for i in range(2, n):
        run = {"run_id": {"S": waiter_id(i)}}
        items.append(
            {**waiter, **run, "sk": {"S": wait_key(session_id, waiter_id(i))[1]}, "arrived": {"N": f"{T0 + i:.3f}"}}
        )
        items.append({**place, **run, "sk": {"S": queue_key(session_id, T0 + i, waiter_id(i))[1]}})
    for start in range(0, len(items), 25):
        requests = [{"PutRequest": {"Item": item}} for item in items[start : start + 25]]
        assert not store.table.db.batch_write_item(RequestItems={store.table.name: requests}).get("UnprocessedItems")


def waiter_id(i: int) -> str:
    return f"bg:task-{i:04d}"


def release_to_the_next(
    store: DynamoStore, traffic: DynamoTraffic, session_id: str
) -> tuple[str | None, list[str], int]:
    """The session's holder ends its turn and hands the session on: who got it, the calls, the bytes."""
    token = acquire_lease(store, session_id, "live:holder", 600)
    assert token is not None
    handed: list[str | None] = []
    calls, received = traffic.measure(lambda: handed.append(hand_off(store.leases, Queue(), session_id, token)))
    return handed[0], calls, received


def test_a_release_before_1000_waiters_of_200_kb_reads_what_it_reads_before_one(store: DynamoStore) -> None:
    # GIVEN one session with a single waiter, another with 1,000, each waiter's body 200 KB, and
    # the genuine first waiter of the long list a run whose id sorts last
    park_many(store, "one", 1, first="bg:zzz-first")
    park_many(store, "many", 1000, first="bg:zzz-first")
    traffic = DynamoTraffic(store.table.db)
    # WHEN each session's holder releases it
    one, one_calls, one_bytes = release_to_the_next(store, traffic, "one")
    many, many_calls, many_bytes = release_to_the_next(store, traffic, "many")
    # THEN the release before 1,000 waiters made the same calls and read about the same bytes:
    # the first places and the chosen waiter's item (its 200 KB body once), not 1,000 bodies
    assert many_calls == one_calls, (one_calls, many_calls)
    assert BODY_BYTES <= one_bytes <= many_bytes <= one_bytes + 2_000, (one_bytes, many_bytes)
    # AND the genuine first waiter was handed the session in both
    assert one == many == "bg:zzz-first"
    assert lease_holder(store, "many")[0] == "bg:zzz-first"  # type: ignore[index]
    # AND it left the list, the next in arrival order is now first
    assert [w.run_id for w in store.leases.waiters("many", first=2)] == ["bg:task-0001", "bg:task-0002"]


def test_a_place_whose_run_left_the_list_is_removed_and_the_next_waiter_is_handed_the_session(
    store: DynamoStore,
) -> None:
    # GIVEN three waiters, and the first's item gone while its place stayed (a crash between the two)
    park_many(store, "s", 3, first="bg:zzz-first")
    store.table.db.delete_item(TableName=store.table.name, Key=key(*wait_key("s", "bg:zzz-first")))
    # WHEN the holder releases the session
    handed, _, _ = release_to_the_next(store, DynamoTraffic(store.table.db), "s")
    # THEN the next waiter in arrival order gets it, and the left-over place is gone
    assert handed == waiter_id(1)
    places = [i["run_id"]["S"] for i in store.table.query(session_pk("s"), QUEUE_PREFIX)]
    assert places == [waiter_id(2)]


@pytest.fixture
def receiver() -> Iterator[CountingReceiver]:
    with CountingReceiver() as r:
        yield r


def busy(resources: Resources, store: DynamoStore, receiver: CountingReceiver, cap: int) -> Any:
    deps = seed(resources, store, receiver, ("a", "b", "c"))
    assert acquire_lease(store, "s", "bg:holder", 600) is not None
    return deps.__class__(
        store=store, settings=Settings(table_name=resources.table, session_wait_list_max=cap), result_queue=Queue()
    )


def test_a_result_past_the_wait_lists_cap_is_dead_lettered_as_wait_list_full(
    resources: Resources, store: DynamoStore, receiver: CountingReceiver
) -> None:
    # GIVEN a busy session whose wait list may hold 2, and 2 results waiting on it
    deps = busy(resources, store, receiver, cap=2)
    assert isinstance(wait(deps, "a"), Resend) and isinstance(wait(deps, "b"), Resend)
    # WHEN a third result finds the session busy
    third = wait(deps, "c")
    # THEN it is refused at once: dead-lettered as WaitListFull, with a reason naming the session,
    # its holder and the cap
    assert isinstance(third, DeadLetter) and third.error_type == "WaitListFull"
    assert "session s is busy (held by run bg:holder)" in third.reason
    assert "already holds 2 waiting wakes (SessionWaitListMax 2)" in third.reason
    # AND the failure an operator reads is recorded on the run, which never started
    [failure] = store.ends.failures("bg:c")
    assert failure.error_type == "WaitListFull" and failure.attempt == 0
    # AND the list is unchanged: the two that waited, in order, and not the third
    assert [w.run_id for w in store.leases.waiters("s")] == ["bg:a", "bg:b"]
    # AND a waiter already on the full list that comes back and waits again is not refused
    assert isinstance(wait(deps, "a", WaitState(count=1, since=deps.clock.wall())), Resend)


def test_the_result_handler_sends_a_wait_list_full_result_to_the_dlq_with_its_reason(
    resources: Resources, store: DynamoStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the stack's cap set to 1, a busy session and one result waiting on it
    monkeypatch.setenv("AGENTWAKE_SESSION_WAIT_LIST_MAX", "1")
    from agentwake.bootstrap import get_settings

    get_settings.cache_clear()
    seed_session(store, "s1")
    for task_id in ("t1", "t2"):
        seed_task(store, task_id, "s1")
    assert acquire_lease(store, "s1", "bg:holder", 600) is not None
    assert invoke_background({"Records": [sqs_record(result_body("t1", "s1"))]}) == {"batchItemFailures": []}
    assert [m["MessageAttributes"].get("agentwake-error-type") for m in drain(resources.dlq_url)] == []
    # WHEN a second result arrives at the busy session
    assert invoke_background({"Records": [sqs_record(result_body("t2", "s1"), "m2")]}) == {"batchItemFailures": []}
    # THEN it is on the DLQ at once, with the type and a reason an operator can read
    [dead] = drain(resources.dlq_url)
    attributes = dead["MessageAttributes"]
    assert attributes["agentwake-error-type"]["StringValue"] == "WaitListFull"
    assert "SessionWaitListMax 1" in attributes["agentwake-reason"]["StringValue"]
    assert dead["Body"] == result_body("t2", "s1")
    # AND only the first waits
    assert [w.run_id for w in store.leases.waiters("s1")] == ["bg:t1"]
    # AND the operator's CLI reads it as a run that never started, and why
    shown = describe(dead, "results", resources.dlq_url, store)
    assert (shown.kind, shown.run_id, shown.error_type) == ("background", "bg:t2", "WaitListFull")
    assert "SessionWaitListMax 1" in (shown.error_detail or "")
    assert shown.trigger["never_ran"] == "the session's wait list was full"


def test_a_cron_wake_past_the_cap_raises_wait_list_full_and_leaves_the_list_as_it_was(
    resources: Resources, store: DynamoStore, receiver: CountingReceiver
) -> None:
    # GIVEN a busy session whose wait list (cap 1) holds a result
    deps = busy(resources, store, receiver, cap=1)
    assert isinstance(wait(deps, "a"), Resend)
    # WHEN a cron wake of the session finds it busy
    found = SessionBusy("busy", run_id="cron:j:2026-12-01T00:00:00Z", session_id="s", holder="bg:holder")
    # THEN it is refused as WaitListFull, a permanent error (CronFailureQueue at once), the reason saying why
    with pytest.raises(WaitListFull, match="SessionWaitListMax 1") as refused:
        wait_cron(
            found,
            {"job_id": "j", "scheduled_time": "2026-12-01T00:00:00Z"},
            WaitState(),
            store=store,
            settings=deps.settings,
            schedules=None,
            target_arn=None,
            job_id="j",
            now=deps.clock.wall,
        )
    assert not refused.value.retryable
    assert [w.run_id for w in store.leases.waiters("s")] == ["bg:a"]
