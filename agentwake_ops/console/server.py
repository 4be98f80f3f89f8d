"""The console's HTTP server: loopback only, a random token per start, CSRF on every POST.

- **Loopback**: it binds 127.0.0.1 and answers only requests whose ``Host`` is
  ``127.0.0.1:PORT`` or ``localhost:PORT`` (a page of another site that rebinds its name to
  127.0.0.1 is refused).
- **Token**: :func:`make_server` makes a random token per start, and the console lives under it:
  ``http://127.0.0.1:PORT/TOKEN/dlq`` is the URL printed. Every request — pages, static files,
  actions — names it as its path's first segment, or is refused with 403. No cookie: cookies do
  not isolate by port, so a cookie would be sent to (and read by) any other service on
  127.0.0.1. The path is this origin's own: a page on another port can neither read it (the
  same-origin policy; no referrer leaves the console) nor guess it. Every page carries
  ``<base href="/TOKEN/">`` and its links and forms are relative to it (``html.layout``).
- **CSRF**: state-changing requests are POSTs whose form carries the per-start CSRF token (every
  form has it); an ``Origin`` header, when sent, must be this server.
- **Headers**: a Content-Security-Policy that allows only this server's own stylesheet and script,
  no framing, no referrer to other sites (a same-origin one: with none, a browser's form POST
  carries ``Origin: null``).
- **Malformed HTTP** (a bad request line, headers, ``Content-Length``) is a 400 page like every
  refusal; the log names the method, the route without the token, and the status — never the raw
  request line, which holds the token.

One request at a time reaches the stack (a lock): two DLQ scans at once would hold each other's
messages and both could not be sure they saw everything.
"""

from __future__ import annotations

import functools
import hmac
import secrets
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from agentwake_ops.console import actions, approvals, assets, charts, pages, sessions_jobs
from agentwake_ops.console.html import Markup, h, layout
from agentwake_ops.context import OpsContext

#: the largest form a POST may send (selected ids, a provider chain)
MAX_FORM_BYTES = 1 << 20
CSP = (
    "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'self'"
)
#: what the log shows of a request line (bounded; the route only, never the token)
MAX_LOGGED_ROUTE = 200

Page = Callable[[OpsContext, pages.Query, str], Markup]

GET_PAGES: dict[str, tuple[str, Page]] = {
    "/dlq": ("Dead-letter queues", pages.dlq),
    "/dlq/message": ("DLQ message", pages.message),
    "/run": ("Run", pages.run),
    "/runs": ("Runs", pages.runs),
    "/task": ("Task", pages.task),
    "/approvals": ("Approvals", approvals.approvals),
    "/approval": ("Approval", approvals.approval),
    "/tree": ("Runs as a tree", pages.tree),
    "/sessions": ("Sessions", sessions_jobs.sessions),
    "/jobs": ("Jobs", sessions_jobs.jobs),
    "/charts": ("Charts", charts.charts),
}
POST_ACTIONS: dict[str, tuple[str, Page]] = {
    "/dlq/confirm": ("Confirm", actions.confirm),
    "/dlq/redrive": ("Redrive", actions.redrive),
    "/dlq/delete": ("Delete", actions.delete),
    "/dlq/export": ("Export", actions.export),
    "/dlq/settle-confirm": ("Settle a send in doubt", actions.settle_confirm),
    "/dlq/settle": ("Settled and redriven", actions.settle),
    "/run/replay": ("Replay", actions.replay),
    "/run/apply-confirm": ("Apply to the session", actions.apply_confirm),
    "/run/apply": ("Applied to the session", actions.apply),
    "/task/cancel-confirm": ("Cancel a task", actions.cancel_confirm),
    "/task/cancel": ("Task cancelled", actions.cancel),
    "/approval/confirm": ("Decide an approval", approvals.confirm),
    "/approval/decide": ("Approval decided", approvals.decide),
}
STATIC = {"/static/console.css": ("text/css", assets.CSS), "/static/console.js": ("text/javascript", assets.JS)}


