"""The slack channel against a fake Slack Web API on 127.0.0.1 (tests/support/fake_slack.py)."""

from __future__ import annotations

import logging
import time

import pytest

from agentwake.deadline import run_deadline
from agentwake.delivery import Delivery, Receipt
from agentwake.delivery.retry import CUT_MARKER, NOTHING_SENT
from agentwake.delivery.slack import MAX_TEXT
from agentwake.errors import ChannelRefused, ChannelUnavailable, ConfigError, DeliveryUncertain, DeliveryUnconfirmed
from tests.support.fake_slack import Scripted, error

DELIVERY = Delivery(delivery_id="bg:t-1#0#0", run_id="bg:t-1", session_id="sess-A", text="Fertig — 3 new sign-ups.")
SPEC = {"type": "slack", "channel": "C0123ABCD"}
THREAD = {"type": "slack", "channel": "C0123ABCD", "thread_ts": "1733140000.000100"}


def test_posts_with_metadata_and_answers_the_ts_as_receipt(slack, build):
    # GIVEN a slack session channel
    channel = build(SPEC)

    # WHEN a delivery is sent
    receipt = channel.send(DELIVERY)

    # THEN Slack got one message with our metadata, and the receipt is its ts
    assert slack.by_delivery_id() == {"bg:t-1#0#0": 1}
    (message,) = slack.messages
    assert message["text"] == "Fertig — 3 new sign-ups."
    assert message["metadata"] == {"event_type": "agentwake_delivery", "event_payload": {"delivery_id": "bg:t-1#0#0"}}
    assert receipt == Receipt(channel="slack", target="slack", where="C0123ABCD", ids=(message["ts"],))
    assert receipt.describe() == f"slack ts {message['ts']} in C0123ABCD"
    assert type(channel).confirms == "lookup"


def test_a_thread_post_carries_thread_ts_and_the_receipt_names_it(slack, build):
    receipt = build({**THREAD, "name": "ops"}).send(DELIVERY)

    assert slack.messages[0]["thread_ts"] == "1733140000.000100"
    assert receipt.where == "C0123ABCD/1733140000.000100"
    assert receipt.target == "ops"


def test_the_bearer_token_goes_in_the_header(slack, build):
    # a wrong token in the stack's secret: Slack refuses it, and the run is told what to fix
    slack.token = "xoxb-some-other-token-0000"
    with pytest.raises(ChannelRefused) as refused:
        build(SPEC).send(DELIVERY)
    assert "invalid_auth" in str(refused.value)
    assert "SlackBotTokenSecretArn" in str(refused.value)
    assert slack.messages == []


@pytest.mark.parametrize(
    ("code", "advice"),
    [
        ("channel_not_found", "invite the bot"),
        ("not_in_channel", "invite the bot"),
        ("is_archived", "unarchive"),
        ("token_revoked", "SlackBotTokenSecretArn"),
        ("account_inactive", "SlackBotTokenSecretArn"),
        ("missing_scope", "chat:write"),
    ],
)
def test_a_permanent_error_is_refused_with_the_code_and_what_to_do(slack, build, code, advice):
    # GIVEN Slack refuses the post
    slack.then("chat.postMessage", error(code, needed="chat:write") if code == "missing_scope" else error(code))

    # WHEN it is sent
    with pytest.raises(ChannelRefused) as refused:
        build(SPEC).send(DELIVERY)

    # THEN the run fails for good naming Slack's code, the channel and what an operator does
    text = str(refused.value)
    assert text.startswith(f"Slack: {code} for C0123ABCD: ")
    assert advice in text
    assert "agentwake sessions put sess-A --delivery" in text
    assert refused.value.retryable is False
    assert slack.calls("chat.postMessage") == 1  # no retry of a refusal


