"""The embedded moto server answers on kept connections (``agentwake_local.server._keep_alive_handler``).

A DLQ scan of 10,000 messages is 2,000 requests; each used to pay a connect, an accept, a thread
and a close, because werkzeug closes every connection. Counted, never timed: the connections the
server holds, the answers on one socket.
"""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from agentwake_local.server import DEFAULT_REGION, KEEP_ALIVE_IDLE_S, MotoServer, boto3_session

SIGNED = {
    "Authorization": (
        "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/sqs/aws4_request, SignedHeaders=host, Signature=0"
    ),
    "Content-Type": "application/x-amz-json-1.0",
}


@pytest.fixture(scope="module")
def server() -> Iterator[MotoServer]:
    with MotoServer() as moto_server:
        yield moto_server


def sqs_request(target: str, body: dict[str, Any]) -> tuple[dict[str, str], bytes]:
    return {**SIGNED, "X-Amz-Target": f"AmazonSQS.{target}"}, json.dumps(body).encode()


def read_answer(reader: Any) -> tuple[int, dict[str, str], bytes]:
    """One HTTP answer from a stream: (status, headers by lower-case name, body of its Content-Length)."""
    status = int(reader.readline().split()[1])
    headers = {}
    while (line := reader.readline().strip()) != b"":
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.lower()] = value.strip()
    return status, headers, reader.read(int(headers["content-length"]))


def kept(server: MotoServer) -> set[Any]:
    return server._server._server.kept_connections  # type: ignore[no-any-return]


def test_one_client_makes_its_requests_on_one_connection(server: MotoServer) -> None:
    from botocore.config import Config

    # GIVEN a client with one connection in its pool
    before = set(kept(server))
    sqs = boto3_session().client(
        "sqs", endpoint_url=server.endpoint_url, region_name=DEFAULT_REGION, config=Config(max_pool_connections=1)
    )
    url = sqs.create_queue(QueueName="kept-connection")["QueueUrl"]
    # WHEN it makes 30 requests, with bodies and answers of several sizes
    for i in range(10):
        sqs.send_message(QueueUrl=url, MessageBody="x" * (10 * i + 1))
        sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0)
        sqs.list_queues()
    # THEN they were all answered on one connection, which the server still keeps open
    assert len(set(kept(server)) - before) == 1
    sqs.close()


def test_requests_sent_back_to_back_on_one_socket_are_each_answered(server: MotoServer) -> None:
    """werkzeug drains what is left to read after each answer (it would swallow the next request):
    two requests written in one go are both answered, in order, and the socket stays open."""
    sqs = boto3_session().client("sqs", endpoint_url=server.endpoint_url, region_name=DEFAULT_REGION)
    url = sqs.create_queue(QueueName="back-to-back")["QueueUrl"]
    parts = urlsplit(server.endpoint_url)
    raw = b""
    for body in ("first", "second"):
        headers, data = sqs_request("SendMessage", {"QueueUrl": url, "MessageBody": body})
        lines = ["POST / HTTP/1.1", f"Host: {parts.netloc}", f"Content-Length: {len(data)}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        raw += ("\r\n".join(lines) + "\r\n\r\n").encode() + data
    # GIVEN two SendMessage requests written to one socket at once
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        sock.sendall(raw)
        reader = sock.makefile("rb")
        # WHEN both answers are read from the one stream
        answers = [read_answer(reader) for _ in range(2)]
    # THEN both were answered, neither closed the connection, and both messages are on the queue
    assert [(status, headers.get("connection")) for status, headers, _ in answers] == [(200, None), (200, None)]
    assert all("MessageId" in json.loads(body) for _, _, body in answers)
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert sorted(m["Body"] for m in got) == ["first", "second"]


def test_a_request_the_kept_path_does_not_take_is_answered_and_closed(server: MotoServer) -> None:
    # GIVEN a HEAD request (werkzeug's own path: it answers and closes, as before)
    parts = urlsplit(server.endpoint_url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    connection.request("HEAD", "/moto-api/config")
    response = connection.getresponse()
    response.read()
    # THEN it is answered, and the connection is closed after it
    assert response.status < 300
    assert response.will_close
    connection.close()


def test_a_stopped_server_closes_the_connections_it_kept() -> None:
    # GIVEN a connection the server kept after answering on it
    with MotoServer() as moto_server:
        parts = urlsplit(moto_server.endpoint_url)
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        connection.request("GET", "/moto-api/config")
        response = connection.getresponse()
        response.read()
        assert not response.will_close
        sock = connection.sock
    # WHEN the server has stopped  THEN the connection ends at once (a kept handler would otherwise
    # wait on it for its next request until KEEP_ALIVE_IDLE_S)
    sock.settimeout(KEEP_ALIVE_IDLE_S / 3)
    assert sock.recv(1) == b""
    connection.close()


def test_a_kept_connection_left_idle_is_closed_without_an_error_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from agentwake_local import server as server_module

    # GIVEN a server that closes a connection idle for 1 s, and a connection it answered on
    monkeypatch.setattr(server_module, "KEEP_ALIVE_IDLE_S", 1)
    with MotoServer() as moto_server:
        parts = urlsplit(moto_server.endpoint_url)
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        connection.request("GET", "/moto-api/config")
        connection.getresponse().read()
        # WHEN nobody uses it  THEN the server closes it (the client's next request would reconnect)
        connection.sock.settimeout(60)
        assert connection.sock.recv(1) == b""
        # AND says nothing about it (an idle connection closed is not an error), and answers the next one
        connection.close()
        connection.request("GET", "/moto-api/config")
        assert connection.getresponse().status < 300
    assert not [r for r in caplog.records if "timed out" in r.getMessage()]
    connection.close()


def test_a_request_with_a_chunked_body_reaches_moto_whole(server: MotoServer) -> None:
    # GIVEN a queue, and a SendMessage whose body is sent in chunks (no Content-Length)
    sqs = boto3_session().client("sqs", endpoint_url=server.endpoint_url, region_name=DEFAULT_REGION)
    url = sqs.create_queue(QueueName="chunked-body")["QueueUrl"]
    headers, body = sqs_request("SendMessage", {"QueueUrl": url, "MessageBody": "sent in chunks"})
    parts = urlsplit(server.endpoint_url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    connection.request("POST", "/", body=iter([body[:20], body[20:]]), headers=headers, encode_chunked=True)
    response = connection.getresponse()
    answer = response.read()
    connection.close()
    # THEN moto read the whole body: the message is sent and on the queue
    assert response.status == 200, answer[:300]
    [message] = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert message["Body"] == "sent in chunks"
