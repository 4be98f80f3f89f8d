"""Raw socket servers on 127.0.0.1 for what pytest-httpserver cannot do: answer one byte at a time,
or never answer at all. Each records what it received."""

from __future__ import annotations

import socket
import threading
from typing import Any


class RawServer:
    """Accepts connections on 127.0.0.1 and runs ``behave(conn)`` for each, in a thread."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        self.requests: list[bytes] = []
        self.connections = 0
        self._threads: list[threading.Thread] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def behave(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def _read_request(self, conn: socket.socket) -> bytes:
        data = b""
        conn.settimeout(30)
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return data
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        while len(body) < length:
            chunk = conn.recv(65536)
            if not chunk:
                break
            body += chunk
        return head + b"\r\n\r\n" + body

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            t = threading.Thread(target=self._handle, args=(conn,), daemon=True)
            t.start()
            self._threads.append(t)

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            try:
                self.requests.append(self._read_request(conn))
                self.behave(conn)
            except OSError:
                pass

    def __enter__(self) -> Any:
        self._server = threading.Thread(target=self._serve, daemon=True)
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self._server.join(timeout=10)
        self.sock.close()
        for t in self._threads:
            t.join(timeout=10)


class Dribbler(RawServer):
    """Answers ``200 OK`` one byte every ``interval`` seconds, for as long as the client listens."""

    def __init__(self, interval: float = 0.5) -> None:
        super().__init__()
        self.interval = interval
        self.bytes_sent = 0

    def behave(self, conn: socket.socket) -> None:
        answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n" + b" " * 100000
        for i in range(len(answer)):
            if self.stop.wait(self.interval):
                return
            conn.sendall(answer[i : i + 1])
            self.bytes_sent += 1


class Silent(RawServer):
    """Reads the request, then never answers (until the server stops)."""

    def behave(self, conn: socket.socket) -> None:
        self.stop.wait(600)