@dataclass
class Console:
    """One console: the stack it works on, its tokens, and the lock its requests share."""

    ctx: OpsContext
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    lock: threading.Lock = field(default_factory=threading.Lock)
    port: int = 0
    #: a CloudWatch client (the charts read the DLQs' depth from it) for a stack found through
    #: CloudFormation (--stack-name); None otherwise (the local stack, a stack named by AGENTWAKE_* variables)
    metrics: Any = None

    @property
    def stack(self) -> str:
        return self.ctx.description or "agentwake"

    @property
    def root(self) -> str:
        """The path every page, link and form lives under: ``/TOKEN/``."""
        return f"/{self.token}/"

    def allowed_hosts(self) -> set[str]:
        return {f"127.0.0.1:{self.port}", f"localhost:{self.port}"}


class Handler(BaseHTTPRequestHandler):
    server_version = "agentwake-console"
    #: seconds a request may take to arrive (a form shorter than its Content-Length does not hold a
    #: thread for ever)
    timeout = 120
    console: Console  # set on the subclass made by make_server

    # --- answers ------------------------------------------------------------------------------

    def _send(
        self,
        status: int,
        body: str,
        *,
        content_type: str = "text/html; charset=utf-8",
        extra: dict[str, str] | None = None,
    ) -> None:
        data = body.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "same-origin")
        self.send_header("X-Frame-Options", "DENY")
        self.send_header("Cache-Control", "no-store")
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _refuse(self, status: HTTPStatus, why: str) -> None:
        self._send(
            status, f"<!doctype html><title>{status.value}</title><p>{h(why)}</p>", extra={"Connection": "close"}
        )

    def _page(self, status: int, title: str, body: Markup) -> None:
        self._send(status, layout(title, body, stack=self.console.stack, root=self.console.root))

    # --- checks --------------------------------------------------------------------------------

    def _host_ok(self) -> bool:
        return self.headers.get("Host", "") in self.console.allowed_hosts()

    def _route(self) -> tuple[str, str] | None:
        """The route below the token (``/dlq``) and the query, when the path starts with the token."""
        parts = urlsplit(getattr(self, "path", None) or "")
        segments = parts.path.split("/", 2)  # "/TOKEN/dlq/message" -> ["", "TOKEN", "dlq/message"]
        given = segments[1] if len(segments) > 1 and not segments[0] else ""
        if not given or not hmac.compare_digest(given.encode(), self.console.token.encode()):
            return None
        return "/" + (segments[2] if len(segments) > 2 else "").strip("/"), parts.query

    def _checked(self) -> tuple[str, pages.Query] | None:
        """The route and query of an allowed request; None when it was refused (already answered)."""
        if not self._host_ok():
            self._refuse(HTTPStatus.FORBIDDEN, "refused: the console answers only to 127.0.0.1 or localhost")
            return None
        route = self._route()
        if route is None:
            self._refuse(
                HTTPStatus.FORBIDDEN,
                "refused: this console needs its token; open the URL `agentwake console` printed when it started",
            )
            return None
        path, query = route
        return path, parse_qs(query, keep_blank_values=True)

    # --- methods -------------------------------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        checked = self._checked()
        if checked is None:
            return
        path, query = checked
        if path in STATIC:
            content_type, text = STATIC[path]
            self._send(HTTPStatus.OK, text, content_type=f"{content_type}; charset=utf-8")
            return
        if path == "/":
            self._send(HTTPStatus.SEE_OTHER, "", extra={"Location": self.console.root + "dlq"})
            return
        if path not in GET_PAGES:
            self._page(HTTPStatus.NOT_FOUND, "Not found", Markup(f"<p>No page {h(path)}.</p>"))
            return
        title, page = GET_PAGES[path]
        if path == "/charts":
            page = functools.partial(charts.charts, metrics=self.console.metrics)
        self._run(title, page, query)

    def do_POST(self) -> None:  # noqa: N802
        checked = self._checked()
        if checked is None:
            return
        path, _ = checked
        origin = self.headers.get("Origin")
        if origin is not None and urlsplit(origin).netloc not in self.console.allowed_hosts():
            self._refuse(HTTPStatus.FORBIDDEN, "refused: a form of another site cannot act on this console")
            return
        declared = (self.headers.get("Content-Length") or "0").strip()
        if not (declared.isascii() and declared.isdigit()):  # "²" is a digit to str.isdigit, not to int()
            self._refuse(HTTPStatus.BAD_REQUEST, "refused: Content-Length must be a number of bytes")
            return
        length = int(declared)
        if length > MAX_FORM_BYTES:
            self._refuse(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"refused: a form of more than {MAX_FORM_BYTES} bytes")
            return
        form = parse_qs(self.rfile.read(length).decode("utf-8", "replace"), keep_blank_values=True)
        given = (form.get("csrf") or [""])[0]
        if not given or not hmac.compare_digest(given.encode(), self.console.csrf.encode()):
            self._refuse(HTTPStatus.FORBIDDEN, "refused: the form's CSRF token is missing or wrong; reload the page")
            return
        if path not in POST_ACTIONS:
            self._page(HTTPStatus.NOT_FOUND, "Not found", Markup(f"<p>No action {h(path)}.</p>"))
            return
        self._run(*POST_ACTIONS[path], form)

    def _run(self, title: str, page: Page, query: pages.Query) -> None:
        from agentwake_ops.cli_common import error_message, user_errors

        try:
            with self.console.lock:
                body = page(self.console.ctx, query, self.console.csrf)
        except user_errors() as exc:
            self._page(
                HTTPStatus.BAD_REQUEST, title, Markup(f"<p class='error' id='error'>error: {h(error_message(exc))}</p>")
            )
            return
        except Exception as exc:  # a bug: say so on the page, the traceback on the console's stderr
            traceback.print_exc(file=sys.stderr)
            self._page(
                HTTPStatus.INTERNAL_SERVER_ERROR,
                title,
                Markup(f"<p class='error' id='error'>internal error: {h(type(exc).__name__)}: {h(str(exc))}</p>"),
            )
            return
        self._page(HTTPStatus.OK, title, body)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's answer to malformed HTTP (a bad request line, headers too long): this
        console's refusal page, which does not echo the request (it may hold the token)."""
        if getattr(self, "request_version", "HTTP/0.9") == "HTTP/0.9":
            self.request_version = "HTTP/1.0"  # a status line and headers, not a bare body
        self.close_connection = True
        status = HTTPStatus(code)
        self._refuse(status, f"refused: {status.phrase.lower()} (malformed HTTP request)")

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        status = code.value if isinstance(code, HTTPStatus) else code
        sys.stderr.write(f"{self._logged()} {status}\n")

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's name)
        # never format % args: http.server passes the raw request line, which holds the token
        sys.stderr.write(f"{self._logged()} ({format.split('%', 1)[0].strip()})\n")

    def _logged(self) -> str:
        """The method and the route of this request for the log: no token, no query, printable, bounded."""
        command = getattr(self, "command", None) or "-"
        route = self._route() if getattr(self, "path", None) else None
        where = route[0] if route else "(no console token)"
        text = f"{command} {where}"[:MAX_LOGGED_ROUTE]
        return "".join(c if c.isprintable() else "?" for c in text)


def make_server(ctx: OpsContext, port: int = 0, *, metrics: Any = None) -> tuple[ThreadingHTTPServer, Console]:
    """A console server bound to 127.0.0.1:``port`` (0: any free port), not yet serving.
    ``metrics``: a CloudWatch client (on AWS) for the charts."""
    console = Console(ctx, metrics=metrics)
    handler = type("ConsoleHandler", (Handler,), {"console": console})
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    console.port = server.server_address[1]
    return server, console


def url(console: Console, path: str = "/dlq") -> str:
    """The URL to open: the route under the token."""
    return f"http://127.0.0.1:{console.port}{console.root}{path.lstrip('/')}"
