"""Every error agentwake raises on purpose, each saying whether a retry can help.

Classify with these types once, at the edge; never by matching message text.
"""

from __future__ import annotations

from typing import Any, ClassVar


def describe_validation_error(exc: Any, *, whole: str = "(value)", limit: int = 10) -> str:
    """One line from a pydantic ValidationError: ``field.path: message; ...`` (the first ``limit``)."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or whole}: {e['msg']}" for e in exc.errors()[:limit])


class AgentwakeError(Exception):
    """Base class. ``retryable`` tells the trigger whether trying again can help; the background
    handler dead-letters a non-retryable error at once (with its reason) instead of spending the
    message's receives. Unknown is retryable: a retry costs less than a message dead-lettered early."""

    retryable: ClassVar[bool] = True

    @property
    def error_type(self) -> str:
        return type(self).__name__


# --- input that can never succeed: straight to the DLQ, no retries burned ---------------


class PermanentInputError(AgentwakeError):
    """The message itself is wrong; retrying the same bytes cannot help."""

    retryable = False


class InvalidMessage(PermanentInputError):
    """The body is not JSON, or not a valid result message."""


class UnknownTask(PermanentInputError):
    """No task was registered under the message's task id."""


class SessionMismatch(PermanentInputError):
    """The message names a session other than the one its task was registered for."""


class ForgedCompletion(PermanentInputError):
    """The completion message does not carry its task's token (missing, or another task's).

    Only the holder of the token ``register_task`` returned may complete a task; the task is
    left untouched, so the genuine completion still wakes the agent.
    """


# --- a run that did not succeed: raise so the trigger retries --------------------------


class RunFailed(AgentwakeError):
    """The agent run ended in ERROR. Carries the runner's completion text."""

    retryable = True

    def __init__(self, run_id: str, completion_text: str, *, failure_type: str = "RunFailed") -> None:
        from agentwake.trust.redact import redact

        completion_text = redact(completion_text)
        super().__init__(f"run {run_id} failed: {completion_text}")
        self.run_id = run_id
        self.completion_text = completion_text
        self.failure_type = failure_type


class AttemptsSpent(AgentwakeError):
    """A waiting copy's run already made its maxReceiveCount attempts for this message (some of them
    run by a release of its session in its own invocation): dead-lettered, no attempt more."""

    retryable = False

    def __init__(self, message: str, *, attempts: int) -> None:
        super().__init__(message)
        #: the attempts the run counted for the message (the DLQ record's count)
        self.attempts = attempts


class CommitConflict(AgentwakeError):
    """The DONE commit was cancelled on the run item and the run, read again, has not succeeded:
    not a duplicate of a succeeded run. Recorded as a failure; the trigger retries."""

    retryable = True


class BudgetExceeded(RunFailed):
    """The run went over its token budget (per run, or per session per day). Permanent: retrying
    the same run spends more of what is already over budget. It is recorded, dead-lettered at once
    with its reason, and a redrive without a raised budget stops again without calling the model."""

    retryable = False


class MalformedOutput(RunFailed):
    """The model's reply is beyond what a run processes (more tool calls than one reply may make,
    agent/bounds.py). Permanent: the verdict, not the reply, is journaled, so a retry or redrive
    stops the same way without calling the model again; the failure is recorded and dead-lettered at
    once with its reason."""

    retryable = False


#: runner error types that end a run for good (no retry can help), by the exception they raise
_PERMANENT_RUN_FAILURES: dict[str, type[RunFailed]] = {
    "BudgetExceeded": BudgetExceeded,
    "MalformedOutput": MalformedOutput,
}


def run_failed(run_id: str, completion_text: str, failure_type: str) -> RunFailed:
    """The exception for a run that ended in ERROR with ``failure_type`` (a runner error type)."""
    cls = _PERMANENT_RUN_FAILURES.get(failure_type, RunFailed)
    return cls(run_id, completion_text, failure_type=failure_type)


class SessionBusy(AgentwakeError):
    """Another wake of the same session holds the lease; try again later.

    Carries who waits (``run_id``) and who holds the session (``holder``, a run id), so that a
    wake that gave up waiting can name the holder to the operator.
    """

    retryable = True

    def __init__(
        self, message: str, *, run_id: str | None = None, session_id: str | None = None, holder: str | None = None
    ) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.session_id = session_id
        self.holder = holder


