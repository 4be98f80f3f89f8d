"""A reference chat app on agentwake (issue 23): a person chats in a browser, the agent can start a
background task, and the woken agent's message appears in the open page.

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
- **the wake's delivery** arrives on ``POST /webhook`` (agentwake's webhook channel) and is checked
  as docs/operations.md says a receiver must (``agentwake.delivery.webhook.verify_delivery``): the
  signature over the body, ``sent_at`` within the tolerance, then the *signed* ``delivery_id`` is
  the dedupe key (the ``X-Agentwake-Delivery-Id`` header is not signed), kept in a small sqlite
  file in the app's state directory so a restart does not forget it; the open page shows a new
  delivery without a reload (it polls ``/api/events``);
- **a reload** renders the whole conversation from the API (``GET .../conversation``, every page,
  oldest first) in the order the session was held. A wake's internal entries (the marker "Output
  your last task result below." and its note, which are for the agent) are not shown; each wake is
  one system line, "The agent was woken by a finished task" (or "by a schedule"), before its first
  message: :func:`shown_entries` makes that line for a reload and for a delivery arriving live.

It starts its own local stack (the embedded local AWS with template.yaml, as ``agentwake local up``
does) under the local stack name ``chat``, recorded where the CLI and ``agentwake console`` look
(``$AGENTWAKE_HOME/local-chat.json``), and serves the page on 127.0.0.1:8766 (the console's default
is 8765). ``--slow-wake N``: the app answers each webhook N s late, so a wake holds the session
that long and a person can watch a message wait. Nothing here is needed by agentwake.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import secrets
import signal
import sqlite3
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SESSION_ID = "chat-web"
#: the SSM parameter holding the webhook's signing secret (under the stack's SsmPathPrefix)
SECRET_PARAMETER = "/agentwake/chat-app/webhook-secret"
MAX_MESSAGE_CHARS = 4000
#: the page's port: not the console's default (8765), so both run side by side
DEFAULT_PORT = 8766
#: the local stack's name: its state file is where the CLI and the console look for a stack
LOCAL_NAME = "chat"
#: --slow-wake's bound: the session's webhook times out after 60 s
MAX_SLOW_WAKE_S = 50.0

#: the woken agent (scripted): tell the user the research is ready, then end
WAKE_SCRIPT = [
    {"tool_calls": [{"name": "send_message_to_user", "arguments": {"text": "Your research is ready."}}]},
    {"text": "I told the user their research is ready."},
]
#: a wake's entries that are for the agent, not the person: the marker and the note (docs/durability.md)
INTERNAL_KINDS = frozenset({"marker", "note"})


def wake_line(run_id: str) -> dict[str, Any]:
    """The one system line that stands for a wake on the page: what woke the agent, in words
    (the run id stays out of what the person reads)."""
    if run_id.startswith("cron:"):
        what = "The agent was woken by a schedule."
    elif run_id.startswith("bg:"):
        what = "The agent was woken by a finished task."
    else:
        what = "The agent was woken."
    return {"kind": "wake", "role": "system", "content": what, "key": f"wake:{run_id}"}


def shown_entries(entries: list[dict[str, Any]], announced: set[str]) -> list[dict[str, Any]]:
    """What the page shows for history entries (oldest first): live turns and deliveries as they
    are; a wake's marker and note hidden; a wake line before the first entry of each wake run not in
    ``announced`` (which it updates). The same for a reload and for a delivery arriving live."""
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


class SeenDeliveries:
    """The delivery ids this app has shown, in a sqlite file: kept across restarts (a redrive may
    resend a delivery days later) and shared by every thread and process that opens the file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._db() as db:
            db.execute("CREATE TABLE IF NOT EXISTS seen (delivery_id TEXT PRIMARY KEY, seen_at TEXT NOT NULL)")

    def _db(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30, isolation_level=None)

    def first_time(self, delivery_id: str) -> bool:
        """Record ``delivery_id``; True when it was not recorded before (atomically: of two
        concurrent requests with the same id, one is the first)."""
        db = self._db()
        try:
            inserted = db.execute(
                "INSERT OR IGNORE INTO seen (delivery_id, seen_at) VALUES (?, datetime('now'))", (delivery_id,)
            )
            return inserted.rowcount == 1
        finally:
            db.close()


