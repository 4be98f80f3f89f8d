"""The telegram channel against a fake Bot API on 127.0.0.1 (tests/support/fake_telegram.py).

Its bot token is in the URL path: no failure text, repr or log record may carry it."""

from __future__ import annotations

import logging
import time

import pytest

from agentwake.deadline import run_deadline
from agentwake.delivery import Delivery, Receipt
from agentwake.delivery.retry import CUT_MARKER, utf16_units
from agentwake.delivery.telegram import MAX_TEXT
from agentwake.errors import (
    ChannelRefused,
    ChannelUnavailable,
    ConfigError,
    DeadlineExceeded,
    DeliveryUncertain,
    OutboundRefused,
)
from tests.support.fake_telegram import Scripted, error

DELIVERY = Delivery(delivery_id="bg:t-1#0#0", run_id="bg:t-1", session_id="sess-A", text="Fertig — 3 new sign-ups.")
SPEC = {"type": "telegram", "chat_id": 99}


def test_sends_to_the_chat_and_answers_the_message_id_as_receipt(telegram, build):
    # GIVEN a telegram session channel
    channel = build(SPEC)

    # WHEN a delivery is sent
    receipt = channel.send(DELIVERY)

    # THEN the chat got one message and the receipt is its message_id
    assert [(m["chat_id"], m["text"]) for m in telegram.messages] == [(99, "Fertig — 3 new sign-ups.")]
    assert receipt == Receipt(channel="telegram", target="telegram", where="99", ids=("4711",))
    assert receipt.describe() == "telegram message 4711 in 99"
    assert type(channel).confirms == "none"
    assert channel.unconfirmed == "dead_letter"


def test_a_topic_and_a_public_channel_name(telegram, build):
    receipt = build({"type": "telegram", "chat_id": "@agentwake_news", "message_thread_id": 7}).send(DELIVERY)

    assert telegram.messages[0]["chat_id"] == "@agentwake_news"
    assert telegram.messages[0]["message_thread_id"] == 7
    assert receipt.where == "@agentwake_news"


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        (error(400, "Bad Request: chat not found"), "check the chat id"),
        (error(403, "Forbidden: bot was blocked by the user"), "the user blocked the bot"),
        (error(403, "Forbidden: bot was kicked from the group chat"), "add the bot to the chat again"),
        (error(401, "Unauthorized"), "TelegramBotTokenSecretArn"),
        (
            error(400, "Bad Request: group chat was upgraded to a supergroup chat", migrate_to_chat_id=-1001234567890),
            "use chat id -1001234567890",
        ),
    ],
    ids=["chat-not-found", "blocked", "kicked", "revoked", "migrated"],
)
def test_a_permanent_error_is_refused_with_the_platforms_reason(telegram, build, answer, says):
    # GIVEN the Bot API refuses the message
    telegram.then(answer)

    # WHEN it is sent
    with pytest.raises(ChannelRefused) as refused:
        build(SPEC).send(DELIVERY)

    # THEN the run fails for good with Telegram's code, the chat and what an operator does
    text = str(refused.value)
    assert text.startswith(f"Telegram: {answer.status} ")
    assert answer.body is not None and answer.body["description"] in text
    assert "telegram chat 99" in text
    assert says in text
    assert refused.value.retryable is False
    assert telegram.requests == 1 and telegram.messages == []


def test_a_wrong_token_is_refused_as_a_token_problem(telegram, build, monkeypatch):
    monkeypatch.setenv("AGENTWAKE_SECRET_TELEGRAM_BOT", "7000009999:AAWrongTokenWrongTokenWrongToken00")

    with pytest.raises(ChannelRefused) as refused:
        build(SPEC).send(DELIVERY)

    assert "bot token was refused" in str(refused.value)
    assert "7000009999:AAWrong" not in str(refused.value)


def test_a_5xx_with_the_bot_apis_answer_is_retried_then_unavailable(telegram, build, clock):
    # GIVEN the Bot API says it failed, three times
    telegram.then(*[error(500, "Internal Server Error")] * 3)

    # WHEN it is sent
    with run_deadline(time.monotonic() + 60), pytest.raises(ChannelUnavailable) as unavailable:
        build(SPEC).send(DELIVERY)

    # THEN it was tried after two short pauses, then reported unavailable (retryable)
    assert clock.sleeps == [0.5, 1.0]
    assert telegram.requests == 3
    assert unavailable.value.retryable is True
    assert "telegram chat 99" in str(unavailable.value)


def test_a_5xx_with_the_bot_apis_answer_then_success_delivers_once(telegram, build, clock):
    telegram.then(error(502, "Bad Gateway"))

    with run_deadline(time.monotonic() + 60):
        receipt = build(SPEC).send(DELIVERY)

    assert receipt.ids == ("4711",)
    assert len(telegram.messages) == 1
    assert clock.sleeps == [0.5]