class WaitListFull(SessionBusy):
    """The session is busy and its wait list already holds ``SessionWaitListMax`` waiting wakes:
    this one never runs. Permanent: it is dead-lettered (a cron wake: CronFailureQueue) at once with
    a reason naming the session and the cap; redrive it once the session's backlog has drained."""

    retryable = False


class ConfigError(AgentwakeError):
    """The agent could not be built (bad session config, unknown provider, missing secret).

    Retryable: an operator can fix the config and redrive.
    """

    retryable = True


class OutboundRefused(ConfigError):
    """An outbound URL breaks the outbound policy (scheme, loopback/private address, redirect).

    A configuration error, not a tool result the model may retry: nothing was sent.
    """


class SecretRefRefused(ConfigError):
    """A secret reference points outside the scope this deployment allows; nothing was read."""


class StepInterrupted(AgentwakeError):
    """Infrastructure failed mid-step (e.g. a delivery was sent but could not be recorded).

    Not a tool result the model should see: it aborts the run unjournaled, so a retry redoes the
    step. Tools raise it to escape the registry's "every failure is an error: result" rule.
    """

    retryable = True


class DeadlineExceeded(StepInterrupted):
    """The run's deadline passed (an HTTP exchange, a model call or a delivery did not finish in
    time). The run ends with a recorded failure before Lambda's own timeout; a retry continues
    from the journal."""


class DeliveryError(AgentwakeError):
    """A message to the user could not be delivered."""

    retryable = True


class DeliveryUncertain(StepInterrupted, DeliveryError):
    """The request may have reached the receiver (a timeout, a connection dropped mid-answer).

    Telling the model "error" could make it send again under a new delivery id, a duplicate no
    receiver can drop. Abort the step instead: the retry resends the same delivery id.
    """


class ChannelRefused(StepInterrupted):
    """A channel refused a delivery for good: a channel that does not exist, a bot removed or
    blocked, a revoked token, a deleted topic. Not a tool result (the model cannot fix a token):
    the run fails at once with the platform's reason and what to do, and its record goes to the
    DLQ (a cron wake's to CronFailureQueue) for an operator to fix the config and redrive."""

    retryable = False


