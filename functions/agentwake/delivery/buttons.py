"""Approve/Reject buttons under an approval request in a chat (issue 35; docs/channels.md, "Deciding in
the chat"): Slack Block Kit and Telegram inline keyboards, both sides of them — what the channel
adapters post, and what the callback endpoint (``product/channel_callback.py``) reads back.

A button carries the request's id and the decision, never its token: a click decides as the token's
holder would only because the callback endpoint checks that it was pressed on the very message the
request was delivered as (its channel or chat and its ``ts``/``message_id``, from the delivery's
receipt). Buttons are offered only where a click can come back: the stack has the callback's secret
(``slack_signing_secret_ref``, ``telegram_webhook_secret_ref``) and the channel posts with the stack's
bot (a session's own ``token_ref`` is another app or bot, whose clicks this stack cannot verify).
"""

from __future__ import annotations

from typing import Any, Literal

#: Slack ``action_id`` → the decision
SLACK_ACTIONS: dict[str, Literal["approve", "reject"]] = {
    "agentwake_approve": "approve",
    "agentwake_reject": "reject",
}
#: the actions block's id (a request's message holds one)
SLACK_BLOCK_ID = "agentwake_approval"
#: a section's text is at most 3000 characters
SLACK_SECTION_CHARS = 3000
#: Telegram ``callback_data`` ``aw:a:{approval_id}`` / ``aw:r:{approval_id}`` (at most 64 bytes)
TELEGRAM_PREFIX = "aw"
TELEGRAM_DATA_BYTES = 64
_TELEGRAM_DECISIONS: dict[str, Literal["approve", "reject"]] = {"a": "approve", "r": "reject"}


def offers_buttons(settings: Any, token_ref: str | None, platform: Literal["slack", "telegram"]) -> bool:
    """Whether a request posted through this channel gets buttons: the stack takes the clicks back,
    and the channel posts with the stack's bot."""
    secret = getattr(settings, f"{platform}_{'signing' if platform == 'slack' else 'webhook'}_secret_ref", None)
    stack_token = getattr(settings, f"{platform}_token_ref", None)
    return bool(secret) and (token_ref is None or token_ref == stack_token)


def slack_blocks(text: str, approval_id: str) -> list[dict[str, Any]]:
    """The request's text (plain text: nothing in the arguments formats or links) and its buttons."""
    return [
        {"type": "section", "text": {"type": "plain_text", "text": _cut(text, SLACK_SECTION_CHARS), "emoji": False}},
        {
            "type": "actions",
            "block_id": SLACK_BLOCK_ID,
            "elements": [
                _slack_button("Approve", "agentwake_approve", approval_id, "primary"),
                _slack_button("Reject", "agentwake_reject", approval_id, "danger"),
            ],
        },
    ]


def slack_decided_blocks(text: str, said: str) -> list[dict[str, Any]]:
    """The request's message once decided: its text and what was decided, no buttons."""
    return [
        {"type": "section", "text": {"type": "plain_text", "text": _cut(text, SLACK_SECTION_CHARS), "emoji": False}},
        {"type": "context", "elements": [{"type": "plain_text", "text": _cut(said, 2000), "emoji": False}]},
    ]


def _slack_button(label: str, action_id: str, approval_id: str, style: str) -> dict[str, Any]:
    return {
        "type": "button",
        "action_id": action_id,
        "text": {"type": "plain_text", "text": label},
        "value": approval_id,
        "style": style,
    }


def telegram_data(decision: Literal["approve", "reject"], approval_id: str) -> str:
    data = f"{TELEGRAM_PREFIX}:{decision[0]}:{approval_id}"
    if len(data.encode()) > TELEGRAM_DATA_BYTES:
        raise ValueError(f"callback_data over {TELEGRAM_DATA_BYTES} bytes for approval {approval_id[:80]}")
    return data


def telegram_keyboard(approval_id: str) -> dict[str, Any]:
    """``reply_markup``: one row, Approve and Reject."""
    return {
        "inline_keyboard": [
            [
                {"text": "Approve", "callback_data": telegram_data("approve", approval_id)},
                {"text": "Reject", "callback_data": telegram_data("reject", approval_id)},
            ]
        ]
    }


def parse_telegram_data(data: Any) -> tuple[Literal["approve", "reject"], str] | None:
    """``(decision, approval_id)`` of one of our buttons' ``callback_data``; None for anything else."""
    if not isinstance(data, str) or len(data.encode()) > TELEGRAM_DATA_BYTES:
        return None
    prefix, _, rest = data.partition(":")
    letter, _, approval_id = rest.partition(":")
    decision = _TELEGRAM_DECISIONS.get(letter)
    if prefix != TELEGRAM_PREFIX or decision is None or not approval_id:
        return None
    return decision, approval_id


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
