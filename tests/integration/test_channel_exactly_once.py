"""Exactly once for channels no receiver dedups (docs/channels.md, "Exactly once"): an intent
(``RUN#{run}`` / ``SENDING#{delivery}#{target}``) is written just before each request, and the next
attempt settles the send a hard kill left in doubt — a lookup (Slack), an operator (Telegram's
default) or a resend (``unconfirmed: resend``) — before it sends; a certain failure is ``not_sent``;
a platform's wait is kept as ``not_before``; a route settles its targets before it routes.

The channels are small fakes of the platforms, registered where the factory imports them
(``agentwake.delivery.slack``, ``.telegram``, ``.websocket``), so the wake builds its channels,
routes and intent guards as it does in a function. The fakes count what the platform got.
"""

from __future__ import annotations

import copy
import json
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agentwake.delivery import Declined, Delivery, Receipt
from agentwake.delivery.intents import Intent
from agentwake.errors import ChannelRefused, ChannelThrottled, ChannelUnavailable, DeliveryUnconfirmed, StepInterrupted
from agentwake.handlers import background_result, cron_wake
from agentwake.settings import Settings
from agentwake.store.dynamo import DynamoStore
from agentwake.store.keys import delivery_sk, lease_key, run_pk, sending_sk
from agentwake.trust.session_checks import ConfigRules
from agentwake.wake.background import wake_for_background_result
from agentwake.wake.spec import WakeDeps
from tests.support.aws import FakeLambdaContext, Resources, drain
from tests.support.builders import OK_SCRIPT, message, seed_job, seed_session, seed_task
from tests.support.clock import FakeClock
from tests.support.faults import FAULT_KINDS, CallFaults
from tests.support.probes import DynamoCalls

RUN = "bg:t1"
#: the delivery OK_SCRIPT's send_message_to_user makes (step 0, call 0)
SENT = "bg:t1#0#0"
FINAL = "bg:t1#final"
PLAIN = [{"text": "Aurora costs $0.12 per ACU-hour."}]
SLACK = {"type": "slack", "channel": "C0123ABCD"}
TELEGRAM = {"type": "telegram", "chat_id": 4711}
EVENTS = Path(__file__).resolve().parents[2] / "events"


class HardKill(BaseException):
    """The Lambda is killed (timeout, out of memory): no except clause runs, no failure is recorded."""


@dataclass
class Platform:
    """What the fake platforms received, as their users would see it."""

    #: (target, delivery id) of every message the platform shows, in order
    posts: list[tuple[str, str]] = field(default_factory=list)
    #: requests made to the platform (a refused or throttled one posts nothing)
    requests: int = 0
    lookups: int = 0
    #: the lookups' probes, as the intent kept them
    probes: list[dict[str, Any]] = field(default_factory=list)
    #: a WebSocket page is open for the session
    page_open: bool = False
    #: targets whose next post kills the Lambda right after the platform took it
    kill_after_post: set[str] = field(default_factory=set)
    #: target -> the error its next request raises, nothing posted
    fail_next: dict[str, BaseException] = field(default_factory=dict)

    def post(self, target: str, delivery: Delivery) -> str:
        self.requests += 1
        failure = self.fail_next.pop(target, None)
        if failure is not None:
            raise failure
        self.posts.append((target, delivery.delivery_id))
        if target in self.kill_after_post:
            self.kill_after_post.discard(target)
            raise HardKill(f"killed after {target} took {delivery.delivery_id}")
        return str(len(self.posts))

    def ids(self, target: str | None = None) -> list[str]:
        return [d for t, d in self.posts if target is None or t == target]


