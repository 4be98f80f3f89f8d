"""The one retry policy for HTTP platforms (delivery/retry.py), through the Slack and Telegram
adapters against their fakes: a wait the platform asks for is slept on the kit's (fake) clock when
it fits in the run's deadline, else the run fails transiently with the wait and nothing sent."""

from __future__ import annotations

import time

import pytest

from agentwake.deadline import run_deadline
from agentwake.delivery import Delivery
from agentwake.delivery.retry import EXCHANGE_S, MAX_WAITS, NOTHING_SENT, RetryPolicy, cut, utf16_units
from agentwake.errors import ChannelThrottled, ChannelUnavailable
from tests.support.clock import FakeClock
from tests.support.fake_slack import ratelimited
from tests.support.fake_telegram import flood

DELIVERY = Delivery(delivery_id="bg:t-1#0#0", run_id="bg:t-1", session_id="sess-A", text="Fertig.")
SLACK = {"type": "slack", "channel": "C0123ABCD"}
TELEGRAM = {"type": "telegram", "chat_id": 99}


def test_slack_retry_after_2_is_one_retry_after_the_wait_and_one_message(slack, build, clock):
    # GIVEN Slack answers the first post 429 Retry-After: 2, and the run has a minute left
    slack.then("chat.postMessage", ratelimited(2))

    # WHEN a delivery is sent
    with run_deadline(time.monotonic() + 60):
        receipt = build(SLACK).send(DELIVERY)

    # THEN two requests, the clock slept 2 s between them, one message, its receipt
    assert slack.calls("chat.postMessage") == 2
    assert clock.sleeps == [2.0]
    assert slack.by_delivery_id() == {"bg:t-1#0#0": 1}
    assert receipt.ids == (slack.messages[0]["ts"],)


def test_telegram_retry_after_is_one_retry_after_the_wait_and_one_message(telegram, build, clock):
    telegram.then(flood(2))

    with run_deadline(time.monotonic() + 60):
        receipt = build(TELEGRAM).send(DELIVERY)

    assert telegram.requests == 2
    assert clock.sleeps == [2.0]
    assert len(telegram.messages) == 1
    assert receipt.ids == (str(telegram.messages[0]["message_id"]),)


def test_slack_retry_after_longer_than_the_time_left_fails_transiently_and_sends_nothing(slack, build, clock):
    # GIVEN 40 s left in the run and Slack asks for 90
    slack.then("chat.postMessage", ratelimited(90))

    # WHEN a delivery is sent
    with run_deadline(time.monotonic() + 40), pytest.raises(ChannelThrottled) as throttled:
        build(SLACK).send(DELIVERY)

    # THEN the run fails transiently carrying the wait, without sleeping or sending
    assert throttled.value.retry_after == 90
    assert throttled.value.retryable is True
    assert isinstance(throttled.value, NOTHING_SENT)  # the core marks the intent not_sent
    assert str(throttled.value).startswith("Slack asked to wait 90 s for slack C0123ABCD; ")
    assert " s were left" in str(throttled.value)
    assert clock.sleeps == []
    assert slack.messages == [] and slack.calls("chat.postMessage") == 1


def test_telegram_retry_after_longer_than_the_time_left_fails_transiently(telegram, build, clock):
    telegram.then(flood(30))

    with run_deadline(time.monotonic() + 10), pytest.raises(ChannelThrottled) as throttled:
        build(TELEGRAM).send(DELIVERY)

    assert throttled.value.retry_after == 30
    assert str(throttled.value).startswith("Telegram asked to wait 30 s for telegram chat 99;")
    assert clock.sleeps == [] and telegram.messages == []


def test_a_wait_must_leave_one_exchanges_budget(slack, build, clock):
    # 20 s left: a 15 s wait would leave 5 s, less than one exchange's budget
    slack.then("chat.postMessage", ratelimited(20 - EXCHANGE_S + 5))

    with run_deadline(time.monotonic() + 20), pytest.raises(ChannelThrottled):
        build(SLACK).send(DELIVERY)

    assert clock.sleeps == []


def test_waits_slept_on_the_fake_clock_count_against_the_deadline(slack, build, clock):
    # GIVEN 45 s left: a first wait of 30 fits, a second of 30 no longer does
    slack.then("chat.postMessage", ratelimited(30), ratelimited(30))

    with run_deadline(time.monotonic() + 45), pytest.raises(ChannelThrottled) as throttled:
        build(SLACK).send(DELIVERY)

    assert clock.sleeps == [30.0]
    assert "15 s were left" in str(throttled.value) or "14 s were left" in str(throttled.value)


def test_at_most_three_waits_per_send(slack, build, clock):
    slack.then("chat.postMessage", *[ratelimited(1)] * (MAX_WAITS + 1))

    with run_deadline(time.monotonic() + 600), pytest.raises(ChannelThrottled, match="after 3 waits"):
        build(SLACK).send(DELIVERY)

    assert clock.sleeps == [1.0] * MAX_WAITS
    assert slack.messages == []


def test_connection_refused_is_retried_shortly_then_unavailable(slack, build, clock, monkeypatch, refusing_port):
    monkeypatch.setenv("AGENTWAKE_SLACK_API_URL", f"http://127.0.0.1:{refusing_port}/api/")

    with run_deadline(time.monotonic() + 60), pytest.raises(ChannelUnavailable) as unavailable:
        build(SLACK).send(DELIVERY)

    assert clock.sleeps == [0.5, 1.0]
    assert "cannot connect" in str(unavailable.value)
    assert isinstance(unavailable.value, NOTHING_SENT)


def test_the_policy_without_a_run_deadline_sleeps_only_a_short_wait():
    from agentwake.delivery.retry import Throttled

    clock = FakeClock()
    policy = RetryPolicy(clock, "Slack")
    asks = iter([5.0, 600.0])

    def once() -> str:
        raise Throttled(next(asks))

    with pytest.raises(ChannelThrottled, match="asked to wait 600 s for x; no time limit"):
        policy.call(once, shown="x")
    assert clock.sleeps == [5.0]


def test_cut_counts_in_the_platforms_units():
    assert cut("short", 10) == "short"
    cut_text = cut("é" * 100, 80)
    assert len(cut_text) == 80
    emoji = cut("🙂" * 100, 80, units=utf16_units)
    assert utf16_units(emoji) <= 80
