"""Deciding in the chat (issue 35, "the person is asked where they are"): an approval request posted to
Slack or Telegram carries Approve/Reject buttons; a click comes back to the callback endpoint
(``product/channel_callback.py``), verified by the platform's secret, and decides through the one
decision path — only on the message the request was delivered as.

Real moto and the real wake and handlers (tests/integration/test_approvals.py's ``Stack``); Slack and
Telegram are the fakes on 127.0.0.1 (tests/support/fake_slack.py, fake_telegram.py); the gated tool is
a server on 127.0.0.1 counting its calls."""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from agentwake import bootstrap
from agentwake.domain.steps import tool_key
from agentwake.product.channel_callback import NOT_HERE, SLACK_PATH, TELEGRAM_PATH, handle
from agentwake.settings import Settings
from agentwake.store.dynamo import DynamoStore
from tests.integration.test_approvals import APPROVAL, FILES_A_TICKET, RUN, Stack, ToolServer, resume_all, ticket_tool
from tests.support.aws import Resources
from tests.support.builders import PRODUCT_CALLER, seed_session, seed_task
from tests.support.fake_slack import FakeSlack
from tests.support.fake_telegram import FakeTelegram

SIGNING_SECRET = "5c1e0d2b7a9f4e3c8b6a1d0e9f2c3b4a"
WEBHOOK_SECRET = "tg-webhook-Secret_0123456789"
CHANNEL = "C0APPROVE1"
CHAT = 424242


@pytest.fixture
def tool() -> Iterator[ToolServer]:
    server = ToolServer()
    yield server
    server.close()


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    with FakeSlack() as server:
        yield server


@pytest.fixture
def telegram() -> Iterator[FakeTelegram]:
    with FakeTelegram() as server:
        yield server


@pytest.fixture
def stack(
    store: DynamoStore,
    resources: Resources,
    monkeypatch: pytest.MonkeyPatch,
    slack: FakeSlack,
    telegram: FakeTelegram,
) -> Stack:
    """The stack with both chats' bots and both callback secrets (``env:`` refs, as the local stack's)."""
    for name, value in {
        "AGENTWAKE_SLACK_API_URL": slack.url,
        "AGENTWAKE_SLACK_TOKEN_REF": "env:AGENTWAKE_SECRET_SLACK_BOT",
        "AGENTWAKE_SECRET_SLACK_BOT": slack.token,
        "AGENTWAKE_SLACK_SIGNING_SECRET_REF": "env:AGENTWAKE_SECRET_SLACK_SIGNING",
        "AGENTWAKE_SECRET_SLACK_SIGNING": SIGNING_SECRET,
        "AGENTWAKE_TELEGRAM_API_URL": telegram.url,
        "AGENTWAKE_TELEGRAM_TOKEN_REF": "env:AGENTWAKE_SECRET_TELEGRAM_BOT",
        "AGENTWAKE_SECRET_TELEGRAM_BOT": telegram.token,
        "AGENTWAKE_TELEGRAM_WEBHOOK_SECRET_REF": "env:AGENTWAKE_SECRET_TELEGRAM_WEBHOOK",
        "AGENTWAKE_SECRET_TELEGRAM_WEBHOOK": WEBHOOK_SECRET,
    }.items():
        monkeypatch.setenv(name, value)
    made = Stack(store, resources)
    monkeypatch.setattr(bootstrap.root(), "wake_deps", made.deps)
    return made


def parked_in(stack: Stack, tool: ToolServer, delivery: dict[str, Any], *, approval: Any = "always") -> None:
    seed_session(
        stack.store,
        "s1",
        providers=[{"type": "scripted", "id": "p", "script": FILES_A_TICKET}],
        tools=[ticket_tool(tool.url, approval)],
        delivery=delivery,
    )
    seed_task(stack.store, "t1", "s1")
    assert stack.wake() == {"batchItemFailures": []}
    run = stack.store.records.get_run(RUN)
    assert run is not None and run.status == "parked", run


def callback(stack: Stack, path: str, body: bytes, headers: dict[str, str]) -> dict[str, Any]:
    """The endpoint as API Gateway invokes it (payload 2.0), over the stack's settings and service."""
    event = {"rawPath": path, "headers": headers, "body": body.decode(), "isBase64Encoded": False}
    return handle(event, Settings.from_env(), lambda: stack.approvals)


# --- Slack --------------------------------------------------------------------------------------


