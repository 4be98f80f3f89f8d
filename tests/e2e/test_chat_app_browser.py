"""The whole loop as a user sees it (issue 23): the reference chat app (examples/chat-app/) on the
local stack with the REAL template.yaml, driven in Debian's headless Chromium (tests/support/browser.py;
`make chromium` installs it). A person chats, the agent starts a background task, the task
finishes, the woken agent's message appears in the open page once, a message typed during the wake
is refused as the session's policy says (waits up to live_turn_wait_s, then "busy"), and a reload
shows the live turns, the delivery and the note in order.

Every wait is a condition with a generous bound; the slow webhook (the app answers agentwake's
delivery after WEBHOOK_DELAY_S) keeps the wake holding the session long enough to type into it.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentwake.delivery import Delivery
from agentwake.delivery.webhook import DELIVERY_ID_HEADER, SIGNATURE_HEADER, WebhookChannel, sign
from tests.support.browser import Browser

APP_DIR = Path(__file__).resolve().parents[2] / "examples" / "chat-app"
#: the app answers each webhook this late: the wake holds the session meanwhile
WEBHOOK_DELAY_S = 20.0
#: the chat session's live_turn_wait_s: a turn typed during the wake waits this long, then is refused
LIVE_TURN_WAIT_S = 2.0

ENTRIES = """return Array.from(document.querySelectorAll('#conversation .entry')).map(
    li => [li.dataset.kind, li.dataset.role, li.querySelector('.content').textContent]);"""


@pytest.fixture
def chat(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[tuple[str, Any, Any]]:
    monkeypatch.setenv("AGENTWAKE_HOME", str(tmp_path))
    monkeypatch.syspath_prepend(str(APP_DIR))
    sys.modules.pop("app", None)
    import app as chat_app  # examples/chat-app/app.py

    with chat_app.running(
        0, task_seconds=2.0, webhook_delay_s=WEBHOOK_DELAY_S, live_turn_wait_s=LIVE_TURN_WAIT_S
    ) as running:
        yield running
    sys.modules.pop("app", None)


def entries(browser: Browser) -> list[tuple[str, str, str]]:
    return [tuple(e) for e in browser.execute(ENTRIES)]  # type: ignore[misc]


def say(browser: Browser, text: str) -> None:
    box = browser.find("#message")
    browser.type(box, text)
    browser.click(browser.find("#send"))


def test_a_person_chats_the_task_finishes_and_the_woken_agents_message_appears(chat: tuple[str, Any, Any]) -> None:
    url, app, _runtime = chat
    with Browser.start() as browser:
        browser.get(url + "/")
        browser.wait_for(lambda: browser.execute("return document.body.dataset.loaded"), what="the page")
        # WHEN the person sends a message THEN the live reply is shown
        say(browser, "hello")
        browser.wait_for(lambda: ("live", "assistant", "You said: hello") in entries(browser), what="the live reply")
        # WHEN they ask for research THEN the agent starts a background task and says so
        say(browser, "research aurora")
        started = "I started researching aurora. I will message you here when it is done."
        browser.wait_for(lambda: ("live", "assistant", started) in entries(browser), what="the task's start")
        # THEN the task finishes and the woken agent's message appears in the open page, no reload
        browser.wait_for(
            lambda: [e for e in entries(browser) if e[0] == "delivery"], within=180, what="the woken agent's message"
        )
        # WHEN the person types while the wake still holds the session (its delivery is being answered)
        say(browser, "are you there?")
        # THEN the turn waits up to live_turn_wait_s, then the page says the agent is busy with the run
        notice = browser.wait_for(
            lambda: browser.text(browser.find("#notice")), within=WEBHOOK_DELAY_S, what="the busy notice"
        )
        assert "busy" in notice and "bg:task-" in notice, notice
        # AND agentwake re-sending the same delivery (same signed delivery id, a fresh body) is dropped
        (delivery,) = [e for e in app.events if e["kind"] == "delivery"]
        again = Delivery(
            delivery["delivery_id"], delivery["delivery_id"].split("#")[0], "chat-web", delivery["content"]
        )
        body = WebhookChannel("https://chat.example/webhook", app.webhook_secret).body(again)
        request = urllib.request.Request(
            url + "/webhook",
            data=body,
            method="POST",
            headers={
                "Content-Type": "application/json",
                DELIVERY_ID_HEADER: delivery["delivery_id"],
                SIGNATURE_HEADER: sign(body, app.webhook_secret),
            },
        )
        app.webhook_delay_s = 0.0  # the re-send needs no slow answer
        with urllib.request.urlopen(request, timeout=60) as resp:  # noqa: S310 - the app on 127.0.0.1
            assert json.loads(resp.read()) == {"duplicate": True}
        # and a forged one (bad signature) is refused
        forged = urllib.request.Request(
            url + "/webhook", data=body, method="POST", headers={SIGNATURE_HEADER: "sha256=00", DELIVERY_ID_HEADER: "x"}
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(forged, timeout=60)  # noqa: S310
        assert refused.value.code == 401
        # WHEN the wake is done (the task woken), a new message goes through
        task_id = delivery["delivery_id"].split("#")[0].removeprefix("bg:")
        browser.wait_for(lambda: app.api.task_status(task_id)["status"] == "woken", within=180, what="the wake's end")
        say(browser, "thanks")
        browser.wait_for(lambda: ("live", "assistant", "You said: thanks") in entries(browser), what="the reply")
        assert [e[0] for e in entries(browser)].count("delivery") == 1  # shown once
        # THEN a reload shows the whole conversation in order: live turns, the delivery and the note
        browser.get(url + "/")
        browser.wait_for(lambda: browser.execute("return document.body.dataset.loaded"), what="the reloaded page")
        shown = [e for e in entries(browser) if e[0] != "marker"]
        assert shown[:4] == [
            ("live", "user", "hello"),
            ("live", "assistant", "You said: hello"),
            ("live", "user", "research aurora"),
            ("live", "assistant", started),
        ]
        assert sorted(e[0] for e in shown[4:6]) == ["delivery", "note"]
        assert "Research: aurora" in next(e[2] for e in shown[4:6] if e[0] == "note")
        assert shown[6:] == [("live", "user", "thanks"), ("live", "assistant", "You said: thanks")]
        # the refused turn was never written
        assert not [e for e in shown if e[2] == "are you there?"]
