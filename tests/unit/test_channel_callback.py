"""The chats' callback endpoint (``product/channel_callback.py``), without AWS: Slack's v0 request
signature and Telegram's webhook secret are checked before anything is read, and the buttons' data
reads back as it was written."""

from __future__ import annotations

import hashlib
import hmac
import json
from types import SimpleNamespace
from typing import Any

import pytest

from agentwake.delivery.buttons import (
    TELEGRAM_DATA_BYTES,
    offers_buttons,
    parse_telegram_data,
    slack_blocks,
    telegram_keyboard,
)
from agentwake.domain.approvals import approval_id
from agentwake.product.channel_callback import (
    MAX_SKEW_S,
    SLACK_PATH,
    TELEGRAM_PATH,
    Refused,
    handle,
    verify_slack,
    verify_telegram,
)

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
BODY = b"payload=%7B%22type%22%3A%22block_actions%22%7D"
NOW = 1_800_000_000.0


def signed(body: bytes = BODY, *, at: float = NOW, secret: str = SECRET) -> dict[str, str]:
    """The headers Slack sends: ``v0=`` HMAC-SHA256 of ``v0:{timestamp}:{body}``."""
    stamp = str(int(at))
    mac = hmac.new(secret.encode(), f"v0:{stamp}:".encode() + body, hashlib.sha256).hexdigest()
    return {"x-slack-request-timestamp": stamp, "x-slack-signature": f"v0={mac}"}


def test_a_slack_request_signed_with_the_signing_secret_within_five_minutes_is_taken() -> None:
    verify_slack(SECRET, signed(), BODY, now=NOW)
    verify_slack(SECRET, signed(at=NOW - MAX_SKEW_S + 1), BODY, now=NOW)


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param(signed(secret="another-apps-secret"), id="another secret"),
        pytest.param({**signed(), "x-slack-signature": "v0=" + "0" * 64}, id="a wrong signature"),
        pytest.param(
            {**signed(), "x-slack-signature": signed()["x-slack-signature"].upper()}, id="not as Slack writes it"
        ),
        pytest.param(signed(at=NOW - MAX_SKEW_S - 1), id="stale"),
        pytest.param(signed(at=NOW + MAX_SKEW_S + 1), id="from the future"),
        pytest.param({"x-slack-request-timestamp": str(int(NOW))}, id="no signature"),
        pytest.param({"x-slack-signature": signed()["x-slack-signature"]}, id="no timestamp"),
        pytest.param({**signed(), "x-slack-request-timestamp": "soon"}, id="a malformed timestamp"),
        pytest.param({}, id="nothing"),
    ],
)
def test_a_slack_request_not_signed_so_is_refused(headers: dict[str, str]) -> None:
    with pytest.raises(Refused):
        verify_slack(SECRET, headers, BODY, now=NOW)


def test_a_slack_signature_covers_the_whole_body() -> None:
    with pytest.raises(Refused):
        verify_slack(SECRET, signed(), BODY + b"&x=1", now=NOW)


def test_a_telegram_update_needs_the_webhook_secret() -> None:
    verify_telegram(SECRET, {"x-telegram-bot-api-secret-token": SECRET})
    for headers in ({}, {"x-telegram-bot-api-secret-token": ""}, {"x-telegram-bot-api-secret-token": SECRET[:-1]}):
        with pytest.raises(Refused):
            verify_telegram(SECRET, headers)


def settings(**kw: Any) -> Any:
    base = {
        "slack_signing_secret_ref": None,
        "telegram_webhook_secret_ref": None,
        "slack_token_ref": None,
        "telegram_token_ref": None,
    }
    return SimpleNamespace(**{**base, **kw})


def event(path: str, body: bytes, headers: dict[str, str]) -> dict[str, Any]:
    return {"rawPath": path, "headers": headers, "body": body.decode(), "isBase64Encoded": False}


def nobody() -> Any:
    raise AssertionError("nothing is decided or read for a request that is not verified")


