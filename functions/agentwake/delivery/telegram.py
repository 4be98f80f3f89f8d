"""The ``telegram`` channel: the Bot API's ``sendMessage`` to a chat, answered by the message's
``message_id`` (docs/channels.md, design §4-5).

The bot token sits in the request's URL path (``{base}bot{token}/sendMessage``), and the exchange's
own errors name their URL: this module registers the token with the redactor and never lets the
URL reach a text. It names its target ``telegram chat <id>``; the retry policy builds every
failure itself, with no chained exception that holds the URL.

Exactly once: the Bot API has no idempotency key and no way to read what a bot sent
(``confirms = "none"``). After a crash between a send and its journal write, the core's intent sends
the delivery to the DLQ (``unconfirmed: dead_letter``, the default) or resends it (``resend``).

Answers, classified once here: 429 with ``parameters.retry_after`` → the retry policy's wait; 400
``chat not found``, 403 (the bot blocked or removed), 401/404 (the token revoked or wrong), 400 with
``parameters.migrate_to_chat_id`` (the group became a supergroup: the new id is named) →
``ChannelRefused``; a 5xx whose body is the Bot API's ``{"ok": false}`` → certainly not sent,
retried shortly then ``ChannelUnavailable``; a 5xx without it, a timeout or a reset after the request
went out → ``DeliveryUncertain``.

An approval request carries an inline keyboard (``delivery/buttons.py``) where the stack takes the
clicks back (``TelegramWebhookSecretArn``) and the chat id is a number.

What the core calls: ``where`` and ``probe(delivery)`` (``chat_id``, ``message_thread_id?``: what an
operator checks) for the intent, then ``send(delivery)``; ``unconfirmed`` says what an intent in
doubt becomes. There is no ``find``.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from agentwake.delivery import Delivery, Receipt
from agentwake.delivery.buttons import offers_buttons, telegram_keyboard
from agentwake.delivery.kit import ChannelKit
from agentwake.delivery.retry import (
    NotSent,
    RetryPolicy,
    Throttled,
    bot_token,
    cut,
    platform_base,
    retry_after_header,
    utf16_units,
)
from agentwake.errors import ChannelRefused, DeliveryUncertain
from agentwake.trust.redact import redact

#: sendMessage's text limit (1-4096 characters after entities parsing, counted in UTF-16 code units)
MAX_TEXT = 4096
#: characters of Telegram's error description kept in a failure text
_DESCRIPTION_CHARS = 200
_FIX_TOKEN = (
    "put the bot's current token (from @BotFather) in the secret the stack parameter "
    "TelegramBotTokenSecretArn names (or the channel's token_ref)"
)


class TelegramChannel:
    """Send a delivery to one Telegram chat; answer its ``message_id`` as the receipt."""

    confirms: ClassVar[str] = "none"

    def __init__(self, spec: Any, kit: ChannelKit) -> None:
        self.spec = spec
        self.name = spec.target()
        self.kit = kit
        #: after a crash in doubt: ``dead_letter`` (ask an operator) or ``resend``
        self.unconfirmed = spec.unconfirmed
        self._base = platform_base(kit, "telegram_api_url", "Telegram", "https://api.telegram.org/")
        self._token = bot_token(
            kit,
            spec.token_ref,
            setting="telegram_token_ref",
            parameter="TelegramBotTokenSecretArn",
            shown=self.shown,
        )
        self._policy = RetryPolicy(kit.clock, "Telegram")

    def __repr__(self) -> str:  # never the token, nor the URL that holds it
        return f"TelegramChannel(chat_id={self.spec.chat_id!r})"

    @property
    def shown(self) -> str:
        return f"telegram chat {self.spec.chat_id}"

    @property
    def where(self) -> str:
        """The chat id, as the intent and the receipt keep it."""
        return str(self.spec.chat_id)

    def probe(self, delivery: Delivery) -> dict[str, str]:
        """What an operator needs to check the chat after a crash in doubt (Telegram has no lookup):
        the chat and the thread. Stored in the intent (``probe``) just before the send."""
        out = {"chat_id": str(self.spec.chat_id)}
        if self.spec.message_thread_id is not None:
            out["message_thread_id"] = str(self.spec.message_thread_id)
        return out

    def send(self, delivery: Delivery) -> Receipt:
        payload: dict[str, Any] = {
            "chat_id": self.spec.chat_id,
            "text": cut(delivery.text, MAX_TEXT, units=utf16_units),
        }
        if self.spec.message_thread_id is not None:
            payload["message_thread_id"] = self.spec.message_thread_id
        approval_id = (delivery.approval or {}).get("approval_id")
        if (
            approval_id
            and isinstance(self.spec.chat_id, int)  # a click names its chat by number
            and offers_buttons(self.kit.settings, self.spec.token_ref, "telegram")
        ):
            # an approval request: Approve/Reject under it (the id only, never the token)
            payload["reply_markup"] = telegram_keyboard(str(approval_id))
        body = json.dumps(payload, ensure_ascii=False).encode("utf-8")

        def once() -> Receipt:
            response = self._policy.exchange(
                "POST",
                f"{self._base}bot{self._token}/sendMessage",
                shown=self.shown,
                headers={"Content-Type": "application/json", "User-Agent": "agentwake-telegram/1"},
                body=body,
                settings=self.kit.settings,
            )
            result = self._answer(response, delivery)
            message_id = result.get("message_id") if isinstance(result, dict) else None
            if not isinstance(message_id, int) or isinstance(message_id, bool):
                raise DeliveryUncertain(
                    f"Telegram answered ok for {self.shown} without a message_id; it may have arrived"
                )
            return Receipt(channel="telegram", target=self.name, where=self.where, ids=(str(message_id),))

        return self._policy.call(once, shown=self.shown)

    def _answer(self, response: Any, delivery: Delivery) -> Any:
        """The ``result`` of an ``ok`` answer; else the failure, classified once."""
        status = response.status
        try:
            answer = json.loads(response.body)
        except (ValueError, RecursionError):
            answer = None
        if not isinstance(answer, dict) or "ok" not in answer:
            if status == 429:
                raise Throttled(retry_after_header(response.headers))
            if 200 <= status < 300 or status >= 500:
                # not the Bot API's own answer (a proxy's 502 page): it cannot tell whether it went
                raise DeliveryUncertain(
                    f"Telegram answered HTTP {status} for {self.shown} without its JSON answer; it may have arrived"
                )
            raise ChannelRefused(
                f"Telegram: HTTP {status} for {self.shown} without its JSON answer: check the stack's "
                "AGENTWAKE_TELEGRAM_API_URL"
            )
        if answer.get("ok") is True:
            return answer.get("result")
        raw_code = answer.get("error_code")
        code = raw_code if isinstance(raw_code, int) and not isinstance(raw_code, bool) else status
        description = redact(str(answer.get("description") or ""))[:_DESCRIPTION_CHARS]
        raw_parameters = answer.get("parameters")
        parameters: dict[str, Any] = raw_parameters if isinstance(raw_parameters, dict) else {}
        retry_after = parameters.get("retry_after")
        if code == 429 or status == 429:
            if isinstance(retry_after, int | float) and not isinstance(retry_after, bool):
                raise Throttled(float(retry_after))
            raise Throttled(retry_after_header(response.headers))
        if code >= 500 or status >= 500:
            raise NotSent(f"{code} {description}".strip())  # the Bot API's own "failed": nothing sent
        raise ChannelRefused(redact(self._refusal(code, description, parameters, delivery)))

    def _refusal(self, code: int, description: str, parameters: dict[str, Any], delivery: Delivery) -> str:
        change = f'agentwake sessions put {delivery.session_id} --delivery \'{{"type":"telegram","chat_id":…}}\''
        said = f"{code} {description!r}" if description else str(code)
        low = description.lower()
        migrated = parameters.get("migrate_to_chat_id")
        if isinstance(migrated, int) and not isinstance(migrated, bool):
            return (
                f"Telegram: {said} for {self.shown}: the group became a supergroup: use chat id {migrated}: "
                f"agentwake sessions put {delivery.session_id} --delivery "
                f'\'{{"type":"telegram","chat_id":{migrated}}}\''
            )
        if code in (401, 404):
            return f"Telegram: {said} for {self.shown}: the bot token was refused (revoked or wrong): {_FIX_TOKEN}"
        if code == 403:
            if "blocked" in low:
                todo = "the user blocked the bot: they can unblock it"
            elif "kicked" in low or "not a member" in low:
                todo = "add the bot to the chat again"
            else:
                todo = "the bot may not write to this chat"
            return f"Telegram: {said} for {self.shown}: {todo}, or change the session's delivery: {change}"
        if "chat not found" in low:
            return (
                f"Telegram: {said} for {self.shown}: check the chat id (a user must have started the bot; a group "
                f"must have it as a member), or change the session's delivery: {change}"
            )
        if "thread not found" in low:
            return f"Telegram: {said} for {self.shown}: the topic is gone: remove message_thread_id: {change}"
        return f"Telegram: {said} for {self.shown}: fix the channel's config: {change}"
