"""Ask before acting in the chat (issue 35, "must be shown": the chat app shows an approval request
with buttons and resumes on a click, in headless Chromium).

The reference chat app (examples/chat-app/) as `make chat` runs it (``tickets``: after research the
woken agent files a ticket through the app's ``file_ticket`` HTTP tool, which the session gates) on
the local stack with the REAL template.yaml, driven in Debian's headless Chromium
(tests/support/browser.py; `make chromium` installs it). The run parks; the request is pushed over
the WebSocket with Approve and Reject buttons; a click decides through the app (``decide_approval``
as the session's owner); the run resumes, the gated tool is called exactly once (counted at the
app's tool server on 127.0.0.1), and the woken agent's next message appears without a reload. A
decided request shows its decision instead of buttons, also after a reload. Every wait is a
condition with a generous bound.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_chat_app_browser import APP_DIR, FETCHED, entries, keep_screenshot, loaded, pushing, say
from tests.support.browser import Browser

#: the request's row: its buttons' labels, or its decision's words
BUTTONS = """return Array.from(document.querySelectorAll('#conversation .entry[data-approval] .approval button'),
    b => b.textContent);"""
DECISION = """const d = document.querySelector('#conversation .entry[data-approval] .approval .decision');
return d ? d.textContent : null;"""
SETTLED = ("delivery", "assistant", "The ticket request is settled.")


@pytest.fixture
def ticket_chat(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[tuple[str, Any, Any]]:
    """The app as `make chat` runs it: the woken agent asks before filing a ticket."""
    monkeypatch.setenv("AGENTWAKE_HOME", str(tmp_path))
    monkeypatch.syspath_prepend(str(APP_DIR))
    sys.modules.pop("app", None)
    import app as chat_app  # examples/chat-app/app.py

    with chat_app.running(0, task_seconds=2.0, tickets=True) as running:
        yield running
    sys.modules.pop("app", None)


def pending(app: Any) -> list[dict[str, Any]]:
    return list(app.api.list_approvals("chat-web", state="pending")["approvals"])


def asked(browser: Browser, app: Any) -> str:
    """Research, then wait for the request with its buttons; its approval id."""
    say(browser, "research tides")
    browser.wait_for(lambda: browser.execute(BUTTONS) == ["Approve", "Reject"], within=180, what="the request")
    approval_id = str(
        browser.execute("return document.querySelector('#conversation .entry[data-approval]').dataset.approval")
    )
    [request] = pending(app)
    assert request["approval_id"] == approval_id and request["tool"] == "file_ticket"
    text = browser.text(browser.find("#conversation .entry[data-approval] .content"))
    assert "file_ticket" in text and approval_id in text
    return approval_id


def test_a_click_on_approve_resumes_the_parked_run_and_its_message_appears_without_a_reload(
    ticket_chat: tuple[str, Any, Any],
) -> None:
    url, app, _runtime = ticket_chat
    with Browser.start() as browser:
        loaded(browser, url)
        browser.wait_for(lambda: pushing(browser), within=30, what="the page's WebSocket")
        # GIVEN the woken agent asked before filing a ticket: the request is shown with its buttons
        approval_id = asked(browser, app)
        # AND nothing was filed while it waits, and the page can still chat (the parked run holds no lease)
        assert app.tickets == {}
        say(browser, "still there?")
        browser.wait_for(lambda: ("live", "assistant", "You said: still there?") in entries(browser), what="a reply")
        keep_screenshot(browser, "approval-asked")

        # WHEN the person clicks Approve
        browser.click(browser.find("#conversation .entry[data-approval] button.approve"))

        # THEN the buttons are replaced by the decision
        browser.wait_for(lambda: browser.execute(DECISION) == "Approved by the chat's user.", what="the decision")
        assert browser.execute(BUTTONS) == []
        # AND the run resumes: its next message is pushed to the open page, no reload
        browser.wait_for(lambda: SETTLED in entries(browser), within=180, what="the resumed run's message")
        assert browser.execute(FETCHED).count("/api/conversation") == 1
        # AND the gated tool was called exactly once, by the resumed run
        [(key, calls)] = app.tickets.items()
        assert calls == 1 and key.startswith("bg:"), app.tickets
        assert pending(app) == []
        approval = app.api.get_approval(approval_id)
        assert approval["state"] == "approved" and approval["decided_by"].endswith(" on behalf of the chat's user")
        keep_screenshot(browser, "approval-approved")

        # WHEN the page is reloaded THEN the request shows its decision, not buttons
        loaded(browser, url)
        assert browser.execute(BUTTONS) == []
        assert browser.execute(DECISION) == "Approved by the chat's user."
        assert SETTLED in entries(browser)
        assert sum(app.tickets.values()) == 1


def test_a_click_on_reject_resumes_the_run_without_calling_the_tool(ticket_chat: tuple[str, Any, Any]) -> None:
    url, app, _runtime = ticket_chat
    with Browser.start() as browser:
        loaded(browser, url)
        browser.wait_for(lambda: pushing(browser), within=30, what="the page's WebSocket")
        approval_id = asked(browser, app)
        # WHEN the person clicks Reject
        browser.click(browser.find("#conversation .entry[data-approval] button.reject"))
        # THEN the decision replaces the buttons, the run resumes, and the tool was never called
        rejected = "Rejected by the chat's user: rejected in the chat."
        browser.wait_for(lambda: browser.execute(DECISION) == rejected, what="the decision")
        browser.wait_for(lambda: SETTLED in entries(browser), within=180, what="the resumed run's message")
        assert app.tickets == {}
        assert app.api.get_approval(approval_id)["state"] == "rejected"
        # AND a second decision through the app is refused, saying what was decided
        assert app.decide(approval_id, "approve")[0] == 409
        loaded(browser, url)
        assert browser.execute(BUTTONS) == [] and browser.execute(DECISION) == rejected
