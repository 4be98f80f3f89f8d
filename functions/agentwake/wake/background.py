"""Wake for a finished background task: one SQS record in, one of done / resend / dead-letter out.

``run_record`` runs one record (``wake.invocation.on_background_record``, the use case the handler
calls, then runs the waiters its release hands the session to): it parses the record, checks the
task and its session, runs the wake, and says what becomes of the record — ``Done`` (it ran, or had
already), ``Resend`` (its session is busy: re-send it with a delay; the wait machinery loads only
then) or ``DeadLetter`` (no retry can help: to the DLQ at once with the reason). A run that ended in
ERROR raises (retryable), so the record alone is a batch item failure and is retried.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from agentwake.domain.models import Task, background_run_id, truncate
from agentwake.domain.task_outcome import Claim, Late, judge  # every background wake judges its message
from agentwake.errors import (
    AgentwakeError,
    AttemptsSpent,
    ForgedCompletion,
    RunDeferred,
    SessionBusy,
    SessionMismatch,
    TaskClaimContended,
    UnknownTask,
)
from agentwake.observability import logger, permanent_failure_handed_over
from agentwake.session.copies import ATTR_HANDED_AT, ATTR_WAIT_COUNT
from agentwake.session.lease import Waiter
from agentwake.wake.messages import BackgroundResultMessage
from agentwake.wake.run import execute_run
from agentwake.wake.spec import RunSpec, WakeDeps, WakeOutcome, waited_of
from agentwake.wake.usage import NOTE_RESULT_BYTES, note_cut

if TYPE_CHECKING:
    from agentwake.session.waiting import Jitter, ParkedRecord, WaitState
    from agentwake.settings import Settings
    from agentwake.store.port import Store
    from agentwake.store.port_queues import DeadLettersPort, ResultQueuePort

#: how much of the result text the wake's prompt carries (the note keeps less: wake.usage.NOTE_RESULT_BYTES)
NOTE_RESULT_CHARS = 20_000


@dataclass(frozen=True)
class Done:
    """The record ran (``succeeded``), its run had already succeeded (``already_succeeded``), or it
    parked waiting for a person's decision (``parked``: handled and deleted, no receive spent)."""

    status: str
    #: how many of the session's waiters this invocation ran after it (``run_waiters_here``)
    ran_after: int = 0


@dataclass(frozen=True)
class Resend:
    """The session is busy: re-send the record after ``delay_s`` carrying the new wait state."""

    record: ParkedRecord
    delay_s: float
    state: WaitState
    holder: str | None = None

    def send(self, result_queue: ResultQueuePort) -> None:
        result_queue.send_later(
            body=self.record.body,
            delay_s=self.delay_s,
            attributes=self.record.attributes.to_api(),
            wait=self.state.to_attributes(),
        )
        logger.info(
            "session busy: the result comes back later",
            extra={"holder": self.holder, "delay_s": round(self.delay_s, 1), "wait_count": self.state.count},
        )


@dataclass(frozen=True)
class DeadLetter:
    """No retry can help: the record goes to the DLQ at once with its reason (message attributes)."""

    body: str
    message_id: str
    source: str
    receive_count: str
    error_type: str
    reason: str
    extra: dict[str, str] | None = None
    #: the permanent failure (counted and logged once it is on the DLQ); None for a wait given up
    error: AgentwakeError | None = field(default=None, compare=False)

    def send(self, dead_letters: DeadLettersPort) -> None:
        """The one DLQ send of a background record."""
        dead_letters.send(
            body=self.body,
            error_type=self.error_type,
            reason=self.reason,
            original_message_id=self.message_id,
            source=self.source,
            receive_count=self.receive_count,
            **({"extra": self.extra} if self.extra is not None else {}),
        )
        if self.error is not None:
            permanent_failure_handed_over(self.error, "the DLQ")


