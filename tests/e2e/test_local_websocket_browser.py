"""The local WebSocket API (agentwake_local.websocket_api) as headless Chromium's own WebSocket sees
it: the handshake a browser makes (Origin, extensions offered and not taken), a refused ticket as the
browser's failed open, frames posted through the management endpoint as ``onmessage`` events, a pong
for the browser's own traffic, and a close through ``DELETE @connections/{id}`` as ``onclose`` —
the framing checked by an implementation that is not ours."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import botocore.session
import pytest

from agentwake_local.sigv4 import SigV4Verifier
from agentwake_local.websocket_api import LocalWebSocketApi
from tests.support.browser import Browser

KEY, SECRET = "AKIDBROWSERPUSH", "browser-push-secret"

OPEN = """
const url = arguments[0];
window.got = []; window.state = 'connecting'; window.closeCode = null; window.error = false;
const ws = new WebSocket(url);
ws.onopen = () => { window.state = 'open'; };
ws.onmessage = (e) => { window.got.push(JSON.parse(e.data)); };
ws.onerror = () => { window.error = true; };
ws.onclose = (e) => { window.state = 'closed'; window.closeCode = e.code; };
window.ws = ws;
"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Chromium on a page of 127.0.0.1 (a page of an opaque origin may not reach a local address)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<!doctype html><title>page</title>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with Browser.start() as b:
            b.get(f"http://127.0.0.1:{server.server_address[1]}/")
            yield b
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def disconnects() -> dict[str, int]:
    """The ``$disconnect`` events' close codes by connection id, as the route's function sees them."""
    return {}


@pytest.fixture
def api(disconnects: dict[str, int]) -> Iterator[LocalWebSocketApi]:
    def invoke(function_id: str, event: dict[str, Any]) -> Any:
        context = event["requestContext"]
        if context["routeKey"] == "$disconnect":
            disconnects[context["connectionId"]] = context["disconnectStatusCode"]
        good = context["routeKey"] == "$disconnect" or (
            (event.get("queryStringParameters") or {}).get("ticket") == "good"
        )
        return SimpleNamespace(response={"statusCode": 200 if good else 401}, error=None)

    server = LocalWebSocketApi(
        {"$connect": "F", "$disconnect": "F"}, invoke, verifier=SigV4Verifier(own={KEY: (SECRET, None)})
    ).start()
    try:
        yield server
    finally:
        server.stop()


def management(api: LocalWebSocketApi) -> Any:
    session = botocore.session.Session()
    session.set_credentials(KEY, SECRET)
    return session.create_client("apigatewaymanagementapi", endpoint_url=api.endpoint, region_name="us-east-1")


def test_chromium_receives_posted_frames_and_sees_a_deleted_connection_close(
    browser: Browser, api: LocalWebSocketApi, disconnects: dict[str, int]
) -> None:
    browser.execute(OPEN, api.url + "?ticket=good")
    browser.wait_for(lambda: browser.execute("return window.state") == "open", within=30, what="the open")
    [cid] = api.open_connections()
    client = management(api)
    # WHEN two deliveries are posted, one over 64 KB (a 64-bit length), one with text beyond ASCII
    client.post_to_connection(ConnectionId=cid, Data=b'{"delivery_id": "d1", "text": "' + b"x" * 70_000 + b'"}')
    client.post_to_connection(ConnectionId=cid, Data='{"delivery_id": "d2", "text": "héllo ✓"}'.encode())
    got = browser.wait_for(lambda: browser.execute("return window.got.length == 2 && window.got"), within=30)
    # THEN the page's onmessage saw both, whole and in order
    assert [g["delivery_id"] for g in got] == ["d1", "d2"]
    assert len(got[0]["text"]) == 70_000 and got[1]["text"] == "héllo ✓"
    # AND a page's own message is taken (no route answers it) without closing anything
    browser.execute("window.ws.send(JSON.stringify({action: 'hello'}))")
    client.post_to_connection(ConnectionId=cid, Data=b'{"delivery_id": "d3"}')
    browser.wait_for(lambda: browser.execute("return window.got.length") == 3, within=30)
    # WHEN the connection is deleted through the management API THEN the page sees a normal close
    client.delete_connection(ConnectionId=cid)
    browser.wait_for(lambda: browser.execute("return window.state") == "closed", within=30, what="the close")
    assert browser.execute("return [window.closeCode, window.error]") == [1000, False]
    # AND the closing handshake completed both ways: the page answered the server's close frame with
    # its own code, which the $disconnect route gets (a server that shut the socket at once: 1001)
    browser.wait_for(lambda: cid in disconnects, within=30, what="the $disconnect route")
    assert disconnects[cid] == 1000
    with pytest.raises(client.exceptions.GoneException):
        client.post_to_connection(ConnectionId=cid, Data=b"{}")


def test_a_refused_ticket_is_the_browser_s_failed_open(browser: Browser, api: LocalWebSocketApi) -> None:
    browser.execute(OPEN, api.url + "?ticket=used")
    browser.wait_for(lambda: browser.execute("return window.state") == "closed", within=30, what="the refusal")
    assert browser.execute("return window.error") is True and browser.execute("return window.closeCode") == 1006
    assert api.open_connections() == []
