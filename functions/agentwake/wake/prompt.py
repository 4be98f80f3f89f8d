"""The wake prompt (DESIGN §2): persona + what woke the agent + rules, the history window, a user turn.

It stays honest about what the user sees: whether the final answer reaches them (the session's
``deliver_final``) and how many messages the run may still send under its caps. Deliveries this
run already made (an earlier attempt's) come back as the replayed steps that made them.

``WakePrompt`` is the agent's prompt port (``agent.woken.Prompt``): the wake gives it what woke the
run and the history; the agent, which keeps the run's caps, asks it for the messages with what the
run may still send.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agentwake.domain.conversation import Message

WakeKind = Literal["cron", "background"]

_RULES = {
    "cron": "You were woken by a schedule (a cron job came due), not by the user.",
    "background": "You were woken because a background task you started has finished, not by the user.",
}

COMMON_RULES = "Do not greet the user. If you write to them, say briefly why you are writing."

FINAL_ANSWER_RULES = {
    "never": (
        "The only way to reach the user is the send_message_to_user tool; your final answer is "
        "recorded in the conversation history but not shown to them."
    ),
    "if_nothing_sent": (
        "Reach the user with the send_message_to_user tool. If you send nothing, your final answer "
        "is sent to the user as your message; if you do send something, your final answer is only "
        "recorded in the conversation history."
    ),
    "always": (
        "Your final answer is sent to the user at the end of this run, after anything you send with "
        "the send_message_to_user tool: do not send the same thing twice."
    ),
}

USER_TURN = {
    "cron": "The scheduled job above is due. Act on it now.",
    "background": "The background task above has finished. Act on its result now.",
}

#: a background task whose outcome is not a plain success is never called "finished" (the reference
#: bug: a failure presented as a result); the rule and the user turn say what happened instead
_BACKGROUND_CASES = {
    "failed": (
        "You were woken because a background task you started has failed, not by the user. Its work did "
        "not succeed: never present it as done or as a result.",
        "The background task above failed (its reason is in the wake). Tell the user what failed if it "
        "matters to them, and what you will do about it.",
    ),
    "redriven": (
        "You were woken because a background task you started succeeded after a redrive (it had failed "
        "before, and you may have told the user so), not by the user.",
        "The background task above succeeded after a redrive. Act on its result now; if you told the user "
        "it had failed, say that it succeeded after all.",
    ),
}


def _rule_and_turn(kind: WakeKind, wake: dict[str, Any]) -> tuple[str, str]:
    if kind == "background":
        case = "failed" if wake.get("status") == "failed" else "redriven" if (wake.get("outcome") or 1) > 1 else None
        if case is not None:
            return _BACKGROUND_CASES[case]
    return _RULES[kind], USER_TURN[kind]


def deliveries_rule(left: int | None, made: int) -> str:
    """How many messages the run may still send, and how many it already sent (earlier attempts)."""
    if left is None:
        return ""
    if left <= 0:
        rule = "You may not send any more messages to the user in this run: its cap is reached."
    else:
        rule = f"You may send at most {left} more message{'s' if left != 1 else ''} to the user in this run."
    if made:
        rule += f" {made} {'was' if made == 1 else 'were'} already sent in this run; they are shown below."
    return rule


def build_wake_messages(
    *,
    persona: str,
    kind: WakeKind,
    wake: dict[str, Any],
    history: Sequence[Message],
    deliver_final: str = "never",
    deliveries_left: int | None = None,
    deliveries_made: int = 0,
) -> list[Message]:
    """System prompt, then the history window as real messages (oldest first), then the wake turn."""
    rule, turn = _rule_and_turn(kind, wake)
    rules = " ".join(
        part
        for part in (
            rule,
            COMMON_RULES,
            FINAL_ANSWER_RULES.get(deliver_final, FINAL_ANSWER_RULES["never"]),
            deliveries_rule(deliveries_left, deliveries_made),
        )
        if part
    )
    note = wake.get("note") if kind == "cron" else None
    if note:  # said in words below, once
        wake = {k: v for k, v in wake.items() if k != "note"}
    system = "\n\n".join(
        part
        for part in (
            persona.strip(),
            rules,
            "What woke you:\n" + json.dumps(wake, ensure_ascii=False, indent=2, default=str),
            f"A note you left for yourself when you scheduled this wake: {note}" if note else "",
        )
        if part
    )
    return [Message(role="system", content=system), *history, Message(role="user", content=turn)]


@dataclass(frozen=True)
class WakePrompt:
    """The wake prompt of one run, waiting for what the run may still send (``agent.woken.Prompt``)."""

    persona: str
    kind: WakeKind
    wake: dict[str, Any]
    history: Sequence[Message]
    deliver_final: str = "never"

    def messages(self, *, deliveries_left: int | None, deliveries_made: int) -> list[Message]:
        return build_wake_messages(
            persona=self.persona,
            kind=self.kind,
            wake=self.wake,
            history=self.history,
            deliver_final=self.deliver_final,
            deliveries_left=deliveries_left,
            deliveries_made=deliveries_made,
        )
