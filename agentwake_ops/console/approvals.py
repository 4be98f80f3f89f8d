"""The console's approvals: ``/approvals`` (pending first, ``approvals list``), ``/approval?id=``
(``approvals show``, with approve and reject buttons while pending), and the decision, through a
confirmation page with a reason and the per-start CSRF token like the task cancel
(``approvals approve|reject ID --yes``: ``ApprovalsService.decide``, via ``console``).

Every value comes from :mod:`agentwake_ops.approvals_view`, the text the CLI prints, escaped here.
"""

from __future__ import annotations

from agentwake_ops import approvals_view
from agentwake_ops.console.html import Markup, facts, h, hidden, link, table
from agentwake_ops.console.links import DECISION_VERBS, decide_buttons
from agentwake_ops.console.pages import Query, one
from agentwake_ops.context import OpsContext, OpsError


def _read(ctx: OpsContext, approval_id: str) -> approvals_view.ApprovalOut:
    if not approval_id:
        raise OpsError("say which approval: /approval?id=APPROVAL_ID")
    found = ctx.approvals.approvals.get(approval_id)
    if found is None:
        raise OpsError(f"no approval {approval_id!r} (list them on /approvals)")
    return approvals_view.view(found)


def approvals(ctx: OpsContext, query: Query, csrf: str) -> Markup:
    """``approvals list``: every request, pending first, each linked to its page and its run."""
    state = one(query, "state", "all")
    if state not in approvals_view.LIST_STATES:
        raise OpsError(f"state must be one of {', '.join(approvals_view.LIST_STATES)}, got {state!r}")
    found = [
        approvals_view.view(a) for a in ctx.approvals.approvals.all_approvals(state=None if state == "all" else state)
    ]
    found.sort(key=lambda a: a.state != "pending")  # stable: pending first, each newest first
    rows = []
    for a in found:
        cells = approvals_view.row(a)
        rows.append(
            (
                link("/approval", a.approval_id, id=a.approval_id),
                cells[1],
                link("/run", a.run_id, id=a.run_id),
                *cells[3:],
            )
        )
    filters = " ".join(
        str(link("/approvals", s, state=s)) if s != state else f"<strong>{h(s)}</strong>"
        for s in approvals_view.LIST_STATES
    )
    return Markup(
        f"<p class='muted'>{len(rows)} approval request(s), pending first (<code>agentwake approvals list</code>). "
        f"State: {filters}</p>" + table(approvals_view.ROW_COLUMNS, rows, cls="approvals")
    )


def approval(ctx: OpsContext, query: Query, csrf: str) -> Markup:
    """``approvals show``: the request, its run, its state and decision; while pending, the buttons."""
    shown = _read(ctx, one(query, "id"))
    linked = {
        "session": link("/sessions", shown.session_id, id=shown.session_id),
        "run": link("/run", shown.run_id, id=shown.run_id),
    }
    rows = [(label, linked.get(label, value)) for label, value in approvals_view.facts(shown)]
    return Markup(facts(rows) + Markup(decide_buttons(shown, csrf)))


def _decision(form: Query) -> str:
    verb = one(form, "decision")
    if verb not in DECISION_VERBS:
        raise OpsError(f"decision must be approve or reject, got {verb!r}")
    return verb


def confirm(ctx: OpsContext, form: Query, csrf: str) -> Markup:
    """The confirmation page: the call, what the decision does, a reason (required to reject) and who decides."""
    shown = _read(ctx, one(form, "id"))
    verb = _decision(form)
    if shown.state != "pending":
        return Markup(
            f"<p class='note' id='already'>{h(shown.approval_id)} is decided already: "
            f"{h(approvals_view.decision_text(shown))}.</p><p>"
            + link("/approval", "back to the approval", id=shown.approval_id)
            + "</p>"
        )
    what = (
        "The parked run resumes and makes the call, once."
        if verb == "approve"
        else "The parked run resumes without the call; the agent reads who rejected it and why."
    )
    required = " required" if verb == "reject" else ""
    return Markup(
        f"<p class='note' id='confirm-decision'>{h(verb.title())} {h(shown.approval_id)}: "
        f"{h(approvals_view.call_text(shown))} for run {h(shown.run_id)}?</p><p>{h(what)} A decision is written "
        "once: there is no undo.</p>"
        f"<form method='post' action='approval/decide'>{hidden('csrf', csrf)}{hidden('id', shown.approval_id)}"
        f"{hidden('decision', verb)}"
        f"<p><label>reason <input name='reason' maxlength='{approvals_view.MAX_REASON}'{required}></label></p>"
        "<p><label>as (your name, recorded with the decision) <input name='as' maxlength='200'></label></p>"
        f"<button id='confirm'>{h(verb.title())} {h(shown.approval_id)}</button></form>"
        "<p>" + link("/approval", "back: leave it pending", id=shown.approval_id) + "</p>"
    )


def decide(ctx: OpsContext, form: Query, csrf: str) -> Markup:
    """``approvals approve|reject ID --yes``, confirmed on the page before."""
    approval_id = one(form, "id")
    verb = _decision(form)
    reason = one(form, "reason") or None
    as_name = one(form, "as") or None
    approvals_view.check_decision(verb, reason, as_name)
    _read(ctx, approval_id)
    decided = approvals_view.view(
        ctx.approvals.decide(approval_id, verb, by=as_name, via="console", reason=reason, token=None, principal=None)
    )
    return Markup(
        f"<p class='ok' id='decision-result'>{h(decided.approval_id)}: {h(approvals_view.decision_text(decided))}; "
        f"{h(approvals_view.what_follows(decided))}</p><p>"
        + link("/approval", "back to the approval", id=decided.approval_id)
        + " · "
        + link("/run", "the run", id=decided.run_id)
        + "</p>"
    )
