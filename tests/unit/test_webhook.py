"""The webhook delivery channel against a real HTTP server on 127.0.0.1, and the channel factory."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta, timezone

import pytest
from werkzeug import Request, Response

from agentwake.delivery import Delivery
from agentwake.delivery.factory import build_channel
from agentwake.delivery.log import LogChannel
from agentwake.delivery.webhook import (
    SENT_AT_TOLERANCE_S,
    DeliveryRefused,
    SignatureRefused,
    WebhookChannel,
    verify_delivery,
    verify_signature,
)
from agentwake.errors import ConfigError, DeliveryError

#: adapters built here, with no stack, read the outbound policy from Settings as in a function
pytestmark = pytest.mark.usefixtures("stackless_settings")

SECRET = "s3cr3t-signing-key"
SENT_AT = datetime(2026, 11, 30, 6, 0, 0, 123000, tzinfo=UTC)
DELIVERY = Delivery(delivery_id="bg:t-1#0#0", run_id="bg:t-1", session_id="sess-A", text="Fertig — 3 new sign-ups.")


@pytest.fixture
def httpserver(httpserver_ipv4):
    """pytest-httpserver bound to 127.0.0.1 explicitly (its default host is "localhost")."""
    return httpserver_ipv4


def channel(url: str, secret: str | None = SECRET, timeout: float = 2.0) -> WebhookChannel:
    return WebhookChannel(url, secret, timeout=timeout, now=lambda: SENT_AT)


def received(httpserver) -> Request:
    assert len(httpserver.log) == 1, httpserver.log
    return httpserver.log[0][0]


# --- what the receiver gets -----------------------------------------------------------------


def test_posts_the_delivery_as_json_with_id_and_signature_headers(httpserver):
    # GIVEN a receiver answering 204
    httpserver.expect_request("/hook", method="POST").respond_with_data("", status=204)

    # WHEN a delivery is sent with a secret
    channel(httpserver.url_for("/hook")).send(DELIVERY)

    # THEN the receiver got one POST with the documented body and headers
    request = received(httpserver)
    assert request.method == "POST"
    assert json.loads(request.get_data()) == {
        "delivery_id": "bg:t-1#0#0",
        "run_id": "bg:t-1",
        "session_id": "sess-A",
        "text": "Fertig — 3 new sign-ups.",
        "sent_at": "2026-11-30T06:00:00.123Z",
    }
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["X-Agentwake-Delivery-Id"] == "bg:t-1#0#0"
    assert request.headers["X-Agentwake-Signature"].startswith("sha256=")


def test_sent_at_is_utc_even_from_a_non_utc_clock(httpserver):
    # GIVEN a clock that reports local time at UTC+2
    httpserver.expect_request("/hook").respond_with_data("ok")
    local = SENT_AT.astimezone(timezone(timedelta(hours=2)))

    # WHEN a delivery is sent
    WebhookChannel(httpserver.url_for("/hook"), None, now=lambda: local).send(DELIVERY)

    # THEN sent_at is the same instant, written in UTC
    assert json.loads(received(httpserver).get_data())["sent_at"] == "2026-11-30T06:00:00.123Z"


def test_signature_verifies_and_fails_with_a_wrong_secret_or_a_tampered_body(httpserver):
    # GIVEN a delivery received with a signature
    httpserver.expect_request("/hook").respond_with_data("ok")
    channel(httpserver.url_for("/hook")).send(DELIVERY)
    request = received(httpserver)
    body, header = request.get_data(), request.headers["X-Agentwake-Signature"]

    # WHEN / THEN the exact body verifies with the shared secret
    assert verify_signature(body, header, SECRET)
    # AND fails with another secret, a changed body, or a broken header
    assert not verify_signature(body, header, "another-secret")
    assert not verify_signature(body.replace(b"3 new", b"4 new"), header, SECRET)
    assert not verify_signature(body + b" ", header, SECRET)
    assert not verify_signature(body, header.removeprefix("sha256="), SECRET)
    assert not verify_signature(body, header[:-1] + ("0" if header[-1] != "0" else "1"), SECRET)
    assert not verify_signature(body, "", SECRET)
    assert not verify_signature(body, "sha256=ünïcode", SECRET)
    assert not verify_signature(body, header, "")


def test_no_signature_header_without_a_secret(httpserver):
    # GIVEN a channel without a secret
    httpserver.expect_request("/hook").respond_with_data("ok")

    # WHEN a delivery is sent
    channel(httpserver.url_for("/hook"), secret=None).send(DELIVERY)

    # THEN the request carries the delivery id but no signature
    request = received(httpserver)
    assert "X-Agentwake-Signature" not in request.headers
    assert request.headers["X-Agentwake-Delivery-Id"] == "bg:t-1#0#0"


def test_a_retry_sends_the_same_delivery_id_so_the_receiver_can_drop_it(httpserver):
    # GIVEN a receiver that answered the first send but whose 2xx was not journaled (crash)
    httpserver.expect_request("/hook").respond_with_data("ok")
    hook = channel(httpserver.url_for("/hook"))

    # WHEN the retry sends the same delivery again
    hook.send(DELIVERY)
    hook.send(DELIVERY)

    # THEN both requests carry the same delivery id header, and the same id inside the signed body
    # (the receiver's dedupe key: verify_delivery reads it from there)
    ids = [req.headers["X-Agentwake-Delivery-Id"] for req, _ in httpserver.log]
    assert ids == ["bg:t-1#0#0", "bg:t-1#0#0"]
    verified = [
        verify_delivery(req.get_data(), req.headers["X-Agentwake-Signature"], SECRET, now=SENT_AT)
        for req, _ in httpserver.log
    ]
    assert [v.delivery for v in verified] == [DELIVERY, DELIVERY]


def test_verify_delivery_checks_the_signature_then_sent_at_within_the_tolerance(httpserver):
    # GIVEN a delivery as the channel sends it
    httpserver.expect_request("/hook").respond_with_data("ok")
    channel(httpserver.url_for("/hook")).send(DELIVERY)
    request = received(httpserver)
    body, header = request.get_data(), request.headers["X-Agentwake-Signature"]
    edge = timedelta(seconds=SENT_AT_TOLERANCE_S)

    # WHEN / THEN it verifies up to the tolerance either side of the receiver's clock, with its signed id
    for now in (SENT_AT, SENT_AT + edge, SENT_AT - edge):
        verified = verify_delivery(body, header, SECRET, now=now)
        assert verified.delivery == DELIVERY and verified.sent_at == SENT_AT
    # AND a second past it either way is refused, saying why
    with pytest.raises(DeliveryRefused, match=r"is 301 s old, outside the 300 s tolerance"):
        verify_delivery(body, header, SECRET, now=SENT_AT + edge + timedelta(seconds=1))
    with pytest.raises(DeliveryRefused, match=r"301 s ahead of this receiver's clock"):
        verify_delivery(body, header, SECRET, now=SENT_AT - edge - timedelta(seconds=1))
    assert verify_delivery(body, header, SECRET, now=SENT_AT + 2 * edge, tolerance_s=2 * SENT_AT_TOLERANCE_S)
    # AND a wrong signature is refused before the body is read, naming the header and not the secret
    with pytest.raises(SignatureRefused, match="X-Agentwake-Signature") as refused:
        verify_delivery(body, header, "another-secret", now=SENT_AT)
    assert SECRET not in str(refused.value) and "another-secret" not in str(refused.value)


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (b"[1]", "not a JSON object"),
        (b"{", "not a JSON object"),
        (b"[" * 100_000, "not a JSON object"),
        (json.dumps({**DELIVERY.to_dict(), "delivery_id": ""}).encode(), "no delivery_id, sent_at"),
        (json.dumps({**DELIVERY.to_dict(), "sent_at": "yesterday"}).encode(), "'yesterday' is not an ISO-8601"),
        (json.dumps({**DELIVERY.to_dict(), "sent_at": "2026-11-30T06:00:00"}).encode(), "with a zone"),
        (json.dumps({**DELIVERY.to_dict(), "sent_at": "9" * 5000}).encode(), "'" + "9" * 40 + "' is not"),
    ],
)
def test_verify_delivery_refuses_a_signed_body_that_is_not_a_delivery(payload, why):
    from agentwake.delivery.webhook import sign

    with pytest.raises(DeliveryRefused, match=why) as refused:
        verify_delivery(payload, sign(payload, SECRET), SECRET, now=SENT_AT)
    assert len(str(refused.value)) < 300


# --- failures ---------------------------------------------------------------------------------


def test_a_500_raises_delivery_error_with_the_status_and_the_url_without_its_query(httpserver):
    # GIVEN a receiver failing with 500, addressed with a token in the query
    httpserver.expect_request("/hook").respond_with_data("database down", status=500)
    url = httpserver.url_for("/hook") + "?token=do-not-log-me"

    # WHEN / THEN sending raises DeliveryError naming the status and the url, not the token
    with pytest.raises(DeliveryError) as info:
        channel(url).send(DELIVERY)
    message = str(info.value)
    assert "HTTP 500" in message
    assert httpserver.url_for("/hook") in message
    assert "do-not-log-me" not in message and "token" not in message
    assert "bg:t-1#0#0" in message
    assert len(httpserver.log) == 1


@pytest.mark.parametrize("status", [400, 404, 429, 503])
def test_any_other_non_2xx_raises_delivery_error(httpserver, status):
    httpserver.expect_request("/hook").respond_with_data("no", status=status)

    with pytest.raises(DeliveryError, match=f"HTTP {status}"):
        channel(httpserver.url_for("/hook")).send(DELIVERY)


def test_a_redirect_is_not_followed_and_raises_delivery_error(httpserver):
    # GIVEN a receiver redirecting to another path (urllib would re-send a POST as a body-less GET)
    httpserver.expect_request("/hook").respond_with_response(
        Response(status=302, headers={"Location": httpserver.url_for("/elsewhere")})
    )
    httpserver.expect_request("/elsewhere").respond_with_data("ok")

    # WHEN / THEN sending fails and the redirect target was never called
    with pytest.raises(DeliveryError, match="HTTP 302"):
        channel(httpserver.url_for("/hook")).send(DELIVERY)
    assert [req.path for req, _ in httpserver.log] == ["/hook"]


def test_a_timeout_raises_delivery_error(httpserver):
    # GIVEN a receiver that does not answer within the channel's timeout
    release = threading.Event()

    def stall(request: Request) -> Response:
        release.wait(5)
        return Response("late")

    httpserver.expect_request("/hook").respond_with_handler(stall)

    # WHEN / THEN sending raises DeliveryError saying it timed out
    try:
        with pytest.raises(DeliveryError, match="timed out after 0.2s"):
            channel(httpserver.url_for("/hook"), timeout=0.2).send(DELIVERY)
    finally:
        release.set()


def test_connection_refused_raises_delivery_error():
    # GIVEN a port on 127.0.0.1 where nothing listens
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    # WHEN / THEN sending raises DeliveryError saying it could not connect
    with pytest.raises(DeliveryError, match="cannot connect") as info:
        channel(f"http://127.0.0.1:{port}/hook?sig=abc").send(DELIVERY)
    assert f"http://127.0.0.1:{port}/hook" in str(info.value)
    assert "sig=abc" not in str(info.value)


@pytest.mark.parametrize(
    ("url", "secret", "timeout"),
    [
        pytest.param("file:///etc/passwd", None, 5.0, id="file-url"),
        pytest.param("not a url", None, 5.0, id="no-scheme"),
        pytest.param("https://", None, 5.0, id="no-host"),
        pytest.param("https://hooks.example:http/x?token=t", None, 5.0, id="bad-port"),
        pytest.param("https://hooks.example/x", "", 5.0, id="empty-secret"),
        pytest.param("https://hooks.example/x", None, 0, id="zero-timeout"),
    ],
)
def test_a_channel_that_cannot_work_is_refused_at_construction(url, secret, timeout):
    with pytest.raises(ConfigError):
        WebhookChannel(url, secret, timeout=timeout)


# --- build_channel ----------------------------------------------------------------------------


def test_build_channel_log():
    assert isinstance(build_channel({"type": "log"}), LogChannel)


def test_build_channel_webhook_resolves_the_secret_and_signs_with_it(httpserver, monkeypatch):
    # GIVEN a webhook session config whose secret comes from the environment
    monkeypatch.setenv("AGENTWAKE_SECRET_TEST_HOOK", SECRET)
    httpserver.expect_request("/hook").respond_with_data("ok")
    spec = {
        "type": "webhook",
        "url": httpserver.url_for("/hook"),
        "secret_ref": "env:AGENTWAKE_SECRET_TEST_HOOK",
        "timeout": 3,
    }

    # WHEN the channel is built and used
    built = build_channel(spec)
    built.send(DELIVERY)

    # THEN it is a webhook channel with that timeout whose signature verifies with the secret
    assert isinstance(built, WebhookChannel)
    assert built.timeout == 3.0
    request = received(httpserver)
    assert verify_signature(request.get_data(), request.headers["X-Agentwake-Signature"], SECRET)


def test_build_channel_webhook_without_secret_ref_is_unsigned_with_default_timeout():
    built = build_channel({"type": "webhook", "url": "https://hooks.example/x"})

    assert isinstance(built, WebhookChannel)
    assert built.secret is None
    assert built.timeout == 5.0


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({"type": "carrier-pigeon"}, id="unknown-type"),
        pytest.param({}, id="no-type"),
        pytest.param({"type": "webhook"}, id="missing-url"),
        pytest.param({"type": "webhook", "url": ""}, id="empty-url"),
        pytest.param({"type": "webhook", "url": "ftp://hooks.example/x"}, id="not-http"),
        pytest.param({"type": "webhook", "url": "https://hooks.example/x", "timeout": 0}, id="zero-timeout"),
        pytest.param({"type": "webhook", "url": "https://hooks.example/x", "secret": "raw"}, id="misspelt-key"),
        pytest.param(
            {"type": "webhook", "url": "https://h.example/x", "secret_ref": "env:AGENTWAKE_SECRET_UNSET_XYZ"},
            id="secret-not-set",
        ),
        pytest.param({"type": "webhook", "url": "https://h.example/x", "secret_ref": "vault:x"}, id="bad-secret-ref"),
        pytest.param("log", id="not-an-object"),
    ],
)
def test_build_channel_config_errors(spec, monkeypatch):
    monkeypatch.delenv("AGENTWAKE_SECRET_UNSET_XYZ", raising=False)

    with pytest.raises(ConfigError):
        build_channel(spec)


def test_build_channel_imports_the_webhook_adapter_only_when_used():
    # GIVEN a fresh interpreter (the Lambda cold start)
    code = (
        "import sys\n"
        "from agentwake.delivery.factory import build_channel\n"
        "build_channel({'type': 'log'})\n"
        "print('agentwake.delivery.webhook' in sys.modules)\n"
    )

    # WHEN the factory is imported and builds a log channel
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout

    # THEN the webhook module was never imported
    assert out.strip() == "False"


def test_an_approval_request_carries_its_token_only_in_the_signed_body(httpserver):
    # GIVEN an approval request's delivery (issue 35), its decision token in its payload
    approval = {"approval_id": "apr-1", "tool": "create_ticket", "token": "tok-SECRET", "token_gen": 2}
    request_delivery = Delivery(
        delivery_id="bg:t-1#0#0#approval",
        run_id="bg:t-1",
        session_id="sess-A",
        text="Approval needed",
        approval=approval,
    )
    httpserver.expect_request("/hook").respond_with_data("ok")
    # WHEN the webhook channel sends it
    channel(httpserver.url_for("/hook")).send(request_delivery)
    request = received(httpserver)
    # THEN the receiver verifies the signed body and reads the token from it
    verified = verify_delivery(request.get_data(), request.headers["X-Agentwake-Signature"], SECRET, now=SENT_AT)
    assert verified.delivery.approval == approval
    # AND the token is in no text, repr or log form of the delivery
    assert "tok-SECRET" not in request_delivery.text + repr(request_delivery)
    assert "tok-SECRET" not in json.dumps(request_delivery.to_dict())
    assert request_delivery.to_dict()["approval"]["token_gen"] == 2
