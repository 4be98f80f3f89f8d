"""The chats' way back (ChannelCallbackFunction, ``handlers/channel_callback.py``; docs/channels.md,
"Deciding in the chat"): a person presses Approve or Reject under an approval request, and the
platform posts the click here. Two routes on the product API, the only ones without SigV4 (the
platforms cannot sign): each request is verified first, and nothing is read or decided otherwise.

- ``POST /channels/slack/interactions``: Slack's interactivity Request URL. Form-encoded
  ``payload=``; verified by ``X-Slack-Signature`` (``v0=`` HMAC-SHA256 with the app's signing secret
  over ``v0:{X-Slack-Request-Timestamp}:{raw body}``, the timestamp within 5 minutes).
- ``POST /channels/telegram/updates``: the bot's webhook (``setWebhook`` with ``secret_token``);
  verified by ``X-Telegram-Bot-Api-Secret-Token`` equal to that secret. Only ``callback_query``
  updates of our buttons are acted on.

A click decides through ``ApprovalsService.decide`` (via ``slack``/``telegram`` with a ``Click``),
which lets it decide as the token's holder only on the message the request was delivered as. Then
the platform is answered: the message shows what was decided, without its buttons; a click that
decides nothing (decided already, another message, no such request) is told why (Slack: an
ephemeral message; Telegram: the callback's answer). A request not verified is 401; a route whose
secret the stack does not have is 404. No secret, signature or body reaches a response or a log.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from agentwake.delivery.buttons import SLACK_ACTIONS, parse_telegram_data, slack_decided_blocks
from agentwake.observability import logger

if TYPE_CHECKING:
    from agentwake.product.approvals import ApprovalsService

SLACK_PATH = "/channels/slack/interactions"
TELEGRAM_PATH = "/channels/telegram/updates"
#: Slack: a request whose timestamp is further than this from now is refused (a replay)
MAX_SKEW_S = 300
#: bytes of a request body read at most (a block_actions payload is a few kB)
MAX_BODY_BYTES = 64 * 1024
#: answerCallbackQuery's text is at most 200 characters
TELEGRAM_ANSWER_CHARS = 200
TELEGRAM_TEXT_CHARS = 4096
_ID = re.compile(r"^[A-Za-z0-9._:#-]{1,128}$")
_NAME = re.compile(r"[^A-Za-z0-9._-]")


class Refused(Exception):
    """The request is not the platform's (a bad, missing or stale signature or secret): 401."""


