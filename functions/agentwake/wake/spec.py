"""The value types of a run: what to run (``RunSpec``), with what (``WakeDeps``), and how it ended
(``WakeOutcome``). Every wake module imports them from here; this module imports no wake module."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from agentwake.agent.providers import build_provider
from agentwake.clock import Clock, SystemClock
from agentwake.session.lease import Waited
from agentwake.settings import Settings

if TYPE_CHECKING:
    from agentwake.agent.chain import RetryPolicy
    from agentwake.agent.runner import RunEvent
    from agentwake.product.approvals import ApprovalsService
    from agentwake.product.tasks import TasksService
    from agentwake.session.lease import Waiter
    from agentwake.session.waiting import WaitState
    from agentwake.store.port import Store
    from agentwake.store.port_queues import ResultQueuePort, SchedulesPort
    from agentwake.wake.prompt import WakeKind


def _default_channel_factory(spec: dict[str, Any], kit: Any = None) -> Any:
    from agentwake.delivery.factory import build_channel

    return build_channel(spec, kit)


@dataclass
class WakeDeps:
    """What a wake needs from the outside world (ports); tests swap any of them."""

    store: Store
    settings: Settings
    clock: Clock = field(default_factory=SystemClock)
    provider_factory: Callable[[dict[str, Any]], Any] = build_provider
    #: builds a session's channel from its spec and the wake's ChannelKit (agentwake.delivery.kit)
    channel_factory: Callable[[dict[str, Any], Any], Any] = _default_channel_factory
    retry: RetryPolicy | None = None
    on_event: Callable[[RunEvent], None] | None = None
    #: deletes EventBridge Scheduler schedules (run-once jobs); None where there is no scheduler
    schedules: SchedulesPort | None = None
    #: the result queue a release hands the session on through (agentwake.session.handoff); None: no hand-off
    result_queue: ResultQueuePort | None = None
    #: the cron function a wake the agent schedules for itself invokes (the cron function's own ARN,
    #: set per invocation; else ``settings.cron_function_arn``)
    cron_target_arn: str | None = None
    #: registers, starts (``wake.start_task``) and completes tasks; None: no background work can start here
    tasks: TasksService | None = None
    #: decides approval requests and sends their checks (``product.approvals``); None: built on first
    #: park from the store and the tasks service's work queue (``wake.park``)
    approvals: ApprovalsService | None = None


@dataclass(frozen=True)
class RunSpec:
    run_id: str
    kind: WakeKind
    session_id: str
    #: what woke the agent, shown to it as JSON in the system prompt
    wake: dict[str, Any]
    #: the history note before the final answer; the answer follows ``note_sep`` (wake.usage.history_note)
    note_head: str = ""
    note_sep: str = ""
    task_id: str | None = None
    job_id: str | None = None
    disable_job_on_success: bool = False
    #: why the job stops after this run (its last allowed fire), shown by ``jobs show``
    job_disabled_reason: str | None = None
    #: the run waited for its session (its record was a waiting copy): for how long, and the
    #: session's idle time before this start when a release handed it over
    waited: Waited | None = None
    #: the SQS message this attempt runs for (its first id), counted on the run (RunRecord.message_attempts)
    message_id: str | None = None
    #: the copy that re-queues the run once an approval it parks on is decided (issue 35):
    #: ``{kind, body, attributes, target}`` (a result record's body and its producer's attributes, or
    #: a cron wake's payload and the function it is invoked through)
    resume: dict[str, Any] | None = None


@dataclass(frozen=True)
class WakeOutcome:
    run_id: str
    #: ``superseded``: a waiting copy whose run a newer copy (a hand-off) has taken over
    #: ``late``: the completion came after its task ended otherwise (cancelled, timed out): no wake
    #: ``parked``: the run waits for a person's decision (issue 35): neither a success nor a failure
    status: Literal["succeeded", "already_succeeded", "superseded", "late", "parked"]
    attempt: int = 0
    steps: int = 0
    final_text: str = ""
    deliveries: int = 0
    #: the final answer was delivered to the user (deliver_final), by this attempt or an earlier one
    final_delivered: bool = False
    #: tokens, latency and estimated cost of the run (agentwake.agent.ledger.usage_totals)
    usage: dict[str, Any] = field(default_factory=dict)
    #: the waiter this run's commit handed the session to, for the caller to run itself
    #: (``execute_run(run_next=...)``); its delayed copy stays in the queue as the fallback
    next_waiter: Waiter | None = field(default=None, compare=False, repr=False)
    #: a parked run: the approval request it waits for
    waiting_for: str | None = None


def waited_of(waiting: WaitState | None, now: float, arrived: float | None = None) -> Waited | None:
    """How long a waiting copy waited, and (a handed copy) how long its session sat idle since;
    ``arrived``: when it first waited, as its entry on the wait list says (its place there)."""
    if waiting is None:
        return None
    idle = None if waiting.handed_at is None else max(0.0, now - waiting.handed_at)
    return Waited(waited_s=waiting.waited(now), idle_s=idle, arrived=arrived)
