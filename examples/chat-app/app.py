"""A reference chat app on agentwake (issues 23, 34): a person chats in a browser, the agent can start a
background task, and the woken agent's message is pushed to the open page over a WebSocket.

    python examples/chat-app/app.py [--port 8766] [--task-seconds 3] [--slow-wake 5]   (or: make chat)

What it shows, each through agentwake's public interfaces only:

- **live turns** go through the product API (``agentwake_client.ProductApiClient``) under the
  session lease: begin a live turn, compute the reply (the scripted provider), append the user's
  message and the reply with the page's message id as idempotency key, end the turn. The page
  queues what the person types and sends one message at a time, so the history holds them in the
  order they were typed. The session's ``live_turn_wait_s`` is 0: a turn begun while a wake holds
  the session is refused at once (409 ``SessionBusy``); the app answers 409 with plain words (never
  the run that holds it) and the page keeps the message, shows it waiting, and sends it again with
  a backoff until the session is free;
- **a background task**: a message starting with ``research`` makes the agent call its
  ``start_research`` tool: the task is registered through the API, and a worker completes it some
  seconds later through the API, as a producer would;
- **the wake's delivery is pushed to the open page**: the session's delivery is ``{"type":
  "websocket"}``. The page asks the app for a ticket (``GET /api/push-ticket``: the app asks the
  product API, ``POST /sessions/{id}/push-tickets``, signed with its own credentials; the browser
  never holds AWS credentials) and opens ``{url}?ticket={ticket}`` (single use, 60 s). agentwake
  posts each delivery to every open page of the session as one frame ``{"type": "delivery",
  "delivery_id", "run_id", "session_id", "text", "sent_at"}``; the page shows it at once, keyed by
  its ``delivery_id`` (a delivery posted again, or both pushed and in the history, is shown once);
- **a reconnect reads what it missed**: when the connection closes (the stack's idle timeout, a
  network change, a deploy), the page takes a new ticket after a backoff, reloads the conversation
  (what came while no page was open is in the history: agentwake keeps a delivery no page received,
  and marks the session unread) and tells the app what it shows (``POST /api/read``), which clears
  the unread mark when it names a delivery the page shows;
- **a reload** renders the whole conversation from the API (``GET .../conversation``, every page,
  oldest first) in the order the session was held. A wake's internal entries (the marker "Output
  your last task result below." and its note, which are for the agent) are not shown; each wake is
  one system line, "The agent was woken by a finished task" (or "by a schedule"), before its first
  message: :func:`shown_entries` makes that line for a reload, and the page makes the same line for
  a pushed delivery from :data:`WAKE_WORDS` (given to the page with it: one source of the wording).

It starts its own local stack (the embedded local AWS with template.yaml, as ``agentwake local up``
does, with its WebSocket API on 127.0.0.1) under the local stack name ``chat``, recorded where the
CLI and ``agentwake console`` look (``$AGENTWAKE_HOME/local-chat.json``), and serves the page on
127.0.0.1:8766 (the console's default is 8765). ``--slow-wake N``: after messaging the user, the
woken agent checks its sources through the app's ``check_sources`` HTTP tool, which the app answers
N s late, so a wake holds the session that long and a person can watch a message wait.

**Ask before acting** (issue 35): with ``--tickets`` (``make chat``'s default) the woken agent then
files the research as a ticket through the app's ``file_ticket`` HTTP tool, which the session gates
(``"approval": "always"``): the run parks, holding nothing, and agentwake pushes the request (a
delivery whose frame carries ``approval``: its id, tool, arguments and expiry, never its token). The
page shows it with Approve and Reject buttons; a click is ``POST /api/approvals/{id}`` here, which
calls ``decide_approval`` as the session's owner; the run resumes, calls the tool (on approval)
exactly once, and its next message is pushed to the page. A decided request shows its decision
instead of the buttons, also after a reload (:meth:`ChatApp.conversation` reads the session's
approvals). Nothing here is needed by agentwake.
"""

from __future__ import annotations

