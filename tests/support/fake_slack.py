"""A fake Slack Web API on 127.0.0.1 (like ``receiver.py``): ``chat.postMessage`` stores each
message with its metadata, ``conversations.history``/``.replies`` answer from what was stored
(``oldest``, ``include_all_metadata``, cursor pages), ``chat.update`` replaces a stored message's text and
blocks, ``chat.postEphemeral`` is kept apart (``ephemeral``), and answers can be scripted (a 429 with
``Retry-After``, a 5xx, ``ok: false`` codes, a post stored but its answer lost)."""

from __future__ import annotations

import itertools
import json
import threading
import time
import urllib.parse
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOKEN = "xoxb-1111111111-2222222222-FakeSlackBotTokenAbc"


@dataclass
class Scripted:
    """One answer to the next request of ``method``: ``body`` as JSON (or ``raw`` bytes)."""

    status: int = 200
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None
    #: store the message anyway (a post that happened but whose answer was lost)
    store: bool = False


def ratelimited(seconds: float) -> Scripted:
    return Scripted(429, {"ok": False, "error": "ratelimited"}, {"Retry-After": f"{seconds:g}"})


def error(code: str, **extra: Any) -> Scripted:
    return Scripted(200, {"ok": False, "error": code, **extra})


class FakeSlack:
    def __init__(self, token: str = TOKEN) -> None:
        self.token = token
        #: every stored message: channel, ts, text, thread_ts?, metadata?
        self.messages: list[dict[str, Any]] = []
        #: method -> answers for its next requests, first first
        self.script: dict[str, list[Scripted]] = {}
        #: (method, form or JSON) of every request, answered or not
        self.requests: list[tuple[str, dict[str, Any]]] = []
        #: chat.postEphemeral's requests: channel, user, text
        self.ephemeral: list[dict[str, Any]] = []
        #: history/replies page size (Slack: ``limit``, at most 15 for some apps)
        self.page_size = 100
        self._lock = threading.Lock()
        self._seq = itertools.count(1)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                method = self.path.rsplit("/", 1)[-1]
                if "json" in (self.headers.get("Content-Type") or ""):
                    args = json.loads(raw or b"{}")
                else:
                    args = dict(urllib.parse.parse_qsl(raw.decode()))
                status, body, headers = outer._answer(method, args, self.headers.get("Authorization", ""))
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        """The API base, for ``AGENTWAKE_SLACK_API_URL``."""
        return f"http://127.0.0.1:{self.server.server_address[1]}/api/"

    def __enter__(self) -> FakeSlack:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def then(self, method: str, *answers: Scripted) -> None:
        with self._lock:
            self.script.setdefault(method, []).extend(answers)

    def by_delivery_id(self) -> Counter[str]:
        return Counter(
            m["metadata"]["event_payload"]["delivery_id"]
            for m in self.messages
            if (m.get("metadata") or {}).get("event_type") == "agentwake_delivery"
        )

    def calls(self, method: str) -> int:
        return sum(1 for name, _ in self.requests if name == method)

    # --- the API ---------------------------------------------------------------------------

    def _answer(self, method: str, args: dict[str, Any], auth: str) -> tuple[int, bytes, dict[str, str]]:
        with self._lock:
            self.requests.append((method, args))
            scripted = self.script.get(method)
            if scripted:
                answer = scripted.pop(0)
                if answer.store and method == "chat.postMessage":
                    self._store(args)
                body = answer.raw if answer.raw is not None else json.dumps(answer.body or {}).encode()
                return answer.status, body, {"Content-Type": "application/json", **answer.headers}
            if auth != f"Bearer {self.token}":
                return self._json({"ok": False, "error": "invalid_auth"})
            if method == "chat.postMessage":
                message = self._store(args)
                return self._json({"ok": True, "channel": message["channel"], "ts": message["ts"], "message": message})
            if method in ("conversations.history", "conversations.replies"):
                return self._json(self._history(method, args))
            if method == "chat.update":  # a message's text and blocks replaced (the buttons gone)
                found = [m for m in self.messages if m["channel"] == args.get("channel") and m["ts"] == args.get("ts")]
                if not found:
                    return self._json({"ok": False, "error": "message_not_found"})
                found[0].update(text=args.get("text"), blocks=args.get("blocks"))
                return self._json({"ok": True, "channel": args["channel"], "ts": args["ts"]})
            if method == "chat.postEphemeral":  # seen by one user only: kept apart
                self.ephemeral.append(dict(args))
                return self._json({"ok": True, "message_ts": f"{time.time():.6f}"})
            return self._json({"ok": False, "error": "unknown_method"})

    def _store(self, args: dict[str, Any]) -> dict[str, Any]:
        ts = f"{time.time():.0f}.{next(self._seq):06d}"
        message: dict[str, Any] = {"type": "message", "channel": args["channel"], "ts": ts, "text": args.get("text")}
        if args.get("thread_ts"):
            message["thread_ts"] = args["thread_ts"]
        if args.get("blocks"):
            message["blocks"] = args["blocks"]
        if args.get("metadata"):
            meta = args["metadata"]
            message["metadata"] = json.loads(meta) if isinstance(meta, str) else meta
        self.messages.append(message)
        return message

    def _history(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        channel = args.get("channel")
        oldest = float(args.get("oldest") or 0)
        found = [m for m in self.messages if m["channel"] == channel and float(m["ts"]) >= oldest]
        if method == "conversations.replies":
            found = [m for m in found if m.get("thread_ts") == args.get("ts")]
        found.sort(key=lambda m: float(m["ts"]), reverse=True)  # newest first, as Slack answers
        if args.get("include_all_metadata") not in ("true", "1", True):
            found = [{k: v for k, v in m.items() if k != "metadata"} for m in found]
        start = int(args.get("cursor") or 0)
        size = min(self.page_size, int(args.get("limit") or 100))
        page = found[start : start + size]
        more = start + size < len(found)
        return {
            "ok": True,
            "messages": page,
            "has_more": more,
            "response_metadata": {"next_cursor": str(start + size) if more else ""},
        }

    @staticmethod
    def _json(body: dict[str, Any]) -> tuple[int, bytes, dict[str, str]]:
        return 200, json.dumps(body).encode(), {"Content-Type": "application/json"}
