"""How a receipt reads to a person (runs show, dlq show, the console): one phrase per channel."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentwake.delivery import Receipt


def describe(receipt: Receipt) -> str:
    ids = ", ".join(receipt.ids)
    where = f" in {receipt.where}" if receipt.where else ""
    by = {"lookup": " (found by lookup)", "operator": " (marked delivered by an operator)"}.get(receipt.found_by, "")
    if receipt.channel == "slack":
        head = f"slack ts {ids}".rstrip() + where
    elif receipt.channel == "telegram":
        head = f"telegram message {ids}".rstrip() + where
    elif receipt.channel == "sns":
        head = f"sns message {ids}".rstrip() + where
    elif receipt.channel == "websocket":
        if receipt.ids:
            gone = receipt.extra.get("gone")
            head = f"websocket {len(receipt.ids)} connection{'s' if len(receipt.ids) != 1 else ''}"
            head += f", {gone} gone" if gone else ""
        else:
            head = "websocket: no open page; kept, unread"
    elif receipt.channel == "webhook":
        status = receipt.extra.get("status")
        head = f"webhook {status}" if status else "webhook"
    elif receipt.channel == "log":
        head = "log"
    else:
        head = f"{receipt.channel} {ids}".strip()
    return head + by