import argparse
import errno
import json
import re
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SESSION_ID = "chat-web"
MAX_MESSAGE_CHARS = 4000
#: the page's port: not the console's default (8765), so both run side by side
DEFAULT_PORT = 8766
#: the local stack's name: its state file is where the CLI and the console look for a stack
LOCAL_NAME = "chat"
#: the woken agent's check_sources tool times out after this many seconds
TOOL_TIMEOUT_S = 60.0
#: --slow-wake's bound: below the tool's timeout
MAX_SLOW_WAKE_S = 50.0
#: the HTTP tool the woken agent calls after messaging the user (answered by this app)
TOOL_PATH = "/tools/check-sources"
#: how many delivery ids the page may name in one ``POST /api/read``
MAX_READ_IDS = 100
#: the gated HTTP tool the woken agent calls with --tickets (answered by this app, counted)
TICKET_PATH = "/tools/file-ticket"
#: who the app says decided (the person at the page; the API records the app as the owner who called)
DECIDED_BY = "the chat's user"
#: an approval request's delivery id ends so (agentwake's ``{run}#{step}#{call}#approval``), and its
#: text names the request: "... (approval apr-...)"
APPROVAL_DELIVERY = "#approval"
APPROVAL_IN_TEXT = re.compile(r"\(approval (apr-[0-9a-f]+)\)\s*$")

#: the woken agent (scripted): tell the user the research is ready, check the sources (the app's
#: HTTP tool, slow with --slow-wake: the wake holds the session meanwhile), then end
WAKE_SCRIPT = [
    {"tool_calls": [{"name": "send_message_to_user", "arguments": {"text": "Your research is ready."}}]},
    {"tool_calls": [{"name": "check_sources", "arguments": {}}]},
    {"text": "I told the user their research is ready."},
]
#: with --tickets: after checking the sources, file the research as a ticket (a gated tool: the run
#: parks until the person decides), then tell the user; the scripted model says the same either way
TICKET_SCRIPT = [
    *WAKE_SCRIPT[:2],
    {"tool_calls": [{"name": "file_ticket", "arguments": {"title": "Research results", "sources": 3}}]},
    {"tool_calls": [{"name": "send_message_to_user", "arguments": {"text": "The ticket request is settled."}}]},
    {"text": "I asked before filing the ticket and told the user."},
]
#: a wake's entries that are for the agent, not the person: the marker and the note (docs/durability.md)
INTERNAL_KINDS = frozenset({"marker", "note"})
#: what woke the agent, in words, by the run id's prefix (the first that matches): the page's
#: system line for a wake, made here for a reload and by the page (given this table) for a push
WAKE_WORDS: tuple[tuple[str, str], ...] = (
    ("cron:", "The agent was woken by a schedule."),
    ("bg:", "The agent was woken by a finished task."),
    ("", "The agent was woken."),
)


def wake_line(run_id: str) -> dict[str, Any]:
    """The one system line that stands for a wake on the page: what woke the agent, in words
    (the run id stays out of what the person reads)."""
    what = next(words for prefix, words in WAKE_WORDS if run_id.startswith(prefix))
    return {"kind": "wake", "role": "system", "content": what, "key": f"wake:{run_id}"}


def shown_entries(entries: list[dict[str, Any]], announced: set[str]) -> list[dict[str, Any]]:
    """What the page shows for history entries (oldest first): live turns and deliveries as they
    are; a wake's marker and note hidden; a wake line before the first entry of each wake run not in
    ``announced`` (which it updates). The page makes the same line for a delivery pushed to it (from :data:`WAKE_WORDS`)."""
    shown: list[dict[str, Any]] = []
    for entry in entries:
        kind, run_id = entry.get("kind"), entry.get("run_id")
        if run_id and kind in INTERNAL_KINDS | {"delivery"} and run_id not in announced:
            announced.add(run_id)
            shown.append(wake_line(run_id))
        if kind in INTERNAL_KINDS:
            continue
        line = {"kind": kind, "role": entry.get("role"), "content": entry.get("content")}
        if entry.get("delivery_id"):
            line["key"] = line["delivery_id"] = entry["delivery_id"]
        shown.append(line)
    return shown