def click_payload(message: dict[str, Any], action: str, *, channel: str = CHANNEL, user: str = "U0BOB") -> bytes:
    """A block_actions payload as Slack posts it (form-encoded ``payload=``)."""
    button = next(
        e for b in message["blocks"] if b["type"] == "actions" for e in b["elements"] if e["action_id"] == action
    )
    payload = {
        "type": "block_actions",
        "user": {"id": user, "username": "bob", "name": "bob"},
        "container": {"type": "message", "message_ts": message["ts"], "channel_id": channel},
        "channel": {"id": channel, "name": "approvals"},
        "message": {"ts": message["ts"], "text": message["text"]},
        "actions": [
            {"type": "button", "action_id": action, "block_id": "agentwake_approval", "value": button["value"]}
        ],
        "response_url": "https://hooks.slack.invalid/actions/1",
    }
    return urllib.parse.urlencode({"payload": json.dumps(payload)}).encode()


def slack_signed(body: bytes, *, secret: str = SIGNING_SECRET, at: float | None = None) -> dict[str, str]:
    stamp = str(int(time.time() if at is None else at))
    mac = hmac.new(secret.encode(), f"v0:{stamp}:".encode() + body, hashlib.sha256).hexdigest()
    return {
        "content-type": "application/x-www-form-urlencoded",
        "x-slack-request-timestamp": stamp,
        "x-slack-signature": f"v0={mac}",
    }


