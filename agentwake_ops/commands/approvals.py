"""``agentwake approvals list|show|approve|reject``: the requests of gated tool calls (a parked run
waits for one; docs/tools.md "Asking before acting") and deciding them as an operator.

A decision goes through ``ApprovalsService.decide``, the one decision path the product API, the
console and the expiry take: it is written once (the same decision again changes nothing, a different
one is refused saying what was decided) and re-queues the parked run.
"""

from __future__ import annotations

from typing import Annotated

import typer

from agentwake_ops import approvals_view, render
from agentwake_ops.cli_common import JsonOpt, WideOpt, YesOpt, check_id, confirm, fail, ops, user_error

app = typer.Typer(
    help="Approval requests of gated tool calls: list and show them, approve or reject one (the parked run resumes).",
    no_args_is_help=True,
)

AsOpt = Annotated[
    str | None,
    typer.Option("--as", help="Who decides, recorded as 'operator (as NAME)' (default: operator).", metavar="NAME"),
]


@app.command("list", epilog="Example: agentwake approvals list --state pending")
def approvals_list(
    ctx: typer.Context,
    session: Annotated[str | None, typer.Option("--session", help="Only this session's approvals.")] = None,
    state: Annotated[
        str,
        typer.Option(
            "--state",
            help="Only approvals in this state (all: every one).",
            metavar="|".join(approvals_view.LIST_STATES),
        ),
    ] = "all",
    as_json: JsonOpt = False,
    wide: WideOpt = False,
) -> None:
    """List approval requests, pending first, then newest first.

    Each row: the call it asks about, its state, when it was requested and when it expires.
    """
    if session is not None:
        check_id(session, "session id")
    if state not in approvals_view.LIST_STATES:
        raise user_error(f"--state must be one of {', '.join(approvals_view.LIST_STATES)}, got {state!r}")
    shown = approvals_view.listed(ops(ctx).approvals, session_id=session, state=None if state == "all" else state)
    if as_json:
        render.print_json([a.model_dump(mode="json") for a in shown])
        return
    out = render.console()
    if not shown:
        out.print("No approvals" + (" match the filters." if session or state != "all" else "."))
        return
    table = render._table(f"{len(shown)} approval(s), pending first", approvals_view.ROW_COLUMNS)
    for approval in shown:
        table.add_row(*(render.escape(cell) for cell in approvals_view.row(approval)))
    render.print_table(table, drop=("expires", "run", "session"), whole=("approval id",), wide=wide)
    out.print("Show one: agentwake approvals show APPROVAL_ID", style="dim")


@app.command("show", epilog="Example: agentwake approvals show apr-0123456789abcdef01234567")
def approvals_show(
    ctx: typer.Context,
    approval_id: Annotated[str, typer.Argument(help="The approval id.", metavar="APPROVAL_ID")],
    as_json: JsonOpt = False,
) -> None:
    """Show an approval request: the call, why it was asked, its run and its decision.

    Also who may decide, when it expires and what the expiry decides. Never its token.
    """
    approval = _read(ctx, approval_id)
    if as_json:
        render.print_json(approval.model_dump(mode="json"))
        return
    render.console().print(render.facts_panel(approvals_view.facts(approval), "approval"))


@app.command("approve", epilog="Example: agentwake approvals approve apr-0123456789abcdef01234567 --as alice --yes")
def approvals_approve(
    ctx: typer.Context,
    approval_id: Annotated[str, typer.Argument(help="The approval id.", metavar="APPROVAL_ID")],
    reason: Annotated[str | None, typer.Option("--reason", help="Why (shown with the decision).")] = None,
    as_name: AsOpt = None,
    yes: YesOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Approve a pending request: the parked run resumes and makes the call, once. Asks for confirmation."""
    _decide(ctx, approval_id, "approved", reason=reason, as_name=as_name, yes=yes, as_json=as_json)


@app.command(
    "reject", epilog="Example: agentwake approvals reject apr-0123456789abcdef01234567 --reason 'wrong customer' --yes"
)
def approvals_reject(
    ctx: typer.Context,
    approval_id: Annotated[str, typer.Argument(help="The approval id.", metavar="APPROVAL_ID")],
    reason: Annotated[str, typer.Option("--reason", help="Why: the agent reads it as the call's result.")],
    as_name: AsOpt = None,
    yes: YesOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Reject a pending request: the parked run resumes without making the call.

    The agent reads who rejected it and why. Asks for confirmation.
    """
    _decide(ctx, approval_id, "rejected", reason=reason, as_name=as_name, yes=yes, as_json=as_json)


def _read(ctx: typer.Context, approval_id: str) -> approvals_view.ApprovalOut:
    check_id(approval_id, "approval id")
    found = ops(ctx).approvals.approvals.get(approval_id)
    if found is None:
        fail(f"no approval {approval_id!r} (list them with: agentwake approvals list)")
    return approvals_view.view(found)


def _decide(
    ctx: typer.Context,
    approval_id: str,
    decision: str,
    *,
    reason: str | None,
    as_name: str | None,
    yes: bool,
    as_json: bool,
) -> None:
    approvals_view.check_decision("approve" if decision == "approved" else "reject", reason, as_name)
    approval = _read(ctx, approval_id)
    verb = "Approve" if decision == "approved" else "Reject"
    service = ops(ctx).approvals
    stored = service.approvals.get(approval_id)
    if approval.state == "pending" and stored is not None and service.clock() >= stored.expiry_epoch:
        # too late for anyone: the expiry decides (its check may not have come yet)
        confirm(
            f"{approval_id} expired at {approval.expiry_at}: nobody may {verb.lower()} it now; "
            f"let the expiry decide it ({approval.on_expiry})?",
            yes,
            what=f"let a request that expired at {approval.expiry_at} be decided by its expiry ({approval.on_expiry})",
        )
    elif approval.state == "pending":
        confirm(
            f"{verb} {approval_id}: {approvals_view.call_text(approval)} for run {approval.run_id}?",
            yes,
            what=f"{verb.lower()} an approval request",
        )
    decided = approvals_view.view(
        service.decide(approval_id, decision, by=as_name, via="cli", reason=reason, token=None, principal=None)
    )
    if as_json:
        render.print_json(decided.model_dump(mode="json"))
        return
    render.console().print(
        render.escape(f"{approval_id}: {approvals_view.decision_text(decided)}; {approvals_view.what_follows(decided)}")
    )