def approval_of(line: dict[str, Any]) -> str | None:
    """The approval id an approval request's history line names (None for any other line)."""
    if not str(line.get("delivery_id") or "").endswith(APPROVAL_DELIVERY):
        return None
    found = APPROVAL_IN_TEXT.search(str(line.get("content") or ""))
    return found.group(1) if found else None


def approval_view(approval: dict[str, Any]) -> dict[str, Any]:
    """What the page shows of a request: the buttons while pending, else who decided what."""
    keep = ("approval_id", "tool", "arguments", "expiry_at", "state", "decided_by", "reason", "expired")
    view = {k: approval.get(k) for k in keep}
    # the API records the caller too ("arn:... on behalf of the chat's user"): the page names the person
    view["decided_by"] = str(view["decided_by"] or "").rsplit(" on behalf of ", 1)[-1] or None
    return view


def busy_words(holder: str | None) -> str:
    """Why a turn cannot begin now, in plain words (never the holder's run id)."""
    if (holder or "").startswith("live:"):
        return "the agent is answering another message"
    if (holder or "").startswith("cron:"):
        return "the agent is running a scheduled job"
    return "the agent is finishing a task"


def live_script(text: str) -> list[dict[str, Any]]:
    """The live agent's reply for one message (the scripted provider): ``research X`` starts a
    background task through the ``start_research`` tool, anything else is answered at once."""
    if text.lower().startswith("research "):
        topic = text[len("research ") :].strip()[:200]
        return [
            {"tool_calls": [{"name": "start_research", "arguments": {"topic": topic}}]},
            {"text": f"I started researching {topic}. I will message you here when it is done."},
        ]
    return [{"text": f"You said: {text}"}]


