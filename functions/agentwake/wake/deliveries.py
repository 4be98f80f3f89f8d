"""A run's deliveries, in one home: the channels a run sends through (``channels_for``), the
receipts a send answers (``receipts_of``) and ``RecordingChannel``, which sends a delivery once and
records it (marker with its receipts, history entry) with the step that reports it.

Exactly once (docs/durability.md, docs/channels.md): a delivery with a marker is never sent again.
The window left — a hard kill between the request and the write that records it — is the
receiver's to close (a webhook, SNS or a page drops a repeated delivery id), or, for a channel whose
receiver cannot (Slack, Telegram), the intent's: ``delivery/intents.py`` writes it before the
request, through the run's journal handed to the channels' kit, and the next attempt settles it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agentwake.delivery import Declined, Receipt
from agentwake.errors import DeliveryError, StepInterrupted

if TYPE_CHECKING:
    from agentwake.delivery import Delivery, DeliveryChannel
    from agentwake.domain.models import SessionConfig
    from agentwake.store.port import Counters, Recorder
    from agentwake.wake.spec import WakeDeps


def channels_for(session: SessionConfig, deps: WakeDeps, *, intents: Any = None) -> Callable[[str], DeliveryChannel]:
    """Each target session's own delivery channel (an admin run may message other sessions).
    ``intents``: the run's journal as the intent log (``delivery.intents.IntentLog``) the channels
    that need intents write through; None: none are written (a channel built outside a run)."""
    from agentwake.delivery.kit import ChannelKit

    # the store's connections port exists where the stack has a push API (store/push.py)
    kit = ChannelKit(
        settings=deps.settings,
        clock=deps.clock,
        connections=getattr(deps.store, "connections", None),
        intents=intents,
    )
    built = {session.session_id: deps.channel_factory(session.delivery, kit)}

    def channel_for(session_id: str) -> DeliveryChannel:
        if session_id not in built:
            target = deps.store.records.get_session(session_id)
            if target is None:
                raise DeliveryError(f"there is no session {session_id!r} to message")
            built[session_id] = deps.channel_factory(target.delivery, kit)
        return built[session_id]

    return channel_for


#: channel types whose receiver drops a repeated delivery id: a send of theirs is never in doubt
_RECEIVER_CONFIRMED = frozenset({"log", "webhook", "websocket", "sns"})


def _targets(channel: Any) -> set[str]:
    """The target names a channel sends to (a route's leaves; an IntentGuard's target)."""
    leaves = getattr(channel, "leaves", None)
    if leaves is not None:
        return set().union(*(_targets(leaf) for leaf in leaves))
    name = getattr(channel, "target", None) or getattr(channel, "name", None)
    return {str(name)} if name else set()


def receipts_of(answer: Any) -> list[Receipt]:
    """The receipts a channel answered (one, or a route's list); no receipt, no delivery. A channel
    that declined as the last resort (a WebSocket with no open page) keeps the delivery unread."""
    answers = list(answer) if isinstance(answer, list | tuple) else [answer]
    if answers and all(isinstance(a, Receipt | Declined) for a in answers):
        return [a.kept() if isinstance(a, Declined) else a for a in answers]
    raise StepInterrupted(f"a delivery channel answered {type(answer).__name__} instead of a receipt: nothing recorded")


class RecordingChannel:
    """Sends through the target session's own channel; a delivery already recorded is never sent
    again, and each delivered message is appended to that session's history whatever the run's
    outcome later: the DynamoDB journal stages it and writes it in the same transaction as the
    step that reports the send — the tool result, or for deliver_final's answer its
    ``final.delivery`` entry, which the commit writes (docs/durability.md).

    When that transaction fails (throttled, refused, an error, a lost answer), the delivery is not
    lost: a lost answer is read back first (the write may have landed), and what did not land —
    marker, history entry, the tool result — is written by the run's failure transaction, as
    deliver_final's answer is; a retry then finds the marker and sends nothing.

    The at-least-once edge: a crash after ``send`` and before the transaction that records the
    delivery (the tool step's write; for deliver_final's answer, the commit) with no failure
    transaction after it (a hard kill, the table unreachable) means a retry sends the same delivery
    id again; receivers drop it by the signed delivery id. A channel no receiver dedups settles it
    by its intent instead (a lookup, or an operator: ``delivery/intents.py``).
    """

    def __init__(
        self, channel_for: Callable[[str], DeliveryChannel], recorder: Recorder, counters: Counters | None = None
    ) -> None:
        self.channel_for = channel_for
        self.recorder = recorder
        #: the session's daily counters (agentwake.store.daily), counted in the delivery's own write
        self.counters = counters
        self.sent: list[Delivery] = []

    def _no_doubt_elsewhere(self, delivery: Delivery, channel: Any) -> None:
        """A send left in doubt to a target the channel no longer has (the delivery config edited
        between the failure and the redrive) is not settled by the channel's own targets: an
        operator says whether it arrived before anything is sent elsewhere (DeliveryUnconfirmed)."""
        intents = getattr(self.recorder, "intents", None)
        if not callable(intents):
            return
        current = _targets(channel)
        for intent in intents(delivery.delivery_id).values():
            if intent.state == "sending" and intent.target not in current and intent.channel not in _RECEIVER_CONFIRMED:
                from agentwake.delivery.intents import unconfirmed_reason
                from agentwake.errors import DeliveryUnconfirmed

                raise DeliveryUnconfirmed(
                    unconfirmed_reason(delivery, intent)
                    + f" (the session's delivery no longer has the target {intent.target!r})"
                )

    def send(self, delivery: Delivery) -> list[Receipt] | None:
        if self.recorder.has_delivery(delivery.run_id, delivery.delivery_id):
            return None
        # DeliveryError here (incl. an unknown target session) is a tool result the model sees
        channel = self.channel_for(delivery.session_id)
        self._no_doubt_elsewhere(delivery, channel)
        before_send = getattr(self.recorder, "before_send", None)
        if before_send is not None and not getattr(channel, "intends_first", False):
            # every step kept back so far is durable before anything leaves (a channel that writes
            # its intent before any request carries them on that write)
            before_send()
        answer = channel.send(delivery)
        receipts = receipts_of(answer)
        self.sent.append(delivery)
        try:
            extra: dict[str, Any] = {"receipts": [r.to_dict() for r in receipts]}
            if self.counters is not None and delivery.session_id == self.counters.session_id:
                extra["also"] = [self.counters.add(deliveries=1)]
            self.recorder.record_delivery(
                run_id=delivery.run_id,
                delivery_id=delivery.delivery_id,
                session_id=delivery.session_id,
                text=delivery.text,
                **extra,
            )
        except Exception as exc:
            # sent but not recorded: telling the model "error" would be a lie; abort, and the retry
            # resends the same delivery id, which receivers drop
            raise StepInterrupted(f"delivery {delivery.delivery_id} was sent but not recorded: {exc}") from exc
        return receipts
