"""``agentwake approvals list|show|approve|reject``: an operator reads the requests of gated tool calls
and decides them through the one decision path (docs/operations.md "Deciding approvals"). The requests
are written as the park writes them (tests/support/approval_items.py)."""

from __future__ import annotations

import json
import time

from agentwake.domain.steps import decision_key
from agentwake.store.keys import run_pk, step_sk
from tests.e2e.conftest import Cli, Stack, cli_json
from tests.support.approval_items import TOKEN, park_run, put_approval

SECRET = "sk-proj-abcdefghijklmnopqrstuvwx"


def seed(stack: Stack) -> tuple[str, str, str]:
    """Session alice: one request pending (a secret among its arguments), one rejected later; bob: one pending."""
    pending = put_approval(
        stack.store,
        run_id="bg:t-pending",
        requested_at="2026-12-01T09:00:00Z",
        arguments={"amount": 250, "key": SECRET},
    )
    rejected = put_approval(stack.store, run_id="bg:t-rejected", requested_at="2026-12-01T11:00:00Z")
    other = put_approval(stack.store, session_id="bob", run_id="bg:t-bob", requested_at="2026-12-01T12:00:00Z")
    return pending.approval_id, rejected.approval_id, other.approval_id


def test_an_operator_lists_approvals_pending_first_and_filters_them(cli: Cli, stack: Stack) -> None:
    # GIVEN two requests of session alice (the later one rejected by an operator) and one of bob
    pending, rejected, other = seed(stack)
    cli("approvals", "reject", rejected, "--reason", "wrong customer", "--yes")
    # WHEN an operator lists them all
    listed = [a["approval_id"] for a in cli_json(cli, "approvals", "list")]
    # THEN the pending ones come first (newest first), then the decided
    assert listed == [other, pending, rejected]
    # AND the filters take one session, one state
    only = cli_json(cli, "approvals", "list", "--session", "alice", "--state", "pending")
    assert [a["approval_id"] for a in only] == [pending]
    assert [a["approval_id"] for a in cli_json(cli, "approvals", "list", "--state", "rejected")] == [rejected]
    # AND the table names the call each asks about, never a secret argument nor the token's hash
    table = cli("approvals", "list", "--wide").stdout
    assert pending in table and "create_ticket" in table and "rejected" in table
    assert SECRET not in table and "token_sha256" not in table
    # AND a state it does not know is refused in one line
    assert "--state must be one of" in cli("approvals", "list", "--state", "maybe", expect=1).stderr


def test_show_says_what_is_asked_until_when_and_how_to_decide_never_the_token(cli: Cli, stack: Stack) -> None:
    pending, _, _ = seed(stack)
    # WHEN an operator shows the pending request
    shown = " ".join(cli("approvals", "show", pending).stdout.replace("│", " ").split())
    # THEN it names the call, why it was asked, the run, the expiry and then what, and how to decide
    for said in ("create_ticket", "amount > 100", "bg:t-pending", "2099-12-02 10:00:00 (then rejected)"):
        assert said in shown, said
    assert f"agentwake approvals approve {pending} --yes" in shown
    assert SECRET not in shown
    # AND its JSON carries no token nor its hash nor the resume copy
    raw = cli("approvals", "show", pending, "--json").stdout
    data = json.loads(raw)
    assert data["state"] == "pending" and "token_sha256" not in data and "resume" not in data
    assert TOKEN not in raw
    # AND an unknown id says so
    assert "no approval" in cli("approvals", "show", "apr-nope", expect=1).stderr


def test_an_operator_approves_once_and_a_different_decision_is_refused_saying_what_stands(
    cli: Cli, stack: Stack
) -> None:
    pending, _, _ = seed(stack)
    # WHEN an operator approves without --yes and no terminal to ask THEN it is refused, nothing changed
    assert "pass --yes" in cli("approvals", "approve", pending, expect=1).stderr
    assert cli_json(cli, "approvals", "show", pending)["state"] == "pending"
    # WHEN they approve it with their name
    said = " ".join(cli("approvals", "approve", pending, "--as", "alice", "--yes").stdout.split())
    # THEN it is approved once, naming who and how, and the run's journal holds the decision
    assert "approved by operator (as alice) via cli" in said and "resumes and makes the call once" in said
    shown = cli_json(cli, "approvals", "show", pending)
    assert (shown["state"], shown["decided_by"], shown["decided_via"]) == ("approved", "operator (as alice)", "cli")
    step = stack.store.table.read_item(run_pk("bg:t-pending"), step_sk(decision_key(1, 0)))
    assert step is not None
    # AND the same decision again answers the same, without asking
    assert cli_json(cli, "approvals", "approve", pending, "--json")["decided_at"] == shown["decided_at"]
    # AND a rejection now is refused in one line saying what was decided, and nothing changed
    refused = cli("approvals", "reject", pending, "--reason", "no", "--yes", expect=1).stderr
    assert "approved" in refused and "operator (as alice)" in refused
    assert cli_json(cli, "approvals", "show", pending)["state"] == "approved"


