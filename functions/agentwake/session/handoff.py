"""The hand-off: whoever releases a session (a run, a live turn) gives it at once to the run that has
waited for it longest (docs/durability.md, "Who holds a session").

Before its release the holder reads the session's wait list (``prepare``: the oldest waiter still
waiting; a run reads it before its commit or failure record, which take the run itself off the
list). The release (``release``: one plain conditional write after the commit, the failure record
or the park, and at a live turn's end) then turns the lease into a reservation for that run in the
same write: only that run's lease may replace it, anyone's after ``RESERVATION_S``. After the
release (``complete``) a newer copy of the waiter (``agentwake-wait-gen``) is sent on and the waiter
marked handed; its older copy retires when it comes back. A result's copy is re-sent to the
result queue with no delay; a cron wake's is a one-time schedule ``at(now)`` invoking the function it
came through (EventBridge Scheduler fires within its 60 s precision: the slow path, for a release
with no time to run it). Or, when the releasing invocation has the time, it runs the waiter itself
(``take``), whatever its kind, through that waiter's own use case: no round trip stands between two
runs of the session, and the waiter's fallback copy, left as it is (same copy number), stays the
fallback.

Nothing here fails the holder's own outcome: a hand-off that does not happen (the wait list could
not be read, the re-send failed) leaves the waiter to its delayed copy, as before the hand-off
existed, and a reservation nobody takes lapses after ``RESERVATION_S``.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentwake.observability import add_metric, logger
from agentwake.session.copies import HandedCopy, handed_copy, schedule_cron_copy
from agentwake.session.lease import RESERVATION_S, Lease, Waiter

if TYPE_CHECKING:
    from agentwake.settings import Settings
    from agentwake.store.port import SessionLeasePort
    from agentwake.store.port_queues import ResultQueuePort, SchedulesPort

__all__ = [
    "RESERVATION_S",
    "CronRoute",
    "complete",
    "cron_route",
    "decline",
    "hand_off",
    "offer",
    "prepare",
    "release",
    "requeue",
    "take",
]


@dataclass(frozen=True)
class CronRoute:
    """How a release sends a cron waiter's copy on when it cannot run it here: a one-time schedule
    ``at(now)`` that invokes the function the waiter came through, as its job's schedule would."""

    schedules: SchedulesPort
    role_arn: str
    dlq_arn: str | None = None

    def send(self, copy: HandedCopy, *, target: str, gen: int, at: float) -> None:
        schedule_cron_copy(
            self.schedules,
            name=handed_schedule_name(copy.run_id, gen),
            at=at,
            target=target,
            role_arn=self.role_arn,
            dlq_arn=self.dlq_arn,
            payload=copy.as_cron_event(),
        )


def cron_route(schedules: SchedulesPort | None, settings: Settings) -> CronRoute | None:
    """The route of cron waiters' copies, or None where there is no scheduler (a bare setup): a
    cron waiter handed the session there is left to its own fallback schedule."""
    if schedules is None or not schedules.group or not settings.scheduler_role_arn:
        return None
    return CronRoute(schedules, settings.scheduler_role_arn, settings.scheduler_dlq_arn)


def handed_schedule_name(run_id: str, gen: int) -> str:
    """The one-time schedule of a cron waiter's handed copy ``gen`` (<= 64 characters): a second
    release handing the same copy finds it exists."""
    return f"handed-{hashlib.sha256(run_id.encode()).hexdigest()[:32]}-{gen}"


def prepare(leases: SessionLeasePort, queue: ResultQueuePort | None, lease: Lease, run_id: str | None = None) -> Lease:
    """``lease`` naming the session's oldest waiter, so that its release reserves the session for
    it: one Query of the list's first places (nobody waits: that is all), then that waiter's item —
    not the other waiters' bodies, however many wait. Nobody when there is no queue to re-send
    through. ``run_id``: the run releasing the lease, never its own next holder; when it is on the
    list itself (``Lease.listed``) its commit takes it off. A lease named already (read before its
    run's commit or failure record) is not read again: a run that joined the list since marked the
    lease, and the release to nobody fails on that mark (``release``)."""
    if lease.named or not _can_send(queue):
        return lease
    try:
        waiting, listed = leases.head(lease.session_id, first=1, skip=run_id)
    except Exception:  # the waiters' delayed copies remain
        logger.exception("could not read the session's wait list", extra={"session_id": lease.session_id})
        return lease
    return lease.naming(waiting[0] if waiting else None, listed=listed)


