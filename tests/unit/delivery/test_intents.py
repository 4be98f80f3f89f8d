"""The intent guard and the routes over in-memory fakes: what each answer of a channel leaves on the
target's intent, and what the next attempt does with it (delivery/intents.py, delivery/route.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from agentwake.delivery import Declined, Delivery, Receipt
from agentwake.delivery.factory import build_channel
from agentwake.delivery.intents import Intent, IntentGuard
from agentwake.delivery.kit import ChannelKit
from agentwake.delivery.route import RouteChannel
from agentwake.errors import (
    ChannelRefused,
    ChannelUnavailable,
    DeliveryError,
    DeliveryUncertain,
    DeliveryUnconfirmed,
    OutboundRefused,
)
from agentwake.wake.deliveries import receipts_of
from tests.support.clock import FakeClock

DELIVERY = Delivery(delivery_id="r1#0#0", run_id="r1", session_id="s1", text="Your research is done.")


class MemoryLog:
    """The IntentLog port in memory: what was written now, and what rides on the next write."""

    def __init__(self, *intents: Intent) -> None:
        self.by_target = {i.target: i for i in intents}
        self.written: list[Intent] = []
        self.later: list[Intent] = []

    def intents(self, delivery_id: str) -> dict[str, Intent]:
        return {t: i for t, i in self.by_target.items() if i.delivery_id == delivery_id}

    def intend(self, intent: Intent) -> None:
        self.by_target[intent.target] = intent
        self.written.append(intent)

    def settle_intent(self, intent: Intent) -> None:
        self.by_target[intent.target] = intent
        (self.later if intent.state == "not_sent" else self.written).append(intent)


class Fake:
    def __init__(self, confirms: str, answers: list[Any], *, found: Receipt | None = None, name: str = "x") -> None:
        self.confirms = confirms
        self.answers = answers
        self.found = found
        self.name = name
        self.sent = 0
        self.where = "C0123"

    def send(self, delivery: Delivery) -> Any:
        self.sent += 1
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def find(self, delivery: Delivery, intent: Intent) -> Receipt | None:
        return self.found


def guard(inner: Fake, log: MemoryLog, **kw: Any) -> IntentGuard:
    return IntentGuard(inner, channel="slack", target=inner.name, log=log, clock=FakeClock(1_800_000_000.0), **kw)


def receipt(target: str = "x", ts: str = "1") -> Receipt:
    return Receipt(channel="slack", target=target, where="C0123", ids=(ts,))


def test_the_intent_is_written_before_the_request_and_stays_in_doubt_when_it_may_have_arrived() -> None:
    # GIVEN a lookup channel whose answer is lost after the request left
    log = MemoryLog()
    inner = Fake("lookup", [DeliveryUncertain("timed out after the request was sent")])
    # WHEN it sends
    with pytest.raises(DeliveryUncertain):
        guard(inner, log).send(DELIVERY)
    # THEN the intent was written first, with where and when, and it stays "sending" (in doubt)
    [written] = log.written
    assert (written.state, written.where, written.at) == ("sending", "C0123", "2027-01-15T08:00:00.000Z")
    assert log.later == []


@pytest.mark.parametrize(
    "failure",
    [
        ChannelRefused("channel_not_found"),
        ChannelUnavailable("telegram: connection refused"),
        OutboundRefused("the outbound policy refuses http://127.0.0.1:1/"),
    ],
)
def test_a_certain_failure_is_not_sent_on_the_next_write(failure: Exception) -> None:
    log = MemoryLog()
    with pytest.raises(type(failure)):
        guard(Fake("none", [failure]), log).send(DELIVERY)
    assert [i.state for i in log.later] == ["not_sent"]


@pytest.mark.parametrize("kind", ["telegram", "slack"])
def test_a_refused_connection_of_a_real_adapter_is_not_sent_and_the_next_attempt_just_sends(
    kind: str, telegram: Any, slack: Any, build: Any, refusing_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the real adapter pointed at a port on 127.0.0.1 where nothing listens
    spec = {"type": "telegram", "chat_id": 99} if kind == "telegram" else {"type": "slack", "channel": "C0123ABCD"}
    fake = telegram if kind == "telegram" else slack
    monkeypatch.setenv(f"AGENTWAKE_{kind.upper()}_API_URL", f"http://127.0.0.1:{refusing_port}/")
    log = MemoryLog()
    with pytest.raises(ChannelUnavailable):
        IntentGuard(build(spec), channel=kind, target=kind, log=log, clock=FakeClock(1_800_000_000.0)).send(DELIVERY)
    # THEN the intent is not_sent (nothing left), not in doubt
    assert log.by_target[kind].state == "not_sent"
    # AND the next attempt, the platform reachable again, sends once: no lookup, no operator
    monkeypatch.setenv(f"AGENTWAKE_{kind.upper()}_API_URL", fake.url)
    answer = IntentGuard(build(spec), channel=kind, target=kind, log=log, clock=FakeClock(1_800_000_000.0)).send(
        DELIVERY
    )
    assert isinstance(answer, Receipt)
    if kind == "telegram":
        assert fake.requests == 1
    else:
        assert fake.requests == [("chat.postMessage", fake.requests[0][1])]  # no history lookup


def test_a_found_message_is_a_lookup_receipt_and_nothing_is_sent() -> None:
    # GIVEN an intent in doubt, and a channel that finds the message (answering its plain receipt)
    log = MemoryLog(Intent(delivery_id=DELIVERY.delivery_id, target="x", channel="slack", at="t"))
    inner = Fake("lookup", [], found=receipt())
    # WHEN the retry sends
    answer = guard(inner, log).send(DELIVERY)
    # THEN the receipt says it was found, and nothing was sent
    assert answer == replace(receipt(), found_by="lookup") and inner.sent == 0


def test_an_intent_not_sent_is_sent_without_a_lookup_or_an_operator() -> None:
    log = MemoryLog(Intent(delivery_id=DELIVERY.delivery_id, target="x", channel="telegram", state="not_sent"))
    inner = Fake("none", [receipt()])
    assert guard(inner, log).send(DELIVERY) == receipt() and inner.sent == 1


def test_an_unconfirmable_send_in_doubt_asks_an_operator_unless_resends_are_allowed() -> None:
    doubt = Intent(delivery_id=DELIVERY.delivery_id, target="x", channel="telegram", where="telegram chat 9", at="t0")
    with pytest.raises(DeliveryUnconfirmed, match="--delivered r1#0#0") as info:
        guard(Fake("none", []), MemoryLog(doubt)).send(DELIVERY)
    assert "telegram chat 9" in str(info.value) and "t0" in str(info.value) and "Your research" in str(info.value)
    inner = Fake("none", [receipt()])
    assert guard(inner, MemoryLog(doubt), unconfirmed="resend").send(DELIVERY) == receipt() and inner.sent == 1


def test_a_first_route_stops_at_the_first_receipt_and_only_a_decline_falls_through() -> None:
    page = Fake("receiver", [Declined("websocket", "page", "no open page")], name="page")
    slack = Fake("lookup", [receipt("slack")], name="slack")
    never = Fake("none", [], name="never")
    route = RouteChannel(_Spec("first"), [page, slack, never])
    assert route.send(DELIVERY) == receipt("slack") and never.sent == 0
    # a failure is not a decline: it does not fall through
    failing = RouteChannel(_Spec("first"), [Fake("lookup", [DeliveryError("down")]), never])
    with pytest.raises(DeliveryError):
        failing.send(DELIVERY)
    assert never.sent == 0


def test_an_each_route_answers_every_receipt_and_keeps_a_decline_unread() -> None:
    log = MemoryLog()
    page = guard(Fake("receiver", [Declined("websocket", "page", "no open page")], name="page"), log)
    slack = guard(Fake("lookup", [receipt("slack")], name="slack"), log)
    answer = RouteChannel(_Spec("each"), [page, slack]).send(DELIVERY)
    assert answer == [Receipt(channel="websocket", target="page", extra={"unread": True}), receipt("slack")]
    # the first target's receipt was kept on its intent as it came; the last one rides on the marker
    assert [(i.target, i.state) for i in log.written] == [("page", "sent"), ("slack", "sending")]
    assert receipts_of(answer) == answer


def test_a_route_built_with_the_runs_intents_guards_each_target() -> None:
    kit = ChannelKit(settings=None, intents=MemoryLog())
    route = build_channel(
        {"type": "each", "channels": [{"type": "log", "name": "a"}, {"type": "log", "name": "b"}]}, kit
    )
    assert isinstance(route, RouteChannel)
    assert [(type(leaf).__name__, leaf.target) for leaf in route.leaves] == [("IntentGuard", "a"), ("IntentGuard", "b")]


class _Spec:
    def __init__(self, kind: str) -> None:
        self.type = kind


class _Page:
    """A page target answering from a script (an exception is raised)."""

    confirms = "receiver"
    name = "page"

    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers

    def send(self, delivery: Delivery) -> Any:
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


class _Slack:
    confirms = "lookup"
    name = "slack"

    def __init__(self) -> None:
        self.sent = 0

    def send(self, delivery: Delivery) -> Receipt:
        self.sent += 1
        return Receipt(channel="slack", target="slack", ids=("1733140000.000100",))

    def find(self, delivery: Delivery, intent: Intent) -> Receipt | None:
        return None


def test_a_first_route_whose_page_pushed_nothing_before_failing_falls_through_to_slack_on_the_retry() -> None:
    # GIVEN push to the open page, else Slack; the first attempt cannot read the session's pages
    log, clock = MemoryLog(), FakeClock(1_800_000_000.0)
    page = _Page(
        [
            ChannelUnavailable("websocket: the open pages could not be read", nothing_sent=True),
            Declined(channel="websocket", target="page", reason="no page open"),
        ]
    )
    slack = _Slack()

    def route() -> RouteChannel:
        leaves = [
            IntentGuard(page, channel="websocket", target="page", log=log, clock=clock, in_route=True),
            IntentGuard(slack, channel="slack", target="slack", log=log, clock=clock, in_route=True),
        ]
        return RouteChannel(replace_type("first"), leaves)

    with pytest.raises(ChannelUnavailable):
        route().send(DELIVERY)
    # THEN nothing was pushed, and the page's choice says so
    assert log.by_target["page"].state == "not_sent"
    # WHEN the retry finds no page open
    answer = route().send(DELIVERY)
    # THEN it falls through to Slack, once
    assert isinstance(answer, Receipt) and answer.channel == "slack" and slack.sent == 1


def replace_type(kind: str) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(type=kind)