def test_a_route_whose_secret_the_stack_lacks_answers_404_and_reads_nothing() -> None:
    for path in (SLACK_PATH, TELEGRAM_PATH):
        answer = handle(event(path, BODY, signed()), settings(), nobody, now=lambda: NOW)
        assert answer["statusCode"] == 404


def test_a_request_not_verified_is_401_saying_nothing_of_the_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTWAKE_SECRET_SIGNING", SECRET)
    on = settings(
        slack_signing_secret_ref="env:AGENTWAKE_SECRET_SIGNING",
        telegram_webhook_secret_ref="env:AGENTWAKE_SECRET_SIGNING",
    )
    answers = [
        handle(event(SLACK_PATH, BODY, signed(secret="nope")), on, nobody, now=lambda: NOW),
        handle(event(SLACK_PATH, BODY, signed(at=NOW - 3600)), on, nobody, now=lambda: NOW),
        handle(event(SLACK_PATH, BODY, {}), on, nobody, now=lambda: NOW),
        handle(event(TELEGRAM_PATH, b"{}", {"x-telegram-bot-api-secret-token": "nope"}), on, nobody),
        handle(event(TELEGRAM_PATH, b"{}", {}), on, nobody),
    ]
    assert [a["statusCode"] for a in answers] == [401] * 5
    assert all(SECRET not in json.dumps(a) for a in answers)


def test_the_buttons_carry_the_request_id_and_fit_telegram_s_64_bytes() -> None:
    longest = approval_id("cron:" + "j" * 200 + "#2026-12-03T12:00:00Z", 99, 99)
    keyboard = telegram_keyboard(longest)
    (row,) = keyboard["inline_keyboard"]
    assert [b["text"] for b in row] == ["Approve", "Reject"]
    assert all(len(b["callback_data"].encode()) <= TELEGRAM_DATA_BYTES for b in row)
    assert [parse_telegram_data(b["callback_data"]) for b in row] == [("approve", longest), ("reject", longest)]
    for other in (None, 7, "", "aw:x:apr-1", "zz:a:apr-1", "aw:a:", "aw:a:" + "x" * 64):
        assert parse_telegram_data(other) is None
    section, actions = slack_blocks("Approval needed: *bold* <https://x|y>", longest)
    assert section["text"]["type"] == "plain_text"  # the arguments format nothing, link nowhere
    assert [(e["action_id"], e["value"]) for e in actions["elements"]] == [
        ("agentwake_approve", longest),
        ("agentwake_reject", longest),
    ]


def test_buttons_are_offered_only_where_a_click_can_come_back() -> None:
    on = settings(slack_signing_secret_ref="env:AGENTWAKE_SECRET_S", slack_token_ref="env:AGENTWAKE_SECRET_BOT")
    assert offers_buttons(on, None, "slack")
    assert offers_buttons(on, "env:AGENTWAKE_SECRET_BOT", "slack")
    assert not offers_buttons(on, "env:AGENTWAKE_SECRET_OTHER_APP", "slack")  # another app: its clicks go elsewhere
    assert not offers_buttons(on, None, "telegram")
    assert not offers_buttons(settings(), None, "slack")


def test_a_body_api_gateway_passes_base64_encoded_is_verified_as_slack_signed_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a form body API Gateway hands over base64-encoded, signed over its raw bytes
    import base64

    monkeypatch.setenv("AGENTWAKE_SECRET_SIGNING", SECRET)
    on = settings(slack_signing_secret_ref="env:AGENTWAKE_SECRET_SIGNING")
    encoded = {
        "rawPath": SLACK_PATH,
        "headers": signed(at=NOW),
        "body": base64.b64encode(BODY).decode(),
        "isBase64Encoded": True,
    }
    # THEN it passes (a payload that is no button's click: answered 200, nothing read or decided)
    assert handle(encoded, on, nobody, now=lambda: NOW)["statusCode"] == 200
    # AND a body over the bound is refused before anything else
    big = {**encoded, "body": "x" * (64 * 1024 + 1), "isBase64Encoded": False}
    assert handle(big, on, nobody, now=lambda: NOW)["statusCode"] == 413
