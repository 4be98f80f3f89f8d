"""How long the local stack waits before a retry: short by default, AWS's own with ``faithful``.

On AWS a failed SQS record comes back after the queue's visibility timeout (the template's
``QueueVisibilityTimeout``: 720 s), Lambda retries an asynchronous invocation after about 1 and
then 2 minutes, and EventBridge Scheduler retries a target it could not invoke with a backoff of
about a minute, growing. A person trying agentwake on a laptop would wait an hour to see a message
reach a DLQ, so ``agentwake local up`` shortens all of them (and says so in its banner);
``--faithful`` keeps the template's and AWS's values, for tests of timing.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Lambda's asynchronous invocation: about 1 minute before the first retry, 2 before the second
LAMBDA_ASYNC_RETRY_DELAYS_S = (60.0, 120.0)
#: EventBridge Scheduler's retries of a target it could not invoke: exponential from about a minute
SCHEDULER_RETRY_BASE_S = 60.0
SCHEDULER_RETRY_CAP_S = 600.0

#: local waits are AWS's divided by this (1 minute becomes 3 seconds)
LOCAL_SPEEDUP = 20
#: seconds before a failed SQS record is received again, locally (the template says 720)
LOCAL_VISIBILITY_TIMEOUT_S = 5


@dataclass(frozen=True)
class Timing:
    """The waits one local stack uses."""

    #: seconds a failed SQS record stays invisible; None: the queue's own VisibilityTimeout
    visibility_timeout_override: int | None
    #: delay before async retry N (the last one repeats)
    async_retry_delays: tuple[float, ...]
    #: Scheduler's first retry delay and its cap (doubling in between)
    scheduler_retry_base_s: float
    scheduler_retry_cap_s: float
    faithful: bool

    def scheduler_retry_delay(self, retry: int) -> float:
        """Delay before the scheduler's retry number ``retry`` (1-based)."""
        return min(self.scheduler_retry_base_s * 2 ** max(0, retry - 1), self.scheduler_retry_cap_s)

    def describe(self) -> str:
        """One line for the ``local up`` banner."""
        if self.faithful:
            return (
                "timing: faithful (the queues' own visibility timeouts, Lambda's async retries after "
                f"{_seconds(self.async_retry_delays)}, Scheduler's retries from {self.scheduler_retry_base_s:g}s)"
            )
        visibility = (
            "the queues' own visibility timeouts"
            if self.visibility_timeout_override is None
            else f"failed SQS records back after {self.visibility_timeout_override}s"
        )
        return (
            f"timing: local ({visibility}, async retries after {_seconds(self.async_retry_delays)}, "
            f"Scheduler retries from {self.scheduler_retry_base_s:g}s; AWS waits {LOCAL_SPEEDUP}x longer "
            "and the template's QueueVisibilityTimeout). Use --faithful for AWS's timing."
        )


def _seconds(delays: tuple[float, ...]) -> str:
    return " then ".join(f"{d:g}s" for d in delays) if delays else "no delay"


def faithful() -> Timing:
    return Timing(None, LAMBDA_ASYNC_RETRY_DELAYS_S, SCHEDULER_RETRY_BASE_S, SCHEDULER_RETRY_CAP_S, True)


def local(visibility_timeout_override: int | None = LOCAL_VISIBILITY_TIMEOUT_S) -> Timing:
    return Timing(
        visibility_timeout_override,
        tuple(d / LOCAL_SPEEDUP for d in LAMBDA_ASYNC_RETRY_DELAYS_S),
        SCHEDULER_RETRY_BASE_S / LOCAL_SPEEDUP,
        SCHEDULER_RETRY_CAP_S / LOCAL_SPEEDUP,
        False,
    )


def immediate(visibility_timeout_override: int | None = 0) -> Timing:
    """No waits at all: tests that drive retries themselves."""
    return Timing(visibility_timeout_override, (0.0,), 0.0, 0.0, False)
