"""Assemble the woken agent for one attempt: session → history window → journal and ledger →
wake prompt → delivery channels → runner. ``wake/run.py`` calls this once it holds the lease; it
only leases, runs, commits or fails."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentwake.agent.runner import Runner
from agentwake.errors import DeliveryError
from agentwake.wake.agent_factory import RecordingChannel, build_runner
from agentwake.wake.attention import RunBooks, open_books
from agentwake.wake.prompt import build_wake_messages

if TYPE_CHECKING:
    from agentwake.store.journal import DynamoJournal
    from agentwake.store.models import SessionConfig
    from agentwake.store.port import DailyUsage
    from agentwake.wake.run import RunSpec, WakeDeps


@dataclass
class WakeAgent:
    """The runner of one attempt and what the commit or the failure record needs from it."""

    runner: Runner
    #: the DynamoDB journal (under the daily token counter's wrapper, if the session has one)
    journal: DynamoJournal
    books: RunBooks
    channel: RecordingChannel


def assemble_agent(
    spec: RunSpec,
    deps: WakeDeps,
    session: SessionConfig,
    *,
    first_attempt: bool,
    deadline: float | None,
    on_journal: Callable[[DynamoJournal], None] | None = None,
    usage: DailyUsage | None = None,
) -> WakeAgent:
    """Build the attempt's runner. ``on_journal`` learns the journal as soon as it exists, so a
    failure while assembling still records what it holds. ``usage``: the session's counters of
    today, as the lease's transaction checked them (None: read them here)."""
    store = deps.store
    history = [
        e.to_message()
        for e in store.history_window(spec.session_id, session.history_window)
        if e.run_id != spec.run_id  # this run's own deliveries come back through the journal
    ]
    books = open_books(store, session, spec.run_id, fresh=first_attempt, usage=usage)
    journal: DynamoJournal = getattr(books.journal, "inner", books.journal)  # type: ignore[arg-type]
    if on_journal is not None:
        on_journal(journal)
    messages = build_wake_messages(
        persona=session.persona,
        kind=spec.kind,
        wake=spec.wake,
        history=history,
        deliver_final=session.deliver_final,
        deliveries_left=books.ledger.remaining_deliveries(),
        deliveries_made=len(books.ledger.deliveries),
    )
    # the journal records the deliveries: each lands with the step that reports it
    channel = RecordingChannel(channels_for(session, deps), journal, books.counters)
    runner = build_runner(
        session=session,
        run_id=spec.run_id,
        messages=messages,
        journal=books.journal,
        ledger=books.ledger,
        channel=channel,
        clock=deps.clock,
        deadline=deadline,
        settings=deps.settings,
        provider_factory=deps.provider_factory,
        retry=deps.retry,
        on_event=deps.on_event,
    )
    return WakeAgent(runner=runner, journal=journal, books=books, channel=channel)


def channels_for(session: Any, deps: WakeDeps) -> Callable[[str], Any]:
    """Each target session's own delivery channel (an admin run may message other sessions)."""
    built = {session.session_id: deps.channel_factory(session.delivery)}

    def channel_for(session_id: str) -> Any:
        if session_id not in built:
            target = deps.store.get_session(session_id)
            if target is None:
                raise DeliveryError(f"there is no session {session_id!r} to message")
            built[session_id] = deps.channel_factory(target.delivery)
        return built[session_id]

    return channel_for
