"""The hand-off: whoever releases a session (a run, a live turn) gives it at once to the run that has
waited for it longest (docs/durability.md, "Who holds a session").

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
from typing import TYPE_CHECKING

from agentwake.observability import logger, metrics
from agentwake.session.copies import handed_copy
from agentwake.session.lease import RESERVATION_S, Lease, Waiter

if TYPE_CHECKING:
    from agentwake.store.port import ResultQueuePort, SessionLeasePort

__all__ = ["RESERVATION_S", "complete", "decline", "hand_off", "prepare", "release", "take"]


def prepare(leases: SessionLeasePort, queue: ResultQueuePort | None, lease: Lease, run_id: str | None = None) -> Lease:
    """``lease`` naming the session's oldest waiter (one Query), so that its release reserves the
    session for it. Nobody when there is no queue to re-send through. ``run_id``: the run releasing
    the lease, never its own next holder; when it is on the list itself (``Lease.listed``) its
    commit takes it off."""
    if lease.hand_to is not None or not _can_send(queue):
        return lease
    try:
        waiting = leases.waiters(lease.session_id)
    except Exception:  # the waiters' delayed copies remain
        logger.exception("could not read the session's wait list", extra={"session_id": lease.session_id})
        return lease
    listed = run_id is not None and any(w.run_id == run_id for w in waiting)
    return lease.naming(next((w for w in waiting if w.run_id != run_id), None), listed=listed)


def complete(
    leases: SessionLeasePort, queue: ResultQueuePort | None, lease: Lease, *, now: Callable[[], float] = time.time
) -> str | None:
    """After the release: re-send the waiter the session was reserved for; its run id, or None."""
    waiter = lease.hand_to
    if waiter is None or not lease.handed or queue is None:
        return None
    return send(leases, queue, waiter, now=now)


def take(leases: SessionLeasePort, lease: Lease) -> Waiter | None:
    """After the release: the waiter the session was reserved for, for this invocation to run
    itself; None if the release reserved it for nobody. The waiter is marked handed with its copy
    number unchanged, so the delayed copy it keeps in the queue still runs it if this process dies."""
    waiter = lease.hand_to
    if waiter is None or not lease.handed:
        return None
    try:
        leases.mark_handed(waiter.session_id, waiter.run_id, waiter.gen)
    except Exception:  # it stays a candidate; the reservation is its own either way
        logger.exception("could not mark the next waiter handed", extra={"session_id": waiter.session_id})
    metrics.add_metric(name="SessionHandOff", unit="Count", value=1)
    logger.info(
        "session handed to the next waiter, run here",
        extra={"session_id": waiter.session_id, "next_run_id": waiter.run_id},
    )
    return waiter


def send(
    leases: SessionLeasePort, queue: ResultQueuePort, waiter: Waiter, *, now: Callable[[], float] = time.time
) -> str | None:
    """Re-send ``waiter``'s record with no delay, the session reserved for it; its run id, or None
    (the re-send failed: the reservation is given back and its delayed copy remains)."""
    try:
        _send(leases, queue, waiter, now())
    except Exception:
        logger.exception("could not hand the session to its next waiter", extra={"session_id": waiter.session_id})
        _give_back(leases, waiter)
        return None
    return waiter.run_id


def release(leases: SessionLeasePort, queue: ResultQueuePort | None, lease: Lease, run_id: str | None = None) -> Lease:
    """Release ``lease`` (when the commit or the failure record did not), reserving the session for
    its oldest waiter; returns the lease released. A release to nobody fails if a run joined the
    wait list after it was read (it marks the lease: ``SessionLeases.mark_parked``); the list is
    then read again, once, and the second release is unconditional. Raises if the table does not
    answer."""
    if lease.released:
        return lease
    for last in (False, True):
        lease = prepare(leases, queue, lease, run_id)
        hand_to = lease.hand_to.run_id if lease.hand_to is not None else None
        checked = not last and hand_to is None and _can_send(queue)
        if leases.release(lease.session_id, lease.token, hand_to=hand_to, unless_parked=checked):
            return lease.after_release(True)
        if not checked:
            break  # not ours any more (expired and taken over): nothing to hand on
        lease = lease.naming(None)  # somebody joined the list: read it again
    return lease.given_up()


def hand_off(
    leases: SessionLeasePort,
    queue: ResultQueuePort | None,
    session_id: str,
    token: str,
    *,
    now: Callable[[], float] = time.time,
) -> str | None:
    """Release the lease held with ``token`` and hand the session to its oldest waiter (a live
    turn's end); returns that run's id, or None (nobody waits)."""
    lease = release(leases, queue, Lease(session_id=session_id, token=token, attempt=0))
    return complete(leases, queue, lease, now=now)


def decline(
    leases: SessionLeasePort,
    queue: ResultQueuePort | None,
    session_id: str,
    run_id: str,
    *,
    now: Callable[[], float] = time.time,
) -> None:
    """A run handed the session does not take it (it had already succeeded, or it is deferred): give
    the reservation back, and hand the session to the next waiter."""
    try:
        if not leases.release_reservation(session_id, run_id):
            return
        if queue is None or not _can_send(queue):
            return
        for waiter in leases.waiters(session_id)[:3]:
            if waiter.run_id != run_id and leases.reserve(session_id, waiter.run_id, RESERVATION_S):
                _send(leases, queue, waiter, now())
                return
    except Exception:
        logger.exception("could not give back the session's reservation", extra={"session_id": session_id})


def _send(leases: SessionLeasePort, queue: ResultQueuePort, waiter: Waiter, handed_at: float) -> None:
    copy = handed_copy(waiter, gen=waiter.gen + 1, handed_at=handed_at)
    queue.send_later(body=copy.body, delay_s=0, attributes=copy.attributes.to_api(), wait=copy.wait)
    metrics.add_metric(name="SessionHandOff", unit="Count", value=1)
    logger.info(
        "session handed to the next waiter", extra={"session_id": waiter.session_id, "next_run_id": waiter.run_id}
    )
    leases.mark_handed(waiter.session_id, waiter.run_id, waiter.gen + 1)


def _give_back(leases: SessionLeasePort, waiter: Waiter) -> None:
    try:
        leases.release_reservation(waiter.session_id, waiter.run_id)
    except Exception:  # it lapses after RESERVATION_S
        logger.exception("could not give back the session's reservation")


def _can_send(queue: ResultQueuePort | None) -> bool:
    return queue is not None and bool(queue.url)