@dataclass
class ChatApp:
    """The app's state: the product API client (signed with the app's credentials), and how slowly
    the woken agent's ``check_sources`` tool is answered."""

    api: Any
    task_seconds: float = 3.0
    #: --slow-wake: the tool is answered this late, so the wake holds the session meanwhile
    slow_wake_s: float = 0.0

    def __post_init__(self) -> None:
        #: the gated ``file_ticket`` tool's calls, by Idempotency-Key (a resumed run calls it once)
        self.tickets: Counter[str] = Counter()
        self._tickets_lock = threading.Lock()

    # -- a message from the page ------------------------------------------------------------------

    def send(self, text: str, message_id: str) -> tuple[int, dict[str, Any]]:
        from agentwake_client import ApiError

        if not text.strip() or len(text) > MAX_MESSAGE_CHARS:
            return 400, {"error": f"a message is 1 to {MAX_MESSAGE_CHARS} characters"}
        try:
            # the session's live_turn_wait_s is 0: refused at once while a wake holds it, and the
            # page (which keeps the message) tries again; nothing is written until the turn begins
            with self.api.live_turn(SESSION_ID) as turn:
                reply = self._reply(text)
                written = self.api.append(turn, [("user", text), ("assistant", reply)], idempotency_key=message_id)
        except ApiError as exc:
            if exc.type == "SessionBusy":
                return 409, {"error": busy_words(exc.holder), "type": "SessionBusy"}
            return 502, {"error": f"the agent's service answered {exc.status} ({exc.type}); the message is kept"}
        except OSError as exc:
            return 502, {"error": f"the agent's service cannot be reached ({type(exc).__name__}); the message is kept"}
        return 200, {"reply": reply, "written": bool(written.get("written", True))}

    def _reply(self, text: str) -> str:
        from agentwake.agent.providers.scripted import ScriptedProvider
        from agentwake.agent.types import ChatRequest
        from agentwake.domain.conversation import Message

        provider = ScriptedProvider("live", live_script(text))
        messages: tuple[Message, ...] = (Message(role="user", content=text),)
        for step in range(4):
            reply = provider.complete(ChatRequest(messages=messages, step=step))
            if not reply.tool_calls:
                return reply.text
            for call in reply.tool_calls:
                if call.name == "start_research":
                    self.start_research(json.loads(call.arguments)["topic"])
        return "(no reply)"

    # -- the background task: registered now, completed later as a producer would ------------------

    def start_research(self, topic: str) -> str:
        task = self.api.register_task(SESSION_ID, "research", {"topic": topic})

        def finish() -> None:
            time.sleep(self.task_seconds)
            self.api.complete_task(
                task.task_id,
                task.task_token,
                "succeeded",
                f"3 sources about {topic}.",
                summary_name=f"Research: {topic}",
                note=f"The user asked to research {topic}.",
            )

        threading.Thread(target=finish, name=f"task-{task.task_id}", daemon=True).start()
        return str(task.task_id)

    # -- the woken agent's HTTP tool --------------------------------------------------------------

    def check_sources(self) -> tuple[int, dict[str, Any]]:
        """The woken agent's ``check_sources`` tool (an HTTP tool of the session, on this app): with
        --slow-wake it answers late, and the wake holds the session meanwhile."""
        if self.slow_wake_s:
            time.sleep(self.slow_wake_s)
        return 200, {"checked": 3, "result": "3 sources checked."}

    def file_ticket(self, idempotency_key: str) -> tuple[int, dict[str, Any]]:
        """The woken agent's gated ``file_ticket`` tool: called only after the person approved."""
        with self._tickets_lock:
            self.tickets[idempotency_key] += 1
            number = len(self.tickets)
        return 200, {"ticket": f"T-{number}", "result": f"Filed ticket T-{number}."}

    # -- approvals: the person's decision, as the session's owner ---------------------------------

    def decide(self, approval_id: str, decision: str) -> tuple[int, dict[str, Any]]:
        """Approve or reject a request of this session (``decide_approval`` with the app's own
        credentials, an owner of the session): the run resumes and its next message is pushed."""
        from agentwake_client import ApiError

        if decision not in ("approve", "reject"):
            return 400, {"error": 'send {"decision": "approve" | "reject"}'}
        try:
            got = self.api.get_approval(approval_id)
            if got.get("session_id") != SESSION_ID:
                return 404, {"error": "no such approval request"}
            reason = None if decision == "approve" else "rejected in the chat"
            decided = self.api.decide_approval(approval_id, decision, reason=reason, decided_by=DECIDED_BY)  # type: ignore[arg-type]
        except ApiError as exc:
            if exc.type == "ApprovalAlreadyDecided" and isinstance(exc.body.get("approval"), dict):
                return 409, {"error": "it was decided already", "approval": approval_view(exc.body["approval"])}
            if exc.status == 404:
                return 404, {"error": "no such approval request"}
            return 502, {"error": f"the agent's service answered {exc.status} ({exc.type}); try again"}
        except OSError as exc:
            return 502, {"error": f"the agent's service cannot be reached ({type(exc).__name__}); try again"}
        return 200, {"approval": approval_view(decided)}

    def approvals(self) -> dict[str, dict[str, Any]]:
        """The session's approval requests by id (every page)."""
        found: dict[str, dict[str, Any]] = {}
        cursor = None
        while True:
            page = self.api.list_approvals(SESSION_ID, cursor=cursor, limit=100)
            for approval in page["approvals"]:
                found[approval["approval_id"]] = approval_view(approval)
            cursor = page["cursor"]
            if cursor is None:
                return found

    # -- push: the page's ticket, and what it has read --------------------------------------------

    def push_ticket(self) -> tuple[int, dict[str, Any]]:
        """``{url, ticket, expires_in}`` for the page (single use, 60 s), from the product API."""
        from agentwake_client import ApiError

        try:
            got = self.api.push_ticket(SESSION_ID)
        except (ApiError, OSError) as exc:
            return 502, {"error": f"no push ticket now ({type(exc).__name__}); the page tries again"}
        return 200, {"url": got["url"], "ticket": got["ticket"], "expires_in": got["expires_in"]}

    def read(self, shown: list[str]) -> tuple[int, dict[str, Any]]:
        """The page shows these deliveries: clear the session's unread mark when it names one of
        them (a delivery no page received meanwhile stays unread)."""
        from agentwake_client import ApiError

        try:
            mark = self.api.unread(SESSION_ID)
            if not mark["unread"] or mark["delivery_id"] not in shown:
                return 200, {"cleared": False}
            return 200, {"cleared": self.api.mark_read(SESSION_ID, mark["delivery_id"])}
        except (ApiError, OSError) as exc:
            return 502, {"error": f"the unread mark cannot be cleared now ({type(exc).__name__})"}

    # -- what the page reads ----------------------------------------------------------------------

    def conversation(self) -> dict[str, Any]:
        """The whole conversation oldest first (every page of the API's newest-first reading), as
        the page shows it (:func:`shown_entries`)."""
        entries: list[dict[str, Any]] = []
        cursor = None
        while True:
            page = self.api.read_conversation(SESSION_ID, cursor=cursor, limit=200)
            entries += page["entries"]
            cursor = page["cursor"]
            if cursor is None:
                break
        shown = shown_entries(list(reversed(entries)), set())
        if any(approval_of(line) for line in shown):
            approvals = self.approvals()
            for line in shown:
                found = approvals.get(approval_of(line) or "")
                if found is not None:
                    line["approval"] = found  # a decided request shows its decision, not buttons
        return {"entries": shown}