def complete(
    leases: SessionLeasePort,
    queue: ResultQueuePort | None,
    lease: Lease,
    *,
    now: Callable[[], float] = time.time,
    cron: CronRoute | None = None,
) -> str | None:
    """After the release: send on the waiter the session was reserved for; its run id, or None."""
    waiter = lease.hand_to
    if waiter is None or not lease.handed or queue is None:
        return None
    return send(leases, queue, waiter, now=now, cron=cron)


def take(leases: SessionLeasePort, lease: Lease) -> Waiter | None:
    """After the release: the waiter the session was reserved for, for this invocation to run
    itself; None if the release reserved it for nobody. Nothing is written between the release and
    that run's start: its start marks it started and takes its place off the list in the
    transaction that counts its attempt (under the lease it took just before), and no other
    release can name it meanwhile (the reservation is its own). Its copy number is unchanged, so the delayed copy it keeps in the queue still runs
    it if this process dies (the waiter is still ``waiting`` then, as it was)."""
    waiter = lease.hand_to
    if waiter is None or not lease.handed:
        return None
    add_metric(name="SessionHandOff", unit="Count", value=1)
    logger.info(
        "session handed to the next waiter, run here",
        extra={"session_id": waiter.session_id, "next_run_id": waiter.run_id},
    )
    return waiter


def send(
    leases: SessionLeasePort,
    queue: ResultQueuePort,
    waiter: Waiter,
    *,
    now: Callable[[], float] = time.time,
    cron: CronRoute | None = None,
) -> str | None:
    """Send on a newer copy of ``waiter``, the session reserved for it; the run id of the waiter
    handed the session, or None. When that send fails (or a cron waiter has no route from here) the
    reservation is given back, the waiter keeps its fallback copy, and the session goes to the next
    waiter instead: nobody behind a waiter that cannot be sent waits for a delayed copy."""
    try:
        _send(leases, queue, waiter, now(), cron)
    except Exception:
        logger.exception("could not hand the session to its next waiter", extra={"session_id": waiter.session_id})
        _give_back(leases, waiter)
        return _pass_on(leases, queue, waiter.session_id, skip=waiter.run_id, now=now, cron=cron)
    return waiter.run_id


def release(leases: SessionLeasePort, queue: ResultQueuePort | None, lease: Lease, run_id: str | None = None) -> Lease:
    """Release ``lease`` (after the run's commit, failure record or park; a live turn's end),
    reserving the session for its oldest waiter; returns the lease released. A release to nobody
    fails if a run joined the wait list after it was read (it marks the lease:
    ``SessionLeases.mark_parked``); the list is then read again, once, and the second release is
    unconditional. Raises if the table does not answer."""
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
        lease = lease.read_again()  # somebody joined the list: read it again
    return lease.given_up()


def hand_off(
    leases: SessionLeasePort,
    queue: ResultQueuePort | None,
    session_id: str,
    token: str,
    *,
    now: Callable[[], float] = time.time,
    cron: CronRoute | None = None,
) -> str | None:
    """Release the lease held with ``token`` and hand the session to its oldest waiter (a live
    turn's end); returns that run's id, or None (nobody waits)."""
    lease = release(leases, queue, Lease(session_id=session_id, token=token, attempt=0))
    return complete(leases, queue, lease, now=now, cron=cron)


def decline(
    leases: SessionLeasePort,
    queue: ResultQueuePort | None,
    session_id: str,
    run_id: str,
    *,
    now: Callable[[], float] = time.time,
    cron: CronRoute | None = None,
) -> None:
    """A run handed the session does not take it (it had already succeeded, or it is deferred): give
    the reservation back, and hand the session to the next waiter, whatever its kind."""
    try:
        if not leases.release_reservation(session_id, run_id):
            return
    except Exception:
        logger.exception("could not give back the session's reservation", extra={"session_id": session_id})
        return
    _pass_on(leases, queue, session_id, skip=run_id, now=now, cron=cron)


def offer(
    leases: SessionLeasePort,
    queue: ResultQueuePort | None,
    session_id: str,
    *,
    now: Callable[[], float] = time.time,
    cron: CronRoute | None = None,
) -> str | None:
    """Reserve the free session for its oldest waiter that can be sent from here and send its copy;
    the run id handed the session, or None (nobody waits, or somebody holds the session now)."""
    return _pass_on(leases, queue, session_id, skip=None, now=now, cron=cron)