def run_record(
    record: SQSRecord, deps: WakeDeps, *, remaining_ms: int | None, run_next: Callable[[], bool] | None = None
) -> tuple[Done | Resend | DeadLetter, Waiter | None]:
    """What becomes of one record of the result queue, and the waiter its run handed the session to
    (for the invocation to run next: ``wake.invocation``). Raises a retryable AgentwakeError
    (RunFailed, RunDeferred) or a crash: the record is then a batch item failure and SQS retries it."""
    # a copy that waited for its session carries its wait state (the machinery loads only then)
    parked = _parked(record) if ATTR_WAIT_COUNT in (record.raw_event.get("messageAttributes") or {}) else None
    most = deps.settings.max_receive_count
    if parked is not None and parked.state.spent and parked.attempts > most:
        # its last attempt ended without an outcome (the function timed out or was stopped): SQS
        # would give this copy a count of its own, so the run's count ends it here
        return _dead_letter(
            parked,
            error_type="AttemptsSpent",
            reason=(
                f"run {background_run_id_of(record)} used its {most} attempts (maxReceiveCount), "
                f"{parked.state.spent} of them before it waited for its session; the last ended without "
                f"an outcome (a timeout or a crash: see runs show)"
            ),
        ), None
    try:
        msg = BackgroundResultMessage.parse_body(record.body)
        try:
            outcome = wake_for_background_result(
                msg,
                deps,
                remaining_ms=remaining_ms,
                waiting=parked.state if parked else None,
                run_next=run_next,
                message_id=parked.first_id if parked else record.message_id,
                max_attempts=most if parked else None,
                resume=resume_copy(record),
            )
        except SessionBusy as busy:
            wait = wait_for_session(
                busy,
                parked or _parked(record),
                store=deps.store,
                settings=deps.settings,
                task_id=msg.task_id,
                now=deps.clock.wall,
            )
            return wait, None
    except AgentwakeError as exc:
        # a failed run, a deferred record: the batch item fails and SQS retries it, unless this was
        # the last of the attempts a copy that waited for its session had left (SQS counts each
        # copy's receives from 1: the run's count carried by the copy says when it is spent)
        if exc.retryable:
            if parked is None or isinstance(exc, RunDeferred):
                raise  # (a deferred record made no attempt)
            # attempts a release ran in its own invocation (run_waiters_here) are counted on the run,
            # not in this copy's receives: the larger count is the run's
            made = _attempts_made(deps, msg.run_id, parked.first_id)
            attempts = max(parked.attempts, made)
            if attempts < most or (not parked.state.spent and made <= parked.attempts):
                raise  # SQS's own count of this copy ends it, or it has attempts left
            reason = (
                f"{exc} (the last of its {most} attempts, maxReceiveCount; {parked.state.spent} of them "
                f"before it waited for its session"
                + (
                    f", {made - parked.attempts} run for it by a release of its session"
                    if made > parked.attempts
                    else ""
                )
                + ")"
            )
            return _dead_letter(
                parked, error_type=getattr(exc, "failure_type", exc.error_type), reason=reason, attempts=attempts
            ), None
        if isinstance(exc, AttemptsSpent) and parked is not None:
            # the run's count, not this copy's receives: dead-lettered as every spent copy is
            return _dead_letter(parked, error_type=exc.error_type, reason=str(exc), attempts=exc.attempts), None
        # a permanent input error, or a run that failed for good (BudgetExceeded): no retry can help
        dead = DeadLetter(
            body=record.body,
            message_id=parked.first_id if parked else record.message_id,
            source=record.event_source_arn,
            receive_count=str(parked.attempts if parked else record.attributes.approximate_receive_count),
            error_type=exc.error_type,
            reason=str(exc),
            error=exc,
        )
        return dead, None
    if parked is not None and outcome.status not in ("superseded", "late"):
        from agentwake.session.waiting import ran_after_waiting

        ran_after_waiting(parked.state, deps.clock.wall())
    return Done(outcome.status), outcome.next_waiter


def resume_copy(record: SQSRecord) -> dict[str, Any]:
    """What re-queues this record's run once an approval it parks on is decided (issue 35): its body
    and its producer's attributes (stored shape), never the wait state a copy carried."""
    from agentwake.session.copies import MessageAttributes

    attributes = MessageAttributes.from_event(record.raw_event.get("messageAttributes")).to_stored()
    producer = {name: value for name, value in attributes.items() if not name.startswith("agentwake-")}
    return {"kind": "background", "body": record.body, "attributes": producer, "target": ""}


def _dead_letter(parked: ParkedRecord, *, error_type: str, reason: str, attempts: int | None = None) -> DeadLetter:
    """A copy whose run spent its attempts, dead-lettered as the producer's message it stands for."""
    from agentwake.store.queues import ATTR_ATTEMPTS_SPENT  # the DLQ's attribute names: only here

    logger.warning("a result's attempts are spent: dead-lettered", extra={"error_type": error_type})
    spent = str(attempts if attempts is not None else parked.attempts)
    return DeadLetter(
        body=parked.body,
        message_id=parked.first_id,
        source=parked.source,
        receive_count=spent,
        error_type=error_type,
        reason=reason,
        extra={ATTR_ATTEMPTS_SPENT: spent},
    )


def _attempts_made(deps: WakeDeps, run_id: str, message_id: str) -> int:
    """The attempts the run made for this message, as its record counts them (0: none recorded)."""
    run = deps.store.records.get_run(run_id)
    return run.message_attempts if run is not None and run.message_id == message_id else 0