@pytest.mark.parametrize(
    "answer",
    [
        Scripted(500, raw=b"<html>upstream</html>", store=True),
        Scripted(200, {"ok": False, "error": "internal_error"}, store=True),
    ],
    ids=["5xx", "internal_error"],
)
def test_an_answer_that_cannot_tell_is_uncertain_not_an_error(slack, build, answer):
    # GIVEN Slack took the post but its answer says nothing certain
    slack.then("chat.postMessage", answer)

    # WHEN it is sent
    with pytest.raises(DeliveryUncertain) as uncertain:
        build(SPEC).send(DELIVERY)

    # THEN the intent stays in doubt (not one of the "nothing sent" failures), and it was not posted again (the core's intent looks it up on the retry)
    assert not isinstance(uncertain.value, NOTHING_SENT)
    assert slack.calls("chat.postMessage") == 1


def test_a_text_longer_than_slack_takes_is_cut_with_a_marker(slack, build):
    long = Delivery("d-long", "r", "s", "x" * (MAX_TEXT + 500))

    build(SPEC).send(long)

    text = slack.messages[0]["text"]
    assert len(text) == MAX_TEXT
    assert text.endswith(CUT_MARKER)


def test_no_token_is_a_config_error_naming_the_stack_parameter(monkeypatch, slack, build):
    monkeypatch.setenv("AGENTWAKE_SLACK_TOKEN_REF", "")
    with pytest.raises(ConfigError, match="SlackBotTokenSecretArn"):
        build(SPEC)


def test_a_channels_own_token_ref_wins_over_the_stacks(monkeypatch, slack, build):
    monkeypatch.setenv("AGENTWAKE_SLACK_TOKEN_REF", "env:AGENTWAKE_SECRET_NOT_SET")
    monkeypatch.setenv("AGENTWAKE_SECRET_OWN_BOT", slack.token)

    build({**SPEC, "token_ref": "env:AGENTWAKE_SECRET_OWN_BOT"}).send(DELIVERY)

    assert slack.by_delivery_id() == {"bg:t-1#0#0": 1}


def test_the_api_base_comes_from_the_stack_settings_only(monkeypatch, slack, build, refusing_port):
    # a session spec cannot name an API base at all
    with pytest.raises(ConfigError, match="api_url"):
        build({**SPEC, "api_url": "http://127.0.0.1:1/"})
    # the stack's setting is where the post goes: pointed elsewhere, the fake gets nothing
    monkeypatch.setenv("AGENTWAKE_SLACK_API_URL", f"http://127.0.0.1:{refusing_port}/api/")
    with pytest.raises(Exception, match="Slack is unavailable"):
        build(SPEC).send(DELIVERY)
    assert slack.requests == []


def test_the_token_is_in_no_failure_text_nor_log_record(slack, build, caplog):
    caplog.set_level(logging.DEBUG)
    slack.then(
        "chat.postMessage", error("channel_not_found"), Scripted(502, raw=b"bad gateway " + slack.token.encode())
    )
    channel = build(SPEC)
    texts = [repr(channel)]
    for _ in range(2):
        with pytest.raises(Exception) as failed:
            channel.send(DELIVERY)
        texts += [str(failed.value), repr(failed.value)]
    assert slack.token not in "\n".join(texts + [r.getMessage() for r in caplog.records])


# --- find: the lookup after a crash ------------------------------------------------------------


def test_find_matches_a_sent_delivery_by_its_metadata(slack, build):
    # GIVEN a delivery was posted, between other messages, and the intent kept the probe
    channel = build(SPEC)
    intent = {"at": "2026-12-03T09:00:00+00:00", "where": channel.where, "probe": channel.probe(DELIVERY)}
    channel.send(Delivery("other#0", "r", "sess-A", "earlier"))
    channel.send(DELIVERY)
    channel.send(Delivery("other#1", "r", "sess-A", "later"))

    # WHEN the retry looks it up
    found = channel.find(DELIVERY, intent)

    # THEN the receipt is the message's ts, found by lookup, and nothing was posted again
    posted = next(m for m in slack.messages if m["text"] == DELIVERY.text)
    assert found == Receipt(channel="slack", target="slack", where="C0123ABCD", ids=(posted["ts"],), found_by="lookup")
    assert slack.calls("chat.postMessage") == 3
    (history,) = [args for name, args in slack.requests if name == "conversations.history"]
    assert history["include_all_metadata"] == "true"
    assert history["oldest"] == intent["probe"]["oldest"]


