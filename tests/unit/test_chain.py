"""The provider chain (DESIGN §2): fallbacks, retries, sticky failover, deadline-bounded backoff."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentwake.agent.chain import ProviderChain, RetryPolicy
from agentwake.agent.providers.scripted import ScriptedProvider
from agentwake.agent.types import ChatRequest, ModelReply
from agentwake.domain.conversation import Message
from agentwake.errors import AllProvidersFailed, TransientProviderError
from tests.support.clock import FakeClock

START = 1000.0


def request(step: int = 0) -> ChatRequest:
    return ChatRequest(messages=(Message(role="user", content="hi"),), step=step, run_id="r")


def sp(id: str, *script: dict[str, Any]) -> ScriptedProvider:
    return ScriptedProvider(id=id, script=list(script))


def fixed(*values: float) -> Callable[[], float]:
    it: Iterator[float] = iter(values)
    return lambda: next(it)


class Timed:
    """A provider that records when each attempt started and the timeout it was given, and whose
    every call takes ``duration`` seconds on the fake clock before it fails or answers."""

    def __init__(self, id: str, clock: FakeClock, *, duration: float = 0.0, fail: bool = True) -> None:
        self.id = id
        self.clock = clock
        self.duration = duration
        self.fail = fail
        self.starts: list[float] = []
        self.timeouts: list[float] = []

    def complete(self, request: ChatRequest) -> ModelReply:
        self.starts.append(self.clock.now())
        self.timeouts.append(request.timeout)
        self.clock.advance(self.duration)
        if self.fail:
            raise TransientProviderError("slow down", code="ThrottlingException")
        return ModelReply(text="ok")


class SleepLog(FakeClock):
    """A fake clock that also records when each sleep would end."""

    def __init__(self, start: float) -> None:
        super().__init__(start)
        self.sleep_ends: list[float] = []

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        self.sleep_ends.append(self.now())


# --- fallback -------------------------------------------------------------------------------


def test_falls_back_when_a_provider_raises_an_unexpected_exception():
    # GIVEN a primary that crashes with a RuntimeError and a working fallback
    chain = ProviderChain([sp("a", {"error": "crash"}), sp("b", {"text": "from b"})], clock=FakeClock())

    # WHEN the chain is asked
    reply = chain.complete(request())

    # THEN the fallback answers, the crash was not retried, and the error is remembered
    assert (reply.text, reply.provider_id) == ("from b", "b")
    assert chain.attempts == [("a", 1), ("b", 1)]
    assert chain.errors == {"a": "RuntimeError: scripted provider a crashed"}
    assert chain.failovers == 1


def test_transient_errors_are_retried_max_attempts_times_then_fall_back():
    # GIVEN a primary throttled on every attempt, max_attempts=3
    clock = FakeClock(START)
    chain = ProviderChain(
        [sp("a", {"error": "throttling"}), sp("b", {"text": "ok"})],
        retry=RetryPolicy(max_attempts=3),
        clock=clock,
        rand=lambda: 0.0,
    )

    # WHEN the chain is asked
    reply = chain.complete(request())

    # THEN the primary got exactly 3 attempts with a sleep between each, then the fallback answered
    assert chain.attempts == [("a", 1), ("a", 2), ("a", 3), ("b", 1)]
    assert len(clock.sleeps) == 2
    assert reply.provider_id == "b"
    assert chain.errors["a"].startswith("ThrottlingException")


def test_transient_error_that_clears_is_retried_on_the_same_provider():
    # GIVEN a primary failing with a 5xx only on its first attempt
    chain = ProviderChain(
        [sp("a", {"error": "server", "error_times": 1, "text": "second try"}), sp("b", {"text": "unused"})],
        clock=FakeClock(),
        rand=lambda: 0.0,
    )

    # WHEN the chain is asked
    reply = chain.complete(request())

    # THEN the same provider answered on its second attempt; no failover
    assert (reply.text, reply.provider_id) == ("second try", "a")
    assert chain.attempts == [("a", 1), ("a", 2)]
    assert chain.failovers == 0


@pytest.mark.parametrize("error", ["auth", "validation", "not_found"])
def test_permanent_errors_fall_back_at_once_without_retry(error):
    # GIVEN a primary failing permanently
    clock = FakeClock()
    chain = ProviderChain([sp("a", {"error": error}), sp("b", {"text": "ok"})], clock=clock)

    # WHEN the chain is asked
    reply = chain.complete(request())

    # THEN the primary was tried once, nobody slept, and the fallback answered
    assert chain.attempts == [("a", 1), ("b", 1)]
    assert clock.sleeps == []
    assert reply.provider_id == "b"


def test_empty_reply_counts_as_transient():
    # GIVEN a provider that answers empty once, then with text
    clock = FakeClock()
    chain = ProviderChain(
        [sp("a", {"error": "empty", "error_times": 1, "text": "now with text"})], clock=clock, rand=lambda: 0.0
    )

    # WHEN the chain is asked
    reply = chain.complete(request())

    # THEN the empty reply was retried (with a backoff sleep) like any transient error
    assert reply.text == "now with text"
    assert chain.attempts == [("a", 1), ("a", 2)]
    assert len(clock.sleeps) == 1


def test_always_empty_reply_exhausts_retries_and_is_reported_as_empty_output():
    # GIVEN a provider that only ever answers empty
    chain = ProviderChain([sp("a", {"error": "empty"})], retry=RetryPolicy(max_attempts=2), clock=FakeClock())

    # WHEN / THEN the chain fails naming the empty output
    with pytest.raises(AllProvidersFailed) as info:
        chain.complete(request())
    assert chain.attempts == [("a", 1), ("a", 2)]
    assert info.value.errors == {"a": "EmptyOutput: the model returned an empty reply"}


def test_fallbacks_are_deduplicated_by_id():
    # GIVEN a chain whose fallbacks repeat the primary's id (and each other's)
    a, a_again, b, b_again = (
        sp("a", {"error": "auth"}),
        sp("a", {"text": "dup"}),
        sp("b", {"error": "auth"}),
        sp("b", {"text": "dup"}),
    )
    chain = ProviderChain([a, b, a_again, b_again], clock=FakeClock())

    # WHEN every distinct provider fails
    with pytest.raises(AllProvidersFailed):
        chain.complete(request())

    # THEN only the first of each id was kept and called
    assert [p.id for p in chain.providers] == ["a", "b"]
    assert chain.attempts == [("a", 1), ("b", 1)]
    assert a_again.calls == [] and b_again.calls == []


def test_an_empty_chain_is_refused():
    with pytest.raises(ValueError):
        ProviderChain([])


def test_failover_is_sticky_for_later_steps():
    # GIVEN a primary that fails permanently, a fallback that works, and a third in reserve
    a, b, c = sp("a", {"error": "auth"}), sp("b", {"text": "b answers"}), sp("c", {"text": "c answers"})
    chain = ProviderChain([a, b, c], clock=FakeClock())

    # WHEN two steps of the same run ask the chain
    first = chain.complete(request(step=0))
    second = chain.complete(request(step=1))

    # THEN step 2 starts at the provider that worked; the primary is not asked again
    assert first.provider_id == second.provider_id == "b"
    assert chain.attempts == [("a", 1), ("b", 1), ("b", 1)]
    assert chain.active_provider_id == "b"
    assert a.calls == [0]
    assert c.calls == []


def test_all_failed_error_names_each_provider_and_its_last_error():
    # GIVEN three providers failing in three different ways
    chain = ProviderChain(
        [
            sp("bedrock:claude", {"error": "throttling"}),
            sp("openai:gpt", {"error": "auth"}),
            sp("local", {"error": "crash"}),
        ],
        retry=RetryPolicy(max_attempts=2),
        clock=FakeClock(),
        rand=lambda: 0.0,
    )

    # WHEN the chain is asked
    with pytest.raises(AllProvidersFailed) as info:
        chain.complete(request())

    # THEN the error lists every provider with its own last error, in chain order
    assert info.value.errors == {
        "bedrock:claude": "ThrottlingException: rate limit exceeded (scripted)",
        "openai:gpt": "AccessDenied: invalid credentials (scripted)",
        "local": "RuntimeError: scripted provider local crashed",
    }
    assert str(info.value) == (
        "All chat models failed: bedrock:claude: ThrottlingException: rate limit exceeded (scripted); "
        "openai:gpt: AccessDenied: invalid credentials (scripted); "
        "local: RuntimeError: scripted provider local crashed"
    )


# --- backoff --------------------------------------------------------------------------------


def test_backoff_grows_exponentially_with_equal_jitter_within_bounds():
    policy = RetryPolicy(base_delay=0.5, max_delay=8.0)
    # GIVEN / WHEN the delay after each attempt with the smallest and largest jitter
    # THEN it lies in [ceiling/2, ceiling], ceiling = min(max_delay, base * 2**(attempt-1))
    for attempt, ceiling in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (5, 8.0), (6, 8.0), (10, 8.0)]:
        assert policy.delay(attempt, 0.0) == pytest.approx(ceiling / 2)
        assert policy.delay(attempt, 1.0) == pytest.approx(ceiling)
        assert ceiling / 2 <= policy.delay(attempt, 0.37) <= ceiling


def test_chain_sleeps_follow_the_policy_with_injected_jitter():
    # GIVEN a provider that fails 4 times before answering, and a known jitter sequence
    clock = FakeClock(START)
    chain = ProviderChain(
        [sp("a", {"error": "timeout", "error_times": 4, "text": "finally"})],
        retry=RetryPolicy(max_attempts=5, base_delay=0.5, max_delay=2.0),
        clock=clock,
        rand=fixed(0.0, 1.0, 0.5, 0.25),
    )

    # WHEN the chain is asked
    reply = chain.complete(request())

    # THEN each sleep is ceiling/2 + ceiling/2 * rand with ceilings 0.5, 1, 2, 2 (capped)
    assert reply.text == "finally"
    assert clock.sleeps == pytest.approx([0.25, 1.0, 1.5, 1.25])


def test_backoff_never_sleeps_past_the_deadline_and_gives_up_on_the_provider():
    # GIVEN a 3 s budget and delays of 1, 2, 4 s (full jitter) for an always-throttled primary
    clock = FakeClock(START)
    deadline = START + 3.0
    a = Timed("a", clock)
    b = Timed("b", clock, fail=False)
    chain = ProviderChain(
        [a, b],
        retry=RetryPolicy(max_attempts=10, base_delay=1.0, max_delay=8.0),
        clock=clock,
        deadline=deadline,
        rand=lambda: 1.0,
    )

    # WHEN the chain is asked
    reply = chain.complete(request())

    # THEN the primary stopped retrying when the next sleep (2 s) would reach the deadline,
    # and the fallback was tried with the time that was left
    assert clock.sleeps == [1.0]
    assert a.starts == [START, START + 1.0]
    assert START + sum(clock.sleeps) <= deadline
    assert reply.provider_id == "b"
    assert b.starts == [START + 1.0]
    assert b.timeouts == [pytest.approx(2.0)]


def test_no_attempt_starts_after_the_deadline():
    # GIVEN slow providers (1.5 s per call, one attempt each) and a 2 s budget
    clock = FakeClock(START)
    deadline = START + 2.0
    a, b, c = Timed("a", clock, duration=1.5), Timed("b", clock, duration=1.5), Timed("c", clock, fail=False)
    chain = ProviderChain([a, b, c], retry=RetryPolicy(max_attempts=1), clock=clock, deadline=deadline)

    # WHEN the chain is asked
    with pytest.raises(AllProvidersFailed) as info:
        chain.complete(request())

    # THEN a and b started before the deadline; c, whose turn came after it, never started
    assert a.starts == [START]
    assert b.starts == [START + 1.5]
    assert c.starts == []
    assert info.value.errors["c"] == "DeadlineExceeded: no time left before the deadline"
    # AND the attempt's timeout never reached past the deadline
    assert b.timeouts == [pytest.approx(0.5)]


@settings(max_examples=150, deadline=None)
@given(
    budget=st.floats(min_value=0.0, max_value=30.0),
    durations=st.lists(st.floats(min_value=0.0, max_value=5.0), min_size=3, max_size=3),
    jitter=st.floats(min_value=0.0, max_value=1.0),
    max_attempts=st.integers(min_value=1, max_value=6),
)
def test_deadline_invariants_hold_for_any_budget(budget, durations, jitter, max_attempts):
    # GIVEN always-failing providers of any speed, any jitter and any remaining time
    clock = SleepLog(START)
    deadline = START + budget
    providers = [Timed(f"p{i}", clock, duration=d) for i, d in enumerate(durations)]
    chain = ProviderChain(
        providers,
        retry=RetryPolicy(max_attempts=max_attempts, base_delay=0.5, max_delay=4.0),
        clock=clock,
        deadline=deadline,
        rand=lambda: jitter,
    )

    # WHEN the chain is asked
    with pytest.raises(AllProvidersFailed):
        chain.complete(request())

    # THEN no attempt started at or after the deadline, no attempt was promised time past it,
    # and no sleep ended past it
    for p in providers:
        for start, timeout in zip(p.starts, p.timeouts, strict=True):
            assert start < deadline
            assert start + timeout <= deadline + 1e-9
    assert all(end <= deadline for end in clock.sleep_ends)
    assert START + sum(clock.sleeps) <= deadline
    assert all(s >= 0 for s in clock.sleeps)
