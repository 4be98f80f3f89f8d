"""``send_message_to_user``: the one tool always on offer. Delivers through a delivery channel."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from agentwake.agent.tools import Tool, ToolContext
from agentwake.delivery import Delivery, DeliveryChannel

MAX_MESSAGE_CHARS = 8000


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

    def __init__(self, channel: DeliveryChannel) -> None:
        self.channel = channel

    def invoke(self, args: SendMessageArgs, ctx: ToolContext) -> str:
        target = args.session_id or ctx.session_id
        if target != ctx.session_id and ctx.role != "admin":
            raise PermissionError(f"this run may only message its own session ({ctx.session_id})")
        delivery = Delivery(delivery_id=ctx.delivery_id, run_id=ctx.run_id, session_id=target, text=args.text)
        self.channel.send(delivery)
        return f"delivered (delivery_id={delivery.delivery_id})"
