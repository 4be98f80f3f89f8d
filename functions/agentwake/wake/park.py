"""The park: a run whose model called a tool that asks before acting ends its attempt **parked**
(issue 35; docs/durability.md, "Parked runs") — neither a success (no note) nor a failure (no retry
spent, nothing in the DLQ), holding no session, computing nothing while it waits.

Under the run's lease, in this order:

1. the request's first **check** goes to the work queue (``wake.approval_check``; delay min(900 s,
   the time left)), before the request exists: no request is without its expiry chain;
2. the **request** is written (``store.approvals.request``: the approval item, pending, and its
   ``approval`` journal step), with a fresh decision token stored only hashed;
3. unless the journal reports it asked already, the request is **delivered** to the session's channel
   through the run's ``RecordingChannel`` (delivery id ``{run}#{n}#{i}#approval``; the token only in
   the delivery's ``approval`` payload, never in its text, history, the journal or a log), and its
   ``asked`` step is kept back for the park transaction;
4. the **park** transaction (``RunEnds.record_park``): run ``parked``, the ``asked`` step with the
   delivery's marker and history entry, the request's ``asked_at`` (on ``state = pending``), the run
   off the wait list; then the lease released or handed on, as after a commit (``wake/run.py``).

A request decided before the park landed cancels it: the decision is taken into the journal and the
run goes on in place, in this attempt. The resume after a decision is the ordinary wake of the same
run id (``wake.approval_check`` re-queues it), replaying its journal.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from agentwake.domain.approvals import Approval, approval_id, new_token, shown_arguments, token_sha256
from agentwake.domain.steps import approval_delivery_id, approval_key, asked_key, decision_key
from agentwake.errors import ApprovalAlreadyDecided, RunAlreadySucceeded
from agentwake.observability import add_metric, logger
from agentwake.session import handoff
from agentwake.wake.spec import RunSpec, WakeDeps, WakeOutcome

if TYPE_CHECKING:
    from agentwake.agent.gate import ParkRequest
    from agentwake.agent.woken import RunResult
    from agentwake.product.approvals import ApprovalsService
    from agentwake.wake.attempt import Attempt

#: the path a decision is posted to on the product API (the delivery names it for the receiver)
DECIDE_PATH = "/approvals/{approval_id}/decision"


def approvals_of(deps: WakeDeps) -> ApprovalsService:
    """The wake's approvals service: given, or built on first park over the store and the work queue."""
    if deps.approvals is None:
        from agentwake.product.approvals import ApprovalsService

        deps.approvals = ApprovalsService(
            deps.store, deps.tasks.work_queue if deps.tasks is not None else None, clock=deps.clock.wall
        )
    return deps.approvals


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def park_run(spec: RunSpec, deps: WakeDeps, held: Any, attempt: Attempt, result: RunResult) -> WakeOutcome | RunResult:
    """Park the run on ``result.parked`` (module docstring). Returns how the attempt ended
    (``parked``, or ``already_succeeded``), or — the request was decided before the park landed —
    the ``RunResult`` of the run gone on in place, for the caller to end as any other.

    Raises DeliveryError (the request certainly not sent: the attempt fails, retried, nobody asked)
    and anything a crash raises (the caller records the failure)."""
    park = result.parked
    assert park is not None
    service = approvals_of(deps)
    now = deps.clock.wall()
    approval = _request(spec, park, now)
    token = new_token()
    approval = approval.model_copy(update={"token_sha256": token_sha256(token)})
    journal = attempt.journal
    if journal.get(approval_key(park.step, park.index)) is None:
        # 1. the chain first: no request exists without the check that decides it at its expiry
        if service.work_queue is not None and service.work_queue.url:
            service.send_check(approval, now=now)
        else:
            logger.warning("no work queue (AGENTWAKE_WORK_QUEUE_URL): this request's expiry is not enforced")
    # 2. the request (a retry finds it, and the same pending request gets this attempt's token)
    requested = service.approvals.request(approval, _request_step(approval))
    stored = requested.approval
    journal.learn(approval_key(park.step, park.index), _request_step(stored))
    if not stored.pending:
        return _go_on(spec, attempt, stored)
    # 3. ask, once: the delivery's marker and the ``asked`` step land with the park
    if journal.get(asked_key(park.step, park.index)) is None and requested.token_current:
        _ask(spec, attempt, stored, token)
    # 4. the park transaction; the release after it hands the session on, as after a commit
    lease = held.lease = handoff.prepare(deps.store.leases, deps.result_queue, held.lease, spec.run_id)
    try:
        deps.store.ends.record_park(
            run_id=spec.run_id,
            session_id=spec.session_id,
            approval_id=stored.approval_id,
            asked=deps.store.approvals.asked_item(stored.approval_id),
            steps=result.steps_done,
            job_id=spec.job_id,
            journal=journal,
            lease=lease,
            usage=result.usage,
            waited=spec.waited is not None or lease.listed,
        )
    except ApprovalAlreadyDecided:
        decided = deps.store.approvals.get(stored.approval_id)
        assert decided is not None and not decided.pending
        return _go_on(spec, attempt, decided)
    except RunAlreadySucceeded:
        logger.info("another copy committed this run first")
        return WakeOutcome(run_id=spec.run_id, status="already_succeeded", attempt=lease.attempt)
    add_metric(name="RunParked", unit="Count", value=1)
    logger.info(
        "run parked",
        extra={"approval_id": stored.approval_id, "tool": stored.tool, "step": park.step, "call_index": park.index},
    )
    return WakeOutcome(
        run_id=spec.run_id,
        status="parked",
        attempt=lease.attempt,
        steps=result.steps_done,
        deliveries=len(attempt.channel.sent),
        usage=result.usage or {},
        waiting_for=stored.approval_id,
    )