def test_an_expired_request_is_left_to_its_expiry_and_the_operator_is_told_so(cli: Cli, stack: Stack) -> None:
    # GIVEN a pending request whose expiry passed an hour ago, its expiry's check not yet come
    expired = put_approval(
        stack.store,
        run_id="bg:t-expired",
        requested_at="2026-12-01T09:00:00Z",
        expiry_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 3600)),
    ).approval_id
    # WHEN an operator approves it without --yes THEN the question says it expired and what the expiry decides
    asked = " ".join(cli("approvals", "approve", expired, expect=1).stderr.split())
    assert "expired at" in asked and "be decided by its expiry (reject)" in asked, asked
    assert cli_json(cli, "approvals", "show", expired)["state"] == "pending"
    # WHEN they go on THEN the expiry decides (reject) and the approval is refused saying so
    refused = " ".join(cli("approvals", "approve", expired, "--yes", expect=1).stderr.split())
    assert "rejected by expiry" in refused, refused
    shown = cli_json(cli, "approvals", "show", expired)
    assert (shown["state"], shown["decided_by"], shown["expired"]) == ("rejected", "expiry", True)


def test_a_rejection_says_why_or_is_refused(cli: Cli, stack: Stack) -> None:
    pending, _, _ = seed(stack)
    # WHEN an operator rejects with an empty reason THEN it is refused before anything is written
    assert "reason" in cli("approvals", "reject", pending, "--reason", " ", "--yes", expect=1).stderr
    assert cli_json(cli, "approvals", "show", pending)["state"] == "pending"
    # WHEN they reject with a reason THEN the request says who, how and why
    cli("approvals", "reject", pending, "--reason", "wrong customer", "--yes")
    decided = " ".join(cli("approvals", "show", pending).stdout.replace("│", " ").split())
    assert "rejected by operator via cli at" in decided and '"wrong customer"' in decided


def test_a_parked_run_shows_what_it_waits_for_since_when_and_how_to_decide(cli: Cli, stack: Stack) -> None:
    # GIVEN a run parked on a request, and a run of the same session that succeeded
    approval = put_approval(stack.store, run_id="bg:t-parked", requested_at="2026-12-01T10:00:00Z")
    park_run(stack.store, approval)
    other = put_approval(stack.store, run_id="bg:t-done")
    park_run(stack.store, other, started_at="2026-12-01T09:00:00Z")
    stack.store.table.db.update_item(
        TableName=stack.store.table.name,
        Key={"pk": {"S": "RUN#bg:t-done"}, "sk": {"S": "RUN"}},
        UpdateExpression="SET #s = :s REMOVE waiting_for, parked_at",
        ExpressionAttributeNames={"#s": "status"},
        ExpressionAttributeValues={":s": {"S": "succeeded"}},
    )
    # WHEN an operator shows the parked run
    shown = " ".join(cli("runs", "show", "bg:t-parked").stdout.split())
    # THEN it says since when, at which step, what it waits for, until when and then what, and how to decide
    assert "parked since 2026-12-01 10:00:00 at step 1: waiting for approval" in shown
    assert approval.approval_id in shown and 'create_ticket({"amount": 250, "customer": "acme"})' in shown
    assert "expires 2099-12-02 10:00:00 (then rejected)" in shown
    assert f"agentwake approvals approve {approval.approval_id} --yes" in shown
    waiting = cli_json(cli, "runs", "show", "bg:t-parked")["waiting_for"]
    assert waiting["approval_id"] == approval.approval_id and "token_sha256" not in waiting
    # AND `runs list --status parked` lists it alone, by session and by day
    for extra in (["--session", "alice"], []):
        listed = cli_json(cli, "runs", "list", "--status", "parked", "--since", "2026-11-30T00:00:00Z", *extra)
        rows = listed["runs"] if isinstance(listed, dict) else listed
        assert [r["run_id"] for r in rows] == ["bg:t-parked"], extra
    # AND a run that is not parked shows no such line
    assert "waiting for approval" not in cli("runs", "show", "bg:t-done").stdout


def test_a_run_that_asked_still_shows_and_lists_as_a_tree(cli: Cli, stack: Stack) -> None:
    # GIVEN a run whose call asked for approval (the request is on the session's tree index, under its run)
    approval = put_approval(stack.store, run_id="bg:t-asked")
    # WHEN the run is shown, and the session's runs as a tree
    shown = cli("runs", "show", "bg:t-asked").stdout
    cli("runs", "list", "--session", "alice", "--tree")
    # THEN both answer: the request is named as the run's approval, not mistaken for a task or a job
    assert "bg:t-asked" in shown and "tasks this run started" not in shown
    assert f"approval {approval.approval_id}: create_ticket, pending" in " ".join(shown.replace("│", " ").split())


def test_what_a_decider_wrote_reaches_the_terminal_inert(cli: Cli, stack: Stack) -> None:
    # GIVEN a request rejected with a reason and a name holding terminal controls
    pending, _, _ = seed(stack)
    from agentwake.product.approvals import ApprovalsService

    ApprovalsService(stack.store).decide(
        pending, "reject", by="\x1b]0;pwned\x07eve", via="console", reason="no\x1b[2J thanks"
    )
    # WHEN an operator lists and shows it THEN no control character reaches the terminal, shown as text
    for out in (cli("approvals", "show", pending).stdout, cli("approvals", "list", "--wide").stdout):
        assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b" in cli("approvals", "show", pending).stdout
