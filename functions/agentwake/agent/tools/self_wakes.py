"""``schedule_wake``, ``list_wakes``, ``cancel_wake``: the woken agent schedules its own follow-ups
(docs/self-scheduling.md). Offered only when the session's config has ``self_wakes`` enabled.

Each wake is a job created through ``agentwake.jobs.self_wakes``, exactly once per tool call (the
call's ``idempotency_key`` names the job). A request over a limit is a result the model reads
("refused: ..."), never a failed run. Creating and cancelling are side effects: a what-if replay
never calls them.

A table or Scheduler call that fails mid-create (or mid-cancel) raises StepInterrupted: the run
stops unjournaled and its retry asks again with the same call, which finds the wake its first try
made. A failure the model read as "error:" would leave it believing no wake exists.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from agentwake.agent.tools import Tool, ToolContext
from agentwake.errors import StepInterrupted

if TYPE_CHECKING:
    from agentwake.jobs.self_wakes import SelfWakes


class ScheduleWakeArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    at: str | None = Field(default=None, description="Wake once at this ISO time, e.g. 2026-12-01T09:00:00.")
    in_: str | None = Field(default=None, alias="in", description="Wake once after this long: 90m, 2h, 1h30m, 3d.")
    cron: str | None = Field(
        default=None, description="Wake repeatedly: six cron fields (min hour day-of-month month day-of-week year)."
    )
    rate: str | None = Field(default=None, description="Wake repeatedly: '2 hours', '1 day'.")
    timezone: str | None = Field(default=None, description="IANA time zone of 'at' and 'cron' (default UTC).")
    note: str = Field(
        default="", max_length=2000, description="What your future self should do when woken; shown then."
    )
    max_fires: int | None = Field(default=None, ge=1, description="A recurring wake stops after this many fires.")


class ScheduleWake(Tool):
    name = "schedule_wake"
    Args = ScheduleWakeArgs
    side_effect = True

    def __init__(self, wakes: SelfWakes) -> None:
        self.wakes = wakes
        p = wakes.policy
        self.description = (
            "Schedule a wake for yourself: once ('at' a time or 'in' a duration) or recurring ('cron' or "
            "'rate'), with a note you will read when it fires. Limits: at most "
            f"{p.max_pending} pending wakes, {p.max_days_ahead} days ahead, a recurring wake at most "
            f"{p.max_fires} fires and not more often than every {p.min_interval_s} s."
        )

    def invoke(self, args: ScheduleWakeArgs, ctx: ToolContext) -> str:
        from agentwake.jobs.self_wakes import WakeRefused, WakeRequest, describe

        request = WakeRequest(
            at=args.at,
            in_=args.in_,
            cron=args.cron,
            rate=args.rate,
            timezone=args.timezone,
            note=args.note,
            max_fires=args.max_fires,
        )
        try:
            with _aws_fault_interrupts("schedule_wake"):
                job, created = self.wakes.schedule(
                    request, session_id=ctx.session_id, run_id=ctx.run_id, call=ctx.idempotency_key
                )
        except WakeRefused as exc:
            return str(exc)
        return f"{'scheduled' if created else 'already scheduled'} {describe(job, now=self.wakes.jobs.clock())}"


class _NoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ListWakes(Tool):
    name = "list_wakes"
    description = "List the wakes you scheduled that are still pending: id, next fire, note."
    Args = _NoArgs
    side_effect = False

    def __init__(self, wakes: SelfWakes) -> None:
        self.wakes = wakes

    def invoke(self, args: _NoArgs, ctx: ToolContext) -> str:
        from agentwake.jobs.self_wakes import describe

        pending = self.wakes.pending(ctx.session_id)
        if not pending:
            return "you have no pending wakes"
        now = self.wakes.jobs.clock()
        return "\n".join(
            [f"{len(pending)} pending (at most {self.wakes.policy.max_pending}):"]
            + [describe(j, now=now) for j in pending]
        )


class CancelWakeArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    wake_id: str = Field(min_length=1, max_length=64, description="The wake's id (list_wakes shows it).")


class CancelWake(Tool):
    name = "cancel_wake"
    description = "Cancel a wake you scheduled, by its id; it will not wake you."
    Args = CancelWakeArgs
    side_effect = True

    def __init__(self, wakes: SelfWakes) -> None:
        self.wakes = wakes

    def invoke(self, args: CancelWakeArgs, ctx: ToolContext) -> str:
        from agentwake.jobs.self_wakes import WakeRefused

        try:
            with _aws_fault_interrupts("cancel_wake"):
                return self.wakes.cancel(args.wake_id, session_id=ctx.session_id, by=f"the agent (run {ctx.run_id})")
        except WakeRefused as exc:
            return str(exc)


@contextmanager
def _aws_fault_interrupts(tool: str) -> Iterator[None]:
    """An AWS call that failed (an error, a throttle, a lost answer) stops the step: retried, not told."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        yield
    except (ClientError, BotoCoreError) as exc:
        raise StepInterrupted(f"{tool}: an AWS call failed mid-way ({type(exc).__name__}); the run retries it") from exc


def self_wake_tools(wakes: SelfWakes) -> list[Tool]:
    return [ScheduleWake(wakes), ListWakes(wakes), CancelWake(wakes)]
