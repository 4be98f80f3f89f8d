"""DynamoDB round trips of a wake that delivers through each channel (docs/channels.md), counted at
the client like test_wake_round_trips.py, against a stand-in for each platform that needs no network
(tests/support/channel_platforms.py: a receiver and fake Slack and Telegram servers on 127.0.0.1,
moto's SNS and API Gateway management API).

Budgets (design 34 §11.7): a wake with one ``send_message_to_user`` delivery by webhook is the
baseline (5 + 1 step + 1 delivery); a websocket costs one Query more (the session's open pages),
Slack and Telegram one PutItem more (the intent written just before the request), SNS nothing more;
deliver_final's answer through Slack nothing more than through a webhook (the intent rides on the
write that journals the reply before it is sent).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from agentwake.settings import Settings
from agentwake.store.dynamo import DynamoStore
from agentwake.store.keys import delivery_sk, run_pk, sending_sk
from agentwake.store.queues import ResultQueue
from agentwake.wake.background import wake_for_background_result
from agentwake.wake.spec import WakeDeps
from tests.support.aws import Resources
from tests.support.builders import OK_SCRIPT, message, seed_session, seed_task
from tests.support.channel_platforms import ChannelPlatforms, channel_platforms
from tests.support.probes import DynamoCalls

ONE_STEP = [{"text": "Nothing else to say."}]
#: the baseline: a two-step wake whose first step messages the user through a webhook
START = ["BatchGetItem", "PutItem", "UpdateItem", "Query"]  # batch read, the lease, the attempt, history window
STEP = ["PutItem"]  # the reply that calls send_message_to_user, journaled before its tool runs
RECORD = ["TransactWriteItems"]  # the delivery's marker, history entry and tool result
END = ["Query", "TransactWriteItems", "DeleteItem"]  # the wait list before the commit, the commit, the release
SENT = "bg:t1#0#0"
FINAL = "bg:t1#final"


@pytest.fixture
def platforms(resources: Resources) -> Iterator[ChannelPlatforms]:
    with channel_platforms(resources.table) as running:
        yield running


def deps(store: DynamoStore, platforms: ChannelPlatforms) -> WakeDeps:
    """As deployed: with the result queue (every release reads the wait list), and the stack's
    channel settings pointing at the platforms."""
    settings = platforms.settings(Settings.from_env())
    return WakeDeps(store=store, settings=settings, result_queue=ResultQueue(settings.result_queue_url))


def woken(store: DynamoStore, platforms: ChannelPlatforms, channel: str, *, final: bool = False) -> list[str]:
    """The DynamoDB calls of session s1's wake by task t1, delivering through ``channel``."""
    script = ONE_STEP if final else OK_SCRIPT
    seed_session(
        store,
        "s1",
        providers=[{"type": "scripted", "id": "p", "script": script}],
        deliver_final="if_nothing_sent" if final else "never",
        delivery=platforms.spec(channel),
    )
    seed_task(store, "t1", "s1")
    return DynamoCalls(store.table.db).during(
        lambda: wake_for_background_result(message("t1", "s1"), deps(store, platforms))
    )


def receipts(store: DynamoStore, delivery_id: str = SENT) -> list[dict[str, object]]:
    item = store.table.read_item(run_pk("bg:t1"), delivery_sk(delivery_id))
    assert item is not None, f"no marker for {delivery_id}"
    return json.loads(item["receipts"]["S"])  # type: ignore[no-any-return]


def test_a_webhook_delivery_is_the_baseline(store: DynamoStore, platforms: ChannelPlatforms) -> None:
    # GIVEN a session that delivers by webhook WHEN its agent messages the user once
    calls = woken(store, platforms, "webhook")
    # THEN a two-step wake with one delivery: 5 + 1 + 1, as test_wake_round_trips.py budgets it
    assert calls == START + STEP + RECORD + END, calls
    assert len(calls) <= 7 + 1 + 1
    # AND the receiver got the delivery once, its receipt journaled
    assert platforms.received("webhook") == [SENT]
    assert [r["channel"] for r in receipts(store)] == ["webhook"]


