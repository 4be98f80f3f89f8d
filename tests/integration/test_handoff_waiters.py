"""The hand-off and the wait list when a waiting run runs from a record that does not carry its wait
(an SQS duplicate of the producer's record): its commit takes it off the wait list and hands the
session to the next waiter, not to itself (docs/durability.md, "Waiting for the session").

Found by the state machine (tests/integration/test_durable_properties.py): the run succeeded and
stayed ``waiting`` on the list, and its own commit reserved the session for it.
"""

from __future__ import annotations

from typing import Any

from agentwake.domain.models import SessionConfig, Task
from agentwake.errors import SessionBusy
from agentwake.session.copies import ATTR_HANDED_AT, MessageAttributes
from agentwake.session.waiting import ParkedRecord, WaitState
from agentwake.settings import Settings
from agentwake.store.dynamo import DynamoStore
from agentwake.store.keys import wait_key
from agentwake.wake.background import DeadLetter, Resend, wait_for_session, wake_for_background_result
from agentwake.wake.messages import BackgroundResultMessage
from agentwake.wake.spec import WakeDeps
from tests.support.aws import Resources
from tests.support.builders import OK_SCRIPT
from tests.support.receiver import CountingReceiver
from tests.support.store_writes import acquire_lease, lease_holder
from tests.support.tasks import token_for, token_hash_for


class Queue:
    """The result queue as the wake sees it: what was sent, in memory."""

    url = "memory://results"

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def send_later(self, **kw: Any) -> str:
        self.sent.append(kw)
        return f"m{len(self.sent)}"


def message(task_id: str) -> BackgroundResultMessage:
    return BackgroundResultMessage(
        task_id=task_id,
        session_id="s",
        task_token=token_for(task_id),
        tool_name="job",
        status="succeeded",
        result_text="r",
        summary_name="Job",
        finished_at="2026-11-30T05:00:00Z",
    )


def seed(resources: Resources, store: DynamoStore, receiver: CountingReceiver, task_ids: tuple[str, ...]) -> WakeDeps:
    """Session ``s`` (a scripted model, the receiver's webhook) with the tasks ``task_ids``; the
    wake's ports with an in-memory result queue."""
    store.records.put_session(
        SessionConfig(
            session_id="s",
            providers=[{"type": "scripted", "id": "p", "script": OK_SCRIPT}],
            delivery={"type": "webhook", "url": receiver.url},
            retry_base_delay_ms=0,
        )
    )
    for task_id in task_ids:
        store.records.put_task(
            Task(task_id=task_id, session_id="s", tool_name="job", token_sha256=token_hash_for(task_id))
        )
    return WakeDeps(store=store, settings=Settings(table_name=resources.table), result_queue=Queue())


def wait(deps: WakeDeps, task_id: str, state: WaitState | None = None) -> Resend | DeadLetter:
    """What the task's record does when it finds the session busy (``state``: the wait it carries)."""
    try:
        wake_for_background_result(message(task_id), deps)
    except SessionBusy as busy:
        record = ParkedRecord(
            body=message(task_id).model_dump_json(),
            message_id=f"msg-{task_id}",
            source="arn:aws:sqs:us-east-1:123456789012:results",
            receive_count="1",
            attributes=MessageAttributes(),
            state=state or WaitState(),
        )
        return wait_for_session(
            busy, record, store=deps.store, settings=deps.settings, task_id=task_id, now=deps.clock.wall
        )
    raise AssertionError(f"{task_id} did not find its session busy")


def park(deps: WakeDeps, task_id: str) -> None:
    """The task's record finds the session busy and waits (on the wait list, a delayed copy sent)."""
    result = wait(deps, task_id)
    assert isinstance(result, Resend)
    result.send(deps.result_queue)


def test_a_waiting_run_that_runs_from_a_plain_duplicate_leaves_the_list_and_hands_on(
    resources: Resources, store: DynamoStore
) -> None:
    with CountingReceiver() as receiver:
        # GIVEN a session held by another writer, and two results (x, then y) waiting for it
        deps = seed(resources, store, receiver, ("x", "y"))
        queue = deps.result_queue
        token = acquire_lease(store, "s", "bg:intruder", 600)
        assert token is not None
        park(deps, "x")
        park(deps, "y")
        assert [w.run_id for w in store.leases.waiters("s")] == ["bg:x", "bg:y"]
        store.leases.release("s", token)  # a release that hands nothing over: the waiters stay
        queue.sent.clear()
        # WHEN SQS delivers x's plain record again (a duplicate of the producer's, without the wait)
        outcome = wake_for_background_result(message("x"), deps)
        # THEN x ran once, and its commit took it off the wait list
        assert outcome.status == "succeeded"
        assert store.table.read_item(*wait_key("s", "bg:x")) is None
        # AND the session is reserved for y, the next waiter (handed: no longer waiting), and y alone
        # was re-sent at once
        assert store.leases.waiters("s") == []
        held = lease_holder(store, "s")
        assert held is not None and held[0] == "bg:y", held
        handed = [message_of(kw) for kw in queue.sent if ATTR_HANDED_AT in kw["wait"]]
        assert handed == ["y"], handed


def message_of(sent: dict[str, Any]) -> str:
    return BackgroundResultMessage.parse_body(sent["body"]).task_id