def page_bytes() -> bytes:
    """The page, given :data:`WAKE_WORDS` (a JSON script block) for the wake lines it makes."""
    words = json.dumps([list(pair) for pair in WAKE_WORDS]).replace("</", "<\\/")
    return (HERE / "static" / "index.html").read_text().replace("__WAKE_WORDS__", words).encode("utf-8")


def handler_class(app: ChatApp) -> type[BaseHTTPRequestHandler]:
    page = page_bytes()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self, status: int, body: Any, content_type: str = "application/json") -> None:
            raw = body if isinstance(body, bytes) else json.dumps(body).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(raw)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self) -> None:
            path = urlsplit(self.path).path
            if path == "/":
                self._answer(200, page, "text/html; charset=utf-8")
            elif path == "/api/conversation":
                from agentwake_client import ApiError

                try:
                    self._answer(200, app.conversation())
                except (ApiError, OSError) as exc:
                    self._answer(502, {"error": f"the conversation cannot be read now ({type(exc).__name__})"})
            elif path == "/api/push-ticket":
                self._answer(*app.push_ticket())
            elif path == TOOL_PATH:
                self._answer(*app.check_sources())
            else:
                self._answer(404, {"error": "not found"})

        def do_POST(self) -> None:
            try:
                length = min(max(0, int(self.headers.get("Content-Length") or 0)), 1024 * 1024)
            except ValueError:
                self._answer(400, {"error": "Content-Length is not a number"})
                return
            body = self.rfile.read(length)
            if self.path == "/api/send":
                try:
                    data = json.loads(body)
                    text, message_id = str(data["text"]), str(data.get("message_id") or uuid.uuid4().hex)
                except (ValueError, KeyError, TypeError):
                    self._answer(400, {"error": 'send {"text": "...", "message_id": "..."}'})
                    return
                self._answer(*app.send(text, message_id[:128]))
            elif self.path == "/api/read":
                try:
                    shown = json.loads(body)["shown"]
                    if not isinstance(shown, list) or len(shown) > MAX_READ_IDS:
                        raise TypeError
                    ids = [str(i)[:200] for i in shown]
                except (ValueError, KeyError, TypeError):
                    self._answer(400, {"error": f'send {{"shown": [delivery ids, at most {MAX_READ_IDS}]}}'})
                    return
                self._answer(*app.read(ids))
            elif self.path == TICKET_PATH:
                self._answer(*app.file_ticket(self.headers.get("Idempotency-Key") or "?"))
            elif self.path.startswith("/api/approvals/") and self.path.count("/") == 3:
                try:
                    decision = str(json.loads(body)["decision"])
                except (ValueError, KeyError, TypeError):
                    self._answer(400, {"error": 'send {"decision": "approve" | "reject"}'})
                    return
                self._answer(*app.decide(self.path.rsplit("/", 1)[-1][:100], decision))
            else:
                self._answer(404, {"error": "not found"})

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
            pass

    return Handler