def _fake_modules(platform: Platform) -> dict[str, types.ModuleType]:
    class SlackChannel:
        confirms = "lookup"

        def __init__(self, spec: Any, kit: Any) -> None:
            self.target = spec.target()
            self.where = spec.channel

        def probe(self, delivery: Delivery) -> dict[str, Any]:
            return {"channel": self.where, "oldest": "1000.000000"}

        def send(self, delivery: Delivery) -> Receipt:
            ts = platform.post(self.target, delivery)
            return Receipt(channel="slack", target=self.target, where=self.where, ids=(ts,))

        def find(self, delivery: Delivery, intent: Intent) -> Receipt | None:
            platform.lookups += 1
            platform.probes.append(intent.probe)
            for n, (target, delivery_id) in enumerate(platform.posts, start=1):
                if target == self.target and delivery_id == delivery.delivery_id:
                    return Receipt(channel="slack", target=self.target, where=self.where, ids=(str(n),))
            return None

    class TelegramChannel:
        confirms = "none"

        def __init__(self, spec: Any, kit: Any) -> None:
            self.target = spec.target()
            self.where = f"telegram chat {spec.chat_id}"

        def send(self, delivery: Delivery) -> Receipt:
            message_id = platform.post(self.target, delivery)
            return Receipt(channel="telegram", target=self.target, where=self.where, ids=(message_id,))

    class WebSocketChannel:
        confirms = "receiver"

        def __init__(self, spec: Any, kit: Any) -> None:
            self.target = spec.target()

        def send(self, delivery: Delivery) -> Receipt | Declined:
            if not platform.page_open:
                return Declined(channel="websocket", target=self.target, reason="no open page")
            platform.post(self.target, delivery)
            return Receipt(channel="websocket", target=self.target, ids=("conn-1",))

    modules = {}
    for name, cls in (("slack", SlackChannel), ("telegram", TelegramChannel), ("websocket", WebSocketChannel)):
        module = types.ModuleType(f"agentwake.delivery.{name}")
        setattr(module, cls.__name__, cls)
        modules[module.__name__] = module
    return modules


@pytest.fixture
def platform(monkeypatch: pytest.MonkeyPatch) -> Platform:
    """The fake platforms, registered where the factory imports each channel."""
    platform = Platform()
    for name, module in _fake_modules(platform).items():
        monkeypatch.setitem(sys.modules, name, module)
    return platform


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=1_800_000_000.0)


def deps_for(store: DynamoStore, clock: FakeClock) -> WakeDeps:
    return WakeDeps(store=store, settings=Settings.from_env(), clock=clock)


def seed(store: DynamoStore, delivery: dict[str, Any], script: list[dict[str, Any]] = OK_SCRIPT) -> None:
    # fake adapters stand in for the platforms: no bot token or push API to check the config against
    seed_session(
        store,
        "s1",
        providers=[{"type": "scripted", "id": "p", "script": script}],
        delivery=delivery,
        rules=ConfigRules(),
    )
    seed_task(store, "t1", "s1")


def killed_then_retried(store: DynamoStore, deps: WakeDeps) -> None:
    """The first attempt is killed; the killed holder's lease expires (released here)."""
    with pytest.raises(HardKill):
        wake_for_background_result(message("t1", "s1"), deps)
    store.table.db.delete_item(TableName=store.table.name, Key=store.table.key(*lease_key("s1")))


def marker_receipts(store: DynamoStore, delivery_id: str = SENT) -> list[dict[str, Any]]:
    item = store.table.read_item(run_pk(RUN), delivery_sk(delivery_id))
    assert item is not None, f"no marker for {delivery_id}"
    return json.loads(item["receipts"]["S"])  # type: ignore[no-any-return]


def intent_item(store: DynamoStore, target: str, delivery_id: str = SENT) -> dict[str, Any]:
    item = store.table.read_item(run_pk(RUN), sending_sk(delivery_id, target))
    assert item is not None, f"no intent for {delivery_id} to {target}"
    return {k: next(iter(v.values())) for k, v in item.items()}


def deliveries_in_history(store: DynamoStore) -> list[str]:
    return [e.delivery_id or "" for e in store.history.history("s1") if e.kind == "delivery"]


def background_event(*, message_id: str = "m-1") -> dict[str, Any]:
    record = copy.deepcopy(json.loads((EVENTS / "background-result-success.json").read_text())["Records"][0])
    record["messageId"] = message_id
    record["body"] = message("t1", "s1").model_dump_json()
    return {"Records": [record]}