def test_find_answers_none_when_the_post_never_arrived(slack, build):
    channel = build(SPEC)
    channel.send(Delivery("other#0", "r", "sess-A", "another delivery"))

    assert channel.find(DELIVERY, {"probe": channel.probe(DELIVERY)}) is None


def test_find_pages_through_history_with_the_cursor(slack, build):
    slack.page_size = 2
    channel = build(SPEC)
    channel.send(DELIVERY)
    for i in range(5):
        channel.send(Delivery(f"later#{i}", "r", "sess-A", f"later {i}"))

    found = channel.find(DELIVERY, {"probe": channel.probe(DELIVERY)})

    assert found is not None and found.found_by == "lookup"
    assert slack.calls("conversations.history") == 3


def test_find_in_a_thread_reads_its_replies(slack, build):
    channel = build(THREAD)
    channel.send(DELIVERY)

    found = channel.find(DELIVERY, {"probe": channel.probe(DELIVERY)})

    assert found is not None and found.where == "C0123ABCD/1733140000.000100"
    assert slack.calls("conversations.replies") == 1 and slack.calls("conversations.history") == 0


def test_find_takes_the_probe_as_the_journal_stores_it_json(slack, build):
    import json

    channel = build(SPEC)
    channel.send(DELIVERY)

    class Intent:  # an intent object, its probe as the item keeps it
        probe = json.dumps(channel.probe(DELIVERY))
        at = "2026-12-03T09:00:00Z"

    assert channel.find(DELIVERY, Intent()) is not None


def test_find_without_the_history_scope_is_unconfirmed_with_that_reason(slack, build):
    slack.then("conversations.history", error("missing_scope", needed="channels:history"))
    channel = build(SPEC)

    with pytest.raises(DeliveryUnconfirmed) as unconfirmed:
        channel.find(DELIVERY, {"probe": channel.probe(DELIVERY)})

    assert "missing_scope" in str(unconfirmed.value)
    assert "channels:history" in str(unconfirmed.value)


def test_find_honours_retry_after_like_a_send(slack, build, clock):
    from tests.support.fake_slack import ratelimited

    slack.then("conversations.history", ratelimited(3))
    channel = build(SPEC)
    channel.send(DELIVERY)

    with run_deadline(time.monotonic() + 120):
        found = channel.find(DELIVERY, {"probe": channel.probe(DELIVERY)})

    assert found is not None
    assert clock.sleeps == [3.0]
    assert slack.calls("conversations.history") == 2


def test_no_answer_after_the_post_went_out_is_in_doubt(monkeypatch, slack, build, silent_server):
    # GIVEN a Slack that takes the request and never answers
    monkeypatch.setenv("AGENTWAKE_SLACK_API_URL", f"http://127.0.0.1:{silent_server}/api/")
    channel = build(SPEC)
    channel._policy.exchange_s = 0.3  # the exchange's own timeout, short for the test

    # WHEN a delivery is sent, THEN it may have arrived: the core's intent looks it up on the retry
    with pytest.raises(DeliveryUncertain, match="may have arrived"):
        channel.send(DELIVERY)


def test_a_lookup_with_no_answer_is_retried_then_unavailable_never_in_doubt(
    monkeypatch, slack, build, clock, silent_server
):
    # GIVEN the history read goes unanswered (a read is safe to repeat)
    monkeypatch.setenv("AGENTWAKE_SLACK_API_URL", f"http://127.0.0.1:{silent_server}/api/")
    channel = build(SPEC)
    channel._policy.exchange_s = 0.2

    # WHEN the lookup runs, THEN it retries shortly and reports the platform unavailable (retryable)
    with pytest.raises(ChannelUnavailable):
        channel.find(DELIVERY, {"probe": channel.probe(DELIVERY)})
    assert clock.sleeps == [0.5, 1.0]
