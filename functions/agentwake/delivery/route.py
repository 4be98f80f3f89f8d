"""The ``first`` and ``each`` routes over up to four leaf channels (docs/channels.md).

- ``first``: the first target that takes the delivery; only a :class:`Declined` (a WebSocket
  session with no open page) falls through, and the last target's decline is the answer (the
  recording channel keeps the delivery unread).
- ``each``: every target; the answer is the list of their receipts (a declining target's kept
  receipt, unread). A target's receipt is kept on
  its intent as it comes (``state=sent``), so a retry after a later target failed skips it.

Before routing, a target whose send an earlier attempt left in doubt (or answered) is settled
first: a ``first`` route whose page connected since must not post to the page while a Slack send is
in doubt. The leaves are ``IntentGuard``\\ s when the run's journal is at hand (``delivery/intents``).
"""

from __future__ import annotations

from typing import Any

from agentwake.delivery import Answer, Declined, Delivery, Receipt
from agentwake.errors import StepInterrupted


def _intent(leaf: Any, delivery: Delivery) -> Any:
    intent = getattr(leaf, "intent", None)
    return intent(delivery) if callable(intent) else None


class RouteChannel:
    #: each target settles its own doubts (its IntentGuard)
    confirms = "receiver"

    def __init__(self, spec: Any, leaves: list[Any]) -> None:
        if not leaves:
            raise ValueError("a route needs at least one channel")
        self.mode: str = spec.type
        self.name: str = spec.type
        self.leaves = list(leaves)

    def __repr__(self) -> str:
        return f"RouteChannel({self.mode}, {self.leaves!r})"

    def send(self, delivery: Delivery) -> Answer:
        if self.mode == "each":
            return self._each(delivery)
        return self._first(delivery)

    def _first(self, delivery: Delivery) -> Answer:
        for leaf in self.leaves:
            intent = _intent(leaf, delivery)
            if intent is not None and intent.state in ("sending", "sent"):
                # an earlier attempt chose this target: settle it there (lookup, operator, resend)
                return leaf.send(delivery)  # type: ignore[no-any-return]
        answer: Answer = None
        for leaf in self.leaves:
            answer = leaf.send(delivery)
            if not isinstance(answer, Declined):
                return answer
        return answer

    def _each(self, delivery: Delivery) -> list[Receipt]:
        out: list[Receipt] = []
        last = len(self.leaves) - 1
        for n, leaf in enumerate(self.leaves):
            try:
                self._each_one(delivery, leaf, out, keep=n < last)
            except StepInterrupted:
                raise
            except Exception as exc:
                taken = [r for r in out if not (r.extra or {}).get("unread")]
                if not taken:
                    raise  # nothing reached anyone: the model may be told
                # a target already took it: an ``error:`` result would have the model send again
                # under a new delivery id; the run aborts and its retry skips what was reached
                reached = ", ".join(f"{r.channel} {r.where or r.target}" for r in taken)
                raise StepInterrupted(
                    f"delivery {delivery.delivery_id} reached {reached}, then a later target failed "
                    f"({type(exc).__name__}): the retry sends to the rest"
                ) from exc
        return out

    @staticmethod
    def _each_one(delivery: Delivery, leaf: Any, out: list[Receipt], *, keep: bool) -> None:
        kept = getattr(leaf, "receipt_kept", None)
        earlier = kept(delivery) if callable(kept) else None
        if earlier is not None:
            out.append(earlier)  # answered before a later target failed: not sent again
            return
        answer = leaf.send(delivery)
        answers = answer if isinstance(answer, list) else [answer]
        for one in answers:
            if not isinstance(one, Receipt | Declined):
                raise TypeError(f"channel {leaf!r} answered {type(one).__name__}, not a receipt")
            out.append(one.kept() if isinstance(one, Declined) else one)  # kept, unread
        mark_sent = getattr(leaf, "mark_sent", None)
        if keep and callable(mark_sent) and len(answers) == 1:
            mark_sent(delivery, answers[0])  # the last target's receipt rides on the marker
