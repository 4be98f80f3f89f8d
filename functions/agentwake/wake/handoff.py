"""The hand-off: whoever releases a session (a run, a live turn) gives it at once to the run that has
waited for it longest (docs/durability.md, "Waiting for the session").

Before its release the holder reads the session's wait list (``prepare``: the oldest waiter still
waiting). The release itself — the commit, the failure record, or a plain release — then turns the
lease into a reservation for that run in the same conditional write: only that run's lease may
replace it, anyone's after ``RESERVATION_S``. After the release (``complete``) the waiter's record
is re-sent with no delay as a newer copy (``agentwake-wait-gen``) and the waiter marked handed; its
older copy, delayed in the queue, retires when it comes back. Or, when the releasing invocation has
the time, it runs the waiter itself (``take``): no queue round trip stands between two runs of the
session, and the waiter's delayed copy, left as it is (same copy number), stays the fallback.

Nothing here fails the holder's own outcome: a hand-off that does not happen (the wait list could
not be read, the re-send failed) leaves the waiter to its delayed copy, as before the hand-off
existed, and a reservation nobody takes lapses after ``RESERVATION_S``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agentwake.observability import logger, metrics
from agentwake.store.queues import ATTR_HANDED_AT, ATTR_WAIT_GEN
from agentwake.store.wake_begin import RESERVATION_S

if TYPE_CHECKING:
    from agentwake.store.port import Lease, Waiter

__all__ = ["RESERVATION_S", "complete", "decline", "hand_off", "prepare", "release", "take"]


def prepare(store: Any, result_queue: Any, lease: Lease, run_id: str | None = None) -> None:
    """Name the session's oldest waiter on ``lease`` (one Query), so that its release reserves the
    session for it. Nobody when there is no queue to re-send through. ``run_id``: the run releasing
    the lease, never its own next holder; when it is on the list itself (``lease.listed``) its
    commit takes it off."""
    if lease.hand_to is not None or not _can_send(result_queue):
        return
    try:
        waiting = store.waiters(lease.session_id)
    except Exception:  # the waiters' delayed copies remain
        logger.exception("could not read the session's wait list", extra={"session_id": lease.session_id})
        return
    lease.listed = run_id is not None and any(w.run_id == run_id for w in waiting)
    lease.hand_to = next((w for w in waiting if w.run_id != run_id), None)


def complete(store: Any, result_queue: Any, lease: Lease, *, now: Callable[[], float] = time.time) -> str | None:
    """After the release: re-send the waiter the session was reserved for; its run id, or None."""
    waiter = lease.hand_to
    if waiter is None or not lease.handed:
        return None
    return send(store, result_queue, waiter, now=now)


def take(store: Any, lease: Lease) -> Waiter | None:
    """After the release: the waiter the session was reserved for, for this invocation to run
    itself; None if the release reserved it for nobody. The waiter is marked handed with its copy
    number unchanged, so the delayed copy it keeps in the queue still runs it if this process dies."""
    waiter = lease.hand_to
    if waiter is None or not lease.handed:
        return None
    try:
        store.mark_handed(waiter.session_id, waiter.run_id, waiter.gen)
    except Exception:  # it stays a candidate; the reservation is its own either way
        logger.exception("could not mark the next waiter handed", extra={"session_id": waiter.session_id})
    metrics.add_metric(name="SessionHandOff", unit="Count", value=1)
    logger.info(
        "session handed to the next waiter, run here",
        extra={"session_id": waiter.session_id, "next_run_id": waiter.run_id},
    )
    return waiter


def send(store: Any, result_queue: Any, waiter: Waiter, *, now: Callable[[], float] = time.time) -> str | None:
    """Re-send ``waiter``'s record with no delay, the session reserved for it; its run id, or None
    (the re-send failed: the reservation is given back and its delayed copy remains)."""
    try:
        _send(store, result_queue, waiter, now())
    except Exception:
        logger.exception("could not hand the session to its next waiter", extra={"session_id": waiter.session_id})
        _give_back(store, waiter)
        return None
    return waiter.run_id


def release(store: Any, result_queue: Any, lease: Lease, run_id: str | None = None) -> None:
    """Release ``lease`` (when the commit or the failure record did not), reserving the session for
    its oldest waiter. A release to nobody fails if a run joined the wait list after it was read
    (it marks the lease: ``WaitList.mark_parked``); the list is then read again, once, and the
    second release is unconditional. Raises if the table does not answer."""
    if lease.released:
        return
    for last in (False, True):
        prepare(store, result_queue, lease, run_id)
        hand_to = lease.hand_to.run_id if lease.hand_to is not None else None
        checked = not last and hand_to is None and _can_send(result_queue)
        if store.release_lease(lease.session_id, lease.token, hand_to=hand_to, unless_parked=checked):
            lease.handed = hand_to is not None
            break
        if not checked:
            break  # not ours any more (expired and taken over): nothing to hand on
        lease.hand_to = None  # somebody joined the list: read it again
    lease.released = True


def hand_off(
    store: Any, result_queue: Any, session_id: str, token: str, *, now: Callable[[], float] = time.time
) -> str | None:
    """Release the lease held with ``token`` and hand the session to its oldest waiter (a live
    turn's end); returns that run's id, or None (nobody waits)."""
    from agentwake.store.port import Lease

    lease = Lease(session_id=session_id, token=token, attempt=0)
    release(store, result_queue, lease)
    return complete(store, result_queue, lease, now=now)


def decline(store: Any, result_queue: Any, session_id: str, run_id: str) -> None:
    """A run handed the session does not take it (it had already succeeded, or it is deferred): give
    the reservation back, and hand the session to the next waiter."""
    try:
        if not store.release_reservation(session_id, run_id):
            return
        waiting = store.waiters(session_id) if _can_send(result_queue) else []
        for waiter in waiting[:3]:
            if waiter.run_id != run_id and store.reserve_session(session_id, waiter.run_id, RESERVATION_S):
                _send(store, result_queue, waiter, time.time())
                return
    except Exception:
        logger.exception("could not give back the session's reservation", extra={"session_id": session_id})


def _send(store: Any, result_queue: Any, waiter: Waiter, handed_at: float) -> None:
    from agentwake.store.waitlist import sqs_attributes

    gen = waiter.gen + 1
    result_queue.send_later(
        body=waiter.body,
        delay_s=0,
        attributes=sqs_attributes(waiter.attributes),
        wait={**(waiter.wait or {}), ATTR_WAIT_GEN: str(gen), ATTR_HANDED_AT: str(int(handed_at * 1000))},
    )
    metrics.add_metric(name="SessionHandOff", unit="Count", value=1)
    logger.info(
        "session handed to the next waiter", extra={"session_id": waiter.session_id, "next_run_id": waiter.run_id}
    )
    store.mark_handed(waiter.session_id, waiter.run_id, gen)


def _give_back(store: Any, waiter: Waiter) -> None:
    try:
        store.release_reservation(waiter.session_id, waiter.run_id)
    except Exception:  # it lapses after RESERVATION_S
        logger.exception("could not give back the session's reservation")


def _can_send(result_queue: Any) -> bool:
    return result_queue is not None and bool(getattr(result_queue, "url", None))
