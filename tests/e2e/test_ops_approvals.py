"""``agentwake approvals list|show|approve|reject``: an operator reads the requests of gated tool calls
and decides them (docs/operations.md "Deciding approvals"). The requests are written as the park writes
them (tests/support/approval_items.py)."""

from __future__ import annotations

from tests.e2e.conftest import Cli, Stack, cli_json
from tests.support.approval_items import TOKEN, put_approval

PENDING = "apr-000000000000000000000001"
REJECTED = "apr-000000000000000000000002"
OTHER = "apr-000000000000000000000003"


def seed(stack: Stack) -> None:
    put_approval(
        stack.store,
        PENDING,
        requested_at="2026-12-01T09:00:00Z",
        arguments={"amount": 250, "api_key": "sk-proj-abcdefghijklmnopqrstuvwx"},
    )
    put_approval(
        stack.store,
        REJECTED,
        requested_at="2026-12-01T11:00:00Z",
        state="rejected",
        decided_by="operator (bob)",
        decided_via="cli",
        decided_at="2026-12-01T11:05:00Z",
        reason="wrong customer",
    )
    put_approval(stack.store, OTHER, session_id="bob", requested_at="2026-12-01T12:00:00Z")


def test_an_operator_lists_approvals_pending_first_and_filters_them(cli: Cli, stack: Stack) -> None:
    # GIVEN two approvals of session alice (one pending, one rejected later) and one of bob
    seed(stack)
    # WHEN an operator lists them all
    listed = [a["approval_id"] for a in cli_json(cli, "approvals", "list")]
    # THEN the pending ones come first (newest first), then the decided
    assert listed == [OTHER, PENDING, REJECTED]
    # AND the filters take one session, one state
    assert [
        a["approval_id"] for a in cli_json(cli, "approvals", "list", "--session", "alice", "--state", "pending")
    ] == [PENDING]
    assert [a["approval_id"] for a in cli_json(cli, "approvals", "list", "--state", "rejected")] == [REJECTED]
    # AND the table names the call each asks about, never a secret argument nor the token's hash
    table = cli("approvals", "list", "--wide").stdout
    assert PENDING in table and "create_ticket" in table and "rejected" in table
    assert "sk-proj-abcdefghijklmnopqrstuvwx" not in table and "token_sha256" not in table
    # AND a state it does not know is refused in one line
    assert "--state must be one of" in cli("approvals", "list", "--state", "maybe", expect=1).stderr


def test_show_says_what_is_asked_until_when_and_how_to_decide_never_the_token(cli: Cli, stack: Stack) -> None:
    seed(stack)
    # WHEN an operator shows the pending request
    shown = cli("approvals", "show", PENDING).stdout
    # THEN it names the call, why it was asked, the run, the expiry and then what, and how to decide
    for said in ("create_ticket", "amount > 100", "bg:task-1", "2026-12-02 10:00:00 (then rejected)"):
        assert said in shown, said
    assert f"agentwake approvals approve {PENDING}" in shown.replace("\n", " ").replace("│", " ")
    # AND its JSON carries no token nor its hash nor the resume copy
    data = cli_json(cli, "approvals", "show", PENDING)
    assert data["state"] == "pending" and "token_sha256" not in data and "resume" not in data
    assert TOKEN not in cli("approvals", "show", PENDING, "--json").stdout
    # AND a decided one says who decided, how, when and why
    decided = cli("approvals", "show", REJECTED).stdout
    assert 'rejected by operator (bob) via cli at 2026-12-01 11:05:00: "wrong customer"' in " ".join(decided.split())
    # AND an unknown id says so
    assert "no approval" in cli("approvals", "show", "apr-nope", expect=1).stderr