def state_dir() -> Path:
    """Where the app keeps its state: ``$AGENTWAKE_HOME/chat-app`` (``~/.agentwake/chat-app``)."""
    from agentwake_local.stack import agentwake_home

    return agentwake_home() / "chat-app"


def webhook_secret(folder: Path) -> str:
    """The webhook's signing secret, made once and kept (mode 0600) with the seen ids: a restarted
    app checks what was signed before its restart with the same secret."""
    path = folder / "webhook-secret"
    folder.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    with os.fdopen(fd, "w") as out:
        secret = secrets.token_urlsafe(32)
        out.write(secret)
    return secret


@dataclass
class ChatApp:
    """The app's state: the product API client, the events the open pages poll, deliveries seen."""

    api: Any
    webhook_secret: str
    seen: SeenDeliveries
    task_seconds: float = 3.0
    webhook_delay_s: float = 0.0
    events: list[dict[str, Any]] = field(default_factory=list)
    #: the wake runs the open pages were told about (one wake line each)
    announced: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

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

    # -- agentwake's webhook ----------------------------------------------------------------------

    def webhook(self, body: bytes, headers: Any) -> tuple[int, dict[str, Any]]:
        """A delivery, checked as docs/operations.md says: signature, then ``sent_at``, then the
        signed ``session_id`` (one of this app's), then the signed ``delivery_id`` as the dedupe key
        (the header is not signed: it is not read)."""
        from agentwake.delivery.webhook import SIGNATURE_HEADER, DeliveryRefused, SignatureRefused, verify_delivery

        try:
            received = verify_delivery(body, headers.get(SIGNATURE_HEADER), self.webhook_secret)
        except SignatureRefused as exc:
            return 401, {"error": str(exc)}
        except DeliveryRefused as exc:
            return 400, {"error": str(exc)}
        delivery = received.delivery
        if delivery.session_id != SESSION_ID:
            # signed by the stack, but for a session this app does not show: not ours to display
            return 400, {"error": f"a delivery for session {delivery.session_id[:128]!r}, not this app's"}
        duplicate = not self.seen.first_time(delivery.delivery_id)
        if not duplicate:
            entry = {"kind": "delivery", "role": "assistant", "content": delivery.text}
            with self.lock:
                lines = shown_entries(
                    [{**entry, "run_id": delivery.run_id, "delivery_id": delivery.delivery_id}], self.announced
                )
            for line in lines:
                self._event(**line)
        if self.webhook_delay_s:  # a slow receiver keeps the wake (and the session) busy this long
            time.sleep(self.webhook_delay_s)
        return 200, {"duplicate": duplicate}

    # -- what the page reads ----------------------------------------------------------------------

    def _event(self, kind: str, role: str, content: str, **extra: Any) -> None:
        with self.lock:
            self.events.append({"n": len(self.events) + 1, "kind": kind, "role": role, "content": content, **extra})

    def events_after(self, after: int) -> dict[str, Any]:
        with self.lock:
            return {"events": self.events[after:], "next": len(self.events)}

    def conversation(self) -> dict[str, Any]:
        """The whole conversation oldest first (every page of the API's newest-first reading), as
        the page shows it (:func:`shown_entries`), and ``next``: the first live event the page is
        to show after it. A delivery is in the history once the webhook answered; one the app has
        received and is still answering (a slow wake) is not there yet: ``next`` points at its
        event, so a page loaded meanwhile shows it too (the page drops a second copy by its key)."""
        with self.lock:
            events = list(self.events)
        entries: list[dict[str, Any]] = []
        cursor = None
        while True:
            page = self.api.read_conversation(SESSION_ID, cursor=cursor, limit=200)
            entries += page["entries"]
            cursor = page["cursor"]
            if cursor is None:
                break
        shown = shown_entries(list(reversed(entries)), set())
        keys = {line["key"] for line in shown if "key" in line}
        missing = (n for n, event in enumerate(events) if event.get("key") not in keys)
        return {"entries": shown, "next": next(missing, len(events))}


def handler_class(app: ChatApp) -> type[BaseHTTPRequestHandler]:
    page = (HERE / "static" / "index.html").read_bytes()

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
            split = urlsplit(self.path)
            if split.path == "/":
                self._answer(200, page, "text/html; charset=utf-8")
            elif split.path == "/api/events":
                after = int((parse_qs(split.query).get("after") or ["0"])[0] or 0)
                self._answer(200, app.events_after(max(0, after)))
            elif split.path == "/api/conversation":
                from agentwake_client import ApiError

                try:
                    self._answer(200, app.conversation())
                except (ApiError, OSError) as exc:
                    self._answer(502, {"error": f"the conversation cannot be read now ({type(exc).__name__})"})
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
            elif self.path == "/webhook":
                self._answer(*app.webhook(body, self.headers))
            else:
                self._answer(404, {"error": "not found"})

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
            pass

    return Handler


