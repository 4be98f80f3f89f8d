"""A small WebSocket client for tests (stdlib sockets; RFC 6455 frames from ``agentwake_local.ws_frames``):
open ``{url}?ticket=...``, read text frames with a deadline, ping, close. It checks the server's
``Sec-WebSocket-Accept`` and refuses an unmasked-rule violation (a server's frames are unmasked).

One reader thread reads the socket without a timeout and queues each message; a test waits on
the queue with its own bound, so a slow frame on a busy machine is waited for, never lost to a
socket timeout (a timed-out socket file cannot be read again)."""

from __future__ import annotations

import json
import queue
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from agentwake_local import ws_frames


class HandshakeRefused(Exception):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"the WebSocket handshake was refused: {status} {body[:200]}")
        self.status = status
        self.body = body


@dataclass
class WsClient:
    sock: socket.socket
    stream: Any
    #: every text message received, in order (raw)
    received: list[str] = field(default_factory=list)
    closed_with: int | None = None
    inbox: queue.Queue[tuple[int, bytes] | BaseException] = field(default_factory=queue.Queue)

    def __post_init__(self) -> None:
        self.sock.settimeout(None)
        threading.Thread(target=self._read, name="ws-client-reader", daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                message = ws_frames.read_message(self.stream, masked=False)
            except BaseException as exc:  # closed, reset, a protocol error: the waiter sees it
                self.inbox.put(exc)
                return
            self.inbox.put(message)
            if message[0] == ws_frames.CLOSE:
                return

    @classmethod
    def connect(cls, url: str, *, timeout: float = 10.0) -> WsClient:
        split = urlsplit(url)
        assert split.scheme == "ws" and split.hostname in ("127.0.0.1", "localhost"), url
        sock = socket.create_connection((split.hostname, split.port or 80), timeout=timeout)
        key = ws_frames.new_key()
        target = split.path + (f"?{split.query}" if split.query else "")
        request = (
            f"GET {target} HTTP/1.1\r\nHost: {split.netloc}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nUser-Agent: agentwake-tests\r\n\r\n"
        )
        sock.sendall(request.encode("ascii"))
        stream = sock.makefile("rb")
        status_line = stream.readline().decode("latin-1")
        status = int(status_line.split()[1])
        headers: dict[str, str] = {}
        while (line := stream.readline().decode("latin-1").strip()) != "":
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if status != 101:
            body = stream.read(int(headers.get("content-length") or 0)).decode("utf-8", "replace")
            sock.close()
            raise HandshakeRefused(status, body)
        assert headers.get("sec-websocket-accept") == ws_frames.accept_key(key), headers
        return cls(sock, stream)

    def _send(self, opcode: int, payload: bytes = b"") -> None:
        self.sock.sendall(ws_frames.encode(opcode, payload, mask=True))

    def send_text(self, text: str) -> None:
        self._send(ws_frames.TEXT, text.encode("utf-8"))

    def recv(self, timeout: float = 10.0) -> tuple[int, bytes]:
        """The next message (opcode, payload); TimeoutError after ``timeout``; the reader's error
        (``ws_frames.Closed``, an OSError) once the connection ended."""
        try:
            got = self.inbox.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no WebSocket message within {timeout} s") from None
        if isinstance(got, BaseException):
            self.inbox.put(got)  # every later recv sees the end too
            raise got
        opcode, payload = got
        if opcode == ws_frames.TEXT:
            self.received.append(payload.decode("utf-8"))
        if opcode == ws_frames.CLOSE:
            self.closed_with = ws_frames.close_code(payload)
            self.inbox.put(ws_frames.Closed("closed"))
        return opcode, payload

    def frames(self, count: int, *, within: float = 30.0) -> list[dict[str, Any]]:
        """Wait (polling the socket, bounded by ``within``) until ``count`` text messages came; their JSON."""
        deadline = time.monotonic() + within
        while len(self.received) < count:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{len(self.received)} of {count} frames within {within} s: {self.received}")
            try:
                opcode, _ = self.recv(timeout=left)
            except TimeoutError:
                continue
            if opcode == ws_frames.CLOSE:
                raise ConnectionError(f"closed ({self.closed_with}) after {len(self.received)} frames")
        return [json.loads(m) for m in self.received[:count]]

    def quiet_for(self, seconds: float) -> list[str]:
        """Whatever text messages arrive within ``seconds`` (for asserting none does)."""
        deadline = time.monotonic() + seconds
        before = len(self.received)
        while (left := deadline - time.monotonic()) > 0:
            try:
                opcode, _ = self.recv(timeout=left)
            except (TimeoutError, ws_frames.Closed):
                break
            if opcode == ws_frames.CLOSE:
                break
        return self.received[before:]

    def ping(self, payload: bytes = b"hi") -> bytes:
        self._send(ws_frames.PING, payload)
        while True:
            opcode, got = self.recv()
            if opcode == ws_frames.PONG:
                return got

    def close(self, code: int = ws_frames.NORMAL) -> None:
        try:
            self._send(ws_frames.CLOSE, ws_frames.close_payload(code))
            deadline = time.monotonic() + 10
            while (left := deadline - time.monotonic()) > 0:
                opcode, _ = self.recv(timeout=left)
                if opcode == ws_frames.CLOSE:
                    break
        except (OSError, TimeoutError, ws_frames.Closed, ws_frames.ProtocolError):
            pass
        finally:
            self.sock.close()

    def __enter__(self) -> WsClient:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()
