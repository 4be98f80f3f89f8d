"""The reference chat app's push routes over HTTP (issue 34), without a browser: the ticket the app
gets for its page from the product API opens the session's WebSocket once and carries the woken
agent's message as the agreed frame; ``POST /api/read`` clears the session's unread mark only when it
names a delivery the page says it shows; the page is given the app's wording of a wake line (one
source for a reload and a push). The page itself is driven in test_chat_app_browser.py."""

from __future__ import annotations

import json
import re
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from agentwake_local import ws_frames
from tests.e2e.test_busy_sessions import wait_until
from tests.support.ws_client import HandshakeRefused, WsClient

APP_DIR = Path(__file__).resolve().parents[2] / "examples" / "chat-app"


@pytest.fixture(scope="module")
def chat_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AGENTWAKE_HOME", str(tmp_path_factory.mktemp("agentwake-home")))
        patch.syspath_prepend(str(APP_DIR))
        sys.modules.pop("app", None)
        import app  # examples/chat-app/app.py

        yield app
        sys.modules.pop("app", None)


@pytest.fixture(scope="module")
def chat(chat_app: ModuleType) -> Iterator[tuple[str, Any, Any]]:
    with chat_app.running(0, task_seconds=0.5) as running:
        yield running


def call(url: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:  # noqa: S310 (127.0.0.1)
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())


def test_the_page_is_given_the_apps_wording_of_a_wake_line(chat_app: ModuleType) -> None:
    # WHEN the app serves its page
    page = chat_app.page_bytes().decode()
    # THEN the page holds the app's table of what woke the agent, the one wake_line reads
    [words] = re.findall(r'<script type="application/json" id="wake-words">(.*?)</script>', page)
    table = json.loads(words)
    assert table == [list(pair) for pair in chat_app.WAKE_WORDS] and table[-1][0] == ""
    for run_id in ("bg:task-1", "cron:daily:2026-12-03T09:00:00Z", "admin:1"):
        expected = chat_app.wake_line(run_id)["content"]
        assert next(w for prefix, w in table if run_id.startswith(prefix)) == expected
    # AND the page polls nothing: no events route, no webhook receiver
    assert "/api/events" not in page and "setInterval" not in page


def test_the_apps_ticket_opens_the_sessions_websocket_once_and_carries_the_woken_agents_message(
    chat: tuple[str, Any, Any],
) -> None:
    url, app, runtime = chat
    # WHEN the page asks the app for a ticket
    status, ticket = call(url + "/api/push-ticket")
    # THEN it gets the stack's WebSocket URL and a single-use ticket, and nothing of AWS
    assert status == 200 and set(ticket) == {"url", "ticket", "expires_in"}, ticket
    assert ticket["url"] == runtime.push_url and ticket["expires_in"] == 60
    with WsClient.connect(f"{ticket['url']}?ticket={ticket['ticket']}") as page:
        with pytest.raises(HandshakeRefused) as again:
            WsClient.connect(f"{ticket['url']}?ticket={ticket['ticket']}")
        assert again.value.status == 401
        # WHEN a research task finishes and wakes the agent
        task_id = app.start_research("tides")
        # THEN the open page receives the woken agent's message once, as the agreed frame
        # (one read with a long bound: after a socket timeout its stream reads no more)
        opcode, payload = page.recv(timeout=120)
        assert opcode == ws_frames.TEXT
        frame = json.loads(payload)
        assert frame["type"] == "delivery" and frame["session_id"] == "chat-web", frame
        assert frame["run_id"] == f"bg:{task_id}" and frame["text"] == "Your research is ready."
        wait_until(lambda: app.api.task_status(task_id)["status"] == "woken", 60, "the task's wake")
        assert page.quiet_for(0.5) == []
    # AND the old routes are gone
    assert call(url + "/api/events?after=0")[0] == 404
    assert call(url + "/webhook", b"{}")[0] == 404


def test_read_clears_the_unread_mark_only_for_a_delivery_the_page_shows(chat: tuple[str, Any, Any]) -> None:
    url, app, _runtime = chat
    # GIVEN a woken agent's message that reached no page (none was open): kept, and the session unread
    task_id = app.start_research("waves")
    wait_until(lambda: app.api.task_status(task_id)["status"] == "woken", 120, "the task's wake")
    mark = app.api.unread("chat-web")
    assert mark["unread"] is True and mark["delivery_id"].startswith(f"bg:{task_id}#"), mark
    # WHEN a page says it shows nothing, or other deliveries THEN the mark stays
    assert call(url + "/api/read", {"shown": []}) == (200, {"cleared": False})
    assert call(url + "/api/read", {"shown": ["bg:another#0#0"]}) == (200, {"cleared": False})
    assert app.api.unread("chat-web")["unread"] is True
    # AND a body that is not a list of ids is refused, and changes nothing
    for bad in (b"not json", {"shown": "x"}, {"shown": ["d"] * 101}, {"read": []}):
        status, answer = call(url + "/api/read", bad)
        assert status == 400 and "shown" in answer["error"], answer
    assert app.api.unread("chat-web")["unread"] is True
    # WHEN the page says it shows that delivery THEN the session is read
    assert call(url + "/api/read", {"shown": ["bg:another#0#0", mark["delivery_id"]]}) == (200, {"cleared": True})
    assert app.api.unread("chat-web")["unread"] is False