def dead_letters(resources: Resources) -> list[dict[str, str]]:
    return [{k: v["StringValue"] for k, v in m["MessageAttributes"].items()} for m in drain(resources.dlq_url)]


# --- a hard kill after the request, before the journal write ----------------------------------------


def test_a_slack_post_killed_before_its_journal_write_is_found_by_lookup_and_not_posted_again(
    store: DynamoStore, platform: Platform, clock: FakeClock
) -> None:
    # GIVEN a Slack session whose first attempt is killed right after Slack took the message
    seed(store, SLACK)
    platform.kill_after_post.add("slack")
    deps = deps_for(store, clock)
    killed_then_retried(store, deps)
    # AND the send was journaled as an intent before the request left
    intent = intent_item(store, "slack")
    assert (intent["state"], intent["channel"], intent["where"]) == ("sending", "slack", "C0123ABCD")
    assert intent["text"] == "Your research is done."
    # WHEN the trigger retries the run
    outcome = wake_for_background_result(message("t1", "s1"), deps)
    # THEN the retry looked the message up with the intent's probe and did not post it again
    assert outcome.status == "succeeded"
    assert platform.ids() == [SENT] and platform.requests == 1
    assert platform.lookups == 1 and platform.probes == [{"channel": "C0123ABCD", "oldest": "1000.000000"}]
    # AND the marker keeps the receipt it found, saying so; history holds the message once
    assert marker_receipts(store) == [
        {"channel": "slack", "target": "slack", "where": "C0123ABCD", "ids": ["1"], "found_by": "lookup"}
    ]
    assert deliveries_in_history(store) == [SENT]


def test_a_slack_lookup_that_finds_nothing_posts_once(store: DynamoStore, platform: Platform, clock: FakeClock) -> None:
    # GIVEN an intent left by an attempt killed before Slack took the message (the request never arrived)
    seed(store, SLACK)
    deps = deps_for(store, clock)
    platform.fail_next["slack"] = HardKill("killed before the request arrived")
    killed_then_retried(store, deps)
    assert intent_item(store, "slack")["state"] == "sending" and platform.posts == []
    # WHEN the trigger retries
    outcome = wake_for_background_result(message("t1", "s1"), deps)
    # THEN the lookup found nothing and the message was posted once, its receipt answered by Slack
    assert outcome.status == "succeeded"
    assert platform.lookups == 1 and platform.ids() == [SENT]
    assert [r.get("found_by", "answer") for r in marker_receipts(store)] == ["answer"]


def test_a_telegram_send_in_doubt_goes_to_the_dlq_naming_the_chat_the_time_and_the_text(
    store: DynamoStore, resources: Resources, platform: Platform, clock: FakeClock
) -> None:
    # GIVEN a Telegram session (unconfirmed: dead_letter, the default) whose attempt is killed
    # right after Telegram took the message
    seed(store, TELEGRAM)
    platform.kill_after_post.add("telegram")
    killed_then_retried(store, deps_for(store, clock))
    at = intent_item(store, "telegram")["at"]
    # WHEN the record is received again by the function
    response = background_result.handler(background_event(), FakeLambdaContext())
    # THEN it is dead-lettered at once (no receive spent on a retry), nothing sent again
    assert response == {"batchItemFailures": []}
    assert platform.ids() == [SENT] and platform.requests == 1
    [dead] = dead_letters(resources)
    assert dead["agentwake-error-type"] == "DeliveryUnconfirmed"
    assert dead["agentwake-receive-count"] == "1"
    # AND its reason names the chat, when the send was made, the start of the text and the way out
    reason = dead["agentwake-reason"]
    assert "telegram chat 4711" in reason and at in reason and "Your research is done." in reason
    assert f"--delivered {SENT}" in reason and f"--resend {SENT}" in reason
    # AND the run failed with that reason, and no marker claims the delivery
    failures = store.ends.failures(RUN)
    assert failures[-1].error_type == "DeliveryUnconfirmed"
    assert store.table.read_item(run_pk(RUN), delivery_sk(SENT)) is None