def _request(spec: RunSpec, park: ParkRequest, now: float) -> Approval:
    """The request of the parked call as this attempt would write it (a retry's finds the stored one)."""
    rule = park.gate.rule
    asked = park.asked or {}
    expires_in_s = int(asked.get("expires_in_s") or rule.expires_in_s)
    return Approval(
        approval_id=approval_id(spec.run_id, park.step, park.index),
        run_id=spec.run_id,
        session_id=spec.session_id,
        kind="cron" if spec.kind == "cron" else "background",
        step=park.step,
        call_index=park.index,
        call_id=park.call.id or "",
        tool=park.call.name or "?",
        arguments=asked.get("arguments") or shown_arguments(park.gate.arguments, rule.hide),
        rule=str(asked.get("rule") or park.gate.words),
        deciders=list(asked.get("deciders") or rule.deciders),
        requested_at=iso(now),
        expiry_at=iso(now + expires_in_s),
        expiry_epoch=round(now + expires_in_s, 3),
        expires_in_s=expires_in_s,
        on_expiry=asked.get("on_expiry") or rule.on_expiry,
        resume=spec.resume,
    )


def _request_step(approval: Approval) -> dict[str, Any]:
    """The journal's ``approval`` step: the gated call as asked. Never a token."""
    return {
        "approval_id": approval.approval_id,
        "tool": approval.tool,
        "call_id": approval.call_id,
        "arguments": approval.arguments,
        "rule": approval.rule,
        "deciders": approval.deciders,
        "expiry_at": approval.expiry_at,
        "expires_in_s": approval.expires_in_s,
        "on_expiry": approval.on_expiry,
    }


def request_text(approval: Approval) -> str:
    """What the person reads (and history keeps): the tool, the shown arguments, the expiry and the
    request's id. Never the token."""
    import json

    then = "approved" if approval.on_expiry == "approve" else "rejected"
    return (
        f"Approval needed: the agent wants to call {approval.tool} with "
        f"{json.dumps(approval.arguments, ensure_ascii=False)} ({approval.rule}). "
        f"Approve or reject by {approval.expiry_at}, else it is {then}. (approval {approval.approval_id})"
    )


def _ask(spec: RunSpec, attempt: Attempt, approval: Approval, token: str) -> None:
    """Deliver the request through the run's recording channel (sent once per delivery id), then
    keep back its ``asked`` step for the park transaction. A DeliveryError: not sent, the attempt fails."""
    from agentwake.delivery import Delivery

    delivery_id = approval_delivery_id(spec.run_id, approval.step, approval.call_index)
    delivery = Delivery(
        delivery_id=delivery_id,
        run_id=spec.run_id,
        session_id=spec.session_id,
        text=request_text(approval),
        approval={
            "approval_id": approval.approval_id,
            "tool": approval.tool,
            "arguments": approval.arguments,
            "expiry_at": approval.expiry_at,
            "on_expiry": approval.on_expiry,
            "token": token,
            "token_gen": approval.token_gen,
            "decide_path": DECIDE_PATH.format(approval_id=approval.approval_id),
        },
    )
    attempt.channel.send(delivery)  # DeliveryError: certainly not sent (the caller fails the attempt)
    attempt.journal.put(
        asked_key(approval.step, approval.call_index),
        {"approval_id": approval.approval_id, "delivery_id": delivery_id, "token_gen": approval.token_gen},
    )


def _go_on(spec: RunSpec, attempt: Attempt, decided: Approval) -> RunResult:
    """Decided before the park landed: take the decision into the journal and run on, in place."""
    logger.info("the approval was decided before the run parked: it goes on in place", extra={"run_id": spec.run_id})
    attempt.journal.learn(decision_key(decided.step, decided.call_index), decided.decision_step())
    return attempt.agent.run()
