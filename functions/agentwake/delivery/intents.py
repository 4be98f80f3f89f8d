"""Exactly once for channels whose receiver cannot drop a repeat (Slack, Telegram: ``confirms`` is
``lookup`` or ``none``): an :class:`Intent` is written just before each request,
so a retry that finds one without the delivery's marker knows a crash hit between the request and
the journal write, and settles it before it sends (docs/channels.md, "Exactly once").

``IntentGuard`` wraps one leaf channel (inside a route too: each target has its own intent). The
journal is reached through the :class:`IntentLog` port (the run's ``DynamoJournal``): ``delivery/``
imports no store module. Loaded only by a session whose channel needs it (cold start).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol

from agentwake.delivery import Answer, Declined, Delivery, Receipt
from agentwake.delivery.retry import NOTHING_SENT
from agentwake.errors import (
    ChannelThrottled,
    ChannelUnavailable,
    DeliveryError,
    DeliveryUncertain,
    DeliveryUnconfirmed,
)

if TYPE_CHECKING:
    from agentwake.clock import Clock


@dataclass(frozen=True)
class Intent:
    """A send that may be in doubt: written (``RUN#{run}`` / ``SENDING#{delivery_id}#{target}``) just
    before the request to a channel whose receiver cannot drop a repeat (Slack, Telegram), so that
    a retry finding it without the delivery's marker knows a crash hit between the request and the
    journal write. The adapter's ``find(delivery, intent)`` reads ``probe`` (what a lookup needs,
    e.g. Slack's channel, thread and ``oldest``). ``state``: ``sending`` (in doubt), ``not_sent``
    (certainly not sent: the next attempt sends without a lookup), ``sent`` (a route's target whose
    ``receipt`` came; a retry skips it)."""

    delivery_id: str
    #: the spec's name (its type unless named): one intent per target of a route
    target: str
    #: the channel type: slack, telegram, ...
    channel: str
    session_id: str = ""
    where: str = ""
    text: str = ""
    #: when the request was about to leave (ISO, UTC)
    at: str = ""
    state: Literal["sending", "not_sent", "sent"] = "sending"
    receipt: Receipt | None = None
    #: the platform asked to wait until then (ISO, UTC): an attempt before it sends nothing
    not_before: str | None = None
    probe: dict[str, Any] = field(default_factory=dict)


#: what a send raises when nothing left: the intent is ``not_sent`` (retry.NOTHING_SENT: a refused
#: connection is ChannelUnavailable, a refused base ConfigError/OutboundRefused)
_NOTHING_LEFT: tuple[type[Exception], ...] = (*NOTHING_SENT, DeliveryError)

#: the ``confirms`` values whose sends are journaled as intents before the request
IN_DOUBT = ("lookup", "none")
#: how much of a delivery's text an operator's reason quotes
_QUOTED_CHARS = 60


class IntentLog(Protocol):
    """The run's intents, as the guard sees them (``store/journal.py`` ``DynamoJournal``)."""

    def intents(self, delivery_id: str) -> dict[str, Intent]:
        """The delivery's intents by target, as the run's journal loaded them (no read of its own:
        a retry's one Query of its run partition returns them with the steps)."""
        ...

    def intend(self, intent: Intent) -> None:
        """Write the intent now, with the steps the journal kept back (one write): the request
        leaves right after it."""
        ...

    def settle_intent(self, intent: Intent) -> None:
        """The intent's new state: ``not_sent`` rides on the run's next write (the failure
        transaction, or the step that reports the error); ``sent`` (a route's target that answered
        its receipt) is written now."""
        ...


def needs_intent(channel: Any) -> bool:
    """Whether a channel's sends are in doubt after a crash (no receiver drops a repeat)."""
    return getattr(channel, "confirms", "receiver") in IN_DOUBT


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


class IntentGuard:
    """One target's channel with its intents: settles an intent left by a crashed attempt (a
    receipt it has, a lookup, the spec's ``unconfirmed`` policy) before it sends, writes the intent
    before each request of a ``lookup``/``none`` channel, and marks a certain failure ``not_sent``."""

    def __init__(
        self,
        inner: Any,
        *,
        channel: str,
        target: str,
        log: IntentLog,
        clock: Clock,
        unconfirmed: str = "dead_letter",
        in_route: bool = False,
    ) -> None:
        self.inner = inner
        self.channel = channel
        self.target = target
        self.log = log
        self.clock = clock
        self.unconfirmed = unconfirmed
        self.confirms = getattr(inner, "confirms", "receiver")
        #: the inner channel's requests are journaled as intents before they leave
        self.in_doubt = self.confirms in IN_DOUBT
        #: a route's receiver-confirmed target (a page, a webhook, SNS): its intent records that the
        #: route chose it, so a retry returns to it (the receiver drops the repeat) and a ``first``
        #: route does not fall through to another target the first attempt never used
        self.records_choice = in_route and not self.in_doubt
        #: nothing leaves before the intent is written, which carries the steps the journal kept
        #: back (``IntentLog.intend``): the recording channel need not flush them first
        self.intends_first = self.in_doubt

    def __repr__(self) -> str:
        return f"IntentGuard({self.inner!r}, target={self.target!r})"

    def intent(self, delivery: Delivery) -> Intent | None:
        return self.log.intents(delivery.delivery_id).get(self.target)

    def receipt_kept(self, delivery: Delivery) -> Receipt | None:
        """The receipt an earlier attempt kept on this target's intent (a route's target that
        answered before a later one failed): the target is not sent to again."""
        intent = self.intent(delivery)
        return intent.receipt if intent is not None and intent.state == "sent" else None

    def send(self, delivery: Delivery) -> Answer:
        intent = self.intent(delivery)
        if intent is not None:
            if intent.state == "sent" and intent.receipt is not None:
                return intent.receipt
            if intent.not_before is not None:
                wait = _epoch(intent.not_before) - self.clock.wall()
                if wait > 0:
                    raise ChannelThrottled(
                        f"{self.channel} asked to wait until {intent.not_before}: "
                        f"delivery {delivery.delivery_id} is sent after it ({wait:.0f} s left)",
                        retry_after=wait,
                    )
            if intent.state == "sending":
                found = self._settle_in_doubt(delivery, intent)
                if found is not None:
                    return found
        return self._send(delivery)

    def _settle_in_doubt(self, delivery: Delivery, intent: Intent) -> Receipt | None:
        """An earlier attempt sent (perhaps) and crashed before its journal write: the receipt the
        channel finds (not sent again), None to send, or DeliveryUnconfirmed for an operator."""
        if self.confirms == "lookup":
            found: Receipt | None = self.inner.find(delivery, intent)
            if found is None:
                return None
            return found if found.found_by == "lookup" else replace(found, found_by="lookup")
        if self.confirms == "none" and self.unconfirmed != "resend":
            raise DeliveryUnconfirmed(unconfirmed_reason(delivery, intent))
        return None

    def _send(self, delivery: Delivery) -> Answer:
        if not (self.in_doubt or self.records_choice):
            return self.inner.send(delivery)
        probe = getattr(self.inner, "probe", None)
        intent = Intent(
            delivery_id=delivery.delivery_id,
            target=self.target,
            channel=self.channel,
            session_id=delivery.session_id,
            where=str(getattr(self.inner, "where", "") or ""),
            text=delivery.text,
            at=_iso(self.clock.wall()),
            probe=dict(probe(delivery)) if callable(probe) else {},
        )
        self.log.intend(intent)
        if self.records_choice:
            try:
                answer = self.inner.send(delivery)  # a failure leaves the choice: the retry resends here
            except ChannelUnavailable as exc:
                if exc.nothing_sent:  # nothing reached anyone: the retry may choose again
                    self.log.intend(replace(intent, state="not_sent"))
                raise
            if isinstance(answer, Declined):
                # nothing reached the receiver: written now, so a retry after a later target took
                # the delivery does not come back here
                self.log.intend(replace(intent, state="not_sent"))
            return answer  # type: ignore[no-any-return]
        try:
            return self.inner.send(delivery)  # type: ignore[no-any-return]
        except ChannelThrottled as exc:
            not_before = _iso(self.clock.wall() + max(0.0, exc.retry_after))
            self.log.settle_intent(replace(intent, state="not_sent", not_before=not_before))
            raise
        except DeliveryUncertain:
            raise  # it may have arrived: the intent stays in doubt
        except _NOTHING_LEFT:
            # nothing was sent: a refused connection (ChannelUnavailable), a base the outbound
            # policy refuses (OutboundRefused), a refusal of the platform
            self.log.settle_intent(replace(intent, state="not_sent"))
            raise

    def mark_sent(self, delivery: Delivery, answer: Receipt | Declined) -> None:
        """Keep a route target's receipt on its intent (``state=sent``): a retry after a later target
        failed skips this one."""
        receipt = answer.kept() if isinstance(answer, Declined) else answer
        self.log.settle_intent(
            Intent(
                delivery_id=delivery.delivery_id,
                target=self.target,
                channel=self.channel,
                session_id=delivery.session_id,
                where=receipt.where,
                text=delivery.text,
                at=_iso(self.clock.wall()),
                state="sent",
                receipt=receipt,
            )
        )


def unconfirmed_reason(delivery: Delivery, intent: Intent) -> str:
    """What an operator reads on the DLQ: which chat, when, which text, and the two ways out."""
    text = delivery.text if len(delivery.text) <= _QUOTED_CHARS else delivery.text[:_QUOTED_CHARS] + "…"
    where = intent.where or intent.target
    return (
        f"{intent.channel} may already show delivery {delivery.delivery_id} in {where}: an attempt sent "
        f"it at {intent.at or '?'} and stopped before journaling it, and {intent.channel} cannot tell "
        f"whether it arrived (text: {text!r}). Check {where}, then redrive with "
        f"`agentwake dlq redrive ... --delivered {delivery.delivery_id}` if it is there "
        f"or `--resend {delivery.delivery_id}` if it is not"
    )


def guarded(channel: Any, spec: Any, kit: Any, *, in_route: bool = False) -> Any:
    """``channel`` behind its intents when the kit has the run's intent log and the channel needs
    them (a ``lookup``/``none`` channel; every target of a route, whose receipts are kept per
    target); else ``channel`` itself."""
    log = getattr(kit, "intents", None)
    if log is None or not (in_route or needs_intent(channel)):
        return channel
    return IntentGuard(
        channel,
        channel=str(spec.type),
        target=spec.target(),
        log=log,
        clock=kit.clock,
        unconfirmed=getattr(spec, "unconfirmed", "dead_letter"),
        in_route=in_route,
    )
