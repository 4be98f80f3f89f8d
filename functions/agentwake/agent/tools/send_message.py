"""``send_message_to_user``: the one tool always on offer. Delivers through a delivery channel.

Caps (the run's ledger): at most ``max_deliveries_per_run`` messages per run and
``max_deliveries_per_day`` per session per day; a message over a cap is not sent and the model
gets an ``error:`` result saying which cap. Each result tells the model how many it may still send.

Every message passes the redactor before it is sent (``Delivery`` redacts its text): what the user
receives, and the history entry the delivery writes, never carry a secret the run resolved.
"""

from __future__ import annotations

from dataclasses import replace

from pydantic import BaseModel, ConfigDict, Field

from agentwake.agent.tools import Tool, ToolContext
from agentwake.agent.types import ToolSpec
from agentwake.delivery import Delivery, DeliveryChannel
from agentwake.trust.redact import redact

MAX_MESSAGE_CHARS = 8000

_DESCRIPTIONS = {
    "if_nothing_sent": (
        "Send a plain-text message to the user. If you send none, your final answer is sent to the user instead."
    ),
    "always": ("Send a plain-text message to the user. Your final answer is also sent to them at the end of the run."),
}


class SendMessageArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=MAX_MESSAGE_CHARS, description="The message, as plain text.")
    session_id: str | None = Field(
        default=None,
        description="Session to message. Omit to message the user of this conversation.",
    )


class SendMessageToUser(Tool):
    name = "send_message_to_user"
    description = (
        "Send a plain-text message to the user. This is the only way to reach the user: "
        "your final answer is not shown to them."
    )
    Args = SendMessageArgs
    #: its effect goes through the delivery channel, which a replay replaces by a dry one that
    #: records what would be sent: so the replay calls it, and it reaches no one
    side_effect = False

    def __init__(self, channel: DeliveryChannel, *, final_answer_delivered: str = "never") -> None:
        self.channel = channel
        #: what the model is told about its final answer must match the session's deliver_final
        self._description = _DESCRIPTIONS.get(final_answer_delivered, self.description)

    def spec(self) -> ToolSpec:
        return replace(super().spec(), description=self._description)

    def invoke(self, args: SendMessageArgs, ctx: ToolContext) -> str:
        target = args.session_id or ctx.session_id
        if target != ctx.session_id and ctx.role != "admin":
            raise PermissionError(f"this run may only message its own session ({ctx.session_id})")
        if ctx.ledger is not None:
            refused = ctx.ledger.delivery_refused()
            if refused:
                return f"error: {refused}"
        delivery = Delivery(delivery_id=ctx.delivery_id, run_id=ctx.run_id, session_id=target, text=args.text)
        self.channel.send(delivery)
        if ctx.ledger is None:
            return f"delivered (delivery_id={delivery.delivery_id})"
        ctx.ledger.record_delivery(delivery.delivery_id, fresh=True)
        left = ctx.ledger.remaining_deliveries()
        more = "" if left is None else f"; you may send {left} more in this run"
        return f"delivered (delivery_id={delivery.delivery_id}{more})"

    def send_final(self, text: str, ctx: ToolContext) -> str | None:
        """deliver_final: send the run's final answer to the run's own session under the delivery
        id ``{run_id}#final``. Returns the delivery id, or None when the daily cap refuses it.
        Raises DeliveryError when it could not be delivered (the run is then retried)."""
        final_ctx = ToolContext(
            run_id=ctx.run_id, session_id=ctx.session_id, role=ctx.role, ledger=ctx.ledger, final=True
        )
        if final_ctx.ledger is not None and final_ctx.ledger.delivery_refused(final=True):
            return None
        text = redact(text)  # before it is cut: half a secret no longer matches
        message = text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 20] + "\n…[truncated]"
        delivery = Delivery(
            delivery_id=final_ctx.delivery_id, run_id=ctx.run_id, session_id=ctx.session_id, text=message
        )
        self.channel.send(delivery)
        if final_ctx.ledger is not None:
            final_ctx.ledger.record_delivery(delivery.delivery_id, fresh=True)
        return delivery.delivery_id