def test_slack_a_signed_click_approves_the_run_resumes_and_the_tool_runs_once(
    stack: Stack, tool: ToolServer, slack: FakeSlack, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a run parked on its gated call, the session's channel Slack
    parked_in(stack, tool, {"type": "slack", "channel": CHANNEL})
    # THEN the request was posted once, with its text and Approve/Reject carrying the id, never the token
    (message,) = copy.deepcopy(slack.messages)  # as posted (the fake updates its own copy)
    section, actions = message["blocks"]
    assert section["text"]["text"] == message["text"] and APPROVAL in message["text"]
    assert [(e["action_id"], e["value"]) for e in actions["elements"]] == [
        ("agentwake_approve", APPROVAL),
        ("agentwake_reject", APPROVAL),
    ]
    (post,) = [args for method, args in slack.requests if method == "chat.postMessage"]
    assert "token" not in json.dumps(post["blocks"]) and stack.approval().token_sha256 not in json.dumps(post)

    # WHEN a click comes with a bad signature, a stale one, none
    body = click_payload(message, "agentwake_approve")
    refused = [
        callback(stack, SLACK_PATH, body, slack_signed(body, secret="not-the-apps-secret")),
        callback(stack, SLACK_PATH, body, slack_signed(body, at=time.time() - 600)),
        callback(stack, SLACK_PATH, body, {"content-type": "application/x-www-form-urlencoded"}),
    ]
    # THEN each is 401 and nothing is decided
    assert [a["statusCode"] for a in refused] == [401, 401, 401]
    assert stack.approval().pending and stack.nudges() == []

    # WHEN the same button is pressed on another channel's copy, or on another message of the channel
    elsewhere = click_payload(message, "agentwake_approve", channel="C0ELSEWHERE")
    other_ts = click_payload({**message, "ts": "1700000000.000001"}, "agentwake_approve")
    for forged in (elsewhere, other_ts):
        assert callback(stack, SLACK_PATH, forged, slack_signed(forged))["statusCode"] == 200
    # THEN nothing is decided; the one who clicked is told why, only them
    assert stack.approval().pending and stack.nudges() == []
    assert [e["user"] for e in slack.ephemeral] == ["U0BOB", "U0BOB"]
    assert all(e["text"] == NOT_HERE for e in slack.ephemeral)

    # WHEN Bob presses Approve on the request's message
    answer = callback(stack, SLACK_PATH, body, slack_signed(body))
    assert answer["statusCode"] == 200
    # THEN it is approved by Bob, through the chat, once; the message shows it, its buttons gone
    decided = stack.approval()
    assert (decided.state, decided.decided_by, decided.decided_via) == ("approved", "slack:U0BOB (@bob)", "slack")
    assert len(stack.nudges()) == 1
    assert [b["type"] for b in slack.messages[0]["blocks"]] == ["section", "context"]
    assert "approved by slack:U0BOB (@bob)" in slack.messages[0]["text"]
    # AND the run resumes: the gated tool is called exactly once, the run succeeds
    resume_all(stack)
    assert tool.calls == Counter({f"{RUN}#0#0": 1})
    run = stack.store.records.get_run(RUN)
    assert run is not None and run.status == "succeeded"

    # WHEN someone presses Reject afterwards
    late = click_payload(message, "agentwake_reject", user="U0EVE")
    assert callback(stack, SLACK_PATH, late, slack_signed(late))["statusCode"] == 200
    # THEN it stays approved, the tool is not called again, and Eve is told what was decided
    assert stack.approval().state == "approved" and tool.calls == Counter({f"{RUN}#0#0": 1})
    assert (
        slack.ephemeral[-1]["user"] == "U0EVE"
        and "already approved by slack:U0BOB (@bob)" in slack.ephemeral[-1]["text"]
    )
    # AND neither the signing secret nor the bot token is in any answer or log line
    said = json.dumps([*refused, answer]) + capsys.readouterr().out
    assert SIGNING_SECRET not in said and slack.token not in said


def test_slack_no_signing_secret_no_buttons(
    stack: Stack, tool: ToolServer, slack: FakeSlack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a stack without the Slack app's signing secret: a click could not come back
    monkeypatch.delenv("AGENTWAKE_SLACK_SIGNING_SECRET_REF")
    stack.deps.settings = Settings.from_env()
    parked_in(stack, tool, {"type": "slack", "channel": CHANNEL})
    # THEN the request is the text alone, and the route answers 404
    (message,) = slack.messages
    assert "blocks" not in message and APPROVAL in message["text"]
    body = click_payload(
        {
            **message,
            "blocks": [{"type": "actions", "elements": [{"action_id": "agentwake_approve", "value": APPROVAL}]}],
        },
        "agentwake_approve",
    )
    assert callback(stack, SLACK_PATH, body, slack_signed(body))["statusCode"] == 404
    assert stack.approval().pending


def test_a_click_after_an_owners_decision_is_told_its_route_never_the_owners_principal(
    stack: Stack, tool: ToolServer, slack: FakeSlack
) -> None:
    # GIVEN a request posted to Slack that the session's owner rejected through the product API
    parked_in(stack, tool, {"type": "slack", "channel": CHANNEL})
    (message,) = copy.deepcopy(slack.messages)
    stack.approvals.decide(APPROVAL, "reject", by=None, via="api", principal=PRODUCT_CALLER)
    # WHEN Bob presses Approve in the chat
    body = click_payload(message, "agentwake_approve")
    assert callback(stack, SLACK_PATH, body, slack_signed(body))["statusCode"] == 200
    # THEN it stays rejected; the chat shows how it was decided, never who the owner is in AWS
    assert stack.approval().state == "rejected"
    shown = [slack.messages[0]["text"], slack.ephemeral[-1]["text"]]
    assert "rejected through the product API" in shown[0] and "already rejected through the product API" in shown[1]
    assert not any(PRODUCT_CALLER in text or "arn:aws" in text for text in shown), shown


# --- Telegram -----------------------------------------------------------------------------------


def update(message: dict[str, Any], data: str, *, chat: int = CHAT, sender: int = 777) -> bytes:
    """A callback_query update as Telegram posts it to the webhook."""
    return json.dumps(
        {
            "update_id": 90001,
            "callback_query": {
                "id": "cbq-1",
                "from": {"id": sender, "is_bot": False, "first_name": "Carol", "username": "carol"},
                "message": {
                    "message_id": message["message_id"],
                    "chat": {"id": chat, "type": "private"},
                    "date": 1_800_000_000,
                    "text": message["text"],
                },
                "chat_instance": "-1",
                "data": data,
            },
        }
    ).encode()


def from_telegram(secret: str = WEBHOOK_SECRET) -> dict[str, str]:
    return {"content-type": "application/json", "x-telegram-bot-api-secret-token": secret}


def test_telegram_a_click_rejects_and_the_model_reads_who_rejected_it(
    stack: Stack, tool: ToolServer, telegram: FakeTelegram, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a run parked on its gated call, the session's channel a Telegram chat
    parked_in(stack, tool, {"type": "telegram", "chat_id": CHAT})
    # THEN the request carries an inline keyboard naming the request, never its token
    (message,) = copy.deepcopy(telegram.messages)  # as sent (the fake edits its own copy)
    (row,) = message["reply_markup"]["inline_keyboard"]
    assert [(b["text"], b["callback_data"]) for b in row] == [
        ("Approve", f"aw:a:{APPROVAL}"),
        ("Reject", f"aw:r:{APPROVAL}"),
    ]

    # WHEN an update comes without the webhook secret, or with another
    body = update(message, f"aw:r:{APPROVAL}")
    assert callback(stack, TELEGRAM_PATH, body, from_telegram("guess"))["statusCode"] == 401
    assert callback(stack, TELEGRAM_PATH, body, {"content-type": "application/json"})["statusCode"] == 401
    # AND the same button's data from another chat, and from another message of this chat
    other_chat = update(message, f"aw:r:{APPROVAL}", chat=-100999)
    other_message = update({**message, "message_id": message["message_id"] + 1}, f"aw:r:{APPROVAL}")
    for forged in (other_chat, other_message):
        assert callback(stack, TELEGRAM_PATH, forged, from_telegram())["statusCode"] == 200
    # THEN nothing is decided; the clicks are answered with why, as an alert
    assert stack.approval().pending and stack.nudges() == []
    assert [a.get("show_alert") for a in telegram.answers] == [True, True]

    # WHEN Carol presses Reject on the request's message
    assert callback(stack, TELEGRAM_PATH, body, from_telegram())["statusCode"] == 200
    # THEN it is rejected by her, the message says so without its keyboard, the click is answered
    decided = stack.approval()
    assert (decided.state, decided.decided_by, decided.decided_via) == ("rejected", "telegram:777 (@carol)", "telegram")
    assert (
        "reply_markup" not in telegram.messages[0]
        and "rejected by telegram:777 (@carol)" in telegram.messages[0]["text"]
    )
    assert telegram.answers[-1] == {"callback_query_id": "cbq-1", "text": "rejected by telegram:777 (@carol)"}
    # AND the run resumes; the model reads who rejected it; the tool was never called
    resume_all(stack)
    assert tool.calls == Counter()
    step = stack.store.journals.journal_entries(RUN)[tool_key(0, 0)]
    assert step["content"] == "not run: telegram:777 (@carol) rejected this call (no reason given)"
    run = stack.store.records.get_run(RUN)
    assert run is not None and run.status == "succeeded"

    # WHEN Approve is pressed after the rejection
    assert callback(stack, TELEGRAM_PATH, update(message, f"aw:a:{APPROVAL}"), from_telegram())["statusCode"] == 200
    # THEN it stays rejected and the click is told so
    assert stack.approval().state == "rejected" and tool.calls == Counter()
    assert "already rejected by telegram:777 (@carol)" in telegram.answers[-1]["text"]
    assert telegram.answers[-1]["show_alert"] is True
    # AND neither the webhook secret nor the bot token is in any log line
    out = capsys.readouterr().out
    assert WEBHOOK_SECRET not in out and telegram.token not in out


def test_telegram_a_click_on_a_request_only_owners_may_decide_decides_nothing(
    stack: Stack, tool: ToolServer, telegram: FakeTelegram
) -> None:
    # GIVEN a request whose rule lets only the session's owners decide (not the token's holder)
    parked_in(stack, tool, {"type": "telegram", "chat_id": CHAT}, approval={"deciders": ["owners"]})
    (message,) = telegram.messages
    # WHEN its Approve is pressed where it was delivered
    assert callback(stack, TELEGRAM_PATH, update(message, f"aw:a:{APPROVAL}"), from_telegram())["statusCode"] == 200
    # THEN nothing is decided and the click is told why
    assert stack.approval().pending and stack.nudges() == []
    assert telegram.answers[-1]["text"] == NOT_HERE


def test_telegram_other_updates_and_unknown_requests_are_answered_politely(
    stack: Stack, tool: ToolServer, telegram: FakeTelegram
) -> None:
    parked_in(stack, tool, {"type": "telegram", "chat_id": CHAT})
    (message,) = telegram.messages
    # a plain message to the bot: not ours, nothing answered
    plain = json.dumps({"update_id": 1, "message": {"message_id": 5, "chat": {"id": CHAT}, "text": "hi"}}).encode()
    assert callback(stack, TELEGRAM_PATH, plain, from_telegram())["statusCode"] == 200
    assert telegram.answers == []
    # a button of a request that does not exist: told so
    ghost = update(message, "aw:a:apr-000000000000000000000000")
    assert callback(stack, TELEGRAM_PATH, ghost, from_telegram())["statusCode"] == 200
    assert telegram.answers[-1]["text"] == NOT_HERE
    assert stack.approval().pending
