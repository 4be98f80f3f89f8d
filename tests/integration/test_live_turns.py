"""Live turns hold the session, their messages are the history a woken agent reads, and a release
hands the session to the run that waited for it (issue 22; docs/durability.md, "Live turns" and
"Waiting for the session"). The real handler and store on moto; clocks injected where a lease
must lapse."""

from __future__ import annotations

import json
import time
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from agentwake.errors import SessionBusy
from agentwake.product.sessions import LiveTurnCapped, LiveTurnLost, SessionsService
from agentwake.session.copies import ATTR_HANDED_AT, ATTR_WAIT_GEN
from agentwake.settings import Settings
from agentwake.store.dynamo import DynamoStore
from agentwake.store.queues import ResultQueue
from agentwake.wake.background import Done, Resend
from agentwake.wake.invocation import on_background_record
from agentwake.wake.spec import WakeDeps
from agentwake_local.poller import lambda_sqs_record
from tests.integration.test_wake_handlers import invoke_background, result_body
from tests.support.aws import REGION, Resources, drain
from tests.support.builders import seed_session, seed_task
from tests.support.model_calls import record_model_requests
from tests.support.store_writes import acquire_lease, lease_holder

QUEUE_ARN = "arn:aws:sqs:us-east-1:123456789012:results"


def sessions(resources: Resources, store: DynamoStore, **kw: Any) -> SessionsService:
    return SessionsService(
        store, ResultQueue(resources.queue_url, client=boto3.client("sqs", region_name=REGION)), **kw
    )


def records_of(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"Records": [lambda_sqs_record(m, QUEUE_ARN, REGION) for m in messages]}


def purge(resources: Resources) -> None:
    sqs = boto3.client("sqs", region_name=REGION)
    for m in drain(resources.queue_url):
        sqs.delete_message(QueueUrl=resources.queue_url, ReceiptHandle=m["ReceiptHandle"])