def test_a_telegram_session_that_allows_resends_sends_again(
    store: DynamoStore, platform: Platform, clock: FakeClock
) -> None:
    # GIVEN a Telegram session with unconfirmed: resend, killed after Telegram took the message
    seed(store, {**TELEGRAM, "unconfirmed": "resend"})
    platform.kill_after_post.add("telegram")
    deps = deps_for(store, clock)
    killed_then_retried(store, deps)
    # WHEN the trigger retries
    outcome = wake_for_background_result(message("t1", "s1"), deps)
    # THEN the message was sent again (the user may see it twice), recorded once
    assert outcome.status == "succeeded"
    assert platform.ids() == [SENT, SENT]
    assert marker_receipts(store) == [
        {"channel": "telegram", "target": "telegram", "where": "telegram chat 4711", "ids": ["2"]}
    ]
    assert deliveries_in_history(store) == [SENT]


# --- certain failures: not_sent, not_before -------------------------------------------------------


def test_a_send_that_certainly_failed_is_sent_by_the_retry_without_a_lookup(
    store: DynamoStore, platform: Platform, clock: FakeClock
) -> None:
    # GIVEN deliver_final's answer to Slack, whose first request fails with nothing sent
    seed(store, SLACK, PLAIN)
    platform.fail_next["slack"] = ChannelUnavailable("slack: connection refused")
    deps = deps_for(store, clock)
    # WHEN the run fails (retryable) and the trigger retries it
    with pytest.raises(ChannelUnavailable):
        wake_for_background_result(message("t1", "s1"), deps)
    # THEN the failure transaction marked the intent not_sent
    assert intent_item(store, "slack", FINAL)["state"] == "not_sent"
    outcome = wake_for_background_result(message("t1", "s1"), deps)
    # AND the retry sent the answer once, without looking it up
    assert outcome.status == "succeeded" and outcome.final_delivered
    assert platform.ids() == [FINAL] and platform.lookups == 0


def test_a_wait_longer_than_the_run_has_is_kept_and_no_request_is_made_before_it(
    store: DynamoStore, platform: Platform, clock: FakeClock
) -> None:
    # GIVEN Slack asks the first request to wait 90 s, longer than the run has
    seed(store, SLACK)
    platform.fail_next["slack"] = ChannelThrottled("Slack asked to wait 90 s; 31 s were left", retry_after=90)
    deps = deps_for(store, clock)
    # WHEN the run fails transiently
    with pytest.raises(ChannelThrottled):
        wake_for_background_result(message("t1", "s1"), deps)
    # THEN the intent says nothing was sent and when Slack may be asked again
    intent = intent_item(store, "slack")
    assert intent["state"] == "not_sent" and intent["not_before"] == "2027-01-15T08:01:30.000Z"
    assert store.ends.failures(RUN)[-1].error_type == "ChannelThrottled"
    # WHEN a retry comes 30 s later
    clock.advance(30)
    with pytest.raises(ChannelThrottled, match="wait until 2027-01-15T08:01:30.000Z"):
        wake_for_background_result(message("t1", "s1"), deps)
    # THEN it failed again at once, without a request
    assert platform.requests == 1 and platform.posts == []
    # WHEN a retry comes after the wait
    clock.advance(61)
    outcome = wake_for_background_result(message("t1", "s1"), deps)
    # THEN the message is posted once, without a lookup
    assert outcome.status == "succeeded"
    assert platform.ids() == [SENT] and platform.requests == 2 and platform.lookups == 0


# --- refusals: dead-lettered at once, with the platform's reason ------------------------------------

REFUSED = "Slack: channel_not_found for C0123ABCD: invite the bot or change delivery.channel"