def verify_slack(secret: str, headers: Mapping[str, str], body: bytes, *, now: float) -> None:
    """Slack's request signature (v0): raises Refused unless ``X-Slack-Signature`` is the HMAC-SHA256
    of ``v0:{timestamp}:{body}`` under ``secret`` and the timestamp is within ``MAX_SKEW_S`` of now."""
    stamp = headers.get("x-slack-request-timestamp") or ""
    given = headers.get("x-slack-signature") or ""
    if not stamp or not given:
        raise Refused("no Slack signature")
    try:
        at = int(stamp)
    except ValueError:
        raise Refused("a malformed Slack timestamp") from None
    if abs(now - at) > MAX_SKEW_S:
        raise Refused("a stale Slack timestamp")
    mac = hmac.new(secret.encode(), b"v0:" + stamp.encode() + b":" + body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(("v0=" + mac).encode(), given.encode()):
        raise Refused("a wrong Slack signature")


def verify_telegram(secret: str, headers: Mapping[str, str]) -> None:
    """Telegram's webhook secret: raises Refused unless ``X-Telegram-Bot-Api-Secret-Token`` equals it."""
    given = headers.get("x-telegram-bot-api-secret-token") or ""
    if not given or not hmac.compare_digest(given.encode(), secret.encode()):
        raise Refused("no or a wrong Telegram webhook secret")


def handle(
    event: Mapping[str, Any],
    settings: Any,
    approvals: Callable[[], ApprovalsService],
    *,
    now: Callable[[], float] = time.time,
) -> dict[str, Any]:
    """One HTTP API (payload 2.0) request to either route; the answer API Gateway returns."""
    path = str(event.get("rawPath") or "")
    headers = {str(k).lower(): str(v) for k, v in (event.get("headers") or {}).items()}
    body = _body(event)
    if body is None:
        return _answer(413, "too large")
    if path.endswith(SLACK_PATH):
        ref = settings.slack_signing_secret_ref
        platform = "slack"
    elif path.endswith(TELEGRAM_PATH):
        ref = settings.telegram_webhook_secret_ref
        platform = "telegram"
    else:
        return _answer(404, "not found")
    if not ref:
        return _answer(404, f"this stack takes no {platform} clicks (docs/channels.md)")
    from agentwake.errors import ConfigError
    from agentwake.trust.secrets import resolve_secret

    try:
        secret = resolve_secret(ref, callback=True)
    except ConfigError:
        logger.exception(f"cannot read the {platform} callback secret")
        return _answer(503, f"the {platform} callback secret cannot be read")
    try:
        if platform == "slack":
            verify_slack(secret, headers, body, now=now())
        else:
            verify_telegram(secret, headers)
    except Refused as refused:
        logger.warning(f"{platform} callback refused: {refused}")
        return _answer(401, "unauthorized")
    if platform == "slack":
        SlackClick(settings, approvals).handle(body)
    else:
        TelegramClick(settings, approvals).handle(body)
    return {"statusCode": 200, "headers": {"Content-Type": "application/json"}, "body": "{}"}


def _body(event: Mapping[str, Any]) -> bytes | None:
    raw = event.get("body") or ""
    data = base64.b64decode(raw) if event.get("isBase64Encoded") else str(raw).encode("utf-8")
    return None if len(data) > MAX_BODY_BYTES else data


def _obj(value: Any) -> dict[str, Any]:
    """A JSON object of the platform's payload, or {} for anything else."""
    return value if isinstance(value, dict) else {}


def _answer(status: int, message: str) -> dict[str, Any]:
    return {
        "statusCode": status,
        "headers": {"Content-Type": "application/json"},
        "body": json.dumps({"message": message}),
    }


def _who(platform: str, user_id: Any, username: Any) -> str:
    """``slack:U123 (@alice)``: the platform's user id and handle, bounded and inert."""
    who = f"{platform}:{_NAME.sub('', str(user_id))[:40] or '?'}"
    name = _NAME.sub("", str(username or ""))[:64]
    return f"{who} (@{name})" if name else who


#: how the chat names a decision made elsewhere: the route, never the stored principal (an IAM ARN, an
#: operator's name) that everyone in the chat would read
_ROUTES = {
    "api": "through the product API",
    "api-owner": "through the product API",
    "api-token": "through the product API",
    "cli": "by an operator",
    "console": "by an operator",
    "expiry": "by expiry (nobody decided in time)",
}


def shown_in_chat(approval: Any) -> str:
    """What the chat is told of a decision: ``approved by slack:U123 (@bob)`` for a click, else its route."""
    via = str(approval.decided_via or "")
    who = f"by {approval.decided_by}" if via in ("slack", "telegram") else _ROUTES.get(via, "elsewhere")
    return f"{approval.state} {who}"


#: a click on an unknown request and one on a message the request was not delivered as answer alike
#: (the buttons' ids are not secret: the answer must not tell whether a request exists)
NOT_HERE = "this button cannot decide that request here"


@dataclass(frozen=True)
class Outcome:
    """What a click came to: the request as it stands (None: none was found or it was refused),
    what the person is told, and whether the click's decision is the one that stands."""

    approval: Any
    said: str
    stands: bool


def _decide(approvals: Callable[[], ApprovalsService], approval_id: str, decision: str, click: Any) -> Outcome:
    """The click's decision, through the one decision path."""
    from agentwake.errors import ApprovalAlreadyDecided, ForgedDecision, UnknownApproval

    if not _ID.match(approval_id):
        return Outcome(None, "that button names no approval request", False)
    try:
        decided = approvals().decide(approval_id, decision, by=None, via=click.platform, click=click)
    except ApprovalAlreadyDecided as already:
        stood = already.approval
        said = f"already {shown_in_chat(stood)}" if stood is not None else "already decided"
        return Outcome(stood, said, False)
    except (UnknownApproval, ForgedDecision) as refused:
        logger.warning(
            "a click was refused",
            extra={"approval_id": approval_id, "via": click.platform, "why": type(refused).__name__},
        )
        return Outcome(None, NOT_HERE, False)
    logger.info("approval decided in the chat", extra={"approval_id": approval_id, "via": click.platform})
    return Outcome(decided, shown_in_chat(decided), True)


class _Platform:
    """The follow-up calls: the stack's bot, one exchange each; a failure is logged, never raised
    (the decision stands whatever the chat shows)."""

    platform = ""

    def __init__(self, settings: Any, approvals: Callable[[], ApprovalsService]) -> None:
        self.settings = settings
        self.approvals = approvals

    def _token(self) -> str | None:
        """The stack's bot token; None (logged) when it cannot be read: the decision stands unanswered."""
        from agentwake.delivery.retry import bot_token
        from agentwake.errors import ConfigError

        try:
            return bot_token(
                SimpleNamespace(settings=self.settings),
                None,
                setting=f"{self.platform}_token_ref",
                parameter=f"{self.platform.capitalize()}BotTokenSecretArn",
                shown=f"the {self.platform} callback",
            )
        except ConfigError as exc:
            logger.warning(f"the {self.platform} callback cannot answer the chat: {exc}")
            return None

    def _post(self, url: str, payload: dict[str, Any], headers: dict[str, str]) -> None:
        from agentwake.clock import SystemClock
        from agentwake.delivery.retry import RetryPolicy

        shown = f"{self.platform} callback answer"
        try:
            RetryPolicy(SystemClock(), self.platform.capitalize(), exchange_s=3.0).exchange(
                "POST",
                url,
                shown=shown,
                headers={"Content-Type": "application/json; charset=utf-8", **headers},
                body=json.dumps(payload, ensure_ascii=False).encode("utf-8"),
                settings=self.settings,
            )
        except Exception as exc:  # the decision stands; the chat shows the buttons still
            logger.warning(f"{shown}: {type(exc).__name__}: {exc}")


class SlackClick(_Platform):
    platform = "slack"

    def handle(self, body: bytes) -> None:
        from agentwake.product.approvals import Click

        try:
            payload = json.loads(urllib.parse.parse_qs(body.decode("utf-8")).get("payload", [""])[0])
        except (ValueError, UnicodeDecodeError):
            return
        if not isinstance(payload, dict) or payload.get("type") != "block_actions":
            return
        action = next(
            (a for a in payload.get("actions") or () if isinstance(a, dict) and a.get("action_id") in SLACK_ACTIONS),
            None,
        )
        if action is None:
            return
        container = _obj(payload.get("container"))
        channel = str(_obj(payload.get("channel")).get("id") or container.get("channel_id") or "")
        ts = str(container.get("message_ts") or _obj(payload.get("message")).get("ts") or "")
        user = _obj(payload.get("user"))
        who = _who("slack", user.get("id"), user.get("username") or user.get("name"))
        click = Click(platform="slack", where=channel, message=ts, user=who)
        done = _decide(self.approvals, str(action.get("value") or ""), SLACK_ACTIONS[action["action_id"]], click)
        token = self._token()
        if token is None:
            return
        base = str(self.settings.slack_api_url).rstrip("/") + "/"
        auth = {"Authorization": f"Bearer {token}"}
        if done.approval is not None and not done.approval.pending:
            # the message shows the decision that stands, its buttons gone
            text = str(_obj(payload.get("message")).get("text") or "")
            shown = shown_in_chat(done.approval)
            self._post(
                base + "chat.update",
                {"channel": channel, "ts": ts, "text": f"{text}\n{shown}", "blocks": slack_decided_blocks(text, shown)},
                auth,
            )
        if not done.stands:  # told only to the one who clicked
            self._post(
                base + "chat.postEphemeral",
                {"channel": channel, "user": str(user.get("id") or ""), "text": done.said},
                auth,
            )


class TelegramClick(_Platform):
    platform = "telegram"

    def handle(self, body: bytes) -> None:
        from agentwake.product.approvals import Click

        try:
            update = json.loads(body)
        except ValueError:
            return
        query = update.get("callback_query") if isinstance(update, dict) else None
        if not isinstance(query, dict) or not query.get("id"):
            return  # not a button: the bot's other updates are not agentwake's
        token = self._token()
        if token is None:
            return
        base = f"{str(self.settings.telegram_api_url).rstrip('/')}/bot{token}/"
        parsed = parse_telegram_data(query.get("data"))
        if parsed is None:
            self._post(base + "answerCallbackQuery", {"callback_query_id": str(query["id"])[:64]}, {})
            return
        message = _obj(query.get("message"))
        chat = _obj(message.get("chat"))
        sender = _obj(query.get("from"))
        click = Click(
            platform="telegram",
            where=str(chat.get("id") or ""),
            message=str(message.get("message_id") or ""),
            user=_who("telegram", sender.get("id"), sender.get("username")),
        )
        decision, approval_id = parsed
        done = _decide(self.approvals, approval_id, decision, click)
        if done.approval is not None and not done.approval.pending:
            # the message shows the decision that stands; an edit without reply_markup drops the keyboard
            text = str(message.get("text") or "")
            shown = shown_in_chat(done.approval)
            self._post(
                base + "editMessageText",
                {
                    "chat_id": chat.get("id"),
                    "message_id": message.get("message_id"),
                    "text": f"{text}\n\n{shown}"[:TELEGRAM_TEXT_CHARS],
                },
                {},
            )
        answer: dict[str, Any] = {"callback_query_id": str(query["id"])[:64], "text": done.said[:TELEGRAM_ANSWER_CHARS]}
        if not done.stands:
            answer["show_alert"] = True
        self._post(base + "answerCallbackQuery", answer, {})