def put_session(runtime: Any, webhook_url: str, secret: str, live_turn_wait_s: float) -> None:
    """The chat session's config (an operator's step): the woken agent is scripted and delivers to
    this app's webhook, signed with a secret kept in SSM."""
    from agentwake.domain.models import SessionConfig
    from agentwake.store.dynamo import DynamoStore
    from agentwake.trust.session_checks import ConfigRules
    from agentwake_local.server import LOCAL_CALLER_ARN
    from agentwake_local.stack import LOCAL_OUTBOUND_ENV

    runtime.client("ssm").put_parameter(Name=SECRET_PARAMETER, Value=secret, Type="SecureString", Overwrite=True)
    store = DynamoStore(runtime.outputs["AgentTableName"], client=runtime.client("dynamodb"))
    script = json.loads(json.dumps(WAKE_SCRIPT).replace("{result}", "see the research note in this chat."))
    store.records.put_session(
        SessionConfig(
            session_id=SESSION_ID,
            persona="You are the assistant of a chat app.",
            providers=[{"type": "scripted", "id": "scripted", "script": script}],
            delivery={"type": "webhook", "url": webhook_url, "secret_ref": f"ssm:{SECRET_PARAMETER}", "timeout": 60},
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
    webhook_delay_s: float = 0.0,
    live_turn_wait_s: float = 0.0,
    state: Path | None = None,
    local_name: str = LOCAL_NAME,
) -> Iterator[tuple[str, ChatApp, Any]]:
    """The local stack, the chat session and the app's server: yields (page URL, app, runtime).

    The port is taken first (``OSError`` when it is not free, before any stack starts); the stack
    is the local stack ``local_name``, recorded where the CLI and the console find it
    (``LocalStackRunning`` when one of that name already runs). ``webhook_delay_s``: each webhook
    is answered that late (the wake holds the session meanwhile). ``state``: the folder of the seen
    delivery ids and the webhook secret (:func:`state_dir`)."""
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
        folder = state or state_dir()
        app = ChatApp(
            # signed with the stack's credentials, as the local HTTP API verifies them
            api=ProductApiClient(
                runtime.api_url, region=runtime.region, credentials=boto3_session(runtime.region).get_credentials()
            ),
            webhook_secret=webhook_secret(folder),
            seen=SeenDeliveries(folder / "seen-deliveries.sqlite3"),
            task_seconds=task_seconds,
            webhook_delay_s=webhook_delay_s,
        )
        server.RequestHandlerClass = handler_class(app)
        url = f"http://127.0.0.1:{server.server_address[1]}"
        put_session(runtime, f"{url}/webhook", app.webhook_secret, live_turn_wait_s)
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
        raise argparse.ArgumentTypeError(f"0 to {MAX_SLOW_WAKE_S:g} seconds (the webhook times out after 60 s)")
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
        help="answer each webhook this late: the wake holds the session meanwhile, so a message waits (0-50)",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="seen delivery ids and the webhook secret ($AGENTWAKE_HOME/chat-app)",
    )
    args = parser.parse_args(argv)
    from agentwake_local.stack import LocalStackRunning, state_path

    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    options = {"task_seconds": args.task_seconds, "webhook_delay_s": args.slow_wake, "state": args.state_dir}
    try:
        with running(args.port, **options) as (url, _app, runtime):
            print(
                f"chat app on {url}/  (product API {runtime.api_url}, local stack {runtime.endpoint_url})", flush=True
            )
            print(
                f"its local stack is named {LOCAL_NAME!r} ({state_path(name=LOCAL_NAME)}): the CLI and the console "
                f"find it, e.g. `agentwake history show {SESSION_ID}` and `agentwake console` (port 8765); "
                f"with other local stacks running, prefix AGENTWAKE_LOCAL={LOCAL_NAME}",
                flush=True,
            )
            if args.slow_wake:
                print(f"slow wakes: each webhook is answered {args.slow_wake:g} s late (the session stays busy)")
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
