"""The whole loop as a user sees it (issues 23, 34, 36): the reference chat app (examples/chat-app/)
on the local stack with the REAL template.yaml (its WebSocket API on 127.0.0.1), driven in Debian's
headless Chromium (tests/support/browser.py; `make chromium` installs it). A person chats, the agent
starts a background task, the task finishes, the woken agent's message is pushed to the open page
over the WebSocket (no reload, no polling: the page reads the conversation once), after one system
line saying what woke the agent (the marker and the note are not shown, live or after a reload); a
message typed while the wake holds the session is kept, shown waiting in plain words, then sent and
answered; a page whose connection the WebSocket API closes reconnects and shows what came meanwhile,
each delivery once; 15 messages typed 0.3 s apart are stored and shown in the order typed; on a 390
px phone nothing scrolls sideways and a reload shows the newest message.

Every wait is a condition with a generous bound; the slow wake (the app answers the woken agent's
check_sources tool SLOW_WAKE_S late, as `make chat CHAT_SLOW_WAKE=N` does) keeps the wake holding
the session long enough to type into it. Screenshots go to $AGENTWAKE_CHAT_SCREENSHOTS (default
/tmp/shots).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agentwake.store.history import MARKER_TEXT
from agentwake_local.server import boto3_session
from tests.support import processes
from tests.support.browser import Browser

ROOT = Path(__file__).resolve().parents[2]
APP_DIR = ROOT / "examples" / "chat-app"
#: the app answers the woken agent's tool this late (--slow-wake): the wake holds the session meanwhile
SLOW_WAKE_S = 8.0
WAITING = "The agent is finishing a task; your message will be sent when it is done."
WOKEN = ("wake", "system", "The agent was woken by a finished task.")

ENTRIES = """return Array.from(document.querySelectorAll('#conversation .entry')).map(
    li => [li.dataset.kind, li.dataset.role, li.querySelector('.content').textContent]);"""
#: each shown entry with its background colour, and the colour of a message the person typed
COLOURS = """const user = document.createElement('li'); user.className = 'entry'; user.dataset.role = 'user';
document.getElementById('conversation').append(user);
const userColour = getComputedStyle(user).backgroundColor; user.remove();
return [userColour, Array.from(document.querySelectorAll('#conversation .entry')).map(
    li => [li.dataset.role, li.querySelector('.content').textContent, getComputedStyle(li).backgroundColor])];"""
OUTBOX = "return Array.from(document.querySelectorAll('#outbox .entry .content')).map(e => e.textContent)"
#: the shown entries' keys (deliveries by their delivery id, wake lines by their run), in order
KEYS = "return Array.from(document.querySelectorAll('#conversation .entry[data-key]'), li => li.dataset.key)"
#: what the page fetched from the app since it loaded (the browser's own record)
FETCHED = """return performance.getEntriesByType('resource').filter(e => e.initiatorType === 'fetch')
    .map(e => new URL(e.name).pathname);"""
NO_SIDEWAYS_SCROLL = "return document.documentElement.scrollWidth <= document.documentElement.clientWidth"
AT_NEWEST = "return window.scrollY + window.innerHeight >= document.documentElement.scrollHeight - 2"


def _chat(monkeypatch: pytest.MonkeyPatch, home: Path, slow_wake_s: float) -> Iterator[tuple[str, Any, Any]]:
    monkeypatch.setenv("AGENTWAKE_HOME", str(home))
    monkeypatch.syspath_prepend(str(APP_DIR))
    sys.modules.pop("app", None)
    import app as chat_app  # examples/chat-app/app.py

    with chat_app.running(0, task_seconds=2.0, slow_wake_s=slow_wake_s) as running:
        yield running
    sys.modules.pop("app", None)


@pytest.fixture
def chat(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[tuple[str, Any, Any]]:
    """The app as `make chat CHAT_SLOW_WAKE=8` runs it."""
    yield from _chat(monkeypatch, tmp_path, SLOW_WAKE_S)


@pytest.fixture
def quick_chat(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[tuple[str, Any, Any]]:
    """The app as `make chat` runs it."""
    yield from _chat(monkeypatch, tmp_path, 0.0)


def entries(browser: Browser) -> list[tuple[str, str, str]]:
    return [tuple(e) for e in browser.execute(ENTRIES)]  # type: ignore[misc]


def loaded(browser: Browser, url: str) -> None:
    browser.get(url + "/")
    browser.wait_for(lambda: browser.execute("return document.body.dataset.loaded"), what="the page")


def no_user_coloured_marker(browser: Browser) -> None:
    """Only what the person typed looks like their message: no marker, no note, no wake line."""
    user_colour, shown = browser.execute(COLOURS)
    assert not [c for _, c, _ in shown if MARKER_TEXT in c or "[BackgroundTask]" in c], shown
    coloured = [(role, content) for role, content, colour in shown if colour == user_colour]
    assert all(role == "user" for role, _ in coloured), shown
    assert [c for r, c, _ in shown if r == "user"] == [c for _, c in coloured]


def keep_screenshot(browser: Browser, name: str) -> None:
    folder = Path(os.environ.get("AGENTWAKE_CHAT_SCREENSHOTS") or "/tmp/shots")  # noqa: S108 - the brief's folder
    folder.mkdir(parents=True, exist_ok=True)
    browser.screenshot(folder / f"chat-{name}.png")


def say(browser: Browser, text: str) -> None:
    box = browser.find("#message")
    browser.type(box, text)
    browser.click(browser.find("#send"))


def counted(app: Any, name: str) -> list[float]:
    """Count the app's answers to one of its routes (``app.conversation``, ...): when each was made."""
    calls: list[float] = []
    real = getattr(app, name)

    def counting(*args: Any) -> Any:
        try:
            return real(*args)
        finally:
            calls.append(time.monotonic())

    setattr(app, name, counting)
    return calls


