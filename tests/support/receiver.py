"""A real webhook receiver on 127.0.0.1 that counts what it receives."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class CountingReceiver:
    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.fail_next = 0
        #: seconds to wait, after recording a delivery, before answering the next N requests
        self.slow_next = 0
        self.slow_seconds = 0.0
        #: every request waits (after it is recorded) until this event is set, at most 60 s
        self.hold: threading.Event | None = None
        #: set when the first delivery has been recorded (a test waits on it, not on time)
        self.arrived = threading.Event()
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with outer._lock:
                    if outer.fail_next > 0:
                        outer.fail_next -= 1
                        self.send_response(503)
                        self.end_headers()
                        return
                    outer.received.append(json.loads(body))
                    outer.headers.append(dict(self.headers))
                    outer.arrived.set()
                    slow = outer.slow_next > 0
                    if slow:
                        outer.slow_next -= 1
                if slow:
                    time.sleep(outer.slow_seconds)  # it arrived, but the answer comes too late
                if outer.hold is not None:
                    outer.hold.wait(60)
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/deliveries"

    def __enter__(self) -> CountingReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.hold is not None:
            self.hold.set()  # release held requests, so the server shuts down at once
        self.server.shutdown()
        self.server.server_close()

    def by_delivery_id(self) -> Counter[str]:
        return Counter(r["delivery_id"] for r in self.received)

    def texts(self) -> list[str]:
        return [r["text"] for r in self.received]