def test_a_websocket_delivery_reads_the_open_pages_once(store: DynamoStore, platforms: ChannelPlatforms) -> None:
    # GIVEN a session with one page open on the push API
    platforms.open_page(store, "s1", "page-1")
    # WHEN its agent messages the user once
    calls = woken(store, platforms, "websocket")
    # THEN the baseline plus one Query of the session's connections, before the delivery is recorded
    assert calls == START + STEP + ["Query"] + RECORD + END, calls
    assert len(calls) <= 7 + 1 + 1 + 1
    # AND the page got the frame once, and the receipt names its connection
    assert platforms.received("websocket", "page-1") == [SENT]
    assert [(r["channel"], r["ids"]) for r in receipts(store)] == [("websocket", ["page-1"])]


def test_a_websocket_delivery_with_no_page_open_marks_the_session_unread(
    store: DynamoStore, platforms: ChannelPlatforms
) -> None:
    # GIVEN a session with no page open WHEN its agent messages the user once
    calls = woken(store, platforms, "websocket")
    # THEN the Query finds none, and one PutItem marks the session unread
    assert calls == START + STEP + ["Query", "PutItem"] + RECORD + END, calls
    unread = store.connections.unread("s1")
    assert unread is not None and unread["delivery_id"] == SENT


@pytest.mark.parametrize("channel", ["slack", "telegram"])
def test_slack_and_telegram_write_one_intent_before_the_request(
    store: DynamoStore, platforms: ChannelPlatforms, channel: str
) -> None:
    # GIVEN a session that delivers to Slack (or Telegram) WHEN its agent messages the user once
    calls = woken(store, platforms, channel)
    # THEN the baseline plus one PutItem: the intent, written just before the platform's request
    assert calls == START + STEP + ["PutItem"] + RECORD + END, calls
    assert len(calls) <= 7 + 1 + 1 + 1
    # AND the platform shows the message once, its receipt is journaled, and the intent says sent
    text = OK_SCRIPT[0]["tool_calls"][0]["arguments"]["text"]
    want = [text] if channel == "telegram" else [SENT]  # Telegram's messages carry no delivery id
    assert platforms.received(channel) == want
    assert [r["channel"] for r in receipts(store)] == [channel]
    intent = store.table.read_item(run_pk("bg:t1"), sending_sk(SENT, channel))
    assert intent is not None


def test_an_sns_delivery_costs_what_a_webhook_does(store: DynamoStore, platforms: ChannelPlatforms) -> None:
    # GIVEN a session that publishes to a topic under the stack's prefix WHEN its agent messages the user
    calls = woken(store, platforms, "sns")
    # THEN no DynamoDB call more than the webhook (the subscribers drop a delivery id they have seen)
    assert calls == START + STEP + RECORD + END, calls
    # AND the subscribed queue got it once, the receipt is SNS's MessageId
    assert platforms.received("sns") == [SENT]
    ((channel, ids),) = [(r["channel"], r["ids"]) for r in receipts(store)]
    assert channel == "sns" and len(ids) == 1  # type: ignore[arg-type]


def test_deliver_final_through_slack_costs_what_it_does_through_a_webhook(
    store: DynamoStore, platforms: ChannelPlatforms
) -> None:
    # GIVEN a one-step agent whose final answer is sent to Slack WHEN it is woken
    calls = woken(store, platforms, "slack", final=True)
    # THEN a one-step wake plus one write: the reply journaled before it is sent carries the intent
    # (one transaction), and the delivery's record rides on the commit
    assert calls == START + ["TransactWriteItems"] + END, calls
    assert len(calls) <= 7 + 1
    # AND Slack shows the answer once, with its receipt
    assert platforms.received("slack") == [FINAL]
    assert [r["channel"] for r in receipts(store, FINAL)] == ["slack"]
