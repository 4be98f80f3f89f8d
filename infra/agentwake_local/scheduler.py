"""EventBridge Scheduler, emulated locally: the schedules that exist in the local stack fire.

moto stores schedules and never fires them. ``LocalScheduler.tick(now)`` does what the service
does at ``now`` for every ENABLED schedule of every group:

- works out its next firing from ``ScheduleExpression`` (``at``/``rate``/``cron``, see
  ``agentwake.domain.schedule_expressions``) in ``ScheduleExpressionTimezone``, within ``StartDate`` and
  ``EndDate`` (a rate fires on its StartDate, else one period after the schedule was created);
- when that time has come: substitutes ``<aws.scheduler.scheduled-time>``,
  ``<aws.scheduler.schedule-arn>``, ``<aws.scheduler.execution-id>`` and
  ``<aws.scheduler.attempt-number>`` in ``Target.Input`` and invokes the target asynchronously
  (a Lambda function of the stack: Lambda answers 202 and runs it with its own retries);
- if the target cannot be invoked (no such function), retries per ``Target.RetryPolicy`` with
  Scheduler's growing backoff, then sends the input to ``Target.DeadLetterConfig`` with
  Scheduler's message attributes (ERROR_CODE, ERROR_MESSAGE, EXECUTION_ID, EXHAUSTED_RETRY_CONDITION,
  INVOCATION_TIMESTAMP, RETRY_ATTEMPTS, SCHEDULE_ARN, TARGET_ARN);
- a one-time ``at`` schedule with ``ActionAfterCompletion: DELETE`` is deleted after it fired.

A schedule disabled and enabled again (``jobs pause`` / ``jobs resume``) fires from the tick
before it was enabled: what it missed while disabled is the job's catch-up, not the scheduler's.
A recurring firing missed while nothing ticked (the stack was stopped or stalled for more than a
minute) is skipped, not caught up; a one-time ``at`` fires late. One firing per schedule per tick. ``FlexibleTimeWindow`` is ignored: it fires at the window's start.
The clock is injectable: tests call ``tick(now)`` with the time they want.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentwake.domain.schedule_expressions import Rate, ScheduleExpressionError, next_fire, parse
from agentwake_local.timing import Timing

logger = logging.getLogger(__name__)

#: (target ARN, event) -> None; raises TargetNotFound when the target cannot be invoked
InvokeTarget = Callable[[str, Any], None]
Clock = Callable[[], dt.datetime]
#: a schedule first seen this long after its creation still gets the firings of that interval
CATCH_UP_WINDOW = dt.timedelta(minutes=5)
#: a recurring firing found later than this (nothing ticked meanwhile) is skipped, not caught up
MISFIRE_GRACE = dt.timedelta(seconds=60)


class TargetInvocationError(Exception):
    """The scheduler could not invoke the target; ``code`` is what ERROR_CODE says."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _iso(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _as_datetime(value: Any) -> dt.datetime | None:
    """moto returns dates as epoch seconds (or datetimes through boto3)."""
    if value in (None, ""):
        return None
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    return dt.datetime.fromtimestamp(float(value), dt.UTC)


@dataclass
class Firing:
    """One firing of one schedule: every attempt to invoke its target, and where it ended."""

    schedule_arn: str
    group: str
    name: str
    scheduled_time: dt.datetime
    target_arn: str
    execution_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    attempts: int = 0
    outcome: str = "pending"  # invoked | dead-lettered | dropped | pending
    error: TargetInvocationError | None = None
    next_attempt_at: dt.datetime | None = None
    first_attempt_at: dt.datetime | None = None


@dataclass
class _Seen:
    """What the scheduler remembers of a schedule between ticks."""

    modified: Any
    first_seen: dt.datetime
    next_at: dt.datetime | None
    fired_once: bool = False