def test_a_wake_during_a_live_turn_waits_and_sees_the_turn_once_it_ends(
    resources: Resources, store: DynamoStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a live turn holding session s1, and what the user and the agent said in it
    seed_session(store, "s1")
    seed_task(store, "t1", "s1")
    api = sessions(resources, store)
    turn = api.begin_live_turn("s1")
    api.append(turn, [("user", "Please research flights to Oslo."), ("assistant", "On it.")], idempotency_key="k1")
    requests = record_model_requests(monkeypatch)
    # WHEN the task's completion arrives during the turn
    assert invoke_background({"Records": [sqs := lambda_sqs_record(_sent(resources, "t1"), QUEUE_ARN, REGION)]}) == {
        "batchItemFailures": []
    }
    del sqs
    # THEN it does not run: it waits (on the session's wait list) and no model was called
    assert store.records.get_run("bg:t1") is None and requests == []
    assert [w.run_id for w in store.leases.waiters("s1")] == ["bg:t1"]
    purge(resources)  # its delayed fallback copy: not needed below
    # WHEN the live turn ends
    assert api.end_live_turn(turn) == "bg:t1"
    # THEN the session is reserved for bg:t1 and its record re-sent at once, marked handed
    assert lease_holder(store, "s1")[0] == "bg:t1"  # type: ignore[index]
    [handed] = drain(resources.queue_url)
    assert (
        ATTR_HANDED_AT in handed["MessageAttributes"]
        and handed["MessageAttributes"][ATTR_WAIT_GEN]["StringValue"] == "1"
    )
    # AND that copy runs, and its model request holds the live turn's messages before the wake turn
    assert invoke_background(records_of([handed])) == {"batchItemFailures": []}
    assert store.records.get_run("bg:t1").status == "succeeded"  # type: ignore[union-attr]
    first = requests[0]
    assert ("user", "Please research flights to Oslo.") in first and ("assistant", "On it.") in first
    assert (
        first.index(("user", "Please research flights to Oslo."))
        < first.index(("assistant", "On it."))
        < len(first) - 1
    )
    # AND the conversation reads back newest first: the run's note, its marker, its delivery, the turn
    kinds = [e.kind for e in api.read_conversation("s1").entries]
    assert kinds[:2] == ["note", "marker"] and kinds[-2:] == ["live", "live"]
    # AND the run records how long the session sat idle before it started
    assert store.records.get_run("bg:t1").idle_before_s is not None  # type: ignore[union-attr]


def _sent(resources: Resources, task_id: str) -> dict[str, Any]:
    """A completion as SQS delivers it (sent, then received)."""
    sqs = boto3.client("sqs", region_name=REGION)
    sqs.send_message(QueueUrl=resources.queue_url, MessageBody=result_body(task_id, "s1"))
    [message] = drain(resources.queue_url)
    sqs.delete_message(QueueUrl=resources.queue_url, ReceiptHandle=message["ReceiptHandle"])
    return message


def test_a_retried_append_writes_once_and_returns_what_the_first_wrote(
    resources: Resources, store: DynamoStore
) -> None:
    seed_session(store, "s1")
    api = sessions(resources, store)
    with api.live_turn("s1") as turn:
        first = api.append(turn, [("user", "hello")], idempotency_key="msg-41")
        again = api.append(turn, [("user", "hello")], idempotency_key="msg-41")
    assert first.written and not again.written and again.sort_keys == first.sort_keys
    assert [(e.role, e.content, e.kind) for e in store.history.history("s1")] == [("user", "hello", "live")]


def test_an_append_without_the_session_writes_nothing(resources: Resources, store: DynamoStore) -> None:
    # GIVEN a live turn that has ended
    seed_session(store, "s1")
    api = sessions(resources, store)
    turn = api.begin_live_turn("s1")
    api.end_live_turn(turn)
    # WHEN it appends, or renews
    with pytest.raises(LiveTurnLost):
        api.append(turn, [("user", "late")], idempotency_key="k")
    with pytest.raises(LiveTurnLost):
        api.renew_live_turn(turn)
    # THEN nothing was written
    assert store.history.history("s1") == []


def test_a_live_turn_beginning_during_a_run_waits_then_is_told_who_holds_it(
    resources: Resources, store: DynamoStore
) -> None:
    # GIVEN a run holding session s1
    seed_session(store, "s1")
    token = acquire_lease(store, "s1", "bg:busy", 600)
    assert token is not None
    # WHEN a live turn begins and may not wait: busy at once, naming the run
    with pytest.raises(SessionBusy) as busy:
        sessions(resources, store).begin_live_turn("s1", wait_s=0)
    assert busy.value.holder == "bg:busy" and "bg:busy" in str(busy.value)
    # WHEN it may wait, and the run ends while it waits: it gets the session
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        store.leases.release("s1", token)  # the run ends during the first pause

    turn = sessions(resources, store, sleep=sleep).begin_live_turn("s1", wait_s=10)
    assert slept and lease_holder(store, "s1")[0] == f"live:{turn.turn_id}"  # type: ignore[index]


def test_a_live_turn_that_is_never_ended_releases_the_session_after_its_ttl(
    resources: Resources, store: DynamoStore
) -> None:
    # GIVEN a live turn of 5 s (a chat app that crashed mid-turn), on a store whose clock we move
    clock = [1_000_000.0]
    timed = DynamoStore(resources.table, client=store.table.db, now=lambda: clock[0])
    seed_session(store, "s1")
    api = sessions(resources, timed, now=lambda: clock[0])
    turn = api.begin_live_turn("s1", ttl_s=5)
    assert acquire_lease(timed, "s1", "bg:next", 60) is None  # held
    # WHEN its TTL passes
    clock[0] += 6
    # THEN a run takes the session, and the lapsed turn can write nothing
    assert acquire_lease(timed, "s1", "bg:next", 60) is not None
    with pytest.raises(LiveTurnLost):
        api.append(turn, [("user", "too late")], idempotency_key="k")


def test_a_turn_renewed_past_its_cap_loses_the_session_to_the_waiter_which_runs(
    resources: Resources, store: DynamoStore
) -> None:
    # GIVEN a live turn of 2 s on a session whose turns may hold it 10 s in all (a clock we move,
    # started at the real time so the wake's own clock sees the turn's lease as held)
    clock = [time.time()]
    timed = DynamoStore(resources.table, client=store.table.db, now=lambda: clock[0])
    seed_session(store, "s1")
    seed_task(store, "t1", "s1")
    api = sessions(resources, timed, now=lambda: clock[0], max_hold_s=10)
    began = clock[0]
    turn = api.begin_live_turn("s1", ttl_s=2)
    # AND a task's completion that arrives during the turn and waits for the session
    assert invoke_background(records_of([_sent(resources, "t1")])) == {"batchItemFailures": []}
    assert [w.run_id for w in store.leases.waiters("s1")] == ["bg:t1"]
    purge(resources)  # its delayed fallback copy: the hand-off must carry it
    # WHEN the turn renews every second for as long as it is let
    granted: list[float] = []
    with pytest.raises(LiveTurnCapped) as capped:
        for _ in range(30):
            clock[0] += 1
            granted.append(api.renew_live_turn(turn, ttl_s=2).expires_at)
    # THEN renewals were granted, none past the cap, and the one past it was refused saying the cap
    assert granted and max(granted) <= began + 10 + 1e-3, [g - began for g in granted]
    assert clock[0] - began <= 10, "renewed past the cap"
    assert "at most 10 s" in str(capped.value) and "bg:t1" in str(capped.value)
    # AND the session was handed to the waiting completion, whose copy is in the queue at once
    assert lease_holder(store, "s1")[0] == "bg:t1"  # type: ignore[index]
    [handed] = drain(resources.queue_url)
    assert ATTR_HANDED_AT in handed["MessageAttributes"]
    # AND that copy runs: the woken agent's note is in the session's history
    assert invoke_background(records_of([handed])) == {"batchItemFailures": []}
    assert store.records.get_run("bg:t1").status == "succeeded"  # type: ignore[union-attr]
    assert [e.run_id for e in store.history.history("s1") if e.kind == "note"] == ["bg:t1"]
    # AND the capped turn can write nothing more
    with pytest.raises(LiveTurnLost):
        api.append(turn, [("user", "still here?")], idempotency_key="late")


def test_a_turn_asking_for_more_than_its_cap_is_granted_the_cap(resources: Resources, store: DynamoStore) -> None:
    # GIVEN turns that may hold the session 30 s in all
    seed_session(store, "s1")
    api = sessions(resources, store, max_hold_s=30)
    # WHEN a turn asks for 900 s at its begin, and again when it renews
    turn = api.begin_live_turn("s1", ttl_s=900)
    renewed = api.renew_live_turn(turn, ttl_s=900)
    # THEN its lease ends within the cap both times, and the lease on the table says the same
    assert turn.expires_at - time.time() <= 30 and renewed.expires_at <= turn.expires_at + 1e-3
    assert abs(lease_holder(store, "s1")[1] - renewed.expires_at) < 1e-2  # type: ignore[index]


def test_the_conversation_pages_newest_first_with_a_cursor(resources: Resources, store: DynamoStore) -> None:
    seed_session(store, "s1")
    api = sessions(resources, store)
    for n in range(5):
        with api.live_turn("s1") as turn:
            api.append(turn, [("user", f"m{n}")], idempotency_key=f"k{n}")
    pages, cursor = [], None
    while True:
        page = api.read_conversation("s1", cursor=cursor, limit=2)
        pages.append([e.content for e in page.entries])
        if page.cursor is None:
            break
        cursor = page.cursor
    assert pages == [["m4", "m3"], ["m2", "m1"], ["m0"]]
    with pytest.raises(ValueError):
        api.read_conversation("s1", cursor="SESSION#other")


def test_a_duplicated_hand_off_copy_makes_one_run(resources: Resources, store: DynamoStore) -> None:
    # GIVEN a completion that waited for a live turn and was handed the session when it ended
    seed_session(store, "s1")
    seed_task(store, "t1", "s1")
    api = sessions(resources, store)
    turn = api.begin_live_turn("s1")
    invoke_background(records_of([_sent(resources, "t1")]))
    purge(resources)
    api.end_live_turn(turn)
    [handed] = drain(resources.queue_url)
    # WHEN the handed copy arrives twice (an at-least-once receive)
    twice = [dict(handed, MessageId="copy-1"), dict(handed, MessageId="copy-2")]
    for copy in twice:
        assert invoke_background(records_of([copy])) == {"batchItemFailures": []}
    # THEN one run, one note, and the session is free again
    assert store.records.get_run("bg:t1").attempts == 1  # type: ignore[union-attr]
    assert [e.run_id for e in store.history.history("s1") if e.kind == "note"] == ["bg:t1"]
    assert lease_holder(store, "s1") is None


def test_a_holder_killed_before_its_hand_off_delays_the_waiter_by_its_ttl_plus_one_step(
    resources: Resources, store: DynamoStore
) -> None:
    # GIVEN a run holding session s1 for 30 s that dies without releasing it (no hand-off ever comes)
    clock = [2_000_000.0]
    timed = DynamoStore(resources.table, client=store.table.db, now=lambda: clock[0])
    seed_session(store, "s1")
    seed_task(store, "t1", "s1")
    assert acquire_lease(timed, "s1", "bg:dead", 30) is not None
    deps = WakeDeps(
        store=timed, settings=Settings(table_name=resources.table), result_queue=ResultQueue(resources.queue_url)
    )
    record = lambda_sqs_record(_sent(resources, "t1"), QUEUE_ARN, REGION)
    # WHEN the waiter comes back on its fallback copy each time, as SQS would deliver it
    started = clock[0]
    while True:
        outcome = on_background_record(SQSRecord(record), deps)
        if isinstance(outcome, Done):
            break
        assert isinstance(outcome, Resend)
        step = outcome.delay_s
        clock[0] += step
        attrs = {k: {"stringValue": v, "dataType": "String"} for k, v in outcome.state.to_attributes().items()}
        record = {**record, "messageAttributes": {**record.get("messageAttributes", {}), **attrs}}
        assert clock[0] - started < 30 + 60, "never ran"
    # THEN it ran once the lease had lapsed, within the lease's 30 s plus one fallback pause
    assert outcome.status == "succeeded"
    assert clock[0] - started <= 30 + step + 1e-6  # the clock is a float sum: not exact to the last bit
    assert json.loads(store.records.get_run("bg:t1").model_dump_json())["status"] == "succeeded"  # type: ignore[union-attr]
