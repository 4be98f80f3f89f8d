"""The operator console for tests: served in a thread on 127.0.0.1, and a plain HTTP client
(``http.client``) that asks for each route under the console's token, as the pages' links do."""

from __future__ import annotations

import http.client
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from html import unescape
from typing import Any
from urllib.parse import urlencode

from agentwake_ops.console.server import Console, make_server
from agentwake_ops.context import OpsContext


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    text: str


@dataclass
class ConsoleClient:
    port: int
    token: str
    timeout: float = 300.0

    def request(
        self,
        method: str,
        path: str,
        *,
        form: list[tuple[str, str]] | None = None,
        token: bool = True,
        host: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
        """``path`` is a console route (``/dlq?x=1``); with ``token`` it is asked for under the token
        (``/TOKEN/dlq?x=1``), without it as it is."""
        sent = {"Host": host or f"127.0.0.1:{self.port}", **(headers or {})}
        if token:
            path = f"/{self.token}{path}"
        body = None
        if form is not None:
            body = urlencode(form).encode()
            sent["Content-Type"] = "application/x-www-form-urlencoded"
        try:
            conn.request(method, path, body=body, headers=sent)
            resp = conn.getresponse()
            return Answer(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read().decode("utf-8"))
        finally:
            conn.close()

    def get(self, path: str, **kwargs: Any) -> Answer:
        return self.request("GET", path, **kwargs)

    def page(self, path: str) -> str:
        """A page that must answer 200."""
        answer = self.get(path)
        assert answer.status == 200, f"GET {path}: {answer.status}\n{answer.text[:2000]}"
        return answer.text

    def post(self, path: str, form: list[tuple[str, str]], **kwargs: Any) -> Answer:
        return self.request("POST", path, form=form, **kwargs)


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, "no CSRF field on the page"
    return unescape(found.group(1))


def text_of(fragment: str) -> str:
    """The visible text of some HTML (tags dropped, entities decoded)."""
    return unescape(re.sub(r"<[^>]+>", " ", fragment))


@contextmanager
def serving(ctx: OpsContext, *, metrics: Any = None) -> Iterator[tuple[Console, ConsoleClient]]:
    """The console on a free port of 127.0.0.1, served by a thread until the block ends
    (``metrics``: a CloudWatch client, as on AWS)."""
    server, console = make_server(ctx, 0, metrics=metrics)
    thread = threading.Thread(target=server.serve_forever, name="console", daemon=True)
    thread.start()
    try:
        yield console, ConsoleClient(console.port, console.token)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)
