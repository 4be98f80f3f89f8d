"""Settle a send in doubt before a redrive: the operator's word on what the user's chat shows.

A send is in doubt when its intent (``SENDING#{delivery}#{target}``, written just before a Slack or
Telegram request) is still ``sending`` and the delivery has no marker: the request left before a
crash, or not. Telegram cannot be asked, so such a run is dead-lettered (``DeliveryUnconfirmed``)
and ``dlq redrive`` takes the operator's answer:

- ``--delivered ID`` (the user has it): the delivery's marker with an operator receipt and its
  history entry, written by the wake's own builder (``History.delivery_items``) in one conditional
  transaction (``OperatorStore.settle_delivered``): the redriven run never sends it again;
- ``--resend ID`` (the user does not have it): the intent becomes ``not_sent``; the redriven run
  sends it again without asking.

Each id must name a send in doubt of a selected message's run; a delivery already made, or one
settled meanwhile, is refused and nothing is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agentwake_ops.context import OpsContext, OpsError
from agentwake_ops.dlq.describe import DlqMessage

How = Literal["delivered", "resend"]


@dataclass(frozen=True)
class Settlement:
    """One delivery the operator settles: which run, how, and the sends in doubt it covers."""

    delivery_id: str
    run_id: str
    how: How
    #: ``channel in where`` of each send in doubt (what the operator checked)
    targets: tuple[str, ...]

    @property
    def action(self) -> str:
        where = ", ".join(self.targets)
        if self.how == "delivered":
            return f"record {self.delivery_id} as delivered by an operator ({where}): not sent again"
        return f"mark {self.delivery_id} not sent ({where}): the redrive sends it again"

    @property
    def done(self) -> str:
        where = ", ".join(self.targets)
        if self.how == "delivered":
            return f"recorded {self.delivery_id} as delivered by an operator ({where}): it is not sent again"
        return f"marked {self.delivery_id} not sent ({where}): the redriven run sends it again"

    def as_dict(self) -> dict[str, Any]:
        return {"delivery_id": self.delivery_id, "run_id": self.run_id, "how": self.how, "targets": list(self.targets)}


def plan(
    ctx: OpsContext, messages: Sequence[DlqMessage], *, delivered: Sequence[str], resend: Sequence[str]
) -> list[Settlement]:
    """Check each id against the selected messages' runs (read now); OpsError naming the problem."""
    from agentwake_ops.runs import in_doubt_line, run_summary

    delivered = [_bounded(d) for d in delivered]
    resend = [_bounded(d) for d in resend]
    both = sorted(set(delivered) & set(resend))
    if both:
        raise OpsError(f"{', '.join(both)}: either --delivered (the user has it) or --resend (they do not), not both")
    if not messages:
        raise OpsError(
            "the selected message is not in the DLQ (redriven or deleted since): nothing was settled "
            "(agentwake runs show RUN_ID says whether its send is still in doubt)"
        )
    runs = list(dict.fromkeys(m.run_id for m in messages if m.run_id))
    if not runs:
        raise OpsError("--delivered/--resend settle a send of the message's run, and no selected message has a run")
    summaries = {run_id: run_summary(ctx.store, run_id) for run_id in runs}
    out: list[Settlement] = []
    wanted: list[tuple[str, How]] = [(d, "delivered") for d in delivered] + [(d, "resend") for d in resend]
    for delivery_id, how in dict.fromkeys(wanted):
        made = [(r, d) for r, s in summaries.items() for d in s.deliveries if d["delivery_id"] == delivery_id]
        if made:
            run_id, d = made[0]
            got = "; ".join(d.get("received") or ()) or "recorded"
            raise OpsError(
                f"delivery {delivery_id} of run {run_id} is already delivered ({got}): nothing to settle, "
                "and a redrive does not send it again"
            )
        found = [(r, i) for r, s in summaries.items() for i in s.in_doubt if i["delivery_id"] == delivery_id]
        if not found:
            pending = sorted({i["delivery_id"] for s in summaries.values() for i in s.in_doubt})
            known = f"its sends in doubt: {', '.join(pending)}" if pending else "it has no send in doubt"
            raise OpsError(
                f"{delivery_id} names no send in doubt of run {', '.join(runs)} ({known}); nothing was written"
            )
        out.append(Settlement(delivery_id, found[0][0], how, tuple(in_doubt_line(i) for _, i in found)))
    return out


