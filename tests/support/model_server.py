"""An OpenAI-compatible chat-completions server on 127.0.0.1 that holds its callers, for the tests of
records running side by side (docs/durability.md, "Records side by side").

Each session's model is named after the session (the provider's ``model``), so the server knows
whose call it serves. A wake's first call (no tool result in its messages yet) is held: it answers
only once ``expect`` first calls are in flight at once (or ``bound_s`` passed: the test's assertion on
``most`` then says how many were), and not before ``hold_s`` (a model's latency). It answers with a
``send_message_to_user`` call; the next call, with the tool's result, with a final answer at once.
A model named ``fail-...`` answers its first call 401 (an invalid key: every provider of the attempt
fails). Every call is recorded with its start and end as ticks of one counter (an order, not a clock).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: the text each session's run sends the user, and its final answer
SENT = "update for {session}"
FINAL = "done for {session}"


@dataclass(frozen=True)
class ModelCall:
    session: str
    step: int
    started: int
    ended: int


class HoldingModelServer:
    def __init__(self, *, hold_s: float = 2.0, bound_s: float = 60.0) -> None:
        self.hold_s, self.bound_s = hold_s, bound_s
        self._cond = threading.Condition()
        self._tick = 0
        self.expect = 0
        self.released = False
        self.in_flight = 0
        self.most = 0
        self.calls: list[ModelCall] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                status, answer = server.serve(str(body["model"]), body["messages"])
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def arm(self, expect: int) -> None:
        """The next first calls are held until ``expect`` of them are in flight at once."""
        with self._cond:
            self.expect, self.released, self.most, self.calls = expect, False, 0, []

    def serve(self, session: str, messages: list[dict[str, Any]]) -> tuple[int, dict[str, Any]]:
        step = 1 if messages and messages[-1].get("role") == "tool" else 0  # after the tool's result
        with self._cond:
            self._tick += 1
            started = self._tick
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
        try:
            if step == 0:
                self._hold()
            if session.startswith("fail-"):
                return 401, {"error": {"message": "invalid api key"}}
            if step == 0:
                call = {"id": "c1", "type": "function", "function": {"name": "send_message_to_user"}}
                call["function"]["arguments"] = json.dumps({"text": SENT.format(session=session)})
                return 200, _reply({"content": None, "tool_calls": [call]})
            return 200, _reply({"content": FINAL.format(session=session)})
        finally:
            with self._cond:
                self._tick += 1
                self.in_flight -= 1
                self.calls.append(ModelCall(session, step, started, self._tick))

    def _hold(self) -> None:
        arrived = time.monotonic()
        with self._cond:
            if self.in_flight >= self.expect:
                self.released = True
                self._cond.notify_all()
            self._cond.wait_for(lambda: self.released, timeout=self.bound_s)
            self.released = True  # past the bound, nobody waits any more
            self._cond.notify_all()
        rest = self.hold_s - (time.monotonic() - arrived)
        if rest > 0:
            time.sleep(rest)

    def of(self, session: str) -> list[ModelCall]:
        with self._cond:
            return sorted((c for c in self.calls if c.session == session), key=lambda c: c.started)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _reply(message: dict[str, Any]) -> dict[str, Any]:
    usage = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "held",
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": "stop"}],
        "usage": usage,
    }
