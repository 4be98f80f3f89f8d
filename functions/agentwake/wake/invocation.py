"""One invocation of a wake function: the wake its event brought, then the waiters its release hands
the session to, run here while time is left (docs/durability.md, "The hand-off").

The use cases the handlers call: ``on_background_record`` (a record of the result queue) and
``on_cron_event`` (a cron job's fire). A run whose release hands its session to a waiter runs that
waiter next in this invocation, whatever its kind — a background result through the background use
case, a cron wake through the cron use case — and so on (``run_waiters_here``): no round trip
stands between two runs of a session. The waiter's fallback copy (a delayed record, a one-time
schedule) stays as it is, so anything that stops a run here leaves the run to that copy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from agentwake.domain.models import truncate
from agentwake.observability import LOG_REASON_CHARS, logger
from agentwake.session.copies import handed_copy
from agentwake.session.lease import Waiter
from agentwake.wake.background import DeadLetter, Done, Resend, run_record
from agentwake.wake.spec import WakeDeps

#: a waiter runs in the invocation that handed it the session while this many runs' budgets
#: (``min_run_budget_ms``) are left: its own, and one for the rest of the batch. With records side by
#: side (``wake.lanes``) the waiter runs in its session's lane, and the reserve is for what that lane
#: still holds (the session's later records) and for lanes still waiting for a thread
CHAIN_RESERVE_RUNS = 2


def on_background_record(
    record: SQSRecord,
    deps: WakeDeps,
    *,
    remaining_ms: int | None = None,
    time_left: Callable[[], int] | None = None,
) -> Done | Resend | DeadLetter:
    """What becomes of one record of the result queue. Raises a retryable AgentwakeError (RunFailed,
    RunDeferred) or a crash: the record is then a batch item failure and SQS retries it.

    ``time_left`` (the invocation's remaining milliseconds, asked when needed): when the run hands
    its session to a waiter and enough time is left, this invocation runs that waiter next, and so
    on (``run_waiters_here``)."""
    if time_left is not None:
        remaining_ms = time_left()
    result, waiter = run_record(record, deps, remaining_ms=remaining_ms, run_next=_run_next(deps, time_left))
    if waiter is not None and time_left is not None and isinstance(result, Done):
        return replace(result, ran_after=run_waiters_here(waiter, deps, time_left))
    return result


def on_cron_event(
    event: object,
    deps: WakeDeps,
    *,
    remaining_ms: int | None = None,
    target_arn: str | None = None,
    time_left: Callable[[], int] | None = None,
) -> dict[str, Any]:
    """Run the cron wake, or put it on its session's wait list while the session is busy
    (``target_arn``: the function its fallback schedule invokes). Raises InvalidMessage
    (permanent), RunFailed, SessionBusy past its limit. ``time_left``: as ``on_background_record``'s
    (the answer then says how many waiters ran after it, ``ran_after``, when any did)."""
    if time_left is not None:
        remaining_ms = time_left()
    if target_arn and deps.cron_target_arn is None:  # the wakes its agent schedules invoke this function
        deps = replace(deps, cron_target_arn=target_arn)
    from agentwake.wake.cron import run_cron_event  # the cron use case: not at the background function's cold start

    result = run_cron_event(
        event, deps, remaining_ms=remaining_ms, target_arn=target_arn, run_next=_run_next(deps, time_left)
    )
    if result.next_waiter is not None and time_left is not None:
        ran = run_waiters_here(result.next_waiter, deps, time_left)
        if ran:
            return {**result.response, "ran_after": ran}
    return result.response


def run_waiters_here(first: Waiter, deps: WakeDeps, time_left: Callable[[], int]) -> int:
    """Run the session's waiters one after another in this invocation, from the one a release just
    reserved the session for, while time is left. Each waiter goes through its own use case, from
    its handed copy (``session.copies.handed_copy``, its copy number unchanged). Its fallback copy
    stays as it is, so anything that stops a run here (a crash, a failure, another copy that took
    the session first, the time running out) leaves the run to that copy, as the wait list's
    fallback does. Returns how many ran."""
    ran = 0
    waiter: Waiter | None = first
    while waiter is not None:
        logger.thread_safe_append_keys(message_id=f"handed:{waiter.run_id}")
        copy = handed_copy(waiter, gen=waiter.gen, handed_at=deps.clock.wall())
        # the rest of the batch keeps a run's budget: this run's deadline comes before it
        remaining_ms = time_left() - deps.settings.min_run_budget_ms
        run_next = _run_next(deps, time_left)
        try:
            if waiter.kind == "cron":
                from agentwake.wake.cron import run_cron_event  # only when a cron wake waited

                # a cron waiter's fallback is its one-time schedule: no function ARN is needed here
                cron = run_cron_event(copy.as_cron_event(), deps, remaining_ms=remaining_ms, run_next=run_next)
                succeeded = cron.response.get("status") == "succeeded"
                # parked counts as done (not succeeded): the chain goes on to the next waiter
                done = cron.response.get("status") in (
                    "succeeded",
                    "already_succeeded",
                    "superseded",
                    "skipped",
                    "parked",
                )
                waiter = cron.next_waiter
            else:
                result, waiter = run_record(
                    SQSRecord(copy.as_event_record()), deps, remaining_ms=remaining_ms, run_next=run_next
                )
                succeeded = isinstance(result, Done) and result.status == "succeeded"
                done = isinstance(result, Done)
        except Exception as exc:  # its own failure is recorded; one bounded line here
            logger.warning(
                "a waiter run in this invocation did not succeed; its fallback copy carries it",
                extra={"error_type": type(exc).__name__, "detail": truncate(str(exc), LOG_REASON_CHARS)},
            )
            return ran
        if not done:  # it waits again, or cannot run: its fallback copy carries it
            return ran
        ran += succeeded
    return ran


def _run_next(deps: WakeDeps, time_left: Callable[[], int] | None) -> Callable[[], bool] | None:
    """Whether enough of the invocation is left to run a waiter here (``min_run_budget_ms``) and
    still leave the rest of the batch the time a run needs (as much again, kept out of the run's
    deadline). None: no clock to ask, waiters are sent on."""
    if time_left is None:
        return None
    return lambda: time_left() >= CHAIN_RESERVE_RUNS * deps.settings.min_run_budget_ms
