"""Where ``send_message_to_user`` goes: one port (:class:`DeliveryChannel`), one adapter per
platform (``log``, ``webhook``, ``websocket``, ``slack``, ``telegram``, ``sns``) and the routes
``first``/``each`` over them (docs/channels.md). A send answers with the platform's
:class:`Receipt`, journaled on the delivery's marker: nothing counts as delivered without one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from agentwake.trust.redact import redact


@dataclass(frozen=True)
class Delivery:
    """One message to a user. ``delivery_id`` (run id + step + call index) is stable across retries,
    so a receiver can drop a duplicate sent when a crash hit between sending and journaling.

    Its text is redacted when the delivery is made: every channel (webhook, log, a replay's dry
    one) and the history entry it writes see the same text, without any secret the run resolved."""

    delivery_id: str
    run_id: str
    session_id: str
    text: str
    #: an approval request (issue 35): ``{approval_id, tool, arguments, expiry_at, on_expiry, token,
    #: token_gen, decide_path}``. Its ``token`` decides the request: it travels only in the signed body
    #: a receiver gets (``to_dict(with_token=True)``), never in the text, history, a log or a repr
    approval: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", redact(self.text))

    def to_dict(self, *, with_token: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "delivery_id": self.delivery_id,
            "run_id": self.run_id,
            "session_id": self.session_id,
            "text": self.text,
        }
        if self.approval is not None:
            out["approval"] = (
                dict(self.approval) if with_token else {k: v for k, v in self.approval.items() if k != "token"}
            )
        return out


@dataclass(frozen=True)
class Receipt:
    """A platform's proof that it took a delivery: Slack's ``ts``, Telegram's ``message_id``, SNS's
    ``MessageId``, the WebSocket connections reached, a webhook's status. Journaled on the
    delivery's marker and shown by ``runs show``, ``dlq show`` and the console."""

    #: log | webhook | websocket | slack | telegram | sns
    channel: str
    #: the spec's ``name`` (its type unless named): keys a route's targets
    target: str
    #: where it went: a Slack channel (``C0123`` or ``C0123/thread_ts``), a chat id, a topic ARN
    where: str = ""
    #: the platform's ids: ts, message_id, MessageId, the connection ids reached
    ids: tuple[str, ...] = ()
    #: small extras: a webhook's status, a page's ``gone`` count, ``unread``
    extra: dict[str, Any] = field(default_factory=dict)
    #: ``answer`` (the platform answered the send), ``lookup`` (found after a crash), ``operator``
    found_by: Literal["answer", "lookup", "operator"] = "answer"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"channel": self.channel, "target": self.target}
        if self.where:
            out["where"] = self.where
        if self.ids:
            out["ids"] = list(self.ids)
        if self.extra:
            out["extra"] = dict(self.extra)
        if self.found_by != "answer":
            out["found_by"] = self.found_by
        return out

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Receipt:
        return cls(
            channel=str(raw.get("channel", "")),
            target=str(raw.get("target", raw.get("channel", ""))),
            where=str(raw.get("where", "")),
            ids=tuple(str(i) for i in raw.get("ids") or ()),
            extra=dict(raw.get("extra") or {}),
            found_by=raw.get("found_by", "answer"),
        )

    def describe(self) -> str:
        """One line a person reads: "slack ts 1718.0100 in C0123", "websocket 2 connections"."""
        return describe(self)


def describe(receipt: Receipt) -> str:
    """How a receipt reads to a person (runs show, dlq show, the console): one phrase per channel."""
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


@dataclass(frozen=True)
class Declined:
    """The channel could not take it and nothing was sent (a WebSocket session with no open page).
    A ``first`` route tries its next channel; as the last resort it is kept, unread."""

    channel: str
    target: str
    reason: str
    #: what keeping it unread means to the channel (the WebSocket marks the session unread); run by
    #: :meth:`kept` only, so a ``first`` route whose next channel takes the delivery marks nothing
    on_kept: Callable[[], None] | None = field(default=None, compare=False, repr=False)

    def kept(self) -> Receipt:
        """The receipt of a delivery no channel took (the last resort declined): kept in history,
        unread until the product reads it."""
        if self.on_kept is not None:
            self.on_kept()
        return Receipt(channel=self.channel, target=self.target, extra={"unread": True})


#: what a send answers: a receipt, a route's receipts, a decline; ``None`` from the recording
#: wrapper when the delivery was made before (nothing sent)
Answer = Receipt | Declined | list[Receipt] | None


class DeliveryChannel(Protocol):
    """Adapters also say who can tell a duplicate after a crash between the send and its journal
    write, as a class attribute ``confirms``: ``receiver`` (it drops a repeated delivery id),
    ``lookup`` (the channel can find what it sent: ``find(delivery, intent) -> Receipt | None``),
    ``none`` (nobody: a retry in doubt goes to the DLQ, or resends).

    A ``lookup``/``none`` adapter is wrapped by ``delivery/intents.py`` (``IntentGuard``), which
    writes its :class:`~agentwake.delivery.intents.Intent` before each request; it may also offer ``where`` (str: where it
    sends, as the receipt names it) and ``probe(delivery) -> dict`` (what ``find`` will need)."""

    def send(self, delivery: Delivery) -> Answer:
        """Deliver and answer the platform's receipt, or raise: ``DeliveryError`` (the model reads
        ``error:``), ``DeliveryUncertain``, ``ChannelRefused``/``ChannelThrottled``/``ChannelUnavailable``."""
        ...
