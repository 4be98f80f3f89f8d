"""The local stack's WebSocket API (agentwake_local.websocket_api, ws_frames): RFC 6455 framing
(masked client frames with 7/16/64-bit lengths, continuation, ping/pong, close, the 128 KB cap),
the upgrade that runs ``$connect`` first and refuses with its status, and the management endpoint as
botocore's ``apigatewaymanagementapi`` client calls it: SigV4-checked, POST → one text frame, GET,
DELETE → the page is closed and ``$disconnect`` runs, an unknown id → ``GoneException``."""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import botocore.session
import pytest
from botocore.config import Config

from agentwake_local import ws_frames
from agentwake_local.sigv4 import SigV4Verifier
from agentwake_local.websocket_api import LocalWebSocketApi
from tests.support.ws_client import HandshakeRefused, WsClient

KEY, SECRET = "AKIDLOCALPUSH", "local-push-secret"


@pytest.mark.parametrize("size", [0, 125, 126, 65535, 65536, 100_000])
def test_masked_frames_of_every_length_encoding_round_trip(size: int) -> None:
    payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
    stream = io.BytesIO(ws_frames.encode(ws_frames.BINARY, payload, mask=True))
    assert ws_frames.read_message(stream, masked=True) == (ws_frames.BINARY, payload)


def test_fragments_are_joined_and_a_ping_between_them_comes_first() -> None:
    stream = io.BytesIO(
        ws_frames.encode(ws_frames.TEXT, b"hel", mask=True, fin=False)
        + ws_frames.encode(ws_frames.PING, b"p", mask=True)
        + ws_frames.encode(ws_frames.CONTINUATION, b"lo", mask=True)
    )
    assert ws_frames.read_message(stream) == (ws_frames.PING, b"p")
    # the ping interrupted the message: read again from a fresh message (a server reads frame by frame)
    stream = io.BytesIO(
        ws_frames.encode(ws_frames.TEXT, "hé".encode(), mask=True, fin=False)
        + ws_frames.encode(ws_frames.CONTINUATION, b"llo", mask=True)
    )
    assert ws_frames.read_message(stream) == (ws_frames.TEXT, "héllo".encode())


def test_protocol_violations_are_refused_with_their_close_code() -> None:
    unmasked = io.BytesIO(ws_frames.encode(ws_frames.TEXT, b"x"))
    with pytest.raises(ws_frames.ProtocolError, match="masked") as bad:
        ws_frames.read_message(unmasked, masked=True)
    assert bad.value.code == ws_frames.PROTOCOL_ERROR
    too_big = io.BytesIO(ws_frames.encode(ws_frames.TEXT, b"x" * (ws_frames.MAX_MESSAGE_BYTES + 1), mask=True))
    with pytest.raises(ws_frames.ProtocolError) as big:
        ws_frames.read_message(too_big)
    assert big.value.code == ws_frames.TOO_BIG
    with pytest.raises(ws_frames.ProtocolError, match="continuation"):
        ws_frames.read_message(io.BytesIO(ws_frames.encode(ws_frames.CONTINUATION, b"x", mask=True)))
    with pytest.raises(ws_frames.Closed):
        ws_frames.read_message(io.BytesIO(ws_frames.encode(ws_frames.TEXT, b"xyz", mask=True)[:-1]))


def test_the_accept_key_is_rfc_6455_s_example() -> None:
    assert ws_frames.accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


class Api(SimpleNamespace):
    server: LocalWebSocketApi
    events: list[dict[str, Any]]


@pytest.fixture
def api() -> Iterator[Api]:
    events: list[dict[str, Any]] = []

    def invoke(function_id: str, event: dict[str, Any]) -> Any:
        events.append(event)
        route = event["requestContext"]["routeKey"]
        good = route == "$disconnect" or (event.get("queryStringParameters") or {}).get("ticket") == "good"
        return SimpleNamespace(response={"statusCode": 200 if good else 401}, error=None)

    server = LocalWebSocketApi(
        {"$connect": "PushConnectionFunction", "$disconnect": "PushConnectionFunction"},
        invoke,
        verifier=SigV4Verifier(own={KEY: (SECRET, None)}),
    ).start()
    try:
        yield Api(server=server, events=events)
    finally:
        server.stop()


