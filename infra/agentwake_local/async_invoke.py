"""Lambda's asynchronous invocation (``InvocationType=Event``), emulated locally.

As on Lambda: the event is queued; an attempt that ends in a function error is retried up to
``MaximumRetryAttempts`` times (Lambda waits about 1 then 2 minutes; ``agentwake local up`` waits
the same divided by ``timing.LOCAL_SPEEDUP``, ``--faithful`` the real thing; ``LocalStackRuntime``
used directly does not wait unless given a ``timing``) with the same request id; an event older than
``MaximumEventAgeInSeconds`` is not retried. The outcome goes to the EventInvokeConfig
destination as Lambda's invocation record::

    {"version": "1.0", "timestamp": "...Z",
     "requestContext": {"requestId", "functionArn": "<arn>:$LATEST",
                        "condition": "RetriesExhausted" | "EventAgeExceeded" | "Success",
                        "approximateInvokeCount": N},
     "requestPayload": <the event>,
     "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
     "responsePayload": {"errorMessage", "errorType", "requestId", "stackTrace"}}

SQS destinations get it as the message body, SNS as the message, EventBridge as the detail, a
Lambda destination as its (asynchronous) event.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentwake_local.functions import LATEST, Destination, FunctionSpec
from agentwake_local.lambda_runtime import Invocation

logger = logging.getLogger(__name__)

# (function, event, request_id, invoked_function_arn) -> Invocation
InvokeFn = Callable[[FunctionSpec, Any, str, str | None], Invocation]
# (destination, record, condition) -> None
DeliverFn = Callable[[Destination, dict[str, Any], str], None]

#: queued asynchronous invocations served at once in the background mode (Lambda runs each in a
#: sandbox of its own; locally a bound keeps a laptop responsive while retry delays sleep)
DEFAULT_CONCURRENCY = 10


def _timestamp(moment: float) -> str:
    return dt.datetime.fromtimestamp(moment, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def invocation_record(
    function: FunctionSpec,
    event: Any,
    last: Invocation,
    *,
    condition: str,
    attempts: int,
    invoked_function_arn: str | None = None,
    now: float | None = None,
) -> dict[str, Any]:
    """Lambda's destination record for an asynchronous invocation."""
    response_context: dict[str, Any] = {"statusCode": 200, "executedVersion": LATEST}
    if last.error is not None:
        response_context["functionError"] = "Unhandled"
    return {
        "version": "1.0",
        "timestamp": _timestamp(time.time() if now is None else now),
        "requestContext": {
            "requestId": last.request_id,
            "functionArn": invoked_function_arn or f"{function.arn}:{LATEST}",
            "condition": condition,
            "approximateInvokeCount": attempts,
        },
        "requestPayload": event,
        "responseContext": response_context,
        "responsePayload": last.error if last.error is not None else last.response,
    }


@dataclass
class AsyncOutcome:
    """Every attempt of one asynchronous invocation and where its record went."""

    function: str
    request_id: str
    event: Any
    condition: str  # Success | RetriesExhausted | EventAgeExceeded
    attempts: list[Invocation] = field(default_factory=list)
    record: dict[str, Any] | None = None  # the destination record, if a destination received one
    destination: Destination | None = None

    @property
    def ok(self) -> bool:
        return self.condition == "Success"

    @property
    def approximate_invoke_count(self) -> int:
        return len(self.attempts)

    @property
    def error(self) -> dict[str, Any] | None:
        return self.attempts[-1].error if self.attempts else None


class AsyncInvocation:
    """A queued asynchronous invocation; ``wait()`` returns its ``AsyncOutcome``."""

    def __init__(self, function: FunctionSpec, event: Any, request_id: str, invoked_function_arn: str | None):
        self.function = function
        self.event = event
        self.request_id = request_id
        self.invoked_function_arn = invoked_function_arn
        self.enqueued_at = time.time()
        self.outcome: AsyncOutcome | None = None
        self._done = threading.Event()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> AsyncOutcome:
        if not self._done.wait(timeout):
            raise TimeoutError(f"async invocation {self.request_id} of {self.function.logical_id} still pending")
        assert self.outcome is not None
        return self.outcome

    def _finish(self, outcome: AsyncOutcome) -> None:
        self.outcome = outcome
        self._done.set()


