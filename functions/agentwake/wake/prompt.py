"""The wake prompt (DESIGN §2): persona + what woke the agent + rules, the history window, a user turn."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from agentwake.agent.types import Message

WakeKind = Literal["cron", "background"]

_RULES = {
    "cron": "You were woken by a schedule (a cron job came due), not by the user.",
    "background": "You were woken because a background task you started has finished, not by the user.",
}

COMMON_RULES = (
    "Do not greet the user. If you write to them, say briefly why you are writing. "
    "The only way to reach the user is the send_message_to_user tool; your final answer is "
    "recorded in the conversation history but not shown to them."
)

USER_TURN = {
    "cron": "The scheduled job above is due. Act on it now.",
    "background": "The background task above has finished. Act on its result now.",
}


def build_wake_messages(
    *,
    persona: str,
    kind: WakeKind,
    wake: dict[str, Any],
    history: Sequence[Message],
) -> list[Message]:
    """System prompt, then the history window as real messages (oldest first), then the wake turn."""
    system = "\n\n".join(
        part
        for part in (
            persona.strip(),
            _RULES[kind] + " " + COMMON_RULES,
            "What woke you:\n" + json.dumps(wake, ensure_ascii=False, indent=2, default=str),
        )
        if part
    )
    return [Message(role="system", content=system), *history, Message(role="user", content=USER_TURN[kind])]
