"""An approval request's checks (work-queue kind ``approval``; issue 35): the expiry decides when
nobody does, and a decided request re-queues its parked run — the one re-queue path.

Two kinds of message:

- the **chain** (``check_id``/``after_check``): the park sends the first, visible after min(900 s,
  the time left); each takes the request's one place (``Approvals.claim_check``: a duplicate or a
  retried send's twin retires) and sends its successor. Due and still pending, it decides as the
  rule says (``on_expiry``, reject by default) through ``ApprovalsService.decide``: the same
  conditional write a person's decision makes, so the two racing leave one decision, in either order.
  While the decided run is not resumed, the chain re-sends itself as the re-queue's fallback.
- the **nudge** a decision sends (delay 0, never re-sent).

Either, for a decided request whose run is still ``parked`` on it, re-queues the run through the
session's wait list and the ordinary hand-off (``session.handoff.requeue``): the run takes the
session like any waiter (a live turn holding it hands it over when it ends), and its resume is the
ordinary wake of the same run id, replaying its journal. A run not parked on it (it went on in place,
failed, or resumed already) is left alone: the decision waits in its journal for its retry or redrive.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from agentwake.errors import ApprovalAlreadyDecided
from agentwake.observability import add_metric, logger
from agentwake.session import handoff
from agentwake.session.copies import ATTR_WAIT_COUNT, ATTR_WAITING_SINCE
from agentwake.session.lease import Waiter
from agentwake.wake.messages import WorkMessage
from agentwake.wake.park import approvals_of

if TYPE_CHECKING:
    from agentwake.domain.approvals import Approval
    from agentwake.wake.spec import WakeDeps

#: the chain's fallback re-queue: first after this long, doubling up to SQS's 900 s
FALLBACK_FIRST_S = 60
FALLBACK_MAX_S = 900


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def check_approval(msg: WorkMessage, deps: WakeDeps, *, remaining_ms: int | None, receive_count: int) -> None:
    """One check of request ``msg.approval_id`` (module docstring). A failed write or send raises
    (retryable: the record is retried); nothing here is permanent."""
    assert msg.approval_id is not None
    logger.thread_safe_append_keys(approval_id=msg.approval_id, session_id=msg.session_id)
    store = deps.store
    approval = store.approvals.get(msg.approval_id)
    if approval is None:
        logger.info("check of an approval that does not exist: it retires")
        return
    if msg.check_id is not None and not _live(msg, approval, deps):
        logger.info("a check another check of its approval took the place of retires (one chain)")
        return
    service = approvals_of(deps)
    now = deps.clock.wall()
    if approval.pending:
        if msg.nudge:
            return  # a nudge comes after its decision: nothing pending to do
        if approval.expiry_epoch > now:
            add_metric(name="ApprovalPendingAge", unit="Seconds", value=max(0.0, now - _epoch(approval.requested_at)))
            service.send_check(approval, now=now, after=msg.check_id)
            return
        try:
            approval = service.decide(approval.approval_id, approval.on_expiry, by=None, via="expiry")
        except ApprovalAlreadyDecided as exc:  # a person decided in the same moment: theirs stands
            approval = exc.approval
        logger.info("approval expired: decided as configured", extra={"decision": approval.state})
    if approval.resumed_at is not None:
        logger.info("the decided approval's run has resumed: the chain retires")
        return
    run = store.records.get_run(approval.run_id)
    if run is None or run.status != "parked" or run.waiting_for != approval.approval_id:
        logger.info(
            "the decided approval's run is not parked on it: nothing to re-queue",
            extra={"run_id": approval.run_id, "status": run.status if run else None},
        )
        return
    requeue(approval, deps, now=now)
    if not msg.nudge:
        # the chain carries the re-queue until the run has resumed (a lost hand-off, a full list)
        waited = max(0.0, now - _epoch(approval.decided_at or approval.requested_at))
        delay = min(FALLBACK_MAX_S, max(FALLBACK_FIRST_S, int(waited * 2)))
        service.send_check(approval, now=now, after=msg.check_id, delay_s=delay)


def requeue(approval: Approval, deps: WakeDeps, *, now: float) -> str | None:
    """The decided run joins its session's wait list and takes the session like any waiter; the run
    id handed the session now, or None (its holder hands it over when it releases, or the list is
    full: ``SessionWaitListMax``, and the chain's next check tries again)."""
    cap = deps.settings.session_wait_list_max
    places = deps.store.leases.first_places(approval.session_id, limit=cap)
    if len(places) >= cap and approval.run_id not in places:
        # a full wait list is retried by the chain, never dead-lettered
        add_metric(name="SessionWaitListFull", unit="Count", value=1)
        logger.info("the session's wait list is full: the chain re-queues the decided run later")
        return None
    resume = approval.resume or {}
    decided = _epoch(approval.decided_at) if approval.decided_at else now
    waiter = Waiter(
        session_id=approval.session_id,
        run_id=approval.run_id,
        arrived=now,
        state="waiting",
        gen=1,
        body=str(resume.get("body") or ""),
        attributes=resume.get("attributes") or {},
        # it waited once, since its decision: a fresh receive count, as a redrive has
        wait={ATTR_WAIT_COUNT: "1", ATTR_WAITING_SINCE: str(int(decided * 1000))},
        kind=str(resume.get("kind") or "background"),
        target=str(resume.get("target") or ""),
    )
    handed = handoff.requeue(
        deps.store.leases,
        deps.result_queue,
        waiter,
        ttl_s=deps.settings.session_wait_limit_s,
        now=deps.clock.wall,
        cron=handoff.cron_route(deps.schedules, deps.settings),
    )
    logger.info("decided run re-queued", extra={"run_id": approval.run_id, "handed_to": handed})
    return handed


def _live(msg: WorkMessage, approval: Approval, deps: WakeDeps) -> bool:
    """The check takes its place in the request's one chain (as ``wake.task_deadline._live``)."""
    assert msg.check_id is not None
    if approval.check_id == msg.check_id:
        return True
    return deps.store.approvals.claim_check(approval.approval_id, after=msg.after_check, check=msg.check_id)