def put_session(runtime: Any, app_url: str, live_turn_wait_s: float, tickets: bool = False) -> None:
    """The chat session's config (an operator's step): the woken agent is scripted, delivers to the
    session's open pages over the stack's WebSocket API, and has HTTP tools on this app; with
    ``tickets`` its ``file_ticket`` tool asks the person first (``"approval": "always"``)."""
    from agentwake.domain.models import SessionConfig
    from agentwake.store.dynamo import DynamoStore
    from agentwake.trust.session_checks import ConfigRules
    from agentwake_local.server import LOCAL_CALLER_ARN
    from agentwake_local.stack import LOCAL_OUTBOUND_ENV

    store = DynamoStore(runtime.outputs["AgentTableName"], client=runtime.client("dynamodb"))
    check_sources = {
        "type": "http",
        "name": "check_sources",
        "description": "Check the sources of the finished research (the chat app answers).",
        "url": f"{app_url}{TOOL_PATH}",
        "method": "GET",
        "timeout": TOOL_TIMEOUT_S,
    }
    file_ticket = {
        "type": "http",
        "name": "file_ticket",
        "description": "File a ticket (the chat app answers); the person approves it first.",
        "parameters": {"type": "object", "properties": {"title": {"type": "string"}, "sources": {"type": "integer"}}},
        "url": f"{app_url}{TICKET_PATH}",
        "method": "POST",
        "timeout": TOOL_TIMEOUT_S,
        "approval": "always",
    }
    store.records.put_session(
        SessionConfig(
            session_id=SESSION_ID,
            persona="You are the assistant of a chat app.",
            providers=[{"type": "scripted", "id": "scripted", "script": TICKET_SCRIPT if tickets else WAKE_SCRIPT}],
            delivery={"type": "websocket"},
            tools=[check_sources, file_ticket] if tickets else [check_sources],
            live_turn_wait_s=live_turn_wait_s,
            retry_base_delay_ms=0,
            owners=[LOCAL_CALLER_ARN],  # the app signs its API calls with the stack's credentials
        ),
        ConfigRules.from_env(LOCAL_OUTBOUND_ENV),
    )


@contextmanager
def running(
    port: int = 0,
    *,
    task_seconds: float = 3.0,
    slow_wake_s: float = 0.0,
    live_turn_wait_s: float = 0.0,
    local_name: str = LOCAL_NAME,
    tickets: bool = False,
) -> Iterator[tuple[str, ChatApp, Any]]:
    """The local stack (with its WebSocket API), the chat session and the app's server: yields
    (page URL, app, runtime).

    The port is taken first (``OSError`` when it is not free, before any stack starts); the stack
    is the local stack ``local_name``, recorded where the CLI and the console find it
    (``LocalStackRunning`` when one of that name already runs). ``slow_wake_s``: the woken agent's
    ``check_sources`` tool is answered that late (the wake holds the session meanwhile). ``tickets``:
    the woken agent then files a ticket through a gated tool (asks the person first)."""
    from agentwake_client import ProductApiClient
    from agentwake_local.server import boto3_session
    from agentwake_local.stack import LocalStackRuntime

    server = ThreadingHTTPServer(("127.0.0.1", port), BaseHTTPRequestHandler)  # its handler once the app exists
    server.daemon_threads = True
    runtime = LocalStackRuntime(async_retry_delays=0, local_name=local_name)
    try:
        runtime.start(ROOT / "template.yaml", {}, background=True)
    except BaseException:
        server.server_close()
        raise
    try:
        assert runtime.api_url, "the template serves no product API"
        assert runtime.push_url, "the template serves no WebSocket API (PushApi)"
        app = ChatApp(
            # signed with the stack's credentials, as the local HTTP API verifies them
            api=ProductApiClient(
                runtime.api_url, region=runtime.region, credentials=boto3_session(runtime.region).get_credentials()
            ),
            task_seconds=task_seconds,
            slow_wake_s=slow_wake_s,
        )
        server.RequestHandlerClass = handler_class(app)
        url = f"http://127.0.0.1:{server.server_address[1]}"
        put_session(runtime, url, live_turn_wait_s, tickets)
        thread = threading.Thread(target=server.serve_forever, name="chat-app", daemon=True)
        thread.start()
        try:
            yield url, app, runtime
        finally:
            server.shutdown()
            server.server_close()
    finally:
        runtime.stop()