def management(runtime: Any) -> Any:
    """The local WebSocket API's management endpoint, as the wake functions call it (SigV4)."""
    assert runtime.push_api is not None
    return boto3_session(runtime.region).client(
        "apigatewaymanagementapi", endpoint_url=runtime.push_api.endpoint, region_name=runtime.region
    )


def pushing(browser: Browser) -> bool:
    return bool(browser.execute("return document.body.dataset.push === 'open'"))


def test_a_person_chats_the_task_finishes_and_the_woken_agents_message_appears(chat: tuple[str, Any, Any]) -> None:
    url, app, _runtime = chat
    conversation_reads = counted(app, "conversation")
    with Browser.start() as browser:
        browser.viewport(390, 844)
        loaded(browser, url)
        browser.wait_for(lambda: pushing(browser), within=30, what="the page's WebSocket")
        reads_at_load = len(conversation_reads)
        # WHEN the person sends a message THEN the live reply is shown
        say(browser, "hello")
        browser.wait_for(lambda: ("live", "assistant", "You said: hello") in entries(browser), what="the live reply")
        # WHEN they ask for research THEN the agent starts a background task and says so
        say(browser, "research aurora")
        started = "I started researching aurora. I will message you here when it is done."
        browser.wait_for(lambda: ("live", "assistant", started) in entries(browser), what="the task's start")
        # THEN the task finishes and the woken agent's message appears in the open page, no reload,
        # after one system line saying what woke the agent
        browser.wait_for(
            lambda: [e for e in entries(browser) if e[0] == "delivery"], within=180, what="the woken agent's message"
        )
        assert entries(browser)[4:] == [WOKEN, ("delivery", "assistant", "Your research is ready.")]
        # pushed over the WebSocket: one frame came, and the page read the conversation only when it
        # loaded (the app was asked for it no more, the browser fetched it once), never polled
        assert browser.execute("return document.body.dataset.frames") == "1"
        assert len(conversation_reads) == reads_at_load
        fetched = browser.execute(FETCHED)
        assert fetched.count("/api/conversation") == 1, fetched
        assert not [f for f in fetched if f not in ("/api/conversation", "/api/push-ticket", "/api/read", "/api/send")]
        # and there is nothing to poll: the old events route is gone
        with pytest.raises(urllib.error.HTTPError) as gone:
            urllib.request.urlopen(url + "/api/events?after=0", timeout=60)  # noqa: S310 - the app on 127.0.0.1
        assert gone.value.code == 404
        # WHEN the person types while the wake still holds the session (its tool is answered slowly)
        say(browser, "are you there?")
        # THEN the message is kept and shown waiting, in plain words, with no run id
        notice = browser.wait_for(
            lambda: browser.execute(
                "return document.querySelector('#outbox .entry[data-state=waiting]') && "
                "document.getElementById('notice').textContent"
            ),
            within=SLOW_WAKE_S,
            what="the waiting message",
        )
        assert notice == WAITING
        keep_screenshot(browser, "after-390-waiting")
        waiting = browser.text(browser.find("#outbox .entry"))
        assert waiting.split() == ["are", "you", "there?", "waiting"], waiting
        page = browser.text(browser.find("body"))
        assert "bg:" not in page and "task-" not in page and "busy" not in page, page
        assert browser.attribute(browser.find("#message"), "value") == ""  # moved to the outbox, not lost
        # WHEN the person reloads the page while it waits
        loaded(browser, url)
        # THEN the message is still there, waiting to be sent (the page keeps its outbox)
        assert browser.wait_for(lambda: browser.execute(OUTBOX), within=10, what="the kept message after a reload") == [
            "are you there?"
        ]
        # THEN once the wake is done, the kept message is sent and answered, and nothing waits
        browser.wait_for(
            lambda: ("live", "assistant", "You said: are you there?") in entries(browser),
            within=180,
            what="the kept message's answer",
        )
        assert browser.find_all("#outbox .entry") == []
        assert browser.text(browser.find("#notice")) == ""
        say(browser, "thanks")
        browser.wait_for(lambda: ("live", "assistant", "You said: thanks") in entries(browser), what="the reply")
        live = entries(browser)
        assert live == [
            ("live", "user", "hello"),
            ("live", "assistant", "You said: hello"),
            ("live", "user", "research aurora"),
            ("live", "assistant", started),
            WOKEN,
            ("delivery", "assistant", "Your research is ready."),
            ("live", "user", "are you there?"),
            ("live", "assistant", "You said: are you there?"),
            ("live", "user", "thanks"),
            ("live", "assistant", "You said: thanks"),
        ]
        no_user_coloured_marker(browser)
        # AND the history holds them in that order, the wake's marker and note after its delivery
        stored = [(e["kind"], e["role"]) for e in reversed(app.api.read_conversation("chat-web", limit=50)["entries"])]
        assert [k for k, _ in stored] == ["live"] * 4 + ["delivery", "marker", "note"] + ["live"] * 4
        # THEN a reload shows exactly what the open page showed: no marker, no note, one wake line
        loaded(browser, url)
        assert entries(browser) == live
        no_user_coloured_marker(browser)
        assert browser.execute(NO_SIDEWAYS_SCROLL)
        keep_screenshot(browser, "after-390-woken-reloaded")