def test_a_5xx_without_the_bot_apis_answer_is_in_doubt(telegram, build):
    # GIVEN a proxy answered: the message may have gone
    telegram.then(Scripted(502, raw=b"<html>502 Bad Gateway</html>", store=True))

    with pytest.raises(DeliveryUncertain):
        build(SPEC).send(DELIVERY)

    assert telegram.requests == 1  # never sent again here: the intent decides


def test_a_text_longer_than_4096_is_cut_with_a_marker(telegram, build):
    long = Delivery("d-long", "r", "s", "🙂" * 3000)  # 6000 UTF-16 code units

    build(SPEC).send(long)

    text = telegram.messages[0]["text"]
    assert utf16_units(text) <= MAX_TEXT
    assert text.endswith(CUT_MARKER)
    assert text.startswith("🙂" * 2000)


def test_no_token_is_a_config_error_naming_the_stack_parameter(telegram, build, monkeypatch):
    monkeypatch.delenv("AGENTWAKE_TELEGRAM_TOKEN_REF")
    with pytest.raises(ConfigError, match="TelegramBotTokenSecretArn"):
        build(SPEC)


def test_the_api_base_comes_from_the_stack_settings_only(telegram, build, monkeypatch, refusing_port):
    with pytest.raises(ConfigError, match="api_url"):
        build({**SPEC, "api_url": "http://127.0.0.1:1/"})
    monkeypatch.setenv("AGENTWAKE_TELEGRAM_API_URL", f"http://127.0.0.1:{refusing_port}/")
    with pytest.raises(ChannelUnavailable):
        build(SPEC).send(DELIVERY)
    assert telegram.requests == 0


# --- the token, which is in the URL path -----------------------------------------------------


def _all_text(exc: BaseException) -> str:
    """Every text an exception carries, its causes and contexts included (a traceback shows them)."""
    texts = []
    seen: BaseException | None = exc
    while seen is not None:
        texts += [str(seen), repr(seen), *map(str, seen.args)]
        seen = seen.__cause__ or seen.__context__
    return "\n".join(texts)


def test_the_token_is_in_no_failure_text_nor_log_record(telegram, build, monkeypatch, caplog, refusing_port):
    caplog.set_level(logging.DEBUG)
    token = telegram.token
    failures: list[BaseException] = []
    # GIVEN every way a send can fail
    telegram.then(
        error(400, "Bad Request: chat not found"),
        error(500, "Internal Server Error"),
        Scripted(502, raw=b"<html>bad gateway</html>"),
        Scripted(200, raw=b"not json"),
    )
    channel = build(SPEC)
    for _ in range(3):
        with pytest.raises(Exception) as failed:
            channel.send(DELIVERY)
        failures.append(failed.value)
    # connection refused (the exchange's own text names the URL, the token in its path)
    monkeypatch.setenv("AGENTWAKE_TELEGRAM_API_URL", f"http://127.0.0.1:{refusing_port}/")
    with pytest.raises(ChannelUnavailable) as failed:
        build(SPEC).send(DELIVERY)
    failures.append(failed.value)
    # the outbound policy refuses the base (the deployed policy: no plain http, no loopback)
    monkeypatch.setenv("AGENTWAKE_OUTBOUND_ALLOW_HTTP", "false")
    with pytest.raises(OutboundRefused) as failed:
        build(SPEC).send(DELIVERY)
    failures.append(failed.value)

    # THEN no text holds the token
    texts = "\n".join([_all_text(f) for f in failures] + [repr(channel)] + [r.getMessage() for r in caplog.records])
    assert token not in texts
    assert token.split(":")[1] not in texts
    assert "telegram chat 99" in texts


def test_a_timeout_after_sending_is_in_doubt_and_names_no_url(telegram, build, monkeypatch, silent_server):
    monkeypatch.setenv("AGENTWAKE_TELEGRAM_API_URL", f"http://127.0.0.1:{silent_server}/")
    channel = build(SPEC)
    channel._policy.exchange_s = 0.3  # the exchange's own timeout, short for the test

    with pytest.raises(DeliveryUncertain) as uncertain:
        channel.send(DELIVERY)

    assert "may have arrived" in str(uncertain.value)
    assert telegram.token not in _all_text(uncertain.value)
    assert "127.0.0.1" not in _all_text(uncertain.value)


def test_the_runs_deadline_names_no_url(telegram, build, monkeypatch, silent_server):
    monkeypatch.setenv("AGENTWAKE_TELEGRAM_API_URL", f"http://127.0.0.1:{silent_server}/")
    channel = build(SPEC)

    with run_deadline(time.monotonic() + 0.3), pytest.raises(DeadlineExceeded) as exceeded:
        channel.send(DELIVERY)

    assert "may have arrived" in str(exceeded.value)
    assert telegram.token not in _all_text(exceeded.value)