def apply(ctx: OpsContext, settlement: Settlement) -> None:
    """Write the settlement (one conditional transaction); OpsError when it was settled meanwhile."""
    from agentwake.delivery import Receipt
    from agentwake.store.journal import intent_of
    from agentwake.store.keys import SENDING_PREFIX
    from agentwake.store.operator import OperatorStore

    operator = OperatorStore(ctx.store)
    mine = [
        (sk, item)
        for sk, item in operator.run_items(settlement.run_id)
        if sk.startswith(SENDING_PREFIX) and intent_of(item).delivery_id == settlement.delivery_id
    ]
    intents = [(sk, item) for sk, item in mine if (_s(item, "state") or "sending") == "sending"]
    if not intents:
        raise OpsError(
            f"delivery {settlement.delivery_id} is no longer in doubt (settled meanwhile): nothing was written"
        )
    if settlement.how == "resend":
        ok = operator.settle_resend(
            run_id=settlement.run_id, delivery_id=settlement.delivery_id, intent_sks=[sk for sk, _ in intents]
        )
    else:
        first = intents[0][1]
        session_id = _s(first, "session_id") or _run_session(ctx, settlement.run_id)
        receipts = [
            (
                sk,
                Receipt(
                    channel=_s(item, "channel"), target=_s(item, "target"), where=_s(item, "where"), found_by="operator"
                ).to_dict(),
            )
            for sk, item in intents
        ]
        ok = operator.settle_delivered(
            run_id=settlement.run_id,
            delivery_id=settlement.delivery_id,
            session_id=session_id,
            text=_s(first, "text"),
            intents=receipts,
            kept=[r for _, item in mine if _s(item, "state") == "sent" for r in _receipt(item)],
            also=_counted(ctx, session_id, _s(first, "at")),
        )
    if not ok:
        raise OpsError(
            f"delivery {settlement.delivery_id} was settled meanwhile (delivered, or no longer in doubt): "
            "nothing was written; see agentwake runs show " + settlement.run_id
        )


#: the longest delivery id an operator may name (run id + step + call index are far shorter)
MAX_DELIVERY_ID = 600


def _bounded(delivery_id: str) -> str:
    """A delivery id as given, refused when it cannot be one (so an error never echoes a page of text)."""
    value = delivery_id.strip()
    if not value or len(value) > MAX_DELIVERY_ID or not value.isprintable():
        raise OpsError(
            f"not a delivery id (printable, 1-{MAX_DELIVERY_ID} characters): dlq show lists the sends in doubt"
        )
    return value


def _s(item: dict[str, Any], name: str) -> str:
    value = item.get(name) or {}
    return str(value.get("S", value.get("N", "")))


def _receipt(item: dict[str, Any]) -> list[dict[str, Any]]:
    """The receipt an intent holds (an ``each`` route's target that answered), if readable."""
    import json

    try:
        raw = json.loads(_s(item, "receipt") or "null")
    except ValueError:
        return []
    return [raw] if isinstance(raw, dict) else []


def _run_session(ctx: OpsContext, run_id: str) -> str:
    run = ctx.store.records.get_run(run_id)
    if run is None:
        raise OpsError(f"no run {run_id!r} in the store: its delivery cannot be recorded")
    return run.session_id


def _counted(ctx: OpsContext, session_id: str, at: str) -> list[dict[str, Any]]:
    """The session's daily delivery counter, as the wake counts a delivery it records (only for a
    session with a daily limit), on the day the send left."""
    from datetime import datetime

    from agentwake.store.keys import usage_day

    config = ctx.store.records.get_session(session_id)
    if config is None or not config.max_deliveries_per_day:
        return []
    try:
        day = usage_day(datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()) if at else None
    except ValueError:
        day = None
    return [ctx.store.daily.counters(session_id, day=day).add(deliveries=1)]
