"""Durable runs (DESIGN §3): crash anywhere, retry, and the user sees each message once,
history gets one note, and no journaled model call is billed again."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator

import boto3
import pytest
from botocore.exceptions import ClientError

from agentwake.agent.providers import build_provider
from agentwake.agent.types import ChatRequest, ModelReply
from agentwake.errors import RunFailed, SessionBusy
from agentwake.settings import Settings
from agentwake.store.dynamo import DynamoStore
from agentwake.store.itemsize import JOURNAL_VALUE_BYTES, MAX_ITEM_BYTES, item_size
from agentwake.wake.background import wake_for_background_result
from agentwake.wake.spec import WakeDeps
from agentwake_ops.runs import run_summary
from tests.support.aws import REGION, Resources
from tests.support.builders import message, seed_session, seed_task
from tests.support.faults import BOUNDARIES, Crash, FaultyStore
from tests.support.receiver import CountingReceiver
from tests.support.store_writes import acquire_lease, lease_holder

TWO_DELIVERIES = [
    {"tool_calls": [{"name": "send_message_to_user", "arguments": {"text": "first"}}]},
    {"tool_calls": [{"name": "send_message_to_user", "arguments": {"text": "second"}}]},
    {"text": "told the user twice"},
]


@pytest.fixture
def receiver() -> Iterator[CountingReceiver]:
    with CountingReceiver() as r:
        yield r


@pytest.fixture
def faulty(resources: Resources) -> FaultyStore:
    return FaultyStore(resources.table, client=boto3.client("dynamodb", region_name=REGION))


def make_deps(store: DynamoStore, resources: Resources, provider_factory=build_provider) -> WakeDeps:  # type: ignore[no-untyped-def]
    return WakeDeps(store=store, settings=Settings.from_env(), provider_factory=provider_factory)


def notes(store: DynamoStore, session_id: str) -> list:
    return [e for e in store.history.history(session_id) if e.kind == "note"]


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_crash_at_every_boundary_then_retry(
    boundary: str, faulty: FaultyStore, resources: Resources, receiver: CountingReceiver, model_calls: Counter[str]
) -> None:
    # GIVEN a session whose agent messages the user twice, delivering to a counting webhook
    seed_session(
        faulty,
        "s1",
        providers=[{"type": "scripted", "id": "p", "script": TWO_DELIVERIES}],
        delivery={"type": "webhook", "url": receiver.url},
    )
    seed_task(faulty, "t1", "s1")
    deps = make_deps(faulty, resources)
    # WHEN the run crashes at the boundary, then is retried until it stops crashing
    faulty.arm(boundary)
    with pytest.raises(Exception) as crashed:
        wake_for_background_result(message("t1", "s1"), deps)
    injected = (Crash, ClientError)  # ClientError: the transaction the service failed
    assert isinstance(crashed.value, injected) or isinstance(crashed.value.__cause__, injected)
    outcome = wake_for_background_result(message("t1", "s1"), deps)
    # THEN the run ends with exactly one note
    assert outcome.status in ("succeeded", "already_succeeded")
    assert len(notes(faulty, "s1")) == 1
    assert faulty.records.get_run("bg:t1").status == "succeeded"  # type: ignore[union-attr]
    # AND each message reached the user once: a crash after the send, before its step's write, is
    # a failed write whose delivery the failure transaction records (a hard kill there is the
    # at-least-once edge: tests/integration/test_fault_matrix.py)
    by_id = receiver.by_delivery_id()
    assert sorted(by_id) == ["bg:t1#0#0", "bg:t1#1#0"]
    assert sorted(by_id.values()) == [1, 1]
    # AND each delivery is in history exactly once
    deliveries = [e.delivery_id for e in faulty.history.history("s1") if e.kind == "delivery"]
    assert sorted(deliveries) == ["bg:t1#0#0", "bg:t1#1#0"]
    # AND no journaled model call was made again: three steps, three calls
    assert model_calls["p"] == 3
    # AND a duplicate copy afterwards does nothing
    again = wake_for_background_result(message("t1", "s1"), deps)
    assert again.status == "already_succeeded"
    assert model_calls["p"] == 3 and len(notes(faulty, "s1")) == 1


def test_error_after_a_delivery_then_fix_and_redrive(
    store: DynamoStore, resources: Resources, receiver: CountingReceiver
) -> None:
    # GIVEN a run that messages the user, then every provider fails on its next step
    broken = [{"type": "scripted", "id": "p", "script": [TWO_DELIVERIES[0], {"error": "auth"}]}]
    seed_session(store, "s1", providers=broken, delivery={"type": "webhook", "url": receiver.url})
    seed_task(store, "t1", "s1")
    deps = make_deps(store, resources)
    # WHEN it is retried as SQS would (5 receives), it fails every time
    for _ in range(5):
        with pytest.raises(RunFailed):
            wake_for_background_result(message("t1", "s1"), deps)
    # THEN the delivered message is in history already, with no note, and was sent once
    history = store.history.history("s1")
    assert [e.kind for e in history] == ["delivery"]
    assert receiver.texts() == ["first"]
    assert len(store.ends.failures("bg:t1")) == 5
    # WHEN the operator fixes the provider and redrives (same body, a new messageId)
    fixed = [{"type": "scripted", "id": "p", "script": [{"text": "unused: step 0 is journaled"}, {"text": "done"}]}]
    seed_session(store, "s1", providers=fixed, delivery={"type": "webhook", "url": receiver.url})
    outcome = wake_for_background_result(message("t1", "s1"), deps)
    # THEN the run resumes at step 1, succeeds with one note, and sends nothing twice
    assert outcome.status == "succeeded" and outcome.attempt == 6
    assert [e.kind for e in store.history.history("s1")] == ["delivery", "marker", "note"]
    assert receiver.texts() == ["first"]
    assert run_summary(store, "bg:t1").steps[0]["key"] == "000.reply"


class GatedProvider:
    """A provider that signals when it is called, then waits to be released."""

    def __init__(self, entered: threading.Event, release: threading.Event) -> None:
        self.id = "gated"
        self.entered = entered
        self.release = release
        self.calls = 0

    def complete(self, request: ChatRequest) -> ModelReply:
        self.calls += 1
        self.entered.set()
        assert self.release.wait(10), "the test never released the provider"
        return ModelReply(text="done")


def test_duplicate_concurrent_copies_make_one_run(store: DynamoStore, resources: Resources) -> None:
    # GIVEN one message whose run is in progress (its provider is held)
    seed_session(store, "s1")
    seed_task(store, "t1", "s1")
    entered, release = threading.Event(), threading.Event()
    provider = GatedProvider(entered, release)
    deps = make_deps(store, resources, provider_factory=lambda spec: provider)
    results: list[object] = []
    first = threading.Thread(target=lambda: results.append(wake_for_background_result(message("t1", "s1"), deps)))
    first.start()
    assert entered.wait(10)
    # WHEN a second copy of the same message arrives meanwhile
    # THEN the session lease (which admits not even another copy of the run that holds it) turns
    # it away, and it waits like for any busy session (it is the holder itself)
    with pytest.raises(SessionBusy, match="busy with run bg:t1") as busy:
        wake_for_background_result(message("t1", "s1"), deps)
    assert busy.value.holder == "bg:t1"
    release.set()
    first.join(10)
    # THEN exactly one run happened, and the retried copy does nothing
    assert provider.calls == 1
    assert wake_for_background_result(message("t1", "s1"), deps).status == "already_succeeded"
    assert provider.calls == 1 and len(notes(store, "s1")) == 1


def test_two_results_for_one_session_do_not_overlap(store: DynamoStore, resources: Resources) -> None:
    # GIVEN two tasks of one session that finish together
    seed_session(store, "s1")
    seed_task(store, "ta", "s1")
    seed_task(store, "tb", "s1")
    entered, release = threading.Event(), threading.Event()
    held = GatedProvider(entered, release)
    deps_a = make_deps(store, resources, provider_factory=lambda spec: held)
    deps_b = make_deps(store, resources)
    first = threading.Thread(target=lambda: wake_for_background_result(message("ta", "s1"), deps_a))
    first.start()
    assert entered.wait(10)
    # WHEN the second wake starts while the first runs: the session is busy, it is retried later
    with pytest.raises(SessionBusy, match="busy with run bg:ta"):
        wake_for_background_result(message("tb", "s1"), deps_b)
    release.set()
    first.join(10)
    assert wake_for_background_result(message("tb", "s1"), deps_b).status == "succeeded"
    # THEN their journaled steps do not interleave in time
    a = [s["at"] for s in run_summary(store, "bg:ta").steps]
    b = [s["at"] for s in run_summary(store, "bg:tb").steps]
    assert a and b and max(a) < min(b)
    assert len(notes(store, "s1")) == 2


def test_an_expired_lease_is_taken_over(store: DynamoStore) -> None:
    # GIVEN a lease left by a run whose Lambda died
    clock = [1000.0]
    store.table.now = lambda: clock[0]
    dead = acquire_lease(store, "s1", "bg:dead", 60)
    assert dead
    # WHEN another run asks before and after it expires
    assert acquire_lease(store, "s1", "bg:next", 60) is None
    clock[0] += 61
    # THEN it gets the lease only after expiry, and the dead run cannot release it
    assert acquire_lease(store, "s1", "bg:next", 60)
    store.leases.release("s1", dead)
    assert lease_holder(store, "s1")[0] == "bg:next"  # type: ignore[index]


def test_journal_items_expire_and_stay_small(store: DynamoStore) -> None:
    # GIVEN a tool result far larger than a DynamoDB item may be
    journal = store.journals.journal("bg:big")
    # WHEN it is journaled
    journal.put("000.tool.00", {"content": "x" * 500_000, "tool": "send_message_to_user"})
    # THEN it is stored cut to the journal's byte bound with a visible marker, and the item expires
    # (TTL) after 22 days: the DLQ's 14 + the longest approval wait (7) + 1
    item = store.table.db.get_item(TableName=store.table.name, Key=store.table.key("RUN#bg:big", "STEP#000.tool.00"))[
        "Item"
    ]
    assert item_size(item) <= JOURNAL_VALUE_BYTES + 1000 < MAX_ITEM_BYTES
    assert "bytes to fit a DynamoDB item]" in item["value"]["S"]
    ttl = int(item["expires_at"]["N"])
    assert abs(ttl - (store.table.now() + 22 * 86400)) < 60
    # AND a replay reads the same truncated value back
    assert store.journals.journal("bg:big").get("000.tool.00")["content"].endswith("bytes to fit a DynamoDB item]")  # type: ignore[index]


def test_run_summary_is_what_an_operator_reads(
    store: DynamoStore, resources: Resources, receiver: CountingReceiver
) -> None:
    # GIVEN a run that delivered once and then failed twice
    broken = [{"type": "scripted", "id": "p", "script": [TWO_DELIVERIES[0], {"error": "validation"}]}]
    seed_session(store, "s1", providers=broken, delivery={"type": "webhook", "url": receiver.url})
    seed_task(store, "t1", "s1")
    deps = make_deps(store, resources)
    for _ in range(2):
        with pytest.raises(RunFailed):
            wake_for_background_result(message("t1", "s1"), deps)
    # WHEN the operator reads its summary through the store API
    summary = run_summary(store, "bg:t1")
    # THEN it has the attempts, the last error, each failure, the journaled steps and the delivery
    assert summary.run is not None and summary.run.attempts == 2 and summary.run.status == "failed"
    assert summary.run.last_error_type == "AllProvidersFailed"
    assert [f.attempt for f in summary.failures] == [1, 2]
    assert summary.last_failure is not None and "ValidationError" in summary.last_failure.detail
    assert [s["key"] for s in summary.steps] == ["000.reply", "000.tool.00"]
    assert [d["delivery_id"] for d in summary.deliveries] == ["bg:t1#0#0"]