def test_a_refusal_dead_letters_a_background_wake_at_once_and_the_redrive_sends_once(
    store: DynamoStore, resources: Resources, platform: Platform
) -> None:
    # GIVEN a Slack session whose channel does not exist
    seed(store, SLACK)
    platform.fail_next["slack"] = ChannelRefused(REFUSED)
    # WHEN the result arrives
    response = background_result.handler(background_event(), FakeLambdaContext())
    # THEN the record is dead-lettered at its first receive with the platform's reason
    assert response == {"batchItemFailures": []}
    [dead] = dead_letters(resources)
    assert dead["agentwake-error-type"] == "ChannelRefused" and dead["agentwake-receive-count"] == "1"
    assert REFUSED in dead["agentwake-reason"]
    # AND the run's failure says so; the intent says nothing was sent
    assert store.ends.failures(RUN)[-1].error_type == "ChannelRefused"
    assert intent_item(store, "slack")["state"] == "not_sent"
    # WHEN the operator fixes the channel and redrives the record
    response = background_result.handler(background_event(message_id="m-2"), FakeLambdaContext())
    # THEN the message is posted once, without a lookup
    assert response == {"batchItemFailures": []}
    assert platform.ids() == [SENT] and platform.lookups == 0
    assert store.records.get_run(RUN).status == "succeeded"  # type: ignore[union-attr]


def test_a_refusal_sends_a_cron_wake_to_the_cron_failure_queue(
    store: DynamoStore, resources: Resources, platform: Platform
) -> None:
    # GIVEN a job of a Telegram session whose bot was blocked by the user
    seed_session(
        store,
        "s1",
        providers=[{"type": "scripted", "id": "p", "script": OK_SCRIPT}],
        delivery=TELEGRAM,
        rules=ConfigRules(),
    )
    seed_job(store, "job-1", "s1")
    refused = "Telegram: 403 Forbidden: bot was blocked by the user in chat 4711"
    platform.fail_next["telegram"] = ChannelRefused(refused)
    event = {"job_id": "job-1", "scheduled_time": "2026-11-30T06:00:00Z"}
    # WHEN the schedule invokes the cron function once
    result = cron_wake.handler(dict(event), FakeLambdaContext())
    # THEN the run failed for good (no retry spent) and its record is on CronFailureQueue with the reason
    assert result["status"] == "failed_permanently" and result["error_type"] == "ChannelRefused"
    [record] = drain(resources.cron_failure_url)
    attributes = {k: v["StringValue"] for k, v in record["MessageAttributes"].items()}
    assert attributes["agentwake-error-type"] == "ChannelRefused"
    assert refused in attributes["agentwake-reason"]
    assert platform.posts == []


# --- routes ------------------------------------------------------------------------------------------


def test_a_first_route_settles_a_slack_send_in_doubt_before_it_tries_the_page_again(
    store: DynamoStore, platform: Platform, clock: FakeClock
) -> None:
    # GIVEN push-to-the-page-else-Slack, no page open, and the Lambda killed after Slack took the message
    seed(store, {"type": "first", "channels": [{"type": "websocket"}, SLACK]})
    platform.kill_after_post.add("slack")
    deps = deps_for(store, clock)
    killed_then_retried(store, deps)
    # WHEN a page has connected since, and the trigger retries
    platform.page_open = True
    outcome = wake_for_background_result(message("t1", "s1"), deps)
    # THEN the page got nothing: the Slack message was found, and kept as the receipt
    assert outcome.status == "succeeded"
    assert platform.ids("websocket") == [] and platform.ids("slack") == [SENT]
    assert [(r["channel"], r.get("found_by")) for r in marker_receipts(store)] == [("slack", "lookup")]


def test_a_first_route_falls_through_a_decline_and_keeps_the_last_one_unread(
    store: DynamoStore, platform: Platform, clock: FakeClock
) -> None:
    # GIVEN a route of two pages, neither open
    seed(store, {"type": "first", "channels": [{"type": "websocket", "name": "a"}, {"type": "websocket", "name": "b"}]})
    # WHEN the agent sends a message
    outcome = wake_for_background_result(message("t1", "s1"), deps_for(store, clock))
    # THEN nothing was pushed; the delivery is kept, unread, on the last target's receipt
    assert outcome.status == "succeeded" and platform.posts == []
    assert marker_receipts(store) == [{"channel": "websocket", "target": "b", "extra": {"unread": True}}]
    assert deliveries_in_history(store) == [SENT]


