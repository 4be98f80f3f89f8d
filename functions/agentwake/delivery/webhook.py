"""The ``webhook`` channel: POST each delivery as JSON to the user's endpoint (stdlib urllib only).

Request: ``POST url`` with body ``{"delivery_id", "run_id", "session_id", "text", "sent_at"}``
(``sent_at`` is ISO-8601 UTC) and headers

- ``Content-Type: application/json``
- ``X-Agentwake-Delivery-Id: <delivery_id>``
- ``X-Agentwake-Signature: sha256=<hex HMAC-SHA256 of the exact body bytes>`` when a secret is set.

Only a 2xx answer counts as delivered. Redirects are not followed (a redirected POST could land
anywhere, loopback included). The URL passes agentwake.trust.outbound's policy (https; no loopback,
link-local, private or non-HTTP targets, checked after DNS resolution; a refused URL is an
``OutboundRefused`` configuration error, never sent), and the exchange ends by the channel's
timeout or the run's deadline, whichever comes first (``DeadlineExceeded`` at the run's deadline:
the step is aborted, the run fails with that reason and a retry resends the same delivery id).
Two kinds of failure:

- **certainly not delivered** (a 3xx/4xx/5xx answer, connection refused, no such host):
  ``DeliveryError``; the model sees an ``error:`` tool result and may decide what to do;
- **perhaps delivered** (a timeout, a connection dropped before the answer): ``DeliveryUncertain``;
  the step is aborted unjournaled and the run retried, which sends the same ``delivery_id`` again.

At least once, not exactly once: if the Lambda dies, or the outcome is uncertain, between sending
and recording, the retry or redrive of the run sends the same delivery again with the same
``delivery_id`` (run id + step + call index, stable across retries and redrives). Receivers must
drop duplicates by the ``X-Agentwake-Delivery-Id`` header, and should check the signature with
:func:`verify_signature` before trusting the body.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import urllib.parse
from collections.abc import Callable
from datetime import UTC, datetime

from agentwake.delivery import Delivery
from agentwake.errors import ConfigError, DeliveryError, DeliveryUncertain
from agentwake.trust.outbound import (
    ExchangeError,
    ExchangeTimeout,
    OutboundPolicy,
    check_url,
    http_exchange,
    redact_url,
)
from agentwake.trust.redact import redact, register_secret

SIGNATURE_HEADER = "X-Agentwake-Signature"
DELIVERY_ID_HEADER = "X-Agentwake-Delivery-Id"
SIGNATURE_PREFIX = "sha256="
USER_AGENT = "agentwake-webhook/1"
_MAX_ERROR_BODY = 200


def sign(body: bytes, secret: str) -> str:
    """The ``X-Agentwake-Signature`` value for ``body``: ``sha256=<hex HMAC-SHA256>``."""
    digest = hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()
    return SIGNATURE_PREFIX + digest


def verify_signature(body: bytes, header: str | None, secret: str) -> bool:
    """For receivers: does ``header`` (``sha256=<hex>``) sign exactly ``body`` with ``secret``?

    Compare in constant time, so the answer leaks nothing about how much of a forged signature
    was right. Pass the raw request body, not re-serialized JSON.
    """
    if not header or not secret:
        return False
    expected = sign(body, secret).encode("ascii")
    given = header.strip().encode("utf-8", errors="replace")
    return hmac.compare_digest(expected, given)


def _utc_now() -> datetime:
    return datetime.now(UTC)


class WebhookChannel:
    """Deliver by HTTP POST; raise ``DeliveryError`` unless the receiver answers 2xx."""

    def __init__(
        self,
        url: str,
        secret: str | None,
        timeout: float = 5.0,
        *,
        now: Callable[[], datetime] = _utc_now,
        policy: OutboundPolicy | None = None,
    ) -> None:
        parts = urllib.parse.urlsplit(url or "")
        try:
            parts.port  # noqa: B018 -- raises ValueError for a port that is not a number
        except ValueError as exc:
            raise ConfigError(f"webhook url has an invalid port: {redact_url(url)!r}") from exc
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"webhook url must be an http(s) URL with a host, got {redact_url(url or '')!r}")
        check_url(url, policy, what="webhook url", resolve=False)  # OutboundRefused: scheme, IP literal
        if secret is not None and not secret:
            raise ConfigError("webhook secret is empty; omit it to send unsigned deliveries")
        if timeout <= 0:
            raise ConfigError(f"webhook timeout must be positive, got {timeout}")
        self.url = url
        self.secret = secret
        register_secret(secret)
        self.timeout = float(timeout)
        self._now = now
        self._policy = policy

    def __repr__(self) -> str:  # never the secret, nor the URL's query (it may hold a token)
        return f"WebhookChannel(url={redact_url(self.url)!r}, signed={self.secret is not None})"

    def check(self) -> None:
        """Resolve and check the URL against the outbound policy now (OutboundRefused if it breaks it)."""
        check_url(self.url, self._policy, what="webhook url")

    def body(self, delivery: Delivery) -> bytes:
        """The exact bytes sent (and signed) for ``delivery``."""
        sent_at = self._now().astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        payload = {**delivery.to_dict(), "sent_at": sent_at}
        return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")

    def send(self, delivery: Delivery) -> None:
        body = self.body(delivery)
        headers = {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            DELIVERY_ID_HEADER: delivery.delivery_id,
        }
        if self.secret is not None:
            headers[SIGNATURE_HEADER] = sign(body, self.secret)
        where = redact_url(self.url)
        what = f"delivery {delivery.delivery_id} to {where}"
        try:
            response = http_exchange(
                "POST",
                self.url,
                headers=headers,
                body=body,
                deadline=time.monotonic() + self.timeout,
                policy=self._policy,
                max_response_bytes=_MAX_ERROR_BODY,
                what="webhook url",
            )
        except ExchangeTimeout as exc:  # the channel's timeout (the run's deadline is DeadlineExceeded)
            if not exc.request_sent:
                raise DeliveryError(f"{what} failed: cannot connect within {self.timeout:g}s") from exc
            raise DeliveryUncertain(f"{what} timed out after {self.timeout:g}s; it may have arrived") from exc
        except ExchangeError as exc:
            if exc.request_sent:
                # the request went out and the connection broke before a full answer
                raise DeliveryUncertain(f"{what}: {exc}; it may have arrived") from exc
            raise DeliveryError(f"{what} failed: {exc}") from exc
        status = response.status
        if not 200 <= status < 300:
            detail = _error_body(response.body)
            if 300 <= status < 400:
                detail = f" (redirect to {redact_url(response.headers.get('location', ''))!r} not followed){detail}"
            raise DeliveryError(redact(f"{what} failed: HTTP {status} {response.reason}{detail}"))


def _error_body(body: bytes) -> str:
    text = redact(body.decode("utf-8", errors="replace").strip())
    return f": {text}" if text else ""