def test_a_page_whose_connection_is_closed_shows_what_came_meanwhile_once_after_it_reconnects(
    quick_chat: tuple[str, Any, Any],
) -> None:
    url, app, runtime = quick_chat
    # GIVEN tickets the test can withhold (the app's push-ticket route answers 503 meanwhile)
    tickets_given = threading.Event()
    tickets_given.set()
    real_ticket = app.push_ticket

    def ticket() -> tuple[int, dict[str, Any]]:
        if not tickets_given.is_set():
            return 503, {"error": "no ticket now (the test withholds them)"}
        return real_ticket()  # type: ignore[no-any-return]

    app.push_ticket = ticket
    reads = counted(app, "read")
    with Browser.start() as browser:
        loaded(browser, url)
        browser.wait_for(lambda: pushing(browser), within=30, what="the page's WebSocket")
        # GIVEN a woken agent's message pushed to the open page
        say(browser, "research tides")
        browser.wait_for(lambda: len(browser.execute(KEYS)) == 2, within=180, what="the first woken message")
        wake_1, first = browser.execute(KEYS)
        assert wake_1.startswith("wake:bg:") and browser.execute("return document.body.dataset.frames") == "1"
        # WHEN the local WebSocket API closes the page's connection (DELETE @connections/{id}) and the
        # page gets no ticket for a while
        tickets_given.clear()
        [connection] = runtime.push_api.open_connections()
        management(runtime).delete_connection(ConnectionId=connection)
        browser.wait_for(
            lambda: browser.execute("return document.body.dataset.push") == "closed", within=30, what="the close"
        )
        assert "Reconnecting" in browser.text(browser.find("#link"))
        # AND a second task's wake delivers while no page is connected
        say(browser, "research waves")
        started = "I started researching waves. I will message you here when it is done."
        browser.wait_for(lambda: ("live", "assistant", started) in entries(browser), what="the second task's start")
        unread = browser.wait_for(
            lambda: (mark := app.api.unread("chat-web"))["unread"] and mark, within=180, what="the unread delivery"
        )
        # THEN the page does not show it yet: nothing reached it
        second = unread["delivery_id"]
        assert second not in browser.execute(KEYS) and browser.execute("return document.body.dataset.frames") == "1"
        keep_screenshot(browser, "reconnecting")
        reads_before = len(reads)
        # WHEN tickets are given again THEN the page reconnects, reads the conversation and shows the
        # second message, each wake's line and message exactly once (the first: both pushed and read)
        tickets_given.set()
        browser.wait_for(lambda: second in browser.execute(KEYS), within=120, what="the reconnect's fallback")
        keys = browser.execute(KEYS)
        assert len(keys) == 4 and keys[:2] == [wake_1, first] and keys[3] == second, keys
        assert keys[2] == f"wake:{second.split('#')[0]}"
        assert entries(browser) == [
            ("live", "user", "research tides"),
            ("live", "assistant", "I started researching tides. I will message you here when it is done."),
            WOKEN,
            ("delivery", "assistant", "Your research is ready."),
            ("live", "user", "research waves"),
            ("live", "assistant", started),
            WOKEN,
            ("delivery", "assistant", "Your research is ready."),
        ]
        # AND the page said what it shows: the session is no longer unread
        browser.wait_for(lambda: len(reads) > reads_before, within=30, what="the page's read")
        assert app.api.unread("chat-web")["unread"] is False
        assert browser.text(browser.find("#link")) == ""
        keep_screenshot(browser, "reconnected")
        # WHEN the second delivery is pushed again to the new connection (a retry's re-send of the
        # same delivery id, after the page read it from the history)
        assert pushing(browser)
        [connection] = runtime.push_api.open_connections()
        frame = {
            "type": "delivery",
            "delivery_id": second,
            "run_id": second.split("#")[0],
            "session_id": "chat-web",
            "text": "Your research is ready.",
            "sent_at": datetime.now(UTC).isoformat(),
        }
        management(runtime).post_to_connection(ConnectionId=connection, Data=json.dumps(frame).encode())
        # THEN the page received it and shows it still once
        browser.wait_for(
            lambda: browser.execute("return document.body.dataset.frames") == "2", within=30, what="the re-send"
        )
        assert browser.execute(KEYS) == keys
        # AND a reload shows the same
        loaded(browser, url)
        assert browser.execute(KEYS) == keys