def test_an_each_route_skips_a_target_that_answered_before_a_later_one_failed(
    store: DynamoStore, resources: Resources, platform: Platform
) -> None:
    # GIVEN Slack and Telegram both, Telegram refusing the first time (the bot not yet in the chat)
    seed(store, {"type": "each", "channels": [SLACK, TELEGRAM]})
    platform.fail_next["telegram"] = ChannelRefused("Telegram: 400 Bad Request: chat not found (4711)")
    # WHEN the result arrives, is dead-lettered, the operator fixes the chat and redrives it
    background_result.handler(background_event(), FakeLambdaContext())
    assert [d["agentwake-error-type"] for d in dead_letters(resources)] == ["ChannelRefused"]
    # THEN Slack's receipt was kept on its intent when it came
    slack = intent_item(store, "slack")
    assert slack["state"] == "sent" and json.loads(slack["receipt"])["ids"] == ["1"]
    background_result.handler(background_event(message_id="m-2"), FakeLambdaContext())
    # AND the redrive sent to Telegram only: each platform got the message once
    assert platform.ids("slack") == [SENT] and platform.ids("telegram") == [SENT]
    assert platform.lookups == 0
    # AND the marker keeps both receipts
    assert [(r["channel"], r["ids"]) for r in marker_receipts(store)] == [("slack", ["1"]), ("telegram", ["2"])]


def test_a_log_wake_writes_no_intent(store: DynamoStore, platform: Platform, clock: FakeClock) -> None:
    # GIVEN a log session (its receiver, the developer, reads the delivery id)
    seed(store, {"type": "log"})
    # WHEN it runs
    wake_for_background_result(message("t1", "s1"), deps_for(store, clock))
    # THEN no intent item was written
    items = store.table.db.query(
        TableName=store.table.name,
        KeyConditionExpression="pk = :pk AND begins_with(sk, :s)",
        ExpressionAttributeValues={":pk": {"S": run_pk(RUN)}, ":s": {"S": "SENDING#"}},
    )["Items"]
    assert items == []


# --- round trips --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("script", "calls"),
    [
        (
            OK_SCRIPT,  # send_message_to_user: the intent's PutItem just before the request
            [
                "BatchGetItem",
                "PutItem",
                "UpdateItem",
                "Query",
                "PutItem",
                "PutItem",
                "TransactWriteItems",
                "TransactWriteItems",
                "DeleteItem",
            ],
        ),
        (
            PLAIN,  # deliver_final: the reply kept back rides on the intent's write (no call more)
            [
                "BatchGetItem",
                "PutItem",
                "UpdateItem",
                "Query",
                "TransactWriteItems",
                "TransactWriteItems",
                "DeleteItem",
            ],
        ),
    ],
    ids=["tool_delivery", "deliver_final"],
)
def test_a_slack_delivery_costs_a_webhook_ones_calls_plus_its_intent_put(
    store: DynamoStore, platform: Platform, clock: FakeClock, script: list[dict[str, Any]], calls: list[str]
) -> None:
    # GIVEN a Slack session (no result queue: no wait-list read before the release)
    seed(store, SLACK, script)
    counter = DynamoCalls(store.table.db)
    # WHEN it is woken
    made = counter.during(lambda: wake_for_background_result(message("t1", "s1"), deps_for(store, clock)))
    # THEN it makes a webhook wake's calls plus the intent's PutItem (none for deliver_final), and
    # reads nothing more
    assert made == calls, made
    assert platform.ids() == [FINAL if script is PLAIN else SENT]