def _slow_wake(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= MAX_SLOW_WAKE_S:
        raise argparse.ArgumentTypeError(
            f"0 to {MAX_SLOW_WAKE_S:g} seconds (the woken agent's tool times out after {TOOL_TIMEOUT_S:g} s)"
        )
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"the page's port on 127.0.0.1 (default {DEFAULT_PORT})"
    )
    parser.add_argument("--task-seconds", type=float, default=3.0, help="how long the research task takes")
    parser.add_argument(
        "--slow-wake",
        type=_slow_wake,
        default=0.0,
        metavar="SECONDS",
        help="answer the woken agent's check_sources tool this late: the wake holds the session meanwhile, "
        "so a message waits (0-50)",
    )
    parser.add_argument(
        "--no-tickets",
        dest="tickets",
        action="store_false",
        help="the woken agent does not file a ticket (by default it asks you first: Approve or Reject on the page)",
    )
    args = parser.parse_args(argv)
    from agentwake_local.stack import LocalStackRunning, state_path
    from agentwake_local.stop_signals import StopSignals

    stop = StopSignals()  # Ctrl-C from now on stops the app once it has started
    try:
        with running(args.port, task_seconds=args.task_seconds, slow_wake_s=args.slow_wake, tickets=args.tickets) as (
            url,
            _app,
            runtime,
        ):
            print(
                f"chat app on {url}/  (the agent's messages pushed over {runtime.push_url}; "
                f"product API {runtime.api_url}, local stack {runtime.endpoint_url})",
                flush=True,
            )
            print(
                f"its local stack is named {LOCAL_NAME!r} ({state_path(name=LOCAL_NAME)}): the CLI and the console "
                f"find it, e.g. `agentwake history show {SESSION_ID}` and `agentwake console` (port 8765); "
                f"with other local stacks running, prefix AGENTWAKE_LOCAL={LOCAL_NAME}",
                flush=True,
            )
            if args.slow_wake:
                print(
                    f"slow wakes: the woken agent's check_sources tool is answered {args.slow_wake:g} s late "
                    "(the session stays busy)",
                    flush=True,
                )
            if args.tickets:
                print(
                    "after research the agent asks before filing a ticket: Approve or Reject on the page "
                    "(or `agentwake approvals list`)",
                    flush=True,
                )
            print("requests to the product API are SigV4-signed and verified, as deployed; Ctrl-C to stop", flush=True)
            stop.wait()
    except OSError as exc:
        if exc.errno not in (errno.EADDRINUSE, errno.EACCES):
            raise
        print(
            f"cannot listen on 127.0.0.1:{args.port}: {exc.strerror}. Another program (another `make chat`?) "
            f"uses it; pick another port: CHAT_PORT={args.port + 1} make chat (or --port {args.port + 1})",
            file=sys.stderr,
        )
        return 1
    except LocalStackRunning:
        path = state_path(name=LOCAL_NAME)
        print(
            f"a local stack named {LOCAL_NAME!r} already runs ({path}): another `make chat` has it; "
            "use that one, or stop it (Ctrl-C in its terminal) and start again",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