def background_run_id_of(record: SQSRecord) -> str:
    """The run id a result record names, for a reason text (``?`` if its body does not say)."""
    try:
        return background_run_id(BackgroundResultMessage.parse_body(record.body).task_id)
    except Exception:
        return "?"


def session_of(record: SQSRecord) -> str:
    """The session a result record wakes, read by the record's own parser: its lane in the batch
    (``wake.lanes``). Raises InvalidMessage for a body that does not parse (a lane of its own)."""
    return BackgroundResultMessage.parse_body(record.body).session_id


def handed_first(event: dict[str, Any]) -> dict[str, Any]:
    """The batch with the records a release handed the session to first: their session is reserved
    for them and idle until they start, while the others of the batch only wait again."""
    records = event.get("Records")
    if isinstance(records, list):
        event = {
            **event,
            "Records": sorted(records, key=lambda r: ATTR_HANDED_AT not in (r.get("messageAttributes") or {})),
        }
    return event


def _parked(record: SQSRecord) -> ParkedRecord:
    # the wait machinery is loaded by the records that wait, not by every cold start
    from agentwake.session.waiting import ParkedRecord

    return ParkedRecord.from_sqs(record)


def wait_for_session(
    busy: SessionBusy,
    record: ParkedRecord,
    *,
    store: Store,
    settings: Settings,
    task_id: str,
    now: Callable[[], float],
    rng: Jitter = random,
) -> Resend | DeadLetter:
    """A busy session: put the run on the session's wait list (its holder's release hands the
    session to the oldest waiter) and re-send the record later as the fallback; or (past
    SessionWaitLimit, the failure recorded) take it off the list and dead-letter it as SessionBusy;
    or, when the list already holds SessionWaitListMax waiters, dead-letter it as WaitListFull."""
    from agentwake.session.waiting import Wait, join_wait_list, wait_background

    decision = wait_background(busy, record, store=store, settings=settings, task_id=task_id, now=now, rng=rng)
    assert busy.session_id is not None and busy.run_id is not None
    if isinstance(decision, Wait):
        # on the wait list, the release hands the session over: the delayed copy is only the
        # fallback for a hand-off that is lost, and need not come back as often
        delay = join_wait_list(
            busy,
            decision,
            store=store,
            settings=settings,
            kind="background",
            body=record.body,
            attributes=record.attributes.to_stored(),
            now=now(),
        )
        return Resend(record, delay, decision.state, holder=busy.holder)
    store.leases.drop_waiter(busy.session_id, busy.run_id)  # a dead-lettered run is nobody's to hand off to
    return DeadLetter(
        body=record.body,
        message_id=record.first_id,
        source=record.source,
        receive_count=str(record.state.attempts(record.receives - 1)),  # this receive made no attempt
        error_type=decision.error_type,
        reason=decision.detail,
        extra={**record.state.to_attributes(), "agentwake-holder-run-id": decision.holder or "?"},
    )


def background_note_head(msg: BackgroundResultMessage, task: Task | None = None) -> str:
    """The history note of a DONE background run, before its final answer. A failed outcome says
    "failed" with its reason, never "finished" or "Result" (the reference bug); a success after a
    redrive says so."""
    name = msg.summary_name or (task.tool_name if task is not None else msg.tool_name) or "task"
    text = note_cut(msg.result_text, NOTE_RESULT_BYTES)
    head = f"[BackgroundTask] {name} (task_id={msg.task_id})"
    if msg.status == "failed":
        return f"{head} failed: {text}"
    if msg.outcome > 1:
        return f"{head} succeeded after a redrive. Result: {text}"
    return f"{head} finished. Result: {text}"