def test_an_intent_whose_write_failed_is_not_left_for_the_failure_transaction(
    store: DynamoStore, platform: Platform, clock: FakeClock
) -> None:
    # GIVEN deliver_final's answer to Slack, and the write of its reply and intent failing (throttled)
    seed(store, SLACK, PLAIN)
    faults = CallFaults(store.table.db)
    faults.arm(5, "throttling")
    deps = deps_for(store, clock)
    # WHEN the run fails before anything was sent, and the trigger retries it
    with pytest.raises(Exception):  # noqa: B017 -- the throttled write, as the wake saw it
        wake_for_background_result(message("t1", "s1"), deps)
    assert faults.fired is not None and faults.fired[1] == "TransactWriteItems"
    assert platform.requests == 0
    outcome = wake_for_background_result(message("t1", "s1"), deps)
    # THEN the retry found no send in doubt: it posted once, without a lookup
    assert outcome.status == "succeeded"
    assert platform.ids() == [FINAL] and platform.lookups == 0


# --- a fault at the intent's write, and at the write after the post ------------------------------


@pytest.mark.parametrize("kind", FAULT_KINDS)
@pytest.mark.parametrize("at", [6, 7], ids=["intent-PutItem", "tool-step-TransactWriteItems"])
def test_a_fault_at_the_intent_or_the_write_after_the_post_posts_nothing_twice(
    at: int, kind: str, store: DynamoStore, platform: Platform, clock: FakeClock
) -> None:
    # GIVEN a Slack session's tool delivery, and one fault at its intent's PutItem or at the tool
    # step's transaction (marker, history entry, tool result) after Slack took the message
    seed(store, SLACK)
    faults = CallFaults(store.table.db)
    faults.arm(at, kind)
    deps = deps_for(store, clock)
    # WHEN the record is received, and again after each failure, as SQS would
    outcome = None
    for _ in range(5):
        try:
            outcome = wake_for_background_result(message("t1", "s1"), deps)
            break
        except Exception:  # noqa: BLE001,S112 -- whatever the fault became, the trigger retries it
            continue
    # THEN the fault fired where it was aimed, and the run succeeded
    assert faults.fired is not None and faults.fired[1] == ("PutItem" if at == 6 else "TransactWriteItems")
    assert outcome is not None and outcome.status == "succeeded"
    # AND Slack shows each delivery at most once, and history holds what Slack shows, once each
    # (a failed intent write sends nothing: the model is told, as for any write before a send, and
    # its final answer goes instead)
    assert len(platform.ids()) == len(set(platform.ids())) == 1, platform.posts
    assert platform.ids() == ([FINAL] if at == 6 else [SENT]) and platform.lookups == 0
    assert deliveries_in_history(store) == platform.ids()


def test_a_lost_intent_write_before_a_telegram_send_is_not_sent_and_the_retry_sends_once(
    store: DynamoStore, platform: Platform, clock: FakeClock
) -> None:
    # GIVEN deliver_final's answer to Telegram (no receiver confirms it), whose reply-and-intent
    # write fails, and the read-back of an unknown outcome fails too: the intent may have landed
    seed(store, TELEGRAM, PLAIN)
    write, read_back = CallFaults(store.table.db), CallFaults(store.table.db)
    write.arm(5, "timeout_after")  # it landed ("sending"), its answer lost
    read_back.arm(6, "server_error")
    deps = deps_for(store, clock)
    # WHEN the run fails before anything was sent, and the trigger retries it
    with pytest.raises(Exception):  # noqa: B017 -- the failed write, as the wake saw it
        wake_for_background_result(message("t1", "s1"), deps)
    assert write.fired is not None and write.fired[1] == "TransactWriteItems"
    assert read_back.fired is not None and read_back.fired[1] == "GetItem"
    assert platform.requests == 0
    outcome = wake_for_background_result(message("t1", "s1"), deps)
    # THEN the retry knew nothing was sent: no operator is asked, Telegram shows the answer once
    assert outcome.status == "succeeded"
    assert platform.ids() == [FINAL]


