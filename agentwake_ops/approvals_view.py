"""What an operator reads of an approval request, as plain text (``approvals list/show``, the console's
approvals pages and a parked run's "waiting for" in ``runs show`` and the console's run page).

An approval is read as the API's ``ApprovalOut`` (never its token's hash, nor the copy a resume
re-sends). Every value here is plain text: the CLI escapes it for rich, the console for HTML; the
arguments are masked (``terminal.masked``) and bounded before either.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from agentwake_ops.terminal import masked

if TYPE_CHECKING:  # the CLI starts without pydantic's models: they load when an approval is read
    from agentwake.product.api_models import ApprovalOut

#: the states ``approvals list --state`` takes (``all``: every state)
LIST_STATES = ("pending", "approved", "rejected", "all")
#: the arguments as shown in a table row, and on a page of their own
ROW_ARGUMENTS_CHARS = 80
SHOWN_ARGUMENTS_CHARS = 2000
#: a decision's reason and the ``--as`` name: the API's bounds
MAX_REASON = 1000
MAX_NAME = 200
#: who may decide besides the request's ``deciders``: operators always may (the admin path)
OPERATORS = "operators"


def view(approval: Any) -> ApprovalOut:
    """A stored approval (a mapping or a model) as what may be shown of it."""
    from agentwake.product.api_models import ApprovalOut

    return approval if isinstance(approval, ApprovalOut) else ApprovalOut.of(approval)


def listed(service: Any, *, session_id: str | None = None, state: str | None = None) -> list[ApprovalOut]:
    """``approvals list`` and the console's ``/approvals``: pending first, each newest request first;
    one session's (its index partition, every page) or every one (a Scan, as ``tasks list``)."""
    store = service.approvals
    if session_id is None:
        found = list(store.all_approvals(state=state))
    else:
        found, cursor = [], None
        while True:
            page, cursor = store.session_approvals(session_id, limit=100, before=cursor, state=state)
            found += page
            if cursor is None:
                break
    shown = sorted((view(a) for a in found), key=lambda a: (a.requested_at, a.approval_id), reverse=True)
    return sorted(shown, key=lambda a: a.state != "pending")


def arguments_text(approval: ApprovalOut, limit: int = SHOWN_ARGUMENTS_CHARS) -> str:
    """The arguments as the person was asked about them (stored redacted; redacted and masked again
    here, so a secret never reaches a terminal or a page), bounded."""
    from agentwake.trust.redact import redact_data

    text = json.dumps(masked(redact_data(approval.arguments)), ensure_ascii=False, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def call_text(approval: ApprovalOut, limit: int = ROW_ARGUMENTS_CHARS) -> str:
    """``create_ticket({"amount": 250})``: the call the agent wants to make."""
    return f"{approval.tool}({arguments_text(approval, limit)})"


def then_text(approval: ApprovalOut) -> str:
    """What happens at the expiry: ``then rejected`` (the default) or ``then approved``."""
    return f"then {'approved' if approval.on_expiry == 'approve' else 'rejected'}"


def deciders_text(approval: ApprovalOut) -> str:
    return ", ".join([*approval.deciders, OPERATORS])


def decision_text(approval: ApprovalOut) -> str:
    """``pending`` or ``rejected by alice via console at T: "wrong customer"``."""
    if approval.state == "pending":
        return "pending"
    by = approval.decided_by or "?"
    via = f" via {approval.decided_via}" if approval.decided_via and approval.decided_via != "expiry" else ""
    at = f" at {_when(approval.decided_at)}" if approval.decided_at else ""
    why = f': "{approval.reason}"' if approval.reason else ""
    return f"{approval.state} by {by}{via}{at}{why}"


def check_decision(verb: str, reason: str | None, as_name: str | None) -> None:
    """An operator's decision as the CLI and the console take it: a reject says why; bounds as the API's."""
    from agentwake_ops.context import OpsError

    if reason is not None and not reason.strip():
        raise OpsError("the reason is empty: say why, or leave it out (approve only)")
    if verb == "reject" and not reason:
        raise OpsError("a rejection says why: the agent reads the reason as the call's result")
    if reason is not None and len(reason) > MAX_REASON:
        raise OpsError(f"the reason is {len(reason)} characters; at most {MAX_REASON}")
    if as_name is not None and not 0 < len(as_name.strip()) <= MAX_NAME:
        raise OpsError(f"--as must name who decides (1-{MAX_NAME} characters)")


def what_follows(decided: ApprovalOut) -> str:
    """What the decision does to the parked run."""
    if decided.resumed_at:
        return f"run {decided.run_id} resumed at {_when(decided.resumed_at)}."
    if decided.state == "approved":
        return f"run {decided.run_id} resumes and makes the call once."
    return f"run {decided.run_id} resumes without the call (the agent reads why)."


def how_to_decide(approval_id: str) -> str:
    return f"agentwake approvals approve {approval_id} --yes | agentwake approvals reject {approval_id} --reason TEXT --yes"


def waiting_for(approval: ApprovalOut, *, parked_at: str | None = None, step: int | None = None) -> str:
    """A parked run's one line: what it waits for, since when, until when and then what, who may decide
    and how (``runs show``, the console's run page)."""
    since = f"parked since {_when(parked_at or approval.requested_at)}"
    at_step = f" at step {step}" if step is not None else ""
    return (
        f"{since}{at_step}: waiting for approval {approval.approval_id} {call_text(approval)} "
        f"requested {_when(approval.requested_at)}, expires {_when(approval.expiry_at)} ({then_text(approval)}), "
        f"deciders: {deciders_text(approval)}; decide: {how_to_decide(approval.approval_id)}"
    )


def facts(approval: ApprovalOut) -> list[tuple[str, Any]]:
    """``approvals show`` and the console's approval page: the request, its run, its state and decision."""
    rows: list[tuple[str, Any]] = [
        ("approval id", approval.approval_id),
        ("session", approval.session_id),
        ("run", approval.run_id),
        ("tool", approval.tool),
        ("arguments", arguments_text(approval)),
        ("why asked", approval.rule),
        ("state", approval.state),
        ("requested", _when(approval.requested_at)),
        ("expires", f"{_when(approval.expiry_at)} ({then_text(approval)})" if approval.expiry_at else None),
        ("deciders", deciders_text(approval)),
    ]
    if approval.state == "pending":
        rows.append(("decide", how_to_decide(approval.approval_id)))
    else:
        rows += [
            ("decision", decision_text(approval)),
            ("expired", "yes: nobody decided in time" if approval.expired else None),
            ("resumed", _when(approval.resumed_at) if approval.resumed_at else None),
        ]
    return rows


def row(approval: ApprovalOut) -> tuple[str, ...]:
    """A table row: id, session, run, call, state, requested, expires."""
    return (
        approval.approval_id,
        approval.session_id,
        approval.run_id,
        call_text(approval),
        approval.state,
        _when(approval.requested_at),
        _when(approval.expiry_at),
    )


ROW_COLUMNS = ("approval id", "session", "run", "call", "state", "requested", "expires")


def _when(iso: str | None) -> str:
    from agentwake_ops.render import when

    return when(iso)