def management(api: Api, secret: str = SECRET) -> Any:
    session = botocore.session.Session()
    session.set_credentials(KEY, secret)
    return session.create_client(
        "apigatewaymanagementapi",
        endpoint_url=api.server.endpoint,
        region_name="us-east-1",
        config=Config(retries={"max_attempts": 1}),
    )


def routes(api: Api) -> list[str]:
    return [e["requestContext"]["routeKey"] for e in api.events]


def test_connect_runs_first_and_its_refusal_is_the_handshake_s(api: Api) -> None:
    with pytest.raises(HandshakeRefused) as refused:
        WsClient.connect(api.server.url + "?ticket=bad")
    assert refused.value.status == 401 and api.server.open_connections() == []
    with WsClient.connect(api.server.url + "?ticket=good") as page:
        assert page.ping(b"there?") == b"there?"
        [cid] = api.server.open_connections()
        connect = api.events[-1]
        assert connect["requestContext"]["eventType"] == "CONNECT"
        assert connect["requestContext"]["connectionId"] == cid and connect["requestContext"]["stage"] == "v1"
        assert connect["queryStringParameters"] == {"ticket": "good"}


def test_the_management_endpoint_posts_describes_and_closes_a_page(api: Api) -> None:
    page = WsClient.connect(api.server.url + "?ticket=good")
    [cid] = api.server.open_connections()
    client = management(api)
    # POST: one text frame per call, whatever its size (up to the cap)
    client.post_to_connection(ConnectionId=cid, Data=json.dumps({"n": 1}).encode())
    client.post_to_connection(ConnectionId=cid, Data=json.dumps({"n": "x" * 70_000}).encode())
    frames = page.frames(2)
    assert frames[0] == {"n": 1} and len(frames[1]["n"]) == 70_000
    assert client.get_connection(ConnectionId=cid)["Identity"]["UserAgent"] == "agentwake-tests"
    # DELETE closes the page; $disconnect runs; the id is gone from then on
    client.delete_connection(ConnectionId=cid)
    assert page.quiet_for(5) == [] and page.closed_with == ws_frames.NORMAL
    deadline = time.monotonic() + 10
    while "$disconnect" not in routes(api) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert routes(api) == ["$connect", "$disconnect"]
    with pytest.raises(client.exceptions.GoneException):
        client.post_to_connection(ConnectionId=cid, Data=b"{}")


def test_an_unknown_connection_is_gone_and_a_wrong_signature_is_refused(api: Api) -> None:
    client = management(api)
    with pytest.raises(client.exceptions.GoneException) as gone:
        client.post_to_connection(ConnectionId="never-open", Data=b"{}")
    assert gone.value.response["ResponseMetadata"]["HTTPStatusCode"] == 410
    forged = management(api, secret="not-the-secret")
    with pytest.raises(forged.exceptions.ForbiddenException, match="signature does not match"):
        forged.post_to_connection(ConnectionId="never-open", Data=b"{}")


def test_a_page_that_closes_runs_disconnect(api: Api) -> None:
    page = WsClient.connect(api.server.url + "?ticket=good")
    page.close()
    deadline = time.monotonic() + 10
    while "$disconnect" not in routes(api) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert routes(api) == ["$connect", "$disconnect"] and api.server.open_connections() == []
    assert api.events[-1]["requestContext"]["disconnectStatusCode"] == ws_frames.NORMAL