class AsyncInvoker:
    """Runs asynchronous invocations with Lambda's retries and destinations.

    ``invoke`` runs one to completion in the caller's thread. ``submit`` queues one; the queue
    is served by ``concurrency`` background threads after ``start()`` (the "up" mode), or by
    ``run_pending()``.
    """

    def __init__(
        self,
        invoke: InvokeFn,
        deliver: DeliverFn,
        *,
        retry_delays: float | Sequence[float] = 0.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
        concurrency: int = DEFAULT_CONCURRENCY,
    ) -> None:
        self._invoke = invoke
        self._deliver = deliver
        self.retry_delays = [float(retry_delays)] if isinstance(retry_delays, int | float) else list(retry_delays)
        self._sleep = sleep
        self._clock = clock
        self.concurrency = max(1, concurrency)
        self._queue: queue.Queue[AsyncInvocation | None] = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._idle = threading.Condition()
        self._in_progress = 0
        #: told every finished asynchronous invocation (``local up``'s line for retries spent)
        self.on_outcome: Callable[[AsyncOutcome], None] | None = None

    def _delay(self, retry: int) -> float:
        if not self.retry_delays:
            return 0.0
        return self.retry_delays[min(retry - 1, len(self.retry_delays) - 1)]

    def invoke(
        self,
        function: FunctionSpec,
        event: Any,
        *,
        request_id: str | None = None,
        invoked_function_arn: str | None = None,
        enqueued_at: float | None = None,
    ) -> AsyncOutcome:
        """All attempts of one asynchronous invocation, then its destination record."""
        config = function.async_config
        request_id = request_id or str(uuid.uuid4())
        enqueued_at = self._clock() if enqueued_at is None else enqueued_at
        outcome = AsyncOutcome(function.logical_id, request_id, event, condition="RetriesExhausted")
        for attempt in range(config.maximum_retry_attempts + 1):
            if attempt:
                delay = self._delay(attempt)
                if self._clock() + delay - enqueued_at > config.maximum_event_age_seconds:
                    outcome.condition = "EventAgeExceeded"
                    break
                if delay:
                    self._sleep(delay)
            invocation = self._invoke(function, event, request_id, invoked_function_arn)
            outcome.attempts.append(invocation)
            logger.info(
                "async %s request_id=%s attempt=%d/%d duration_ms=%.0f %s",
                function.logical_id,
                request_id,
                attempt + 1,
                config.maximum_retry_attempts + 1,
                invocation.duration_ms,
                "ok" if invocation.ok else f"error {invocation.error.get('errorType')}",  # type: ignore[union-attr]
            )
            if invocation.ok:
                outcome.condition = "Success"
                break
        destination = config.on_success if outcome.ok else config.on_failure
        if destination is not None:
            outcome.record = invocation_record(
                function,
                event,
                outcome.attempts[-1],
                condition=outcome.condition,
                attempts=len(outcome.attempts),
                invoked_function_arn=invoked_function_arn,
                now=self._clock(),
            )
            outcome.destination = destination
            self._deliver(destination, outcome.record, outcome.condition)
        elif not outcome.ok:
            logger.warning(
                "async %s request_id=%s: %s after %d attempts, no on-failure destination: event dropped",
                function.logical_id,
                request_id,
                outcome.condition,
                len(outcome.attempts),
            )
        if self.on_outcome is not None:
            try:
                self.on_outcome(outcome)
            except Exception:  # a courtesy line must never fail the invocation
                logger.exception("async %s request_id=%s: on_outcome failed", function.logical_id, request_id)
        return outcome

    # -- the queue ------------------------------------------------------------------------

    def submit(self, function: FunctionSpec, event: Any, *, invoked_function_arn: str | None = None) -> AsyncInvocation:
        """Queue an asynchronous invocation (Lambda answers 202 at this point)."""
        pending = AsyncInvocation(function, json.loads(json.dumps(event)), str(uuid.uuid4()), invoked_function_arn)
        with self._idle:
            self._in_progress += 1
        self._queue.put(pending)
        return pending

    def _serve(self, pending: AsyncInvocation) -> None:
        try:
            outcome = self.invoke(
                pending.function,
                pending.event,
                request_id=pending.request_id,
                invoked_function_arn=pending.invoked_function_arn,
                enqueued_at=pending.enqueued_at,
            )
        except Exception as exc:  # delivery failed: record it on the outcome, keep serving
            logger.exception("async %s request_id=%s failed", pending.function.logical_id, pending.request_id)
            outcome = AsyncOutcome(pending.function.logical_id, pending.request_id, pending.event, f"LocalError: {exc}")
        pending._finish(outcome)
        with self._idle:
            self._in_progress -= 1
            self._idle.notify_all()

    def run_pending(self) -> list[AsyncOutcome]:
        """Serve every queued invocation in this thread (when no background thread runs)."""
        outcomes: list[AsyncOutcome] = []
        while True:
            try:
                pending = self._queue.get_nowait()
            except queue.Empty:
                return outcomes
            if pending is None:
                continue
            self._serve(pending)
            assert pending.outcome is not None
            outcomes.append(pending.outcome)

    def join(self, timeout: float | None = None) -> bool:
        """Wait until every submitted invocation is finished; False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._in_progress == 0, timeout)

    @property
    def running(self) -> bool:
        return any(thread.is_alive() for thread in self._threads)

    def start(self) -> None:
        """``concurrency`` threads serve the queue: invocations (and their retry delays) overlap."""
        if self.running:
            return
        self._threads = [
            threading.Thread(target=self._run, name=f"lambda-async-invoker#{n}", daemon=True)
            for n in range(self.concurrency)
        ]
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        if not self._threads:
            return
        for _ in self._threads:
            self._queue.put(None)
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._threads = []

    def _run(self) -> None:
        while True:
            pending = self._queue.get()
            if pending is None:
                return
            self._serve(pending)
