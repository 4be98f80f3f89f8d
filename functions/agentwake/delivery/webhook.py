"""The ``webhook`` channel: POST each delivery as JSON to the user's endpoint (stdlib urllib only).

Request: ``POST url`` with body ``{"delivery_id", "run_id", "session_id", "text", "sent_at"}`` (and
``approval`` for an approval request: its decision token is in it, signed like the rest)
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
``delivery_id`` (run id + step + call index, stable across retries and redrives), in a new body
(a new ``sent_at``, so a new signature).

A receiver checks each request with :func:`verify_delivery` (docs/operations.md, "Receiving
webhook deliveries"): the signature over the exact body bytes, then ``sent_at`` within a
tolerance of its own clock (``SENT_AT_TOLERANCE_S`` by default), then it drops a ``delivery_id``
**from the signed body** it has already seen — never by the ``X-Agentwake-Delivery-Id`` header,
which is not signed (a replayed body under another header would pass as new) — keeping the ids it
saw for as long as a redrive may resend them.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from agentwake.delivery import Delivery, Receipt
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
#: how far a delivery's ``sent_at`` may be from a receiver's clock, by default (seconds): a retry
#: resends with a fresh ``sent_at``, so only a replayed or badly delayed body falls outside it
SENT_AT_TOLERANCE_S = 300.0


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


class DeliveryRefused(ValueError):
    """A receiver's verdict: this request is not a delivery to accept (the message says why and
    holds nothing of the secret; at most a bounded part of what was sent)."""


class SignatureRefused(DeliveryRefused):
    """The signature is missing or does not sign the body: nothing in it can be trusted."""


@dataclass(frozen=True)
class ReceivedDelivery:
    """A delivery whose signature and ``sent_at`` were checked: dedupe by ``delivery.delivery_id``."""

    delivery: Delivery
    sent_at: datetime


def verify_delivery(
    body: bytes,
    signature: str | None,
    secret: str,
    *,
    now: datetime | None = None,
    tolerance_s: float = SENT_AT_TOLERANCE_S,
) -> ReceivedDelivery:
    """For receivers: the delivery in ``body`` (the raw request bytes) once ``signature`` (the
    ``X-Agentwake-Signature`` header) signs it with ``secret`` and its ``sent_at`` is within
    ``tolerance_s`` of ``now`` (the receiver's clock); ``SignatureRefused`` when the signature
    fails, ``DeliveryRefused`` when the signed body is not a delivery or outside the tolerance.

    Its ``delivery.delivery_id`` is the signed one: the key to drop duplicates by."""
    if not verify_signature(body, signature, secret):
        raise SignatureRefused(f"the {SIGNATURE_HEADER} header does not sign this body with the webhook's secret")
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        payload = None
    if not isinstance(payload, dict):
        raise DeliveryRefused("the signed body is not a JSON object")
    names = ("delivery_id", "run_id", "session_id", "text", "sent_at")
    missing = [name for name in names if not isinstance(payload.get(name), str) or not payload[name]]
    if missing:
        raise DeliveryRefused(f"the signed body has no {', '.join(missing)} (each a non-empty string)")
    fields: dict[str, str] = {name: payload[name] for name in names}
    try:
        sent_at = datetime.fromisoformat(fields["sent_at"])
    except ValueError:
        sent_at = None
    if sent_at is None or sent_at.tzinfo is None:
        raise DeliveryRefused(f"sent_at {fields['sent_at'][:40]!r} is not an ISO-8601 time with a zone")
    skew = (sent_at - (now or _utc_now())).total_seconds()
    if abs(skew) > tolerance_s:
        when = "old" if skew < 0 else "ahead of this receiver's clock"
        raise DeliveryRefused(
            f"sent_at {fields['sent_at'][:40]} is {abs(skew):.0f} s {when}, outside the {tolerance_s:g} s tolerance: "
            "a replayed or delayed body, or a clock to fix"
        )
    approval = payload.get("approval")
    delivery = Delivery(
        fields["delivery_id"],
        fields["run_id"],
        fields["session_id"],
        fields["text"],
        approval=approval if isinstance(approval, dict) else None,
    )
    return ReceivedDelivery(delivery=delivery, sent_at=sent_at.astimezone(UTC))


def _utc_now() -> datetime:
    return datetime.now(UTC)


def delivery_body(delivery: Delivery, now: datetime) -> bytes:
    """The JSON a delivery travels as, to a webhook and on an SNS topic: ``{"delivery_id", "run_id",
    "session_id", "text", "sent_at"}`` (``sent_at``: ``now`` in ISO-8601 UTC, milliseconds)."""
    sent_at = now.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    payload = {**delivery.to_dict(with_token=True), "sent_at": sent_at}
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


class WebhookChannel:
    """Deliver by HTTP POST; raise ``DeliveryError`` unless the receiver answers 2xx."""

    confirms = "receiver"  # the receiver drops a repeated signed delivery id

    def __init__(
        self,
        url: str,
        secret: str | None,
        timeout: float = 5.0,
        *,
        now: Callable[[], datetime] = _utc_now,
        policy: OutboundPolicy | None = None,
        name: str = "webhook",
    ) -> None:
        self.name = name
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
        return delivery_body(delivery, self._now())

    def send(self, delivery: Delivery) -> Receipt:
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
        return Receipt(channel="webhook", target=self.name, where=where, extra={"status": status})


def _error_body(body: bytes) -> str:
    text = redact(body.decode("utf-8", errors="replace").strip())
    return f": {text}" if text else ""
