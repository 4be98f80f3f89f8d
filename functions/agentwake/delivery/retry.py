"""One retry policy for the chat platforms reached over HTTP (Slack, Telegram): docs/channels.md,
design §5. An adapter classifies each answer once, at its edge, and this module decides what happens:

- the platform asks to wait (HTTP 429 ``Retry-After``, Telegram's ``parameters.retry_after``):
  :class:`Throttled`. If the wait fits in what is left of the run's deadline, leaving one
  exchange's budget, it is slept on the kit's clock and the same request is sent again (at most
  ``MAX_WAITS`` times); else ``ChannelThrottled`` carrying the wait ("Slack asked to wait 90 s; 31 s
  were left"): the run fails transiently, nothing was sent;
- certainly not sent (connection refused, a 5xx whose body says the platform refused it):
  :class:`NotSent`, retried after a short backoff, then ``ChannelUnavailable``;
- perhaps sent (a timeout or a reset after the request went out, an answer that says nothing):
  ``DeliveryUncertain`` at once; the core's intent decides (Slack looks the message up, Telegram
  dead-letters or resends). A read (``idempotent=True``: a history lookup) is never in doubt: its
  failures are :class:`NotSent`.

Every text this module writes names the target as the adapter says (``shown``), never the URL: a
Telegram URL holds the bot token in its path. stdlib only (``trust/outbound.py``'s exchange).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from agentwake import deadline as run_deadline
from agentwake.clock import Clock
from agentwake.errors import (
    ChannelRefused,
    ChannelThrottled,
    ChannelUnavailable,
    ConfigError,
    DeadlineExceeded,
    DeliveryUncertain,
    OutboundRefused,
)

T = TypeVar("T")

#: what a Slack or Telegram ``send`` raises when nothing reached the platform: the core marks the
#: intent ``not_sent`` (``not_before`` from ``ChannelThrottled.retry_after``). Anything else a send
#: raises (``DeliveryUncertain``, ``DeadlineExceeded``) leaves it in doubt (``sending``). From
#: ``find`` the same types mean the lookup did not finish: the intent stays in doubt.
NOTHING_SENT: tuple[type[Exception], ...] = (ChannelThrottled, ChannelUnavailable, ChannelRefused, ConfigError)
logger = logging.getLogger("agentwake.delivery")

#: waits a platform may ask for in one send before the run gives up and fails transiently
MAX_WAITS = 3
#: pauses before a retry of a request that was certainly not sent (then ChannelUnavailable)
BACKOFF_S: tuple[float, ...] = (0.5, 1.0)
#: one exchange's own timeout; a wait is slept only if this much of the run is left after it
EXCHANGE_S = 10.0
#: the longest wait slept where the run has no deadline (a CLI, a test without one)
UNBOUNDED_WAIT_S = 60.0
#: ends a message cut to the platform's limit
CUT_MARKER = "\n… [cut: the message was longer than this channel allows]"
#: bytes of an answer read (Slack's history pages are the largest: 200 messages with metadata)
MAX_ANSWER_BYTES = 2 * 1024 * 1024


class Throttled(Exception):
    """The platform asked to wait ``retry_after`` seconds before the same request."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"asked to wait {retry_after:g} s")
        self.retry_after = max(0.0, float(retry_after))


class NotSent(Exception):
    """Certainly not taken (connection refused, the platform's own "failed" answer): worth a retry."""