def requeue(
    leases: SessionLeasePort,
    queue: ResultQueuePort | None,
    waiter: Waiter,
    *,
    ttl_s: float,
    now: Callable[[], float] = time.time,
    cron: CronRoute | None = None,
) -> str | None:
    """A parked run whose approval was decided takes the session like any waiter (issue 35): it
    joins the wait list at the back (``waiter``: its copy, kind and wait state), then marks the lease
    so its holder (a live turn, another run) hands the session over on release, or — nobody holds the
    session — the session is offered to its oldest waiter now. A mark that did not land may mean a
    holder after all (its tries met transactions on the lease): when the offer finds the session
    held, the lease is marked again, once. Returns the run id handed the session now (this run, or
    an older waiter), or None (a holder hands it over when it releases)."""
    leases.park_waiter(
        session_id=waiter.session_id,
        run_id=waiter.run_id,
        gen=waiter.gen,
        body=waiter.body,
        attributes=waiter.attributes or {},
        wait=waiter.wait or {},
        ttl_s=ttl_s,
        kind=waiter.kind,
        target=waiter.target,
    )
    for _ in range(2):
        if leases.mark_parked(waiter.session_id):
            logger.info("decided run waits for its session's holder", extra={"next_run_id": waiter.run_id})
            return None
        handed = offer(leases, queue, waiter.session_id, now=now, cron=cron)
        if handed is not None:
            return handed
    return None  # the approval's chain re-queues it later


#: how many waiters a hand-off tries after the first one it chose could not be sent
PASS_ON_TRIES = 3


def _pass_on(
    leases: SessionLeasePort,
    queue: ResultQueuePort | None,
    session_id: str,
    *,
    skip: str | None,
    now: Callable[[], float],
    cron: CronRoute | None,
) -> str | None:
    """Reserve the free session for the oldest waiter other than ``skip`` that can be sent from
    here (a cron waiter needs ``cron``) and send it on, trying up to ``PASS_ON_TRIES``; the run id
    handed the session, or None (nobody else waits, or somebody else holds the session now)."""
    if queue is None or not _can_send(queue):
        return None
    try:
        waiting = [w for w in leases.waiters(session_id, first=PASS_ON_TRIES, skip=skip) if _sendable(w, cron)]
    except Exception:  # the waiters' delayed copies remain
        logger.exception("could not read the session's wait list", extra={"session_id": session_id})
        return None
    for waiter in waiting[:PASS_ON_TRIES]:
        try:
            if not leases.reserve(session_id, waiter.run_id, RESERVATION_S):
                return None  # taken meanwhile: its holder hands it on when it releases
            _send(leases, queue, waiter, now(), cron)
        except Exception:
            logger.exception("could not hand the session to its next waiter", extra={"session_id": session_id})
            _give_back(leases, waiter)
            continue
        return waiter.run_id
    return None


def _sendable(waiter: Waiter, cron: CronRoute | None) -> bool:
    return waiter.kind != "cron" or (cron is not None and bool(waiter.target))


def _send(
    leases: SessionLeasePort, queue: ResultQueuePort, waiter: Waiter, handed_at: float, cron: CronRoute | None
) -> None:
    gen = waiter.gen + 1
    copy = handed_copy(waiter, gen=gen, handed_at=handed_at)
    if waiter.kind == "cron":
        if cron is None or not waiter.target:
            raise LookupError("no route to send a cron waiter's copy on: its fallback schedule carries it")
        cron.send(copy, target=waiter.target, gen=gen, at=handed_at)
    else:
        queue.send_later(body=copy.body, delay_s=0, attributes=copy.attributes.to_api(), wait=copy.wait)
    add_metric(name="SessionHandOff", unit="Count", value=1)
    logger.info(
        "session handed to the next waiter", extra={"session_id": waiter.session_id, "next_run_id": waiter.run_id}
    )
    leases.mark_handed(waiter.session_id, waiter.run_id, gen, waiter.arrived)


def _give_back(leases: SessionLeasePort, waiter: Waiter) -> None:
    try:
        leases.release_reservation(waiter.session_id, waiter.run_id)
    except Exception:  # it lapses after RESERVATION_S
        logger.exception("could not give back the session's reservation")


def _can_send(queue: ResultQueuePort | None) -> bool:
    return queue is not None and bool(queue.url)
