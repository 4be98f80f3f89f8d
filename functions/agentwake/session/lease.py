"""Who holds a session, as values: the lease a run holds, a run waiting for the session, how long
it waited. Plain Python (no table, no queue): the store's lease adapter
(``agentwake.store.session_lease``) writes these states, the hand-off (``agentwake.session.handoff``)
moves a lease from one to the next.

The session's states (docs/durability.md, "Who holds a session", has the diagram):

- **free**: no lease item, or one whose ``lease_until`` has passed;
- **held** by a run (``bg:…``/``cron:…``) or by a live turn (``live:{turn}``), with a token new on
  every acquisition; a run that joins the wait list while it is held marks it (**parked mark**),
  so that a release to nobody fails and the holder reads the wait list again;
- **reserved** for one waiting run: a release handed it over; only that run's lease replaces it,
  anyone's once ``RESERVATION_S`` has passed.

A ``Lease`` is immutable: each transition returns the next value, and the code that holds the run
keeps the newest one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

#: how long a session handed to a waiting run stays reserved for it (then anyone may take it)
RESERVATION_S = 30.0
#: the holder of a session a live turn holds: ``live:{turn}``
LIVE_HOLDER_PREFIX = "live:"
#: the shortest pause of a waiter's fallback copy (a result's delayed re-send, a cron wake's
#: one-time schedule) while it is on the session's wait list: the release hands the session over,
#: the fallback only carries a hand-off that was lost (within SessionWaitMaxDelay)
ON_THE_LIST_DELAY_S = 10.0


@dataclass(frozen=True)
class Waiter:
    """One run waiting for its session, as the session's wait list holds it."""

    session_id: str
    run_id: str
    arrived: float
    state: str
    gen: int
    body: str = ""
    #: the waiting record's message attributes, stored shape (``agentwake.session.copies.MessageAttributes``)
    attributes: dict[str, Any] | None = None
    #: the wait state of the copy that parked it (``agentwake-wait-count`` / ``-waiting-since``)
    wait: dict[str, str] | None = None
    #: what kind of wake waits: ``background`` (a result queue record) or ``cron`` (a job's fire:
    #: ``body`` is the invocation's payload as JSON)
    kind: str = "background"
    #: a cron waiter: the function ARN it was invoked through, where a copy of it is invoked again
    target: str = ""


@dataclass(frozen=True)
class Waited:
    """A run that waited for its session: for how long, and how long the session was idle between
    the release that handed it over and this start (None: it was not handed over)."""

    waited_s: float
    idle_s: float | None = None
    #: when it first waited, as its entry on the wait list says (None: not read): where its place is
    arrived: float | None = None


@dataclass(frozen=True)
class Lease:
    """A held session lease and the attempt it was taken for (the lease's put, then the attempt's write)."""

    session_id: str
    token: str
    attempt: int
    #: the write that took it had an unknown outcome (its answer was lost) and was read back as landed
    adopted: bool = False
    #: the run waiting longest for the session, named before the release: the release then reserves
    #: the session for it instead of freeing it
    hand_to: Waiter | None = None
    #: the wait list was read for this lease's release (``hand_to`` is who it named, None: nobody);
    #: the release after the commit or the failure record does not read it again
    named: bool = False
    #: the run holding the lease is on the wait list itself (it ran from a record that did not carry
    #: its wait, e.g. an SQS duplicate of the producer's): its commit takes it off
    listed: bool = False
    #: its release deleted it (or handed it over), or found it not ours any more
    released: bool = False
    #: the release landed as a reservation for ``hand_to``: the waiter is to be run or re-sent now
    handed: bool = False

    def naming(self, waiter: Waiter | None, *, listed: bool | None = None) -> Lease:
        """The lease whose release reserves the session for ``waiter`` (None: frees it)."""
        return replace(self, hand_to=waiter, named=True, listed=self.listed if listed is None else listed)

    def read_again(self) -> Lease:
        """The lease whose release reads the wait list again (a run joined it since it was read)."""
        return replace(self, hand_to=None, named=False)

    def after_release(self, landed: bool) -> Lease:
        """The lease after a write that released it: ``landed`` False when the release was dropped
        (the lease was no longer ours, or a run joined the wait list after it was read)."""
        return replace(self, released=landed, handed=landed and self.hand_to is not None)

    def given_up(self) -> Lease:
        """Nothing more to release (released, or found not ours any more)."""
        return replace(self, released=True)


def live_holder(turn_id: str) -> str:
    """The holder name of a live turn's lease."""
    return LIVE_HOLDER_PREFIX + turn_id
