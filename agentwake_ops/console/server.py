"""The console's HTTP server: loopback only, a random token per start, CSRF on every POST.

- **Loopback**: it binds 127.0.0.1 and answers only requests whose ``Host`` is
  ``127.0.0.1:PORT`` or ``localhost:PORT`` (a page of another site that rebinds its name to
  127.0.0.1 is refused).
- **Token**: :func:`serve` makes a random token and prints the URL with it (as notebook servers
  do). The first request carries it as ``?token=``; the answer sets it as an HttpOnly,
  SameSite=Strict cookie and redirects to the same page without it (so it leaves the address
  bar). Every request — pages, static files, actions — needs the token (cookie or query), or is
  refused with 403.
- **CSRF**: state-changing requests are POSTs whose form carries the per-start CSRF token (every
  form has it); an ``Origin`` header, when sent, must be this server.
- **Headers**: a Content-Security-Policy that allows only this server's own stylesheet and script,
  no framing, no referrer to other sites (a same-origin one: with none, a browser's form POST
  carries ``Origin: null``).

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
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from agentwake_ops.console import actions, assets, charts, pages, sessions_jobs
from agentwake_ops.console.html import Markup, h, layout
from agentwake_ops.context import OpsContext

COOKIE = "agentwake_console"
#: the largest form a POST may send (selected ids, a provider chain)
MAX_FORM_BYTES = 1 << 20
CSP = (
    "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)

Page = Callable[[OpsContext, pages.Query, str], Markup]

GET_PAGES: dict[str, tuple[str, Page]] = {
    "/dlq": ("Dead-letter queues", pages.dlq),
    "/dlq/message": ("DLQ message", pages.message),
    "/run": ("Run", pages.run),
    "/runs": ("Runs", pages.runs),
    "/sessions": ("Sessions", sessions_jobs.sessions),
    "/jobs": ("Jobs", sessions_jobs.jobs),
    "/charts": ("Charts", charts.charts),
}
POST_ACTIONS: dict[str, tuple[str, Page]] = {
    "/dlq/confirm": ("Confirm", actions.confirm),
    "/dlq/redrive": ("Redrive", actions.redrive),
    "/dlq/delete": ("Delete", actions.delete),
    "/dlq/export": ("Export", actions.export),
    "/run/replay": ("Replay", actions.replay),
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
    #: a CloudWatch client on AWS (the charts read the DLQs' depth from it), None on the local stack
    metrics: Any = None

    @property
    def stack(self) -> str:
        return self.ctx.description or "agentwake"

    def allowed_hosts(self) -> set[str]:
        return {f"127.0.0.1:{self.port}", f"localhost:{self.port}"}


class Handler(BaseHTTPRequestHandler):
    server_version = "agentwake-console"
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
        self._send(status, layout(title, body, stack=self.console.stack))

    # --- checks --------------------------------------------------------------------------------

    def _host_ok(self) -> bool:
        return self.headers.get("Host", "") in self.console.allowed_hosts()

    def _token_ok(self, query: pages.Query) -> bool:
        given = (query.get("token") or [""])[0]
        if not given:
            cookie = SimpleCookie(self.headers.get("Cookie", ""))
            given = cookie[COOKIE].value if COOKIE in cookie else ""
        return bool(given) and hmac.compare_digest(given.encode(), self.console.token.encode())

    def _checked(self) -> tuple[str, pages.Query] | None:
        """The path and query of an allowed request; None when it was refused (already answered)."""
        if not self._host_ok():
            self._refuse(HTTPStatus.FORBIDDEN, "refused: the console answers only to 127.0.0.1 or localhost")
            return None
        parts = urlsplit(self.path)
        query = parse_qs(parts.query, keep_blank_values=True)
        if not self._token_ok(query):
            self._refuse(
                HTTPStatus.FORBIDDEN,
                "refused: this console needs its token; open the URL `agentwake console` printed when it started",
            )
            return None
        return parts.path, query

    # --- methods -------------------------------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        checked = self._checked()
        if checked is None:
            return
        path, query = checked
        if "token" in query:  # the first visit: keep the token in a cookie, out of the address bar
            rest = {k: v for k, v in query.items() if k != "token"}
            target = path + (f"?{urlencode(rest, doseq=True)}" if rest else "")
            cookie = f"{COOKIE}={self.console.token}; HttpOnly; SameSite=Strict; Path=/"
            self._send(HTTPStatus.SEE_OTHER, "", extra={"Location": target, "Set-Cookie": cookie})
            return
        if path in STATIC:
            content_type, text = STATIC[path]
            self._send(HTTPStatus.OK, text, content_type=f"{content_type}; charset=utf-8")
            return
        if path == "/":
            self._send(HTTPStatus.SEE_OTHER, "", extra={"Location": "/dlq"})
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
        length = int(self.headers.get("Content-Length") or "0")
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

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's name)
        # no query strings in the log: the first request carries the token
        sys.stderr.write(f"{self.command} {urlsplit(self.path).path} {args[1] if len(args) > 1 else ''}\n")


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
    """The URL to open, with the token."""
    return f"http://127.0.0.1:{console.port}{path}?token={console.token}"
