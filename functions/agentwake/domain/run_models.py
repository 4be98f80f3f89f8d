"""What the store keeps of jobs and runs: jobs, their skipped or missed fires, runs, failed attempts.

Apart from ``agentwake.domain.models`` because a background wake's first attempt validates none of
them (a wake reads a run's record only when an earlier attempt wrote it, a failure only when it
fails): a cold start does not build them (tests/unit/test_cold_start.py).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from agentwake.domain.models import _Stored, truncate, utcnow_iso

JobStatus = Literal["scheduled", "running", "completed", "failed", "parked"]
#: a fire that comes due while this job's previous run still holds the session (docs/operations.md)
OverlapPolicy = Literal["skip", "queue", "buffer_one"]
#: which fires missed while paused (or dead-lettered by the Scheduler) run on resume
CatchUpPolicy = Literal["none", "latest", "all"]
#: the defaults of a new job, shown by ``agentwake jobs --help`` and docs/operations.md
DEFAULT_OVERLAP: OverlapPolicy = "queue"
DEFAULT_CATCH_UP: CatchUpPolicy = "latest"
DEFAULT_CATCH_UP_WINDOW_S = 86_400
DEFAULT_PAUSE_AFTER_FAILURES = 3


#: who created a job: an operator (CLI, console), the product API, or the agent (a wake it scheduled)
JobOrigin = Literal["operator", "api", "agent"]


class Job(_Stored):
    job_id: str
    session_id: str
    name: str
    description: str = ""
    #: EventBridge Scheduler expression: cron(...), rate(...) or at(...)
    schedule_expression: str
    timezone: str = "UTC"
    run_once: bool = False
    enabled: bool = True
    status: JobStatus = "scheduled"
    schedule_name: str | None = None
    created_at: str = Field(default_factory=utcnow_iso)
    last_run_at: str | None = None
    last_error: str | None = None
    overlap: OverlapPolicy = DEFAULT_OVERLAP
    catch_up: CatchUpPolicy = DEFAULT_CATCH_UP
    #: only missed fires this recent (seconds before the resume) are caught up
    catch_up_window_s: int = Field(default=DEFAULT_CATCH_UP_WINDOW_S, ge=0)
    #: consecutive failed runs after which the job pauses itself (0: never)
    pause_after_failures: int = Field(default=DEFAULT_PAUSE_AFTER_FAILURES, ge=0)
    #: failed runs in a row (a success resets it), and the last one counted
    consecutive_failures: int = 0
    last_failed_run_id: str | None = None
    #: set while the job is paused (its schedule disabled): when, why, and the run that made it pause
    paused_at: str | None = None
    pause_reason: str | None = None
    pause_run_id: str | None = None
    #: the one fire waiting behind a running run of this job (overlap ``buffer_one``)
    buffered_run_id: str | None = None
    skipped_fires: int = 0
    missed_fires: int = 0
    #: when the schedule was last changed (``jobs update``); a rate counts from here
    schedule_updated_at: str | None = None
    #: who created it: an operator (CLI, console), the product API, or the agent itself (a wake it
    #: scheduled: the run and tool call that created it, and its note for its future self)
    origin: JobOrigin = "operator"
    created_by_run: str | None = None
    created_by_call: str | None = None
    note: str = ""
    #: a recurring job stops (is disabled) after this many fires (None: no limit); fires so far
    max_fires: int | None = Field(default=None, ge=1)
    fires: int = 0
    #: why a job stopped for good (cancelled, its fires used up): ``jobs show`` and ``list_wakes`` say it
    disabled_reason: str | None = None

    @property
    def paused(self) -> bool:
        return self.paused_at is not None


class JobFire(_Stored):
    """A fire of a job that did not run as scheduled: skipped (overlap) or missed (paused,
    dead-lettered by the Scheduler), and what became of it (``caught_up``, ``not_caught_up``, ``pending``)."""

    job_id: str
    scheduled_time: str
    run_id: str
    kind: Literal["skipped", "missed"]
    reason: str
    outcome: str = "recorded"
    at: str = Field(default_factory=utcnow_iso)


#: ``parked``: the run waits for a person's decision on a gated tool call (issue 35): not a success
#: (no note), not a failure (no retry spent), holding no session; the decision re-queues it
RunStatus = Literal["running", "succeeded", "failed", "parked"]


class RunRecord(_Stored):
    JSON_FIELDS = frozenset({"usage"})

    run_id: str
    kind: Literal["background", "cron", "subagent"]
    session_id: str
    status: RunStatus = "running"
    attempts: int = 0
    started_at: str | None = None
    ended_at: str | None = None
    last_error: str | None = None
    last_error_type: str | None = None
    steps: int = 0
    #: tokens, latency and estimated cost of the run's model calls, in total and per provider
    #: (agentwake.agent.ledger.usage_totals), as of its last attempt
    usage: dict[str, Any] | None = None
    #: the run waited for its session this long before its latest attempt started, and the session
    #: sat idle this long between the release that handed it over and that start (None: not waited)
    waited_s: float | None = None
    idle_before_s: float | None = None
    #: the SQS message (its first id: a copy re-sent while it waited keeps it) that the latest attempt
    #: ran for, and how many attempts ran for it, wherever they ran (a copy's own receive, or a release
    #: that ran the waiter in its invocation): what maxReceiveCount bounds. A redrive is a new message
    message_id: str | None = None
    message_attempts: int = 0
    #: parked (issue 35): since when, on which approval request; ``decided``: the request the last
    #: decision was for (a parked run whose ``decided`` is its ``waiting_for`` is ready to resume)
    parked_at: str | None = None
    waiting_for: str | None = None
    decided: str | None = None
    #: seconds the run spent parked, in total (counted when it resumes)
    parked_s: float = 0.0


class FailureRecord(_Stored):
    """One failed attempt of a run: what an operator reads at the DLQ."""

    JSON_FIELDS = frozenset({"provider_errors"})

    run_id: str
    session_id: str
    attempt: int
    error_type: str
    detail: str
    provider_errors: dict[str, str] = {}
    steps_done: int = 0
    at: str = Field(default_factory=utcnow_iso)

    @field_validator("detail")
    @classmethod
    def _cap(cls, v: str) -> str:
        from agentwake.trust.redact import redact

        return truncate(redact(v), 20_000)

    @field_validator("provider_errors")
    @classmethod
    def _cap_errors(cls, v: dict[str, str]) -> dict[str, str]:
        from agentwake.trust.redact import redact

        return {truncate(str(k), 200): truncate(redact(e), 2000) for k, e in list(v.items())[:20]}
