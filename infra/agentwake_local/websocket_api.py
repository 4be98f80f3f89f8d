"""The template's WebSocket API (``AWS::Serverless::WebSocketApi``, the PushApi), served on
127.0.0.1 as API Gateway serves it:

- ``GET /{stage}?ticket=...`` with ``Upgrade: websocket``: the ``$connect`` route's function is
  invoked (through the local Lambda runtime) with API Gateway's event (``requestContext.routeKey``
  ``$connect``, ``eventType`` CONNECT, ``connectionId``, ``queryStringParameters``); a 200 answer
  upgrades the connection (RFC 6455, ``ws_frames``), anything else is the handshake's refusal with
  that status. The page's pings are answered; when it closes (or this server stops) ``$disconnect``
  is invoked. Nothing a page sends is routed (no ``$default`` route).
- the management endpoint, ``{stage}/@connections/{id}``, SigV4-signed for ``execute-api`` (verified
  against the embedded IAM, ``sigv4.SigV4Verifier``): ``POST`` sends its body as one text frame,
  ``GET`` describes the connection, ``DELETE`` closes it. An id that is not open: 410 with
  ``x-amzn-ErrorType: GoneException``, as botocore's ``apigatewaymanagementapi`` model expects.
"""

from __future__ import annotations

import json
import logging
import secrets
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from agentwake_local import ws_frames
from agentwake_local.sigv4 import Refused, SigV4Verifier

logger = logging.getLogger(__name__)

Invoke = Callable[[str, dict[str, Any]], Any]

#: how long a close this side starts waits for the peer's close frame before it shuts the socket
CLOSE_REPLY_WAIT_S = 5.0


@dataclass
class _Connection:
    connection_id: str
    sock: Any
    wfile: Any
    source_ip: str
    user_agent: str
    connected_at: float = field(default_factory=time.time)
    last_active_at: float = field(default_factory=time.time)
    lock: threading.Lock = field(default_factory=threading.Lock)
    closed: bool = False

    def send(self, opcode: int, payload: bytes) -> None:
        with self.lock:
            if self.closed:
                raise ConnectionError("closed")
            self._write(opcode, payload)

    def _write(self, opcode: int, payload: bytes) -> None:
        """One frame out; the caller holds ``lock``."""
        self.wfile.write(ws_frames.encode(opcode, payload))
        self.wfile.flush()
        self.last_active_at = time.time()

    def close(self, code: int = ws_frames.NORMAL, reason: str = "", *, now: bool = False) -> None:
        """Send a close frame (once: a later call sends nothing). ``now``: the socket is shut at once
        (the peer's close frame came, or the peer broke the protocol, or the stack stops). Otherwise
        this side starts the closing handshake (a DELETE through the management API): the socket stays
        open for the peer's close frame, which the read loop answers with ``close(now=True)``, or for
        ``CLOSE_REPLY_WAIT_S`` if it never comes (RFC 6455 §7.1.1: the server closes the TCP
        connection after the handshake; the ``$disconnect`` route gets the page's own code).

        The frame is written and the connection marked closed under one hold of ``lock``: a page
        answering at once has its reply read by the other thread, whose ``close(now=True)`` must
        find the mark (a second close frame is "Close received after close" to Chromium: 1006)."""
        with self.lock:
            began = not self.closed
            self.closed = True
            if began:
                try:
                    self._write(ws_frames.CLOSE, ws_frames.close_payload(code, reason))
                except OSError:
                    pass
        if now:
            self._shut()
        elif began:
            timer = threading.Timer(CLOSE_REPLY_WAIT_S, self._shut)
            timer.daemon = True
            timer.start()

    def _shut(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def websocket_event(
    route_key: str,
    connection_id: str,
    *,
    stage: str,
    domain: str,
    headers: Mapping[str, str] | None = None,
    query: Mapping[str, str] | None = None,
    source_ip: str = "127.0.0.1",
    disconnect_code: int | None = None,
) -> dict[str, Any]:
    """A WebSocket API event as API Gateway passes it to a ``$connect``/``$disconnect`` function."""
    now = time.time()
    event_type = {"$connect": "CONNECT", "$disconnect": "DISCONNECT"}.get(route_key, "MESSAGE")
    context: dict[str, Any] = {
        "routeKey": route_key,
        "eventType": event_type,
        "extendedRequestId": uuid.uuid4().hex,
        "requestTime": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now)),
        "messageDirection": "IN",
        "stage": stage,
        "connectedAt": int(now * 1000),
        "requestTimeEpoch": int(now * 1000),
        "identity": {"sourceIp": source_ip, "userAgent": (headers or {}).get("user-agent", "")},
        "requestId": uuid.uuid4().hex,
        "domainName": domain,
        "connectionId": connection_id,
        "apiId": "local",
    }
    event: dict[str, Any] = {"requestContext": context, "isBase64Encoded": False}
    if headers:
        event["headers"] = dict(headers)
        event["multiValueHeaders"] = {k: [v] for k, v in headers.items()}
    if query:
        event["queryStringParameters"] = dict(query)
        event["multiValueQueryStringParameters"] = {k: [v] for k, v in query.items()}
    if disconnect_code is not None:
        context["disconnectStatusCode"] = disconnect_code
        context["disconnectReason"] = ""
    return event


