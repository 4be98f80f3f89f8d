"""The woken agent's history window is bounded by size as well as by count (issue 32; docs/woken-agent.md,
"The history window"): what a wake sends its model stays under the bound however large the live
turns' appends were; newer entries win, and an entry larger than the whole window reaches the model
cut, with a marker saying so. The real handler and store on moto; the scripted provider's requests
recorded as the model would receive them."""

from __future__ import annotations

import boto3
import pytest

from agentwake.domain.conversation import HISTORY_WINDOW_BYTES
from agentwake.product.sessions import SessionsService
from agentwake.store.dynamo import DynamoStore
from agentwake.store.queues import ResultQueue
from tests.integration.test_wake_handlers import invoke_background, result_body, sqs_record
from tests.support.aws import REGION, Resources
from tests.support.builders import seed_session, seed_task
from tests.support.model_calls import record_model_requests

#: what a wake sends besides its history: the system prompt, the wake's own message (a few KB)
NOT_HISTORY_BYTES = 8_000


def sent_bytes(request: list[tuple[str, str]]) -> int:
    return sum(len(content.encode()) for _, content in request)


def live_appends(resources: Resources, store: DynamoStore, session_id: str, appends: list[list[str]]) -> None:
    """One live turn appending each list of texts (alternating user/assistant) in one call."""
    api = SessionsService(store, ResultQueue(resources.queue_url, client=boto3.client("sqs", region_name=REGION)))
    turn = api.begin_live_turn(session_id)
    for n, texts in enumerate(appends):
        messages = [("user" if i % 2 == 0 else "assistant", text) for i, text in enumerate(texts)]
        api.append(turn, messages, idempotency_key=f"append-{n}")
    api.end_live_turn(turn)


def test_many_large_appends_leave_the_window_under_its_bound(
    resources: Resources, store: DynamoStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a session with the default window (20 entries, HISTORY_WINDOW_BYTES), and live turns
    # that appended 4 x 25 messages of 20,000 characters (2 MB), the newest one small
    seed_session(store, "s1")
    seed_task(store, "t1", "s1")
    big = [[f"entry {n}-{i} " + "x" * 20_000 for i in range(25)] for n in range(4)]
    big[-1][-1] = "the newest thing the user said"
    live_appends(resources, store, "s1", big)
    requests = record_model_requests(monkeypatch)
    # WHEN the task's result wakes the agent
    invoke_background({"Records": [sqs_record(result_body("t1", "s1"))]})
    # THEN the model was sent at most the window's bound of history (not the 20 x 20 KB the count allows)
    request = requests[0]  # the first step: what the wake loaded (a later step adds its own replies)
    assert sent_bytes(request) <= HISTORY_WINDOW_BYTES + NOT_HISTORY_BYTES, sent_bytes(request)
    # AND the newest entries won: the newest one whole, the next ones newest first, nothing older
    texts = [content for _, content in request]
    assert "the newest thing the user said" in texts
    shown = [t for t in texts if t.startswith("entry ")]
    assert shown and shown[-1].startswith("entry 3-23 ")
    assert not any(t.startswith(("entry 0-", "entry 1-", "entry 2-")) for t in shown)
    # AND the entry that crossed the bound is there, cut with a marker that says so
    assert "the history window holds" in shown[0] and len(shown[0]) < 20_000
    # AND nothing was lost from the conversation itself
    assert len(store.history.history("s1")) >= 100


def test_an_entry_larger_than_the_whole_window_reaches_the_model_cut_with_a_marker(
    resources: Resources, store: DynamoStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a session whose window holds 4,096 bytes, and one live message of 10,000 characters
    seed_session(store, "s2", history_window_bytes=4096)
    seed_task(store, "t2", "s2")
    live_appends(resources, store, "s2", [["Q" * 10_000]])
    requests = record_model_requests(monkeypatch)
    # WHEN a wake runs
    invoke_background({"Records": [sqs_record(result_body("t2", "s2"))]})
    # THEN the model sees the message's beginning and a marker naming its size and the window's
    request = requests[0]  # the first step: what the wake loaded (a later step adds its own replies)
    [cut] = [content for _, content in request if content.startswith("QQQ")]
    size = len(cut.encode())
    assert size <= 4096, size
    assert "this message has 10,000 bytes; the history window holds 4,096" in cut
    # AND the history keeps the whole message
    assert any(e.content == "Q" * 10_000 for e in store.history.history("s2"))
