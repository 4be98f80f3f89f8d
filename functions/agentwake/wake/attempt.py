"""One attempt of a run, built in one place: history window → journal and today's counters →
delivery channel → the agent's parts (``agent_factory.session_agent``), with the wake prompt.

The wake (``wake/run.py``) builds it with the real store, the session's delivery channels and the
run's DynamoDB journal; ``agentwake runs replay`` builds it with the same function, injecting a
dry channel, an in-memory journal and a read-only store. So the prompt a replay asks with is the
prompt the wake asked with, by construction. Either then runs ``attempt.agent.run()``: the agent
builds its ledger, asks the prompt for its messages, builds its chain and tools, and runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from agentwake.delivery import Declined, Receipt
from agentwake.domain.conversation import fit_window
from agentwake.domain.steps import is_tool_result
from agentwake.errors import DeliveryError, StepInterrupted
from agentwake.wake.agent_factory import session_agent
from agentwake.wake.prompt import WakePrompt

if TYPE_CHECKING:
    from agentwake.agent.journal import StepJournal
    from agentwake.agent.tools import TaskStarter, ToolContext
    from agentwake.agent.tools.cancel_task import TaskCanceller
    from agentwake.agent.woken import WokenAgent
    from agentwake.delivery import Delivery, DeliveryChannel
    from agentwake.domain.models import SessionConfig, Task
    from agentwake.store.port import Counters, DailyUsage, Recorder
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
    usage: DailyUsage | None = None,
    deadline: float | None = None,
    journal: StepJournal | None = None,
    channel: DeliveryChannel | None = None,
    dry_run: bool = False,
    number: int | None = None,
) -> Attempt:
    """Build the attempt's agent (it is built and run by ``attempt.agent.run()``).

    ``fresh``: a first attempt, whose journal is empty and is not read. ``usage``: the session's
    counters of today as the lease's transaction checked them (None: read here, one GetItem).
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
    # today's counters of a session with daily limits: as the lease's transaction checked them
    # (counted on the day they were read), else read below
    checked = usage if usage is not None and usage.session_id == session.session_id else None
    counters = None
    if session.has_daily_limits:
        counters = store.daily.counters(session.session_id, day=checked.day if checked else None)
    recorder: Recorder | None = None
    if journal is None:
        counting = counters if session.max_tokens_per_day is not None else None
        journal = recorder = store.journals.journal(spec.run_id, fresh=fresh, counters=counting, attempt=number)
    tokens_today = deliveries_today = 0
    if checked is not None and counters is not None:
        tokens_today, deliveries_today = checked.tokens, checked.deliveries
    elif counters is not None:
        tokens_today, deliveries_today = counters.read()
    if channel is None:
        if recorder is None:
            raise ValueError("an injected journal comes with its channel (a replay's records nothing)")
        # the journal records the deliveries: each lands with the step that reports it
        channel = RecordingChannel(channels_for(session, deps), recorder, counters)
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


def channels_for(session: SessionConfig, deps: WakeDeps) -> Callable[[str], DeliveryChannel]:
    """Each target session's own delivery channel (an admin run may message other sessions)."""
    from agentwake.delivery.kit import ChannelKit

    # the store's connections port exists where the stack has a push API (store/push.py)
    kit = ChannelKit(settings=deps.settings, clock=deps.clock, connections=getattr(deps.store, "connections", None))
    built = {session.session_id: deps.channel_factory(session.delivery, kit)}

    def channel_for(session_id: str) -> DeliveryChannel:
        if session_id not in built:
            target = deps.store.records.get_session(session_id)
            if target is None:
                raise DeliveryError(f"there is no session {session_id!r} to message")
            built[session_id] = deps.channel_factory(target.delivery, kit)
        return built[session_id]

    return channel_for


def receipts_of(answer: Any) -> list[Receipt]:
    """The receipts a channel answered (one, or a route's list); no receipt, no delivery. A channel
    that declined as the last resort (a WebSocket with no open page) keeps the delivery unread."""
    if isinstance(answer, Receipt):
        return [answer]
    if isinstance(answer, Declined):
        return [Receipt(channel=answer.channel, target=answer.target, extra={"unread": True})]
    if isinstance(answer, list | tuple) and answer and all(isinstance(r, Receipt) for r in answer):
        return list(answer)
    raise StepInterrupted(f"a delivery channel answered {type(answer).__name__} instead of a receipt: nothing recorded")


class RecordingChannel:
    """Sends through the target session's own channel; a delivery already recorded is never sent
    again, and each delivered message is appended to that session's history whatever the run's
    outcome later: the DynamoDB journal stages it and writes it in the same transaction as the
    step that reports the send — the tool result, or for deliver_final's answer its
    ``final.delivery`` entry, which the commit writes (docs/durability.md).

    When that transaction fails (throttled, refused, an error, a lost answer), the delivery is not
    lost: a lost answer is read back first (the write may have landed), and what did not land —
    marker, history entry, the tool result — is written by the run's failure transaction, as
    deliver_final's answer is; a retry then finds the marker and sends nothing.

    The at-least-once edge: a crash after ``send`` and before the transaction that records the
    delivery (the tool step's write; for deliver_final's answer, the commit) with no failure
    transaction after it (a hard kill, the table unreachable) means a retry sends the same delivery
    id again; receivers drop it by ``X-Agentwake-Delivery-Id``.
    """

    def __init__(
        self, channel_for: Callable[[str], DeliveryChannel], recorder: Recorder, counters: Counters | None = None
    ) -> None:
        self.channel_for = channel_for
        self.recorder = recorder
        #: the session's daily counters (agentwake.store.daily), counted in the delivery's own write
        self.counters = counters
        self.sent: list[Delivery] = []

    def send(self, delivery: Delivery) -> list[Receipt] | None:
        if self.recorder.has_delivery(delivery.run_id, delivery.delivery_id):
            return None
        before_send = getattr(self.recorder, "before_send", None)
        if before_send is not None:
            before_send()  # every step kept back so far is durable before anything leaves
        # DeliveryError here (incl. an unknown target session) is a tool result the model sees
        answer = self.channel_for(delivery.session_id).send(delivery)
        receipts = receipts_of(answer)
        self.sent.append(delivery)
        try:
            extra: dict[str, Any] = {"receipts": [r.to_dict() for r in receipts]}
            if self.counters is not None and delivery.session_id == self.counters.session_id:
                extra["also"] = [self.counters.add(deliveries=1)]
            self.recorder.record_delivery(
                run_id=delivery.run_id,
                delivery_id=delivery.delivery_id,
                session_id=delivery.session_id,
                text=delivery.text,
                **extra,
            )
        except Exception as exc:
            # sent but not recorded: telling the model "error" would be a lie; abort, and the retry
            # resends the same delivery id, which receivers drop
            raise StepInterrupted(f"delivery {delivery.delivery_id} was sent but not recorded: {exc}") from exc
        return receipts
