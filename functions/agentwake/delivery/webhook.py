"""The ``webhook`` channel: POST each delivery as JSON to the user's endpoint (stdlib urllib only).

Request: ``POST url`` with body ``{"delivery_id", "run_id", "session_id", "text", "sent_at"}``
(``sent_at`` is ISO-8601 UTC) and headers

- ``Content-Type: application/json``
- ``X-Agentwake-Delivery-Id: <delivery_id>``
- ``X-Agentwake-Signature: sha256=<hex HMAC-SHA256 of the exact body bytes>`` when a secret is set.

Only a 2xx answer counts as delivered. Redirects are not followed (urllib would turn a redirected
POST into a body-less GET and report success). Two kinds of failure:

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
import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime

from agentwake.delivery import Delivery
from agentwake.errors import ConfigError, DeliveryError, DeliveryUncertain

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


def redact_url(url: str) -> str:
    """The URL for error messages and logs: no query, fragment or user info (they may hold tokens)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:  # not a number: keep it out of the message rather than fail on it
        port = None
    netloc = f"{host}:{port}" if port else host
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _utc_now() -> datetime:
    return datetime.now(UTC)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Make every 3xx an HTTPError instead of following it."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        return None


class WebhookChannel:
    """Deliver by HTTP POST; raise ``DeliveryError`` unless the receiver answers 2xx."""

    def __init__(
        self,
        url: str,
        secret: str | None,
        timeout: float = 5.0,
        *,
        now: Callable[[], datetime] = _utc_now,
    ) -> None:
        parts = urllib.parse.urlsplit(url or "")
        try:
            parts.port  # noqa: B018 -- raises ValueError for a port that is not a number
        except ValueError as exc:
            raise ConfigError(f"webhook url has an invalid port: {redact_url(url)!r}") from exc
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"webhook url must be an http(s) URL with a host, got {redact_url(url or '')!r}")
        if secret is not None and not secret:
            raise ConfigError("webhook secret is empty; omit it to send unsigned deliveries")
        if timeout <= 0:
            raise ConfigError(f"webhook timeout must be positive, got {timeout}")
        self.url = url
        self.secret = secret
        self.timeout = float(timeout)
        self._now = now
        self._opener = urllib.request.build_opener(_NoRedirect())

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
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        where = redact_url(self.url)
        what = f"delivery {delivery.delivery_id} to {where}"
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                status = response.status
                response.read(65536)  # drain a little so the connection closes cleanly
        except urllib.error.HTTPError as exc:
            detail = _error_body(exc)
            raise DeliveryError(f"{what} failed: HTTP {exc.code} {exc.reason}{detail}") from exc
        except TimeoutError as exc:
            raise DeliveryUncertain(f"{what} timed out after {self.timeout:g}s; it may have arrived") from exc
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError | ConnectionResetError):
                raise DeliveryUncertain(f"{what}: no answer ({exc.reason}); it may have arrived") from exc
            raise DeliveryError(f"{what} failed: cannot connect: {exc.reason}") from exc
        except (ConnectionResetError, http.client.HTTPException) as exc:
            # the request went out and the connection broke before a full answer
            raise DeliveryUncertain(f"{what}: {type(exc).__name__}: {exc}; it may have arrived") from exc
        except OSError as exc:
            raise DeliveryError(f"{what} failed: {type(exc).__name__}: {exc}") from exc
        if not 200 <= status < 300:  # urllib raises for these; kept in case a handler does not
            raise DeliveryError(f"{what} failed: HTTP {status}")


def _error_body(exc: urllib.error.HTTPError) -> str:
    try:
        text = exc.read(_MAX_ERROR_BODY).decode("utf-8", errors="replace").strip()
    except Exception:
        return ""
    finally:
        exc.close()
    return f": {text}" if text else ""
