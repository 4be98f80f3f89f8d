"""One attempt of a run, built in one place: history window → journal and today's counters →
delivery channel → the agent's parts (``agent_factory.session_agent``), with the wake prompt.

The wake (``wake/run.py``) builds it with the real store, the session's delivery channels and the
run's DynamoDB journal; ``agentwake runs replay`` builds it with the same function, injecting a
dry channel, an in-memory journal and a read-only store. So the prompt a replay asks with is the
prompt the wake asked with, by construction. Either then runs ``attempt.agent.run()``: the agent
builds its ledger, asks the prompt for its messages, builds its chain and tools, and runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from agentwake.domain.conversation import fit_window
from agentwake.domain.steps import is_tool_result
from agentwake.wake.agent_factory import session_agent
from agentwake.wake.deliveries import RecordingChannel, channels_for, receipts_of
from agentwake.wake.prompt import WakePrompt

__all__ = ["Attempt", "RecordingChannel", "build_attempt", "channels_for", "receipts_of"]

if TYPE_CHECKING:
    from agentwake.agent.journal import StepJournal
    from agentwake.agent.tools import TaskStarter, ToolContext
    from agentwake.agent.tools.cancel_task import TaskCanceller
    from agentwake.agent.woken import WokenAgent
    from agentwake.delivery import DeliveryChannel
    from agentwake.domain.models import SessionConfig, Task
    from agentwake.store.port import Recorder
    from agentwake.wake.spec import RunSpec, WakeDeps


@dataclass
class Attempt:
    """The agent of one attempt and what the commit or the failure record reads beside it."""

    agent: WokenAgent
    #: the run's journal (the store's, counting tokens on the daily counter if the session has a
    #: daily token budget; a replay's in-memory one)
    journal: Any
    #: where send_message_to_user delivers (RecordingChannel; a replay's DryChannel)
    channel: Any
    session: SessionConfig


def build_attempt(
    spec: RunSpec,
    session: SessionConfig,
    deps: WakeDeps,
    *,
    fresh: bool = False,
    deadline: float | None = None,
    journal: StepJournal | None = None,
    channel: DeliveryChannel | None = None,
    dry_run: bool = False,
    number: int | None = None,
) -> Attempt:
    """Build the attempt's agent (it is built and run by ``attempt.agent.run()``).

    ``fresh``: a first attempt, whose journal is empty and is not read. A session with daily limits
    has today's counters read here (one GetItem): after the run's start, under its lease, where no
    other run of the session can move them until it ends.
    ``journal`` / ``channel``: injected instead of the store's journal and the recording channel
    (a replay); ``dry_run``: side-effecting tools are not called. ``number``: the run's attempt
    number, recorded with each step this attempt journals (``runs show`` labels steps with it).
    """
    store = deps.store
    history = fit_window(
        [
            e.to_message()
            for e in store.history.history_window(spec.session_id, session.history_window)
            if e.run_id != spec.run_id  # this run's own deliveries come back through the journal
        ],
        session.history_window_bytes,
    )
    # today's counters of a session with daily limits, read under the run's lease (the wake's; a
    # replay's are what they are now)
    counters = None
    if session.has_daily_limits:
        counters = store.daily.counters(session.session_id)
    recorder: Recorder | None = None
    if journal is None:
        counting = counters if session.max_tokens_per_day is not None else None
        journal = recorder = store.journals.journal(spec.run_id, fresh=fresh, counters=counting, attempt=number)
    tokens_today = deliveries_today = 0
    if counters is not None:
        tokens_today, deliveries_today = counters.read()
    if channel is None:
        if recorder is None:
            raise ValueError("an injected journal comes with its channel (a replay's records nothing)")
        # the journal records the deliveries: each lands with the step that reports it
        # the journal is also the intent log of the channels no receiver dedups (delivery/intents.py)
        channel = RecordingChannel(channels_for(session, deps, intents=recorder), recorder, counters)
    prompt = WakePrompt(
        persona=session.persona, kind=spec.kind, wake=spec.wake, history=history, deliver_final=session.deliver_final
    )
    agent = session_agent(
        session=session,
        run_id=spec.run_id,
        prompt=prompt,
        journal=journal,
        channel=channel,
        clock=deps.clock,
        deadline=deadline,
        settings=deps.settings,
        provider_factory=deps.provider_factory,
        retry=deps.retry,
        on_event=deps.on_event,
        tokens_today=tokens_today,
        deliveries_today=deliveries_today,
        delivered=journaled_deliveries(journal),
        dry_run=dry_run,
        extra_tools=session_tools(session, deps, kind=spec.kind),
        start_task=task_starter(session, deps),
        cancel_tasks=_task_canceller(session, deps),
    )
    return Attempt(agent=agent, journal=journal, channel=channel, session=session)


def session_tools(session: SessionConfig, deps: WakeDeps, *, kind: str) -> list[Any]:
    """Tools the wake builds for the session beyond its declared ones: its self-wake tools when its
    config allows them (their modules load only then), in a wake of the session's own agent (a
    cron or background wake; never a subagent's run)."""
    if kind not in ("cron", "background") or session.self_wakes is None or not session.self_wakes.enabled:
        return []
    from agentwake.agent.tools.self_wakes import self_wake_tools
    from agentwake.jobs.self_wakes import for_session

    wakes = for_session(session, deps)
    return self_wake_tools(wakes) if wakes is not None else []


def task_starter(session: SessionConfig, deps: WakeDeps) -> TaskStarter | None:
    """How this attempt's background tools (and subagents) start their tasks: the one start path,
    bound to the wake's tasks service and the session's default deadline (None: no tasks service)."""
    tasks = deps.tasks
    if tasks is None:
        return None

    def start(
        ctx: ToolContext,
        *,
        kind: Literal["tool", "subagent"],
        name: str,
        args: dict[str, object],
        deadline_s: float | None = None,
    ) -> Task:
        from agentwake.wake.start_task import start_background_task  # loaded by a run that starts one

        return start_background_task(
            ctx,
            kind=kind,
            name=name,
            args=args,
            deadline_s=deadline_s,
            tasks=tasks,
            default_deadline_s=session.task_deadline_s,
        )

    return start


def _task_canceller(session: SessionConfig, deps: WakeDeps) -> TaskCanceller | None:
    """The tasks service when the session's agent may start tasks (it is then offered ``cancel_task``)."""
    if deps.tasks is None or not (session.subagents or session.tools):
        return None
    from agentwake.agent.tools.cancel_task import starts_tasks

    return deps.tasks if starts_tasks(session.tools, session.subagents) else None


def journaled_deliveries(journal: StepJournal) -> list[str]:
    """Delivery ids that send_message_to_user calls of earlier attempts made (journal order)."""
    entries: dict[str, dict[str, Any]] = getattr(journal, "entries", {}) or {}
    out: list[str] = []
    for key in sorted(entries):
        if is_tool_result(key):
            out += [str(d) for d in entries[key].get("deliveries") or ()]
    return out