def test_fifteen_messages_typed_fast_are_stored_and_shown_in_order_on_a_phone(
    chat: tuple[str, Any, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    url, app, _runtime = chat
    # GIVEN a count of the sends the app is answering at once
    send = app.send
    busy, lock = {"now": 0, "most": 0}, threading.Lock()

    def counted(text: str, message_id: str) -> tuple[int, dict[str, Any]]:
        with lock:
            busy["now"] += 1
            busy["most"] = max(busy["most"], busy["now"])
        try:
            return send(text, message_id)  # type: ignore[no-any-return]
        finally:
            with lock:
                busy["now"] -= 1

    app.send = counted
    typed = [f"ping {n}" for n in range(1, 16)]
    long_words = "see https://example.com/" + "a" * 120 + " and `" + "x" * 80 + "`"
    with Browser.start() as browser:
        browser.viewport(390, 844)
        loaded(browser, url)
        # WHEN a person sends 15 messages 0.3 s apart (the pace is the scenario: nothing is waited on)
        for text in typed:
            say(browser, text)
            time.sleep(0.3)
        say(browser, long_words)
        # THEN each is answered, and the page shows them in the order typed
        browser.wait_for(
            lambda: ("live", "assistant", f"You said: {long_words}") in entries(browser),
            within=180,
            what="the 16 answers",
        )
        shown = entries(browser)
        assert [c for k, r, c in shown if r == "user"] == [*typed, long_words]
        assert [c for k, r, c in shown if r == "assistant"] == [f"You said: {t}" for t in [*typed, long_words]]
        assert busy["most"] == 1  # the page sent each message once the previous one's turn had ended
        # AND the history holds them in that order, as the CLI reads it from the stack `make chat` names
        from agentwake_ops.cli import main as agentwake

        capsys.readouterr()
        assert agentwake(["history", "show", "chat-web", "--last", "200", "--json"]) == 0
        stored = [e["content"] for e in json.loads(capsys.readouterr().out) if e["role"] == "user"]
        assert stored == [*typed, long_words]
        # AND at 390 px nothing scrolls sideways (the long URL and code wrap), the newest is in view
        assert browser.execute("return window.innerWidth") == 390
        assert browser.execute(NO_SIDEWAYS_SCROLL), browser.execute(
            "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        )
        assert browser.execute(AT_NEWEST)
        keep_screenshot(browser, "after-390")
        # THEN after a reload the page shows the newest message too, the same entries
        loaded(browser, url)
        assert browser.wait_for(lambda: browser.execute(AT_NEWEST), within=10, what="the newest message in view")
        assert entries(browser) == shown
        keep_screenshot(browser, "after-390-reloaded")


def test_make_chat_takes_a_port_apart_from_the_consoles_and_says_when_it_is_taken(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import inspect

    from agentwake_local.stack import running_stacks
    from agentwake_ops.commands.console import console

    monkeypatch.setenv("AGENTWAKE_HOME", str(tmp_path))
    monkeypatch.syspath_prepend(str(APP_DIR))
    sys.modules.pop("app", None)
    import app as chat_app  # examples/chat-app/app.py

    # GIVEN the console's default port: the chat app's is another
    assert inspect.signature(console).parameters["port"].default != chat_app.DEFAULT_PORT
    # WHEN the chat app's port is taken
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # THEN it says so and how to pick another, and starts no stack
        assert chat_app.main(["--port", str(port)]) == 1
    err = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port}" in err and f"CHAT_PORT={port + 1} make chat" in err, err
    assert running_stacks() == []
    # AND `make chat` passes its port and CHAT_SLOW_WAKE to the app
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHAT_")}
    spelled = subprocess.run(
        ["make", "-n", "chat", "CHAT_SLOW_WAKE=5"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=60
    )
    [run] = [line for line in spelled.stdout.splitlines() if "examples/chat-app/app.py" in line]
    assert f"--port {chat_app.DEFAULT_PORT} --slow-wake 5" in run, run
    # AND a slow wake past the webhook's timeout is refused before anything starts
    with pytest.raises(SystemExit):
        chat_app.main(["--slow-wake", "99"])
    assert "0 to 50 seconds" in capsys.readouterr().err
    sys.modules.pop("app", None)


def test_each_wake_is_one_system_line_saying_what_woke_the_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(APP_DIR))
    sys.modules.pop("app", None)
    import app as chat_app  # examples/chat-app/app.py

    def wake(run_id: str, delivered: bool) -> list[dict[str, Any]]:
        said = [{"kind": "delivery", "role": "assistant", "content": "Hi.", "run_id": run_id, "delivery_id": run_id}]
        return [
            *(said if delivered else []),
            {"kind": "marker", "role": "user", "content": MARKER_TEXT, "run_id": run_id},
            {"kind": "note", "role": "assistant", "content": f"[CronJob] ... (run {run_id})", "run_id": run_id},
        ]

    # GIVEN a history with a live turn, a task's wake that delivered, and a schedule's that did not
    history = [
        {"kind": "live", "role": "user", "content": "hello", "run_id": None},
        *wake("bg:task-1", delivered=True),
        *wake("cron:daily:2026-12-03T09:00:00Z", delivered=False),
    ]
    # WHEN the page is given what to show
    shown = [(e["kind"], e["role"], e["content"]) for e in chat_app.shown_entries(history, set())]
    # THEN each wake is one line saying what woke the agent, before its messages; no marker, no note
    assert shown == [
        ("live", "user", "hello"),
        WOKEN,
        ("delivery", "assistant", "Hi."),
        ("wake", "system", "The agent was woken by a schedule."),
    ]
    sys.modules.pop("app", None)


def test_make_chat_prints_the_push_url_beside_the_page_url(tmp_path: Path) -> None:
    import queue

    # WHEN the app starts as `make chat` starts it (its own process, its own local stack; its own
    # process group, ended with everything in it however the test ends)
    env = {**os.environ, "AGENTWAKE_HOME": str(tmp_path)}
    app = processes.start(
        [sys.executable, str(APP_DIR / "app.py"), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=ROOT,
    )
    lines: queue.Queue[str] = queue.Queue()
    try:
        assert app.stdout is not None
        threading.Thread(target=lambda: [lines.put(line) for line in app.stdout or ()], daemon=True).start()
        first = lines.get(timeout=180)
    finally:
        # AND Ctrl-C stops it: a clean exit (a generous bound on a busy machine, then SIGTERM, SIGKILL)
        code = processes.stop(app, signal.SIGINT)
    # THEN its first line names the page and, beside it, the WebSocket its messages are pushed over
    page, _, rest = first.partition("/  (")
    assert page.startswith("chat app on http://127.0.0.1:"), first
    assert rest.startswith("the agent's messages pushed over ws://127.0.0.1:") and "/v1;" in rest, first
    assert code == 0
