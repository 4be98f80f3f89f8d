"""HTTP APIs of the template, served on 127.0.0.1: each request becomes an API Gateway HTTP API event
(payload format 2.0) and the route's function is invoked through the local Lambda runtime, its
answer written back as API Gateway would. Routes come from the functions' SAM ``Type: HttpApi``
events (``functions.HttpApiRoute``).

Authorization is enforced as API Gateway's ``AWS_IAM`` authorizer does: each request's SigV4
signature is verified against the credentials the embedded IAM holds (``sigv4.SigV4Verifier``) and
the caller goes into ``requestContext.authorizer.iam``; an unsigned or wrongly signed request is a
403 and no function runs. A route with ``Auth: Authorizer: NONE`` (the chats' callbacks) is served
unsigned, as API Gateway serves it.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from agentwake_local.sigv4 import Refused, SigV4Verifier

logger = logging.getLogger(__name__)

#: API Gateway refuses request bodies over 10 MB; the local server too
MAX_BODY_BYTES = 10 * 1024 * 1024
AUTHORIZATION_NOTE = "AWS_IAM: SigV4-signed requests only, verified against the local IAM"


def http_api_event(
    method: str,
    path: str,
    *,
    body: str | bytes | None = None,
    headers: Mapping[str, str] | None = None,
    query: Mapping[str, str] | None = None,
    route_key: str | None = None,
    path_parameters: Mapping[str, str] | None = None,
    source_ip: str = "127.0.0.1",
    iam: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """An HTTP API event (payload format 2.0) as API Gateway passes it to the function; ``iam``: the
    verified caller an ``AWS_IAM`` route puts in ``requestContext.authorizer.iam`` (``sigv4.iam_identity``)."""
    lowered = {k.lower(): v for k, v in (headers or {}).items()}
    is_b64 = False
    text: str | None = None
    if isinstance(body, bytes):
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            text, is_b64 = base64.b64encode(body).decode("ascii"), True
    else:
        text = body
    now = time.time()
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": route_key or f"{method.upper()} {path}",
        "rawPath": path,
        "rawQueryString": "&".join(f"{k}={v}" for k, v in (query or {}).items()),
        "headers": lowered,
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "local",
            "domainName": lowered.get("host", "127.0.0.1"),
            "domainPrefix": "local",
            "http": {
                "method": method.upper(),
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": source_ip,
                "userAgent": lowered.get("user-agent", ""),
            },
            "requestId": uuid.uuid4().hex,
            "routeKey": route_key or f"{method.upper()} {path}",
            "stage": "$default",
            "time": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now)),
            "timeEpoch": int(now * 1000),
        },
        "isBase64Encoded": is_b64,
    }
    if iam is not None:
        event["requestContext"]["authorizer"] = {"iam": dict(iam)}
    if query:
        event["queryStringParameters"] = dict(query)
    if path_parameters:
        event["pathParameters"] = dict(path_parameters)
    if text is not None:
        event["body"] = text
    return event


@dataclass(frozen=True)
class Route:
    """One route of an HTTP API: ``method`` (or ANY) and ``path`` (``/sessions/{id}``), to a function."""

    method: str
    path: str
    function_id: str
    #: ``Auth: Authorizer: NONE``: no SigV4 (the function verifies the caller itself)
    unsigned: bool = False

    @property
    def route_key(self) -> str:
        return f"{self.method} {self.path}"

    def match(self, method: str, path: str) -> dict[str, str] | None:
        if self.method not in ("ANY", method.upper()):
            return None
        pattern = "^" + re.sub(r"\\\{([A-Za-z0-9_]+)(\\\+)?\\\}", _param, re.escape(self.path)) + "$"
        found = re.match(pattern, path)
        return {k: unquote(v) for k, v in found.groupdict().items()} if found else None


def _param(m: re.Match[str]) -> str:
    return f"(?P<{m.group(1)}>.+)" if m.group(2) else f"(?P<{m.group(1)}>[^/]+)"


def best_route(routes: Sequence[Route], method: str, path: str) -> tuple[Route, dict[str, str]] | None:
    """The route API Gateway picks: the most specific (fewest parameters, then longest) that matches."""
    found = [(r, p) for r in routes if (p := r.match(method, path)) is not None]
    if not found:
        return None
    return min(found, key=lambda rp: (rp[0].method == "ANY", len(rp[1]), -len(rp[0].path)))


Invoke = Callable[[str, dict[str, Any]], Any]


class LocalHttpApi:
    """A threaded HTTP server on ``host:port`` serving ``routes`` by invoking their functions."""

    def __init__(
        self,
        routes: Sequence[Route],
        invoke: Invoke,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        verifier: SigV4Verifier | None = None,
    ) -> None:
        self.routes = list(routes)
        self.invoke = invoke
        self.verifier = verifier or SigV4Verifier()
        self._server = ThreadingHTTPServer((host, port), self._handler_class())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> LocalHttpApi:
        self._thread = threading.Thread(target=self._server.serve_forever, name="local-http-api", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def respond(
        self, method: str, target: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        """Status, headers and body for one request (what the server writes back)."""
        split = urlsplit(target)
        found = best_route(self.routes, method, split.path)
        if found is None:
            return _json(404, {"message": "Not Found"})
        route, params = found
        host = next((v for k, v in headers.items() if k.lower() == "host"), self.url.split("//", 1)[1])
        caller = None
        try:
            if not route.unsigned:
                caller = self.verifier.verify(method, f"http://{host}{target}", headers, body)
        except Refused as refused:
            return _json(403, {"message": "Forbidden", "error": str(refused)})
        query = dict(parse_qsl(split.query, keep_blank_values=True))
        event = http_api_event(
            method,
            split.path,
            body=body if body else None,
            headers=headers,
            query=query or None,
            route_key=route.route_key,
            path_parameters=params or None,
            iam=caller,
        )
        event["rawQueryString"] = split.query
        invocation = self.invoke(route.function_id, event)
        if getattr(invocation, "error", None) is not None:
            # API Gateway's answer to a function error; the error itself stays in the function's log
            logger.warning("%s %s: the function failed (%s)", method, split.path, invocation.error.get("errorType"))
            return _json(500, {"message": "Internal Server Error"})
        return _from_lambda(invocation.response)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length > MAX_BODY_BYTES:
                    status, headers, out = _json(413, {"message": "Request Entity Too Large"})
                else:
                    body = self.rfile.read(length) if length else b""
                    status, headers, out = api.respond(self.command, self.path, dict(self.headers.items()), body)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _serve

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
                logger.debug("http api: " + format, *args)

        return Handler


def _json(status: int, body: Any) -> tuple[int, dict[str, str], bytes]:
    return status, {"Content-Type": "application/json"}, json.dumps(body).encode()


def _from_lambda(response: Any) -> tuple[int, dict[str, str], bytes]:
    """Payload format 2.0's response: a dict with statusCode (else the whole value is a JSON body)."""
    if not isinstance(response, dict) or "statusCode" not in response:
        return _json(200, response)
    headers = {str(k): str(v) for k, v in (response.get("headers") or {}).items()}
    for name, values in (response.get("multiValueHeaders") or {}).items():
        headers[str(name)] = ", ".join(str(v) for v in values)
    body = response.get("body") or ""
    raw = base64.b64decode(body) if response.get("isBase64Encoded") else str(body).encode("utf-8")
    return int(response["statusCode"]), headers, raw
