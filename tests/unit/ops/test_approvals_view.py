"""What an operator reads of an approval request (agentwake_ops/approvals_view.py): the text the CLI,
the console and ``runs show`` share — what is asked, until when and then what, who decided and how,
never a secret, always bounded."""

from __future__ import annotations

from typing import Any

import pytest

from agentwake.domain.approvals import Approval
from agentwake_ops import approvals_view
from agentwake_ops.context import OpsError


def approval(**changes: Any) -> approvals_view.ApprovalOut:
    fields: dict[str, Any] = dict(
        approval_id="apr-0123456789abcdef01234567",
        run_id="bg:t1",
        session_id="s1",
        step=2,
        call_index=0,
        tool="create_ticket",
        arguments={"amount": 250},
        rule="amount > 100",
        requested_at="2026-12-01T10:00:00Z",
        expiry_at="2026-12-02T10:00:00Z",
        expiry_epoch=1796205600.0,
        token_sha256="f" * 64,
        resume={"kind": "background", "body": "{}"},
    )
    return approvals_view.view(Approval(**{**fields, **changes}))


def test_a_parked_runs_line_says_what_it_waits_for_since_when_until_when_and_how_to_decide() -> None:
    line = approvals_view.waiting_for(approval(), parked_at="2026-12-01T10:00:05Z", step=2)
    assert line.startswith(
        "parked since 2026-12-01 10:00:05 at step 2: waiting for approval apr-0123456789abcdef01234567"
    )
    assert 'create_ticket({"amount": 250}) requested 2026-12-01 10:00:00' in line
    assert "expires 2026-12-02 10:00:00 (then rejected)" in line
    assert "deciders: owners, token, operators" in line
    assert "agentwake approvals approve apr-0123456789abcdef01234567 --yes" in line


def test_what_is_shown_never_holds_the_tokens_hash_nor_the_resume_copy() -> None:
    shown = approval()
    assert "token_sha256" not in shown.model_dump() and "resume" not in shown.model_dump()
    assert "f" * 64 not in " ".join(str(v) for _, v in approvals_view.facts(shown))


def test_arguments_are_redacted_again_and_bounded() -> None:
    secret = "sk-proj-abcdefghijklmnopqrstuvwx"
    shown = approval(arguments={"key": secret, "text": "x" * 5000})
    text = approvals_view.arguments_text(shown)
    assert secret not in text and len(text) == approvals_view.SHOWN_ARGUMENTS_CHARS and text.endswith("…")
    assert len(approvals_view.call_text(shown)) <= len("create_ticket()") + approvals_view.ROW_ARGUMENTS_CHARS


def test_a_decision_says_who_how_when_and_why_and_what_follows() -> None:
    rejected = approval(
        state="rejected",
        decided_by="operator (as carol)",
        decided_via="console",
        decided_at="2026-12-01T11:00:00Z",
        reason="wrong customer",
    )
    assert approvals_view.decision_text(rejected) == (
        'rejected by operator (as carol) via console at 2026-12-01 11:00:00: "wrong customer"'
    )
    assert "without the call" in approvals_view.what_follows(rejected)
    expired = approval(state="rejected", decided_by="expiry", decided_via="expiry", expired=True)
    assert approvals_view.decision_text(expired) == "rejected by expiry"
    assert ("expired", "yes: nobody decided in time") in approvals_view.facts(expired)
    assert "then approved" in approvals_view.then_text(approval(on_expiry="approve"))


@pytest.mark.parametrize(
    ("verb", "reason", "as_name", "said"),
    [
        ("reject", None, None, "says why"),
        ("approve", "  ", None, "reason is empty"),
        ("approve", "x" * 1001, None, "at most 1000"),
        ("approve", None, "", "--as must name"),
    ],
)
def test_an_operators_decision_is_checked_before_anything_is_written(
    verb: str, reason: str | None, as_name: str | None, said: str
) -> None:
    with pytest.raises(OpsError, match=said):
        approvals_view.check_decision(verb, reason, as_name)
