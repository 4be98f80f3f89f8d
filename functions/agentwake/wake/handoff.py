"""The hand-off: whoever releases a session (a run, a live turn) gives it at once to the run that has
waited for it longest (docs/durability.md, "Waiting for the session").

On release the holder reads the session's wait list, oldest arrival first, and for the first run
that is still to do: reserves the session for that run alone (only its lease may replace the
reservation, for ``HANDOFF_RESERVE_S``), re-sends its record to the result queue with no delay as
a newer copy (``agentwake-wait-gen``), and marks the waiter handed. The older copy, delayed in
the queue, retires when it comes back. Nothing here can fail the holder's own outcome: a hand-off
that does not happen leaves the waiter to its delayed copy, as before there was a hand-off.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from agentwake.observability import logger, metrics
from agentwake.store.queues import ATTR_HANDED_AT, ATTR_WAIT_GEN

#: how long a session stays reserved for the run it was handed to (then anyone may take it)
HANDOFF_RESERVE_S = 30.0
#: waiters looked at per release (those whose run already succeeded are dropped on the way)
MAX_CANDIDATES = 5


def hand_off(store: Any, result_queue: Any, session_id: str, *, now: Callable[[], float] = time.time) -> str | None:
    """Give the released session to its oldest waiter; returns that run's id, or None (nobody
    waits, the session is taken already, or there is no queue to re-send through)."""
    if result_queue is None or not getattr(result_queue, "url", None):
        return None
    try:
        return _hand_off(store, result_queue, session_id, now)
    except Exception:  # the waiters' delayed copies remain: the hand-off is an optimisation
        logger.exception("could not hand the session to its next waiter", extra={"session_id": session_id})
        return None


def _hand_off(store: Any, result_queue: Any, session_id: str, now: Callable[[], float]) -> str | None:
    from agentwake.store.waitlist import sqs_attributes

    for candidate in store.waiters(session_id)[:MAX_CANDIDATES]:
        if store.run_succeeded(candidate.run_id):
            store.drop_waiter(session_id, candidate.run_id)  # ran through an older copy meanwhile
            continue
        waiter = store.waiter(session_id, candidate.run_id)  # with its body
        if waiter is None or waiter.state != "waiting":
            continue
        if not store.reserve_session(session_id, waiter.run_id, HANDOFF_RESERVE_S):
            return None  # someone took the session: they hand it off when they release it
        gen = waiter.gen + 1
        handed_at = now()
        try:
            result_queue.send_later(
                body=waiter.body,
                delay_s=0,
                attributes=sqs_attributes(waiter.attributes),
                wait={**(waiter.wait or {}), ATTR_WAIT_GEN: str(gen), ATTR_HANDED_AT: str(int(handed_at * 1000))},
            )
        except Exception:
            store.release_reservation(session_id, waiter.run_id)
            raise
        store.mark_handed(session_id, waiter.run_id, gen)
        metrics.add_metric(name="SessionHandOff", unit="Count", value=1)
        logger.info("session handed to the next waiter", extra={"session_id": session_id, "next_run_id": waiter.run_id})
        return str(waiter.run_id)
    return None


def decline(store: Any, result_queue: Any, session_id: str, run_id: str) -> None:
    """A run handed the session does not take it (it had already succeeded, or it is deferred):
    give the reservation back and hand the session on."""
    try:
        if store.release_reservation(session_id, run_id):
            hand_off(store, result_queue, session_id)
    except Exception:
        logger.exception("could not give back the session's reservation", extra={"session_id": session_id})