class RetryPolicy:
    """Sends one request again as the platform allows, within the run's deadline, sleeping on
    ``clock`` (a fake one in tests). ``platform`` names it in texts ("Slack", "Telegram")."""

    def __init__(
        self,
        clock: Clock,
        platform: str,
        *,
        max_waits: int = MAX_WAITS,
        backoff: tuple[float, ...] = BACKOFF_S,
        exchange_s: float = EXCHANGE_S,
    ) -> None:
        self.clock = clock
        self.platform = platform
        self.max_waits = max_waits
        self.backoff = backoff
        self.exchange_s = exchange_s
        # the run's deadline is on time.monotonic(); a fake clock moves only when slept on, so
        # the time it slept counts as spent too (with the system clock both are the same)
        self._mono0 = time.monotonic()
        self._clock0 = clock.now()

    def time_left(self) -> float | None:
        """Seconds until the run's deadline (None: the run has none)."""
        deadline = run_deadline.current()
        if deadline is None:
            return None
        now = max(time.monotonic(), self._mono0 + (self.clock.now() - self._clock0))
        return deadline - now

    def call(self, once: Callable[[], T], *, shown: str) -> T:
        """``once()`` until it answers; it raises :class:`Throttled` or :class:`NotSent` to be
        retried, anything else to stop. ``shown`` names the target in failure texts."""
        waits = 0
        backoffs = 0
        while True:
            try:
                return once()
            except Throttled as asked:
                wait = asked.retry_after
                left = self.time_left()
                if waits >= self.max_waits:
                    raise ChannelThrottled(
                        f"{self.platform} asked to wait {wait:g} s for {shown} after {waits} waits already",
                        retry_after=wait,
                    ) from None
                if not self._fits(wait, left):
                    had = "no time limit" if left is None else f"{max(0.0, left):.0f} s were left"
                    raise ChannelThrottled(
                        f"{self.platform} asked to wait {wait:g} s for {shown}; {had}", retry_after=wait
                    ) from None
                waits += 1
                logger.info(
                    f"{self.platform} asked to wait {wait:g} s for {shown}: waiting", extra={"retry_after": wait}
                )
                self.clock.sleep(wait)
            except NotSent as failed:
                reason = str(failed)
                if backoffs >= len(self.backoff) or not self._fits(self.backoff[backoffs], self.time_left()):
                    tries = backoffs + 1
                    raise ChannelUnavailable(
                        f"{self.platform} is unavailable for {shown} ({tries} tr{'ies' if tries > 1 else 'y'}): {reason}"
                    ) from None
                logger.info(f"{self.platform} did not take the request for {shown} ({reason}): trying again")
                self.clock.sleep(self.backoff[backoffs])
                backoffs += 1

    def _fits(self, wait: float, left: float | None) -> bool:
        if left is None:
            return wait <= UNBOUNDED_WAIT_S
        return wait <= left - self.exchange_s

    def exchange(
        self,
        method: str,
        url: str,
        *,
        shown: str,
        headers: Mapping[str, str],
        body: bytes | None = None,
        settings: Any = None,
        idempotent: bool = False,
    ) -> Any:
        """One HTTP exchange (``trust/outbound.py``: the stack's outbound policy, the run's
        deadline), its failures classified: :class:`NotSent` (nothing taken), ``DeliveryUncertain``
        (the request went out, no answer: never for an ``idempotent`` read), ``DeadlineExceeded``
        and ``OutboundRefused`` named by ``shown``. Answers ``HttpResponse`` whatever its status.

        No text raised here holds ``url`` (nor the exchange's own error, which names it): the
        failure is built after the ``except`` block, so it does not even chain to one that does."""
        from agentwake.trust.outbound import (
            ExchangeError,
            ExchangeTimeout,
            OutboundPolicy,
            default_policy,
            http_exchange,
        )

        policy = OutboundPolicy.from_settings(settings) if settings is not None else default_policy()
        failure: BaseException | None = None
        try:
            return http_exchange(
                method,
                url,
                headers=headers,
                body=body,
                deadline=time.monotonic() + self.exchange_s,
                policy=policy,
                max_response_bytes=MAX_ANSWER_BYTES,
                what=shown,
            )
        except OutboundRefused:
            failure = OutboundRefused(
                f"{self.platform} API base for {shown} is refused by the outbound policy (https, a public "
                "address): check the stack's API URL setting"
            )
        except DeadlineExceeded as exc:
            cause = exc.__cause__
            sent = bool(getattr(cause, "request_sent", True))  # outbound.py raises it from the ExchangeTimeout
            failure = DeadlineExceeded(
                f"{self.platform} did not answer for {shown} before the run's deadline"
                + ("; it may have arrived" if sent else "; nothing was sent")
            )
        except ExchangeTimeout as exc:
            if exc.request_sent and not idempotent:
                failure = DeliveryUncertain(
                    f"{self.platform} did not answer for {shown} within {self.exchange_s:g} s; it may have arrived"
                )
            else:
                failure = NotSent(f"no answer within {self.exchange_s:g} s")
        except ExchangeError as exc:
            if exc.request_sent and not idempotent:
                failure = DeliveryUncertain(
                    f"the exchange with {self.platform} for {shown} broke after the request went out; "
                    "it may have arrived"
                )
            else:
                failure = NotSent("cannot connect" if not exc.request_sent else "the exchange broke")
        raise failure


def retry_after_header(headers: Mapping[str, str], default: float = 1.0) -> float:
    """Seconds from a ``Retry-After`` header (a number; an HTTP date is not used by these platforms)."""
    raw = headers.get("retry-after", "")
    try:
        value = float(raw)
    except ValueError:
        return default
    return value if value >= 0 else default


def cut(text: str, limit: int, *, units: Callable[[str], int] = len) -> str:
    """``text`` within ``limit`` (counted by ``units``), cut with a visible marker rather than refused."""
    if units(text) <= limit:
        return text
    marker = CUT_MARKER
    keep = limit - units(marker)
    lo, hi = 0, len(text)
    while lo < hi:  # the longest prefix that fits (units may count a character as two)
        mid = (lo + hi + 1) // 2
        if units(text[:mid]) <= keep:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo] + marker


def utf16_units(text: str) -> int:
    """Telegram counts a message's length in UTF-16 code units."""
    return len(text.encode("utf-16-le")) // 2


def platform_base(kit: Any, setting: str, platform: str, default: str) -> str:
    """A chat platform's API base from the stack's settings (never a session field), ending in ``/``."""
    base = str(getattr(kit.settings, setting, "") or "")
    if not base:
        raise ConfigError(f"no {platform} API base: set AGENTWAKE_{setting.upper()} (default {default})")
    return base if base.endswith("/") else base + "/"


def bot_token(kit: Any, token_ref: str | None, *, setting: str, parameter: str, shown: str) -> str:
    """The bot token a channel sends with: its own ``token_ref``, else the stack's; resolved through
    the secret scope and registered with the redactor (it must appear in no text that leaves)."""
    ref = token_ref or getattr(kit.settings, setting, None) or None
    if not ref:
        raise ConfigError(
            f"{shown}: no bot token: set the stack parameter {parameter} (AGENTWAKE_{setting.upper()}) "
            "or the channel's token_ref"
        )
    from agentwake.trust.redact import register_secret
    from agentwake.trust.secrets import resolve_secret

    token = resolve_secret(ref, bot_token=True)  # the stack's bot-token secrets are in scope here only
    register_secret(token)
    return token