class ChannelThrottled(StepInterrupted):
    """The platform asked to wait longer than the run has left (HTTP 429 ``Retry-After``,
    Telegram's ``retry_after``). The run fails transiently and a later attempt sends; nothing was sent."""

    retryable = True

    def __init__(self, message: str, *, retry_after: float = 0.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ChannelUnavailable(StepInterrupted):
    """The platform kept failing (5xx, connection refused) through the retries the run's deadline
    allowed. Transient: the record is retried, the journal replays, nothing is sent twice.
    ``nothing_sent``: certainly nothing reached anyone (a route may choose another target)."""

    retryable = True

    def __init__(self, message: str, *, nothing_sent: bool = False) -> None:
        super().__init__(message)
        self.nothing_sent = nothing_sent


class DeliveryUnconfirmed(StepInterrupted):
    """A delivery may have been sent by an attempt that crashed before journaling it, and the
    channel cannot tell (Telegram keeps no idempotency key and cannot read what a bot sent).
    Permanent: an operator checks the chat and redrives with ``--delivered ID`` (it arrived) or
    ``--resend ID`` (it did not)."""

    retryable = False


class RunDeferred(AgentwakeError):
    """Too little of the invocation is left to start a run; nothing was written. Try again later."""

    retryable = True


# --- model providers ---------------------------------------------------------------------


class ProviderError(AgentwakeError):
    """A model provider call failed. ``TransientProviderError`` is retried on the same provider;
    ``PermanentProviderError`` goes to the next provider at once."""

    def __init__(self, message: str, *, code: str | None = None) -> None:
        from agentwake.trust.redact import redact

        super().__init__(redact(message))
        self.code = code or type(self).__name__

    def describe(self) -> str:
        return f"{self.code}: {self}" if str(self) else self.code


class TransientProviderError(ProviderError):
    """Throttling, 5xx, timeouts, empty or malformed output: worth another attempt."""

    retryable = True


class PermanentProviderError(ProviderError):
    """Auth, validation, not found, content filtered: go to the next provider at once."""

    retryable = False


class AllProvidersFailed(AgentwakeError):
    """Every provider in the chain failed. ``errors`` maps provider id to its last error."""

    retryable = True

    def __init__(self, errors: dict[str, str]) -> None:
        from agentwake.trust.redact import redact

        self.errors = {pid: redact(err) for pid, err in errors.items()}
        detail = "; ".join(f"{pid}: {err}" for pid, err in self.errors.items())
        super().__init__(f"All chat models failed: {detail}")


# --- what the store reports (raised by agentwake.store, classified here by type) ---------------


class RunAlreadySucceeded(AgentwakeError):
    """The commit found the run already succeeded: a duplicate copy, nothing to do."""

    retryable = False


class LeaseHeld(AgentwakeError):
    """Another run holds the session's lease (or another copy of this run started meanwhile)."""

    retryable = True

    def __init__(self, session_id: str, holder: str | None, *, detail: str | None = None) -> None:
        super().__init__(detail or f"session {session_id} is busy with run {holder or '?'}")
        self.session_id = session_id
        self.holder = holder


class StartRefused(AgentwakeError):
    """A run's start took the session's lease, then its attempt's write was refused or failed
    (``error``: RunAlreadySucceeded, LeaseHeld for another copy started, a job gone, the table):
    ``lease`` (a ``session.lease.Lease``) is given back through the one release path, which hands
    the session to the next waiter (``wake/run``), and ``error`` stands."""

    retryable = True

    def __init__(self, lease: Any, error: BaseException) -> None:
        super().__init__(f"the attempt was not counted: {type(error).__name__}: {error}")
        self.lease = lease
        self.error = error


class NotAnOwner(PermanentInputError):
    """The caller of the product API is not among the session's owners (or the request carries no
    identity): nothing was read or written. The message names the session and why, nothing else."""


class UnknownSession(PermanentInputError):
    """The product API was asked about a session that has no config."""


class SessionExists(PermanentInputError):
    """A create-only request (``If-None-Match: *``) for a session id that is taken: nothing written."""


class SessionChanged(AgentwakeError):
    """A session config changed (or was created) between the read and the write: read it again."""

    retryable = True


class TaskExists(AgentwakeError, ValueError):
    """A task id is registered already; reusing it would make the new result look like a duplicate."""

    retryable = False


class TaskAlreadyEnded(AgentwakeError):
    """A completion (or a cancel) for a task that already has its outcome: it was cancelled, timed
    out, or completed otherwise. Nothing was sent and nothing changed; a completion is counted as
    late (``late_completions``). Not an error of the caller's work: no retry can change it."""

    retryable = False


class TaskClaimContended(AgentwakeError):
    """Claims on a task's outcome kept losing to other writers (a completion, the deadline, a cancel)
    for a moment: try again; the next read sees who won."""

    retryable = True


class LiveTurnLost(AgentwakeError):
    """The live turn does not hold its session any more (it ended, or its lease expired and another
    writer took the session), or that is not its token: begin a new one. Nothing of the call was
    written."""

    retryable = False


class LiveTurnCapped(LiveTurnLost):
    """The live turn has held its session as long as one turn may (renewals included): the renewal
    is refused and the session goes to the next waiter. Begin a new turn (it queues like any other
    writer)."""


class AppendTooLarge(AgentwakeError):
    """An append larger than one entry may be, or than DynamoDB writes in one item or transaction:
    refused before any write (nothing was appended)."""

    retryable = False


class UnknownApproval(PermanentInputError):
    """No approval request has this id (or it belongs to a session the caller does not own: the
    answer is the same, so ids of other sessions cannot be probed)."""


class ApprovalAlreadyDecided(AgentwakeError):
    """The request was decided otherwise already: the message says what was decided, by whom, when
    and why. Nothing changed; only one decision is ever written."""

    retryable = False

    def __init__(self, message: str, *, approval: Any = None) -> None:
        super().__init__(message)
        #: the stored request as decided (``domain.approvals.Approval``)
        self.approval = approval


class ForgedDecision(PermanentInputError):
    """A decision carrying a token that is not the request's (or a token where the request's
    deciders do not allow one), from a caller who is not an owner: nothing was written."""