def wake_for_background_result(
    msg: BackgroundResultMessage,
    deps: WakeDeps,
    *,
    remaining_ms: int | None = None,
    waiting: WaitState | None = None,
    run_next: Callable[[], bool] | None = None,
    message_id: str | None = None,
    max_attempts: int | None = None,
    resume: dict[str, Any] | None = None,
) -> WakeOutcome:
    """Raises UnknownTask / ForgedCompletion / SessionMismatch (permanent), SessionBusy, RunFailed (retry).

    Nothing is written before the task, its token and its session are checked. ``waiting``: the
    record is a copy that waited for its session; an older copy than the wait list's retires.
    """
    run_id = msg.run_id  # bg:{task}, or bg:{task}:{n} for a later outcome (a success after a redrive)
    logger.thread_safe_append_keys(task_id=msg.task_id, session_id=msg.session_id, run_id=run_id)
    # one batch read: the task, the run and the session config (checked against the task below)
    # and, for a waiting copy, the run's entry on the session's wait list
    read = deps.store.runs.read_wake(
        run_id=run_id, task_id=msg.task_id, session_id=msg.session_id, waiter=waiting is not None
    )
    task = read.task
    if task is None:
        raise UnknownTask(f"no task is registered with id {msg.task_id!r}")
    if not task.token_matches(msg.task_token):
        # only the holder of the token register_task returned may complete the task
        what = "carries no task_token" if not msg.task_token else "carries a task_token that is not this task's"
        raise ForgedCompletion(f"the completion of task {msg.task_id} {what}; the task is left untouched")
    if task.session_id != msg.session_id:
        # never write anything to either conversation: the message may be forged or misrouted
        raise SessionMismatch(
            f"task {msg.task_id} belongs to session {task.session_id!r}, but the message names {msg.session_id!r}"
        )
    if waiting is not None and read.waiter_gen is not None and read.waiter_gen > waiting.gen:
        # a release handed the session to a newer copy of this record: that one carries the run
        logger.info("a newer copy of this waiting result was handed the session; this one retires")
        return WakeOutcome(run_id=run_id, status="superseded")
    run = read.run
    if (
        max_attempts is not None
        and run is not None
        and run.status != "succeeded"
        and message_id
        and run.message_id == message_id
        and run.message_attempts >= max_attempts
    ):
        # a release ran this waiter in its own invocation until its attempts were spent: this copy
        # (its fallback) must not start another
        raise AttemptsSpent(
            f"run {run_id} used its {max_attempts} attempts (maxReceiveCount) for this message, "
            f"{run.message_attempts} counted on the run; its last error: {run.last_error_type or '?'}: "
            f"{truncate(run.last_error or '', 500)}",
            attempts=run.message_attempts,
        )
    ended = _claimed(msg, task, deps)
    if ended is not None:
        logger.info("a completion for a task that ended otherwise changed nothing", extra={"reason": ended})
        return WakeOutcome(run_id=run_id, status="late")
    wake = {
        "trigger": "background_task_finished",
        "task_id": msg.task_id,
        # what was registered, never what the message claims
        "tool_name": task.tool_name,
        "tool_args": task.tool_args,
        "status": msg.status,
        "summary_name": msg.summary_name or task.tool_name,
        "note": msg.note,
        "finished_at": msg.finished_at,
        "subagent_name": msg.subagent_name,
        # 2: it had failed (its worker dead-lettered), was redriven and succeeded
        "outcome": msg.outcome,
        "result": truncate(msg.result_text, NOTE_RESULT_CHARS),
    }
    spec = RunSpec(
        run_id=run_id,
        kind="background",
        session_id=msg.session_id,
        wake=wake,
        note_head=background_note_head(msg, task),
        note_sep="\n\n",
        task_id=msg.task_id,
        waited=waited_of(waiting, deps.clock.wall(), read.waiter_arrived),
        message_id=message_id,
        # what re-queues the run if it parks: the record's own body and attributes, else this message
        resume=resume or {"kind": "background", "body": msg.model_dump_json(), "attributes": {}, "target": ""},
    )
    return execute_run(spec, deps, remaining_ms=remaining_ms, read=read, run_next=run_next)


def _claimed(msg: BackgroundResultMessage, task: Task, deps: WakeDeps) -> str | None:
    """None when the message is the task's claimed outcome; else why it changes nothing (a cancelled
    task never wakes; a timed-out or completed one wakes once), counted as a late completion.

    ``finish_task`` claimed the outcome before it sent the message, so this reads nothing and writes
    nothing more (the wake's round trips are unchanged). A first completion a producer sent straight
    to the queue has no claim: it runs as before (its run id, ``bg:{task}``, is the outcome's)."""
    for _ in range(2):
        verdict = judge(task, msg.status, by="wake", outcome=msg.outcome)
        if isinstance(verdict, Late):
            deps.store.records.count_late_completion(task.task_id)
            return verdict.reason
        if (
            not isinstance(verdict, Claim)
            or verdict.number == 1
            or deps.store.records.claim_task_outcome(
                task.task_id,
                number=verdict.number,
                outcome=msg.status,
                reason=None if msg.status == "succeeded" else truncate(msg.result_text, 2000),
                at=msg.finished_at,
            )
        ):
            return None
        again = deps.store.records.get_task(task.task_id)
        if again is None:
            raise UnknownTask(f"no task is registered with id {msg.task_id!r}")
        task = again
    raise TaskClaimContended(f"the outcome of task {msg.task_id} is contended; the record is retried")
