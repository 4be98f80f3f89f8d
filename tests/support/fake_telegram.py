"""A fake Telegram Bot API on 127.0.0.1 (like ``receiver.py``): ``/bot{token}/sendMessage`` stores
each message and answers its ``message_id``; a wrong token is a 404 as the Bot API answers it; answers
can be scripted (429 with ``parameters.retry_after``, ``ok: false`` errors, a proxy's 502 page, a
message stored but its answer lost)."""

from __future__ import annotations

import itertools
import json
import threading
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOKEN = "7000001234:AAFakeTelegramBotTokenQwertyUiopAsdf12"


@dataclass
class Scripted:
    """One answer to the next sendMessage: ``body`` as JSON (or ``raw`` bytes)."""

    status: int = 200
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None
    #: store the message anyway (it went, the answer was lost)
    store: bool = False


def error(code: int, description: str, **parameters: Any) -> Scripted:
    body: dict[str, Any] = {"ok": False, "error_code": code, "description": description}
    if parameters:
        body["parameters"] = parameters
    return Scripted(code, body)


def flood(seconds: int) -> Scripted:
    return error(429, f"Too Many Requests: retry after {seconds}", retry_after=seconds)


class FakeTelegram:
    def __init__(self, token: str = TOKEN) -> None:
        self.token = token
        #: every stored message: chat_id, text, message_thread_id?, message_id
        self.messages: list[dict[str, Any]] = []
        self.script: list[Scripted] = []
        #: answerCallbackQuery's requests: callback_query_id, text?, show_alert?
        self.answers: list[dict[str, Any]] = []
        #: how many requests reached it (answered or scripted)
        self.requests = 0
        self._lock = threading.Lock()
        self._ids = itertools.count(4711)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                status, body = outer._answer(self.path, json.loads(raw or b"{}"))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        """The API base, for ``AGENTWAKE_TELEGRAM_API_URL``."""
        return f"http://127.0.0.1:{self.server.server_address[1]}/"

    def __enter__(self) -> FakeTelegram:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def then(self, *answers: Scripted) -> None:
        with self._lock:
            self.script.extend(answers)

    def by_text(self) -> Counter[str]:
        """Messages per text (a test gives each delivery its own text: Telegram keeps no delivery id)."""
        return Counter(m["text"] for m in self.messages)

    def _answer(self, path: str, args: dict[str, Any]) -> tuple[int, bytes]:
        with self._lock:
            self.requests += 1
            if self.script:
                answer = self.script.pop(0)
                if answer.store:
                    self._store(args)
                return answer.status, answer.raw if answer.raw is not None else json.dumps(answer.body or {}).encode()
            prefix, _, method = path.rpartition("/")
            if prefix != f"/bot{self.token}" or method not in ("sendMessage", "editMessageText", "answerCallbackQuery"):
                return 404, json.dumps({"ok": False, "error_code": 404, "description": "Not Found"}).encode()
            if method == "answerCallbackQuery":
                self.answers.append(dict(args))
                return 200, json.dumps({"ok": True, "result": True}).encode()
            if method == "editMessageText":  # the text replaced; without reply_markup the keyboard goes
                found = [
                    m
                    for m in self.messages
                    if m["chat_id"] == args.get("chat_id") and m["message_id"] == args.get("message_id")
                ]
                if not found:
                    return 400, json.dumps(
                        {"ok": False, "error_code": 400, "description": "message not found"}
                    ).encode()
                found[0]["text"] = args.get("text")
                found[0].pop("reply_markup", None)
                if args.get("reply_markup"):
                    found[0]["reply_markup"] = args["reply_markup"]
                return 200, json.dumps({"ok": True, "result": found[0]}).encode()
            message = self._store(args)
            result = {"message_id": message["message_id"], "chat": {"id": args["chat_id"]}, "text": args["text"]}
            return 200, json.dumps({"ok": True, "result": result}).encode()

    def _store(self, args: dict[str, Any]) -> dict[str, Any]:
        message = {**args, "message_id": next(self._ids)}
        self.messages.append(message)
        return message