class LocalWebSocketApi:
    """A threaded server on ``host:port``: the WebSocket API's stage ``stage`` (its ``$connect`` and
    ``$disconnect`` routes invoke ``routes[route_key]``, a function id) and its management endpoint."""

    def __init__(
        self,
        routes: Mapping[str, str],
        invoke: Invoke,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        stage: str = "v1",
        verifier: SigV4Verifier | None = None,
    ) -> None:
        self.routes = dict(routes)
        self.invoke = invoke
        self.stage = stage
        self.verifier = verifier or SigV4Verifier()
        self.connections: dict[str, _Connection] = {}
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer((host, port), self._handler_class())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def host_port(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{host}:{port}"

    @property
    def url(self) -> str:
        """What a page opens (``{url}?ticket=...``)."""
        return f"ws://{self.host_port}/{self.stage}"

    @property
    def endpoint(self) -> str:
        """The management endpoint (``AGENTWAKE_PUSH_ENDPOINT``)."""
        return f"http://{self.host_port}/{self.stage}"

    def start(self) -> LocalWebSocketApi:
        self._thread = threading.Thread(target=self._server.serve_forever, name="local-websocket-api", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        with self._lock:
            open_now = list(self.connections.values())
        for conn in open_now:
            conn.close(ws_frames.GOING_AWAY, "the local stack is stopping", now=True)
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def open_connections(self) -> list[str]:
        with self._lock:
            return list(self.connections)

    # --- the management endpoint ----------------------------------------------------------------

    def manage(
        self, method: str, target: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        path = urlsplit(target).path
        prefix = f"/{self.stage}/@connections/"
        raw = path.replace("%40", "@")
        if not raw.startswith(prefix) or "/" in raw[len(prefix) :] or len(raw) == len(prefix):
            return _json(404, {"message": "Not Found"})
        host = next((v for k, v in headers.items() if k.lower() == "host"), self.host_port)
        try:
            self.verifier.verify(method, f"http://{host}{target}", headers, body)
        except Refused as refused:
            return _json(403, {"message": str(refused)}, "ForbiddenException")
        cid = unquote(raw[len(prefix) :])
        with self._lock:
            conn = self.connections.get(cid)
        if conn is None or conn.closed:
            return _json(410, {"message": None}, "GoneException")
        if method == "POST":
            if len(body) > ws_frames.MAX_MESSAGE_BYTES:
                return _json(413, {"message": "Message too long"}, "PayloadTooLargeException")
            try:
                conn.send(ws_frames.TEXT, body)
            except (OSError, ConnectionError):
                self._drop(cid)
                return _json(410, {"message": None}, "GoneException")
            return 200, {}, b""
        if method == "GET":
            return _json(
                200,
                {
                    "connectedAt": _iso(conn.connected_at),
                    "identity": {"sourceIp": conn.source_ip, "userAgent": conn.user_agent},
                    "lastActiveAt": _iso(conn.last_active_at),
                },
            )
        if method == "DELETE":
            conn.close(ws_frames.NORMAL, "closed through the management API")
            return 204, {}, b""
        return _json(404, {"message": "Not Found"})

    def _drop(self, cid: str) -> _Connection | None:
        with self._lock:
            return self.connections.pop(cid, None)

    # --- the WebSocket side ---------------------------------------------------------------------

    def connect_event(self, cid: str, headers: Mapping[str, str], query: Mapping[str, str]) -> dict[str, Any]:
        lowered = {k.lower(): v for k, v in headers.items()}
        return websocket_event("$connect", cid, stage=self.stage, domain=self.host_port, headers=lowered, query=query)

    def _call(self, route_key: str, event: dict[str, Any]) -> int:
        function_id = self.routes.get(route_key)
        if function_id is None:
            return 200  # no route: API Gateway lets the connection be
        invocation = self.invoke(function_id, event)
        if getattr(invocation, "error", None) is not None:
            logger.warning("%s: the function failed (%s)", route_key, invocation.error.get("errorType"))
            return 500
        response = invocation.response
        if isinstance(response, dict) and "statusCode" in response:
            return int(response["statusCode"])
        return 200

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _plain(self, status: int, headers: Mapping[str, str], out: bytes) -> None:
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def _manage(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                self._plain(*api.manage(self.command, self.path, dict(self.headers.items()), body))

            do_POST = do_DELETE = _manage

            def do_GET(self) -> None:
                split = urlsplit(self.path)
                if split.path != f"/{api.stage}" and split.path != f"/{api.stage}/":
                    return self._manage()
                if (self.headers.get("Upgrade") or "").lower() != "websocket" or not self.headers.get(
                    "Sec-WebSocket-Key"
                ):
                    return self._plain(*_json(426, {"message": "Upgrade Required: open a WebSocket"}))
                if self.headers.get("Sec-WebSocket-Version") != "13":
                    return self._plain(426, {"Sec-WebSocket-Version": "13"}, b"")
                query = {k: v[0] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
                cid = secrets.token_urlsafe(12)
                headers = dict(self.headers.items())
                status = api._call("$connect", api.connect_event(cid, headers, query))
                if status != 200:
                    self.close_connection = True
                    return self._plain(*_json(status, {"message": "Forbidden" if status == 403 else "Unauthorized"}))
                conn = _Connection(
                    cid,
                    self.connection,
                    self.wfile,
                    source_ip=self.client_address[0],
                    user_agent=self.headers.get("User-Agent", ""),
                )
                # open (and postable) once the page has its 101: a post waits for the lock meanwhile
                with conn.lock:
                    with api._lock:
                        api.connections[cid] = conn
                    self.send_response(101, "Switching Protocols")
                    self.send_header("Upgrade", "websocket")
                    self.send_header("Connection", "Upgrade")
                    self.send_header("Sec-WebSocket-Accept", ws_frames.accept_key(self.headers["Sec-WebSocket-Key"]))
                    self.end_headers()
                    self.wfile.flush()
                code = ws_frames.GOING_AWAY
                try:
                    code = self._read_until_close(conn)
                finally:
                    self.close_connection = True
                    api._drop(cid)
                    with conn.lock:
                        conn.closed = True
                    api._call(
                        "$disconnect",
                        websocket_event(
                            "$disconnect", cid, stage=api.stage, domain=api.host_port, disconnect_code=code
                        ),
                    )

            def _read_until_close(self, conn: _Connection) -> int:
                while True:
                    try:
                        opcode, payload = ws_frames.read_message(self.rfile, masked=True)
                    except ws_frames.ProtocolError as bad:
                        conn.close(bad.code, str(bad)[:100], now=True)
                        return bad.code
                    except (ws_frames.Closed, OSError, ValueError):
                        return ws_frames.GOING_AWAY
                    conn.last_active_at = time.time()
                    if opcode == ws_frames.PING:
                        try:
                            conn.send(ws_frames.PONG, payload)
                        except OSError:  # ConnectionError("closed") too
                            if not conn.closed:
                                return ws_frames.GOING_AWAY
                            # this side's close frame is out: no pong after it; read on for the reply
                    elif opcode == ws_frames.CLOSE:
                        code = ws_frames.close_code(payload) or ws_frames.NORMAL
                        conn.close(code, now=True)  # the handshake's reply (nothing sent if this side began it)
                        return code
                    # a page's text or binary message: no route takes it (a page only receives)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
                logger.debug("websocket api: " + format, *args)

        return Handler


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def _json(status: int, body: Any, error_type: str | None = None) -> tuple[int, dict[str, str], bytes]:
    headers = {"Content-Type": "application/json"}
    if error_type is not None:
        headers["x-amzn-ErrorType"] = error_type
    return status, headers, json.dumps(body).encode()