def test_an_each_route_whose_second_intent_write_fails_after_slack_posted_aborts_and_posts_slack_once(
    store: DynamoStore, platform: Platform, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN Slack and Telegram both, and the Telegram intent's PutItem throttled once (Slack posted)
    from botocore.exceptions import ClientError

    from agentwake.store.journal import DynamoJournal

    seed(store, {"type": "each", "channels": [SLACK, TELEGRAM]})
    intend = DynamoJournal.intend
    failed: list[str] = []

    def throttled_once(self: DynamoJournal, intent: Intent) -> None:
        if intent.target == "telegram" and not failed:
            failed.append(intent.target)
            error = {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "injected"}}
            raise ClientError(error, "PutItem")  # type: ignore[arg-type]
        intend(self, intent)

    monkeypatch.setattr(DynamoJournal, "intend", throttled_once)
    deps = deps_for(store, clock)
    # WHEN the run aborts (no ``error:`` result the model reads) and the trigger retries it
    with pytest.raises(StepInterrupted, match="reached slack"):
        wake_for_background_result(message("t1", "s1"), deps)
    assert platform.ids() == [SENT]
    outcome = wake_for_background_result(message("t1", "s1"), deps)
    # THEN Slack showed the message once, Telegram once, under the one delivery id
    assert outcome.status == "succeeded" and failed == ["telegram"]
    assert platform.ids("slack") == [SENT] and platform.ids("telegram") == [SENT]
    assert platform.lookups == 0


def test_a_telegram_send_in_doubt_is_not_sent_to_slack_after_the_config_moved_there(
    store: DynamoStore, platform: Platform, clock: FakeClock
) -> None:
    # GIVEN a Telegram send killed right after Telegram took it (in doubt)
    seed(store, TELEGRAM)
    platform.kill_after_post.add("telegram")
    deps = deps_for(store, clock)
    killed_then_retried(store, deps)
    # WHEN the operator switches the session's delivery to Slack and the record is retried
    seed_session(
        store,
        "s1",
        providers=[{"type": "scripted", "id": "p", "script": OK_SCRIPT}],
        delivery=SLACK,
        rules=ConfigRules(),
    )
    with pytest.raises(DeliveryUnconfirmed, match="telegram chat 4711") as info:
        wake_for_background_result(message("t1", "s1"), deps)
    # THEN Slack got nothing: an operator settles the Telegram send first
    assert platform.ids() == [SENT] and platform.ids("slack") == []
    assert f"--delivered {SENT}" in str(info.value)


def test_a_first_route_that_pushed_to_the_page_and_crashed_does_not_post_to_slack_on_the_retry(
    store: DynamoStore, platform: Platform, clock: FakeClock
) -> None:
    # GIVEN push-to-the-page-else-Slack, a page open, and the Lambda killed right after the push
    seed(store, {"type": "first", "channels": [{"type": "websocket"}, SLACK]})
    platform.page_open = True
    platform.kill_after_post.add("websocket")
    deps = deps_for(store, clock)
    killed_then_retried(store, deps)
    # WHEN the page has closed since, and the trigger retries
    platform.page_open = False
    outcome = wake_for_background_result(message("t1", "s1"), deps)
    # THEN the retry went back to the page the first attempt chose: Slack got nothing, and the
    # delivery is kept unread for the page
    assert outcome.status == "succeeded"
    assert platform.ids("websocket") == [SENT] and platform.ids("slack") == []
    assert marker_receipts(store) == [{"channel": "websocket", "target": "websocket", "extra": {"unread": True}}]


def test_a_first_route_whose_page_declined_falls_through_to_slack_on_the_retry(
    store: DynamoStore, platform: Platform, clock: FakeClock
) -> None:
    # GIVEN push-to-the-page-else-Slack, no page open, the Lambda killed right after Slack took it
    seed(store, {"type": "first", "channels": [{"type": "websocket"}, SLACK]})
    platform.kill_after_post.add("slack")
    deps = deps_for(store, clock)
    killed_then_retried(store, deps)
    # THEN the declined page is not the route's choice: the retry settles Slack, the page gets nothing
    platform.page_open = True
    outcome = wake_for_background_result(message("t1", "s1"), deps)
    assert outcome.status == "succeeded"
    assert intent_item(store, "websocket")["state"] == "not_sent"
    assert platform.ids("websocket") == [] and platform.ids("slack") == [SENT]