def test_a_close_through_the_management_api_waits_for_the_page_s_reply(api: Api) -> None:
    page = WsClient.connect(api.server.url + "?ticket=good")
    [cid] = api.server.open_connections()
    # WHEN the connection is deleted THEN the page gets the close frame first
    management(api).delete_connection(ConnectionId=cid)
    opcode, _ = page.recv(timeout=30)
    assert opcode == ws_frames.CLOSE and page.closed_with == ws_frames.NORMAL
    # AND a ping the page sends meanwhile gets no pong (nothing follows a close frame) and ends nothing
    page._send(ws_frames.PING, b"still there?")
    # AND the server still reads the page's reply: the handshake ends with the page's own code,
    # which only a server still reading can know
    page._send(ws_frames.CLOSE, ws_frames.close_payload(4001))
    deadline = time.monotonic() + 30
    while "$disconnect" not in routes(api) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert api.events[-1]["requestContext"]["disconnectStatusCode"] == 4001
    # AND then the server closes the TCP connection, having sent nothing more (no pong)
    page.sock.settimeout(30)
    assert page.stream.read() == b""


def test_a_page_that_answers_a_close_at_once_gets_one_close_frame(api: Api) -> None:
    """The DELETE's thread writes the close frame; the page's reply is read by the connection's own
    thread, which answers it with ``close(now=True)``. Were the frame written and the connection
    marked closed in two holds of its lock, that answer could fall between them and send a second
    close frame: "Close received after close" to Chromium, whose page then sees 1006. Here the
    page replies the moment the frame is written, and the DELETE's thread, each time it lets go of
    the lock after that, waits until the reply has been handled (the ``$disconnect`` route ran)."""
    page = WsClient.connect(api.server.url + "?ticket=good")
    [cid] = api.server.open_connections()
    conn = api.server.connections[cid]
    deleting: list[threading.Thread] = []
    held: list[bool] = []  # each wait of the DELETE's thread: whether the reply had been handled

    class ReplyAtOnce:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def write(self, data: bytes) -> int:
            written: int = self.inner.write(data)
            if data[0] & 0x0F == ws_frames.CLOSE and not deleting:
                deleting.append(threading.current_thread())
                page._send(ws_frames.CLOSE, ws_frames.close_payload(ws_frames.NORMAL))
            return written

        def flush(self) -> None:
            self.inner.flush()

    class Held:
        def __init__(self, inner: threading.Lock) -> None:
            self.inner = inner

        def __enter__(self) -> None:
            self.inner.acquire()

        def __exit__(self, *exc: object) -> None:
            self.inner.release()
            if deleting and threading.current_thread() is deleting[0]:
                deadline = time.monotonic() + 30
                while "$disconnect" not in routes(api) and time.monotonic() < deadline:
                    time.sleep(0.01)
                held.append("$disconnect" in routes(api))

    conn.wfile, conn.lock = ReplyAtOnce(conn.wfile), Held(conn.lock)  # type: ignore[assignment]
    management(api).delete_connection(ConnectionId=cid)
    opcode, payload = page.recv(timeout=30)
    assert opcode == ws_frames.CLOSE and ws_frames.close_code(payload) == ws_frames.NORMAL
    # THEN nothing follows the one close frame before the server closes the TCP connection
    page.sock.settimeout(30)
    assert page.stream.read() == b""
    assert held and all(held), "the DELETE's thread gave up waiting for the reply to be handled"
    assert api.events[-1]["requestContext"]["disconnectStatusCode"] == ws_frames.NORMAL


def test_a_connection_closed_through_the_management_api_is_gone_at_once(api: Api) -> None:
    page = WsClient.connect(api.server.url + "?ticket=good")
    [cid] = api.server.open_connections()
    client = management(api)
    # WHEN the connection is deleted, its page not answering the close yet
    client.delete_connection(ConnectionId=cid)
    # THEN it is gone for the management API at once, as on AWS (410), while the socket waits
    with pytest.raises(client.exceptions.GoneException):
        client.get_connection(ConnectionId=cid)
    with pytest.raises(client.exceptions.GoneException):
        client.post_to_connection(ConnectionId=cid, Data=b"{}")
    page.close()