class LocalScheduler:
    def __init__(
        self,
        scheduler_client: Any,
        sqs_client: Any,
        invoke_target: InvokeTarget,
        *,
        timing: Timing,
        clock: Clock = utcnow,
        interval: float = 1.0,
    ) -> None:
        self.scheduler = scheduler_client
        self.sqs = sqs_client
        self.invoke_target = invoke_target
        self.timing = timing
        self.clock = clock
        self.interval = interval
        self.firings: list[Firing] = []  # every firing, for tests and `local up`'s log
        self._seen: dict[str, _Seen] = {}
        #: schedules seen before that were then disabled (or deleted): enabled again, they count from the last tick
        self._gone: set[str] = set()
        self._last_tick: dt.datetime | None = None
        self._retries: list[Firing] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- one tick -------------------------------------------------------------------------

    def tick(self, now: dt.datetime | None = None) -> list[Firing]:
        """Fire what is due at ``now`` (default: the clock) and retry what waits; returns the attempts made."""
        now = (now or self.clock()).astimezone(dt.UTC)
        with self._lock:
            done: list[Firing] = []
            for firing in [f for f in self._retries if f.next_attempt_at and f.next_attempt_at <= now]:
                self._retries.remove(firing)
                done.append(self._attempt(firing, now))
            for summary in self._list_schedules():
                firing = self._due(summary, now)
                if firing is not None:
                    self.firings.append(firing)
                    done.append(self._attempt(firing, now))
            self._last_tick = now
            return done

    def _list_schedules(self) -> list[dict[str, Any]]:
        schedules: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {"State": "ENABLED"}
        while True:
            page = self.scheduler.list_schedules(**kwargs)
            schedules += page.get("Schedules") or []
            if not page.get("NextToken"):
                break
            kwargs["NextToken"] = page["NextToken"]
        live = {s["Arn"] for s in schedules}
        for arn in set(self._seen) - live:  # deleted or disabled: forget it
            del self._seen[arn]
            self._gone.add(arn)
            logger.info("schedule %s is disabled or deleted: it does not fire", arn.rsplit("/", 1)[-1])
        return schedules

    def _due(self, summary: dict[str, Any], now: dt.datetime) -> Firing | None:
        arn = summary["Arn"]
        seen = self._seen.get(arn)
        modified = summary.get("LastModificationDate")
        schedule: dict[str, Any] | None = None
        if seen is None or seen.modified != modified:
            schedule = self._get(summary)
            if schedule is None:
                return None
            if seen is None and arn in self._gone:  # enabled again (a job resumed): from the last tick
                self._gone.discard(arn)
                seen = _Seen(modified, now, self._next(schedule, self._last_tick or now, now))
            elif seen is None:  # new: count from its creation
                seen = _Seen(modified, now, self._next(schedule, self._since(schedule, now), now))
            else:  # updated: its next firing after now
                seen = _Seen(modified, seen.first_seen, self._next(schedule, now, seen.first_seen))
            self._seen[arn] = seen
        if seen.next_at is None or seen.next_at > now:
            return None
        schedule = schedule or self._get(summary)
        if schedule is None:
            return None
        scheduled_time = seen.next_at
        recurring = not str(schedule.get("ScheduleExpression", "")).startswith("at(")
        if recurring and now - scheduled_time > MISFIRE_GRACE:
            # a recurring time missed while nothing ticked (the stack was stopped or stalled, or the
            # schedule was disabled) is not caught up; a one-time schedule still fires, late. The
            # first time within the grace still fires now.
            logger.warning("schedule %s: missed its firing at %s", schedule["Name"], _iso(scheduled_time))
            seen.next_at = self._next(schedule, now - MISFIRE_GRACE, seen.first_seen)
            if seen.next_at is None or seen.next_at > now:
                return None
            scheduled_time = seen.next_at
        seen.next_at = self._next(schedule, max(now, scheduled_time), seen.first_seen)
        target = schedule.get("Target") or {}
        return Firing(
            schedule_arn=arn,
            group=schedule.get("GroupName") or "default",
            name=schedule["Name"],
            scheduled_time=scheduled_time,
            target_arn=str(target.get("Arn", "")),
        )

    @staticmethod
    def _since(schedule: dict[str, Any], first_seen: dt.datetime) -> dt.datetime:
        """Where a newly seen schedule's firings are counted from: its creation (so that an ``at``
        a few seconds ahead is not missed between two ticks), unless it was created long before this
        scheduler started (no catching up on what fired while the stack was down)."""
        created = _as_datetime(schedule.get("CreationDate")) or first_seen
        if dt.timedelta(0) <= first_seen - created <= CATCH_UP_WINDOW:
            return created - dt.timedelta(microseconds=1)
        return first_seen

    def _get(self, summary: dict[str, Any]) -> dict[str, Any] | None:
        try:
            return dict(self.scheduler.get_schedule(Name=summary["Name"], GroupName=summary.get("GroupName")))
        except self.scheduler.exceptions.ResourceNotFoundException:
            return None

    def _next(self, schedule: dict[str, Any], after: dt.datetime, first_seen: dt.datetime) -> dt.datetime | None:
        expression = schedule.get("ScheduleExpression", "")
        timezone = schedule.get("ScheduleExpressionTimezone") or "UTC"
        start = _as_datetime(schedule.get("StartDate"))
        end = _as_datetime(schedule.get("EndDate"))
        try:
            parsed = parse(expression)
            if start is not None and after < start:
                after = start - dt.timedelta(microseconds=1)
            if start is not None:  # a rate fires on its StartDate, then every period
                anchor = start
            else:  # else one period after it was created
                anchor = _as_datetime(schedule.get("CreationDate")) or first_seen
                if isinstance(parsed, Rate):
                    anchor += dt.timedelta(seconds=parsed.seconds)
            moment = next_fire(parsed, after, timezone, anchor=anchor)
        except ScheduleExpressionError as exc:
            logger.warning("schedule %s: %s; it never fires locally", schedule.get("Name"), exc)
            return None
        if moment is not None and end is not None and moment > end:
            return None
        return moment

    # -- invoking the target --------------------------------------------------------------

    def _attempt(self, firing: Firing, now: dt.datetime) -> Firing:
        schedule = self._schedule_for(firing)
        target = (schedule or {}).get("Target") or {}
        policy = target.get("RetryPolicy") or {}
        max_retries = int(policy.get("MaximumRetryAttempts", 185))
        max_age = int(policy.get("MaximumEventAgeInSeconds", 86400))
        firing.attempts += 1
        firing.first_attempt_at = firing.first_attempt_at or now
        event_text = self._input(target.get("Input"), firing)
        try:
            if schedule is None:
                raise TargetInvocationError("ResourceNotFoundException", f"schedule {firing.name} no longer exists")
            event = json.loads(event_text) if event_text else {}
            self.invoke_target(firing.target_arn, event)
        except TargetInvocationError as exc:
            firing.error = exc
        except ValueError as exc:  # the Input is not JSON: Lambda would refuse the payload
            firing.error = TargetInvocationError("InvalidRequestContentException", f"Input is not JSON: {exc}")
        else:
            firing.outcome = "invoked"
            firing.error = None
            logger.info(
                "scheduler %s/%s fired for %s -> %s (attempt %d)",
                firing.group,
                firing.name,
                _iso(firing.scheduled_time),
                firing.target_arn,
                firing.attempts,
            )
            self._after_completion(schedule, firing)
            return firing
        retries_done = firing.attempts - 1
        delay = self.timing.scheduler_retry_delay(firing.attempts)
        age = (now - firing.scheduled_time).total_seconds() + delay
        if retries_done < max_retries and age <= max_age and schedule is not None:
            firing.next_attempt_at = now + dt.timedelta(seconds=delay)
            self._retries.append(firing)
            logger.warning(
                "scheduler %s/%s: %s: %s; retry %d in %gs",
                firing.group,
                firing.name,
                firing.error.code,
                firing.error,
                firing.attempts,
                delay,
            )
            return firing
        condition = "MaximumRetryAttempts" if retries_done >= max_retries else "MaximumEventAgeInSeconds"
        self._dead_letter(firing, target, event_text, condition, now)
        return firing

    def _schedule_for(self, firing: Firing) -> dict[str, Any] | None:
        return self._get({"Name": firing.name, "GroupName": firing.group})

    @staticmethod
    def _input(template: Any, firing: Firing) -> str:
        text = "" if template is None else str(template)
        return (
            text.replace("<aws.scheduler.scheduled-time>", _iso(firing.scheduled_time))
            .replace("<aws.scheduler.schedule-arn>", firing.schedule_arn)
            .replace("<aws.scheduler.execution-id>", firing.execution_id)
            .replace("<aws.scheduler.attempt-number>", str(firing.attempts))
        )

    def _after_completion(self, schedule: dict[str, Any] | None, firing: Firing) -> None:
        if not schedule or not str(schedule.get("ScheduleExpression", "")).startswith("at("):
            return
        if schedule.get("ActionAfterCompletion") == "DELETE":
            try:
                self.scheduler.delete_schedule(Name=firing.name, GroupName=firing.group)
            except self.scheduler.exceptions.ResourceNotFoundException:
                pass

    def _dead_letter(self, firing: Firing, target: dict[str, Any], body: str, condition: str, now: dt.datetime) -> None:
        error = firing.error or TargetInvocationError("Unknown", "unknown error")
        dlq_arn = (target.get("DeadLetterConfig") or {}).get("Arn")
        if not dlq_arn:
            firing.outcome = "dropped"
            logger.error(
                "scheduler %s/%s: %s after %d attempts, no dead-letter queue: firing dropped",
                firing.group,
                firing.name,
                error.code,
                firing.attempts,
            )
            return

        def attribute(value: str, data_type: str = "String") -> dict[str, str]:
            return {"DataType": data_type, "StringValue": value}

        url = self.sqs.get_queue_url(QueueName=dlq_arn.rsplit(":", 1)[-1])["QueueUrl"]
        self.sqs.send_message(
            QueueUrl=url,
            MessageBody=body or "{}",
            MessageAttributes={
                "ERROR_CODE": attribute(error.code),
                "ERROR_MESSAGE": attribute(str(error)[:1000] or error.code),
                "EXECUTION_ID": attribute(firing.execution_id),
                "EXHAUSTED_RETRY_CONDITION": attribute(condition),
                "INVOCATION_TIMESTAMP": attribute(_iso(now)),
                "RETRY_ATTEMPTS": attribute(str(firing.attempts - 1), "Number"),
                "SCHEDULE_ARN": attribute(firing.schedule_arn),
                "TARGET_ARN": attribute(firing.target_arn),
            },
        )
        firing.outcome = "dead-lettered"
        logger.error(
            "scheduler %s/%s: %s after %d attempts: sent to %s",
            firing.group,
            firing.name,
            error.code,
            firing.attempts,
            dlq_arn,
        )

    # -- background thread ----------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self.running:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="local-scheduler", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:  # the server went away, a transient error: keep ticking
                logger.exception("local scheduler tick failed")
            self._stop.wait(self.interval)
