"""The provider chain: primary then fallbacks, retries with deadline-bounded backoff, sticky failover."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from agentwake.agent.providers.base import Provider
from agentwake.agent.types import ChatRequest, ModelReply, Usage
from agentwake.clock import Clock, SystemClock
from agentwake.errors import (
    AllProvidersFailed,
    DeadlineExceeded,
    OutboundRefused,
    ProviderError,
    SecretRefRefused,
    TransientProviderError,
)


@dataclass(frozen=True)
class RetryPolicy:
    """Per-provider retries of transient errors: exponential backoff with equal jitter."""

    max_attempts: int = 3
    base_delay: float = 0.5
    max_delay: float = 8.0
    call_timeout: float = 60.0

    def delay(self, attempt: int, rand: float) -> float:
        """Delay after failed ``attempt`` (1-based): half fixed, half random, capped."""
        ceiling = min(self.max_delay, self.base_delay * (2 ** (attempt - 1)))
        return ceiling / 2 + ceiling / 2 * rand


def dedupe(providers: Sequence[Provider]) -> list[Provider]:
    seen: set[str] = set()
    out: list[Provider] = []
    for p in providers:
        if p.id not in seen:
            seen.add(p.id)
            out.append(p)
    return out


def describe_error(exc: BaseException) -> str:
    if isinstance(exc, ProviderError):
        return exc.describe()
    return f"{type(exc).__name__}: {exc}"


class ProviderChain:
    """Calls providers in order. Once a provider fails over, later calls start at the one that worked.

    ``deadline`` is an absolute time on ``clock`` (remaining Lambda time minus a margin); no backoff
    sleeps past it and no attempt starts after it.
    """

    def __init__(
        self,
        providers: Sequence[Provider],
        *,
        retry: RetryPolicy | None = None,
        clock: Clock | None = None,
        deadline: float | None = None,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.providers = dedupe(providers)
        if not self.providers:
            raise ValueError("a provider chain needs at least one provider")
        self.retry = retry or RetryPolicy()
        self.clock = clock or SystemClock()
        self.deadline = deadline
        self._rand = rand
        self._active = 0
        #: last error per provider id, over the whole run
        self.errors: dict[str, str] = {}
        #: how many times the chain moved to a later provider
        self.failovers = 0
        #: (provider id, attempt) of every call made, for tests and metrics
        self.attempts: list[tuple[str, int]] = []

    @property
    def active_provider_id(self) -> str:
        return self.providers[self._active].id

    def complete(self, request: ChatRequest) -> ModelReply:
        for index in range(self._active, len(self.providers)):
            provider = self.providers[index]
            try:
                reply = self._call_with_retries(provider, request)
            except (DeadlineExceeded, OutboundRefused, SecretRefRefused) as exc:
                # the run's deadline passed, or the config points somewhere it must not: no
                # fallback can help, the run ends with this reason
                self.errors[provider.id] = describe_error(exc)
                raise
            except Exception as exc:  # any failure of one provider moves to the next
                self.errors[provider.id] = describe_error(exc)
                continue
            if index != self._active:
                self.failovers += index - self._active
                self._active = index
            return reply
        self.failovers += len(self.providers) - 1 - self._active
        self._active = len(self.providers) - 1
        raise AllProvidersFailed({p.id: self.errors[p.id] for p in self.providers if p.id in self.errors})

    def _remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - self.clock.now()

    def _call_with_retries(self, provider: Provider, request: ChatRequest) -> ModelReply:
        attempt = 0
        while True:
            attempt += 1
            remaining = self._remaining()
            if remaining is not None and remaining <= 0:
                raise TransientProviderError("no time left before the deadline", code="DeadlineExceeded")
            timeout = self.retry.call_timeout if remaining is None else min(self.retry.call_timeout, remaining)
            self.attempts.append((provider.id, attempt))
            started = self.clock.now()
            try:
                reply = provider.complete(replace(request, timeout=timeout))
                if reply.is_empty:
                    raise TransientProviderError("the model returned an empty reply", code="EmptyOutput")
                # every call that answered records what it cost: tokens as the provider reported
                # them (zero when it reported none), latency, and which attempt on this provider
                usage = replace(
                    reply.usage or Usage(),
                    latency_ms=max(0, round((self.clock.now() - started) * 1000)),
                    attempt=attempt,
                )
                return replace(reply, provider_id=reply.provider_id or provider.id, usage=usage)
            except TransientProviderError:
                if attempt >= self.retry.max_attempts:
                    raise
                delay = self.retry.delay(attempt, self._rand())
                remaining = self._remaining()
                if remaining is not None and delay >= remaining:
                    raise  # sleeping would pass the deadline: give up on this provider now
                self.clock.sleep(delay)
