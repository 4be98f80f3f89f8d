"""The console's approvals, as ``agentwake approvals`` does them: ``/approvals`` (pending first), an
approval's page with approve and reject buttons while pending, a confirmation page with a reason, then
the decision through ApprovalsService.decide (CSRF-checked POSTs, like the task cancel)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentwake_ops.context import OpsContext, resolve_context
from tests.e2e.conftest import Cli, Stack, cli_json
from tests.support.approval_items import park_run, put_approval
from tests.support.console import ConsoleClient, csrf_of, serving, text_of


@pytest.fixture
def ctx(stack: Stack) -> OpsContext:
    return resolve_context(invoke_async=stack.invoke_async)


@pytest.fixture
def console(ctx: OpsContext) -> Iterator[ConsoleClient]:
    with serving(ctx) as (_, client):
        yield client


def test_the_approvals_page_lists_pending_first_and_links_each(stack: Stack, console: ConsoleClient) -> None:
    # GIVEN a request decided and a later one pending
    decided = put_approval(stack.store, run_id="bg:c1", requested_at="2026-12-01T09:00:00Z")
    pending = put_approval(stack.store, run_id="bg:c2", requested_at="2026-12-01T08:00:00Z", tool="<b>send</b>")
    csrf = csrf_of(console.page("/dlq"))
    console.post("/approval/decide", [("csrf", csrf), ("id", decided.approval_id), ("decision", "approve")])
    # WHEN the page is opened
    page = console.page("/approvals")
    # THEN the pending one comes first, each linked to its page and its run, the tool's name inert
    assert page.index(pending.approval_id) < page.index(decided.approval_id)
    assert f"approval?id={pending.approval_id}" in page and "run?id=bg%3Ac2" in page
    assert "<b>send</b>" not in page and "&lt;b&gt;send&lt;/b&gt;" in page
    # AND the state filter keeps the pending ones
    only = console.page("/approvals?state=pending")
    assert pending.approval_id in only and decided.approval_id not in only


def test_an_approval_is_rejected_from_the_console_after_a_confirmation_with_a_reason(
    cli: Cli, stack: Stack, console: ConsoleClient
) -> None:
    # GIVEN a pending request, and the console's CSRF token
    approval_id = put_approval(stack.store).approval_id
    csrf = csrf_of(console.page("/dlq"))
    page = console.page(f"/approval?id={approval_id}")
    assert "id='approve'" in page and "id='reject'" in page and "create_ticket" in page
    # WHEN a form without the CSRF token asks THEN it is refused, nothing changed
    assert console.post("/approval/decide", [("id", approval_id), ("decision", "reject")]).status == 403
    # WHEN reject is pressed THEN a confirmation names the call and asks why, and nothing changed yet
    confirm = console.post("/approval/confirm", [("csrf", csrf), ("id", approval_id), ("decision", "reject")])
    assert confirm.status == 200 and f"Reject {approval_id}: create_ticket(" in text_of(confirm.text)
    assert "name='reason'" in confirm.text
    assert cli_json(cli, "approvals", "show", approval_id)["state"] == "pending"
    # WHEN it is confirmed without a reason THEN it is refused in one line
    form = [("csrf", csrf), ("id", approval_id), ("decision", "reject")]
    refused = console.post("/approval/decide", form)
    assert refused.status == 400 and "says why" in text_of(refused.text)
    # WHEN it is confirmed with a reason and a name
    done = console.post("/approval/decide", [*form, ("reason", "wrong customer"), ("as", "carol")])
    # THEN it is rejected as by the CLI, via the console, and the page offers the buttons no more
    assert done.status == 200 and "rejected by operator (as carol) via console" in text_of(done.text)
    shown = cli_json(cli, "approvals", "show", approval_id)
    assert (shown["state"], shown["decided_via"], shown["reason"]) == ("rejected", "console", "wrong customer")
    assert "id='approve'" not in console.page(f"/approval?id={approval_id}")
    # AND approving it now says what was decided, changing nothing
    again = console.post("/approval/decide", [("csrf", csrf), ("id", approval_id), ("decision", "approve")])
    assert again.status == 400 and "rejected" in text_of(again.text)
    # AND an unknown approval is a one-line error
    unknown = console.post("/approval/confirm", [("csrf", csrf), ("id", "apr-nope"), ("decision", "approve")])
    assert unknown.status == 400 and "no approval 'apr-nope'" in text_of(unknown.text)


def test_a_parked_runs_page_says_what_it_waits_for_with_the_buttons(stack: Stack, console: ConsoleClient) -> None:
    # GIVEN a run parked on a request
    approval = put_approval(stack.store, run_id="bg:p1")
    park_run(stack.store, approval)
    # WHEN its page is opened
    page = console.page("/run?id=bg:p1")
    # THEN it says since when what it waits for, until when and then what, links the request and offers
    # the decision
    said = text_of(page)
    assert "parked since 2026-12-01 10:00:00 at step 1: waiting for approval" in said
    assert "(then rejected)" in said and f"approval?id={approval.approval_id}" in page
    assert "id='approve'" in page and "id='reject'" in page
    # AND the runs page filters the parked runs
    runs = console.page("/runs?status=parked&since=2026-11-30T00:00:00Z")
    assert "run?id=bg%3Ap1" in runs
