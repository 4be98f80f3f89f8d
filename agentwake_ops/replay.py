"""What-if replay: run a failed run again, in this process, from its journal, changing nothing.

``agentwake runs replay RUN_ID`` rebuilds the run's prompt (what woke it, kept beside its journal;
the session's persona; the history window), reuses every journaled model reply and tool result up to
the first unfinished step, and runs the later steps against the given providers (or the session's
current ones). It reaches the outcome a redrive would reach, without its effects:

- **nothing is written**: the store is read through a DynamoDB client that refuses every write
  (:class:`ReadOnlyClient`); new steps go to an in-memory journal;
- **nothing is delivered**: ``send_message_to_user`` goes to a :class:`DryChannel` that records what
  would be sent;
- **no side-effecting tool is called** (``ToolContext.dry_run``): an HTTP tool whose method is not
  GET/HEAD unless it says ``side_effect: false``, a ``side_effect: true`` one, a Python tool that
  declares effects. Each such call the replayed steps make is reported (``side_effects_not_called``,
  and in the verdicts of ``--verify``) with the answer the model got instead, ``DRY_RUN_RESULT``.

``agentwake dlq redrive --verify`` replays each selected run first and refuses to redrive one whose
replay still ends in ERROR, unless ``--force``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from agentwake.agent.chain import RetryPolicy
from agentwake.agent.providers import build_provider, parse_spec
from agentwake.agent.runner import AgentState, RunEvent
from agentwake.agent.tools import DRY_RUN_RESULT
from agentwake.clock import Clock, SystemClock
from agentwake.delivery import Delivery
from agentwake.domain.models import SessionConfig
from agentwake.errors import AgentwakeError
from agentwake.store.dynamo import DynamoStore
from agentwake_ops.runs import run_summary

#: DynamoDB operations a replay may call; every other operation is refused
READ_OPERATIONS = frozenset({"get_item", "query", "batch_get_item", "transact_get_items", "describe_table"})


class ReplayError(AgentwakeError):
    """The run cannot be replayed (unknown run, no recorded wake input, no session config)."""


class WriteRefused(AgentwakeError):
    """Something tried to write to the table during a replay."""


class ReadOnlyClient:
    """A DynamoDB client that passes reads through and raises on any other operation."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.refused: list[str] = []

    def __getattr__(self, name: str) -> Any:
        if name in READ_OPERATIONS or name in ("exceptions", "meta"):
            return getattr(self._client, name)

        def refuse(*_args: Any, **_kwargs: Any) -> Any:
            self.refused.append(name)
            raise WriteRefused(f"a replay writes nothing: refused DynamoDB {name}")

        return refuse


def read_only(store: DynamoStore) -> DynamoStore:
    """The same table, through a client that refuses writes."""
    return DynamoStore(store.table.name, client=ReadOnlyClient(store.table.db))


class ReplayJournal:
    """The run's journaled steps, read-only; new steps are kept in memory and dropped."""

    def __init__(self, recorded: dict[str, dict[str, Any]]) -> None:
        self.recorded = dict(recorded)
        self.new: dict[str, dict[str, Any]] = {}

    @property
    def entries(self) -> dict[str, dict[str, Any]]:
        return {**self.recorded, **self.new}

    def get(self, key: str) -> dict[str, Any] | None:
        return self.new.get(key, self.recorded.get(key))

    def put(self, key: str, value: dict[str, Any]) -> None:
        self.new[key] = value


class DryChannel:
    """Records what ``send_message_to_user`` would deliver; a delivery the run already made is
    noted as such (a redrive would not send it again either)."""

    def __init__(self, store: DynamoStore, in_doubt: frozenset[str] = frozenset()) -> None:
        self.store = store
        #: delivery ids whose send is in doubt (``runs.RunSummary.in_doubt``): neither sent again
        #: nor known delivered; a redrive asks the platform, or waits for the operator
        self.in_doubt = in_doubt
        self.would_send: list[Delivery] = []
        self.already_delivered: list[Delivery] = []
        self.not_sent_in_doubt: list[Delivery] = []

    def send(self, delivery: Delivery) -> None:
        if self.store.history.has_delivery(delivery.run_id, delivery.delivery_id):
            self.already_delivered.append(delivery)
        elif delivery.delivery_id in self.in_doubt:
            self.not_sent_in_doubt.append(delivery)
        else:
            self.would_send.append(delivery)


@dataclass
class ReplayOutcome:
    run_id: str
    session_id: str
    kind: str
    state: str  # DONE | ERROR | PARKED
    final_text: str = ""
    error_type: str | None = None
    provider_errors: dict[str, str] = field(default_factory=dict)
    steps: int = 0
    replayed_steps: int = 0
    original_status: str | None = None
    original_error: str | None = None
    would_deliver: list[Delivery] = field(default_factory=list)
    already_delivered: list[Delivery] = field(default_factory=list)
    #: the run's sends in doubt (``runs.RunSummary.in_doubt``): listed, never sent by a replay
    in_doubt: list[dict[str, Any]] = field(default_factory=list)
    not_called: list[dict[str, Any]] = field(default_factory=list)
    events: list[RunEvent] = field(default_factory=list)
    #: PARKED: the gated call the run would wait on ``{step, index, tool, arguments, rule}`` (nothing
    #: called, nobody asked); None otherwise
    would_park: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        """DONE, or PARKED: a run that would wait for a person is not a failure (a redrive parks it)."""
        return self.state in (AgentState.DONE.value, AgentState.PARKED.value)

    @property
    def park_note(self) -> str:
        """``would park at step 2: create_ticket needs approval (amount > 100); nothing called, nobody asked``."""
        if self.would_park is None:
            return ""
        p = self.would_park
        return f"would park at step {p['step']}: {p['tool']} needs approval ({p['rule']}); nothing called, nobody asked"

    @property
    def side_effects_note(self) -> str:
        """What the replay did not call, in a line (empty when it skipped nothing)."""
        if not self.not_called:
            return ""
        calls = ", ".join(f"{c['tool']} (step {c['step']})" for c in self.not_called)
        return f"side-effecting tool(s) not called: {calls}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "session_id": self.session_id,
            "kind": self.kind,
            "outcome": self.state,
            "final_text": self.final_text,
            "error_type": self.error_type,
            "provider_errors": self.provider_errors,
            "steps": self.steps,
            "replayed_steps": self.replayed_steps,
            "original_status": self.original_status,
            "original_error": self.original_error,
            "would_deliver": [d.to_dict() for d in self.would_deliver],
            "already_delivered": [d.to_dict() for d in self.already_delivered],
            "in_doubt": self.in_doubt,
            "side_effects_not_called": self.not_called,
            "would_park": self.would_park,
            "transcript": [{"kind": e.kind, "step": e.step, "replayed": e.replayed, **e.data} for e in self.events],
        }


def session_for_replay(
    session: SessionConfig,
    *,
    providers: list[dict[str, Any]] | None = None,
    max_steps: int | None = None,
    persona: str | None = None,
    subagent: str | None = None,
) -> SessionConfig:
    """The session's config with the what-if changes (validated as a stored config would be);
    ``subagent``: the changes are to that subagent's spec (the replay of its ``sub:`` run)."""
    data = session.model_dump()
    target = data
    if subagent is not None:
        target = next((dict(s) for s in data["subagents"] if s.get("name") == subagent), {"name": subagent})
        data["subagents"] = [target if s.get("name") == subagent else s for s in data["subagents"]]
    if providers is not None:
        for spec in providers:
            parse_spec(spec)  # ConfigError naming the problem
        target["providers"] = providers
    if max_steps is not None:
        target["max_steps"] = max_steps
    if persona is not None:
        target["persona"] = persona
    return SessionConfig.model_validate(data)


def replay(
    store: DynamoStore,
    run_id: str,
    *,
    providers: list[dict[str, Any]] | None = None,
    max_steps: int | None = None,
    persona: str | None = None,
    on_event: Callable[[RunEvent], None] | None = None,
    provider_factory: Callable[[dict[str, Any]], Any] = build_provider,
    retry: RetryPolicy | None = None,
    clock: Clock | None = None,
) -> ReplayOutcome:
    """Re-run ``run_id`` from its journal with the given changes; write and deliver nothing.

    The attempt is the wake's own (``agentwake.wake.attempt.build_attempt``: history window,
    ledger, prompt, agent), with a read-only store, an in-memory journal and a dry channel injected.
    """
    from agentwake.settings import Settings
    from agentwake.wake.attempt import build_attempt
    from agentwake.wake.spec import RunSpec, WakeDeps

    ro = read_only(store)
    run = ro.records.get_run(run_id)
    if run is None:
        raise ReplayError(
            f"no run {run_id!r} in the store (run ids look like bg:TASK_ID, sub:TASK_ID or cron:JOB_ID:TIME)"
        )
    recorded = ro.runs.get_wake(run_id)
    if recorded is None:
        raise ReplayError(
            f"run {run_id} has no recorded wake input (a failed attempt's record or a retry's start keeps it: "
            f"this run {'succeeded at once' if run.status == 'succeeded' else 'never failed with a record nor retried'}); "
            "there is nothing to replay: redrive it"
        )
    kind, wake = recorded
    stored = ro.records.get_session(run.session_id)
    if stored is None:
        raise ReplayError(
            f"session {run.session_id} has no config (agentwake sessions put {run.session_id}); the run would fail too"
        )
    subagent = str(wake.get("subagent")) if kind == "subagent" else None
    session = session_for_replay(stored, providers=providers, max_steps=max_steps, persona=persona, subagent=subagent)
    outcome = ReplayOutcome(
        run_id=run_id,
        session_id=session.session_id,
        kind=kind,
        state=AgentState.ERROR.value,
        original_status=run.status,
        original_error=run.last_error,
    )

    def collect(event: RunEvent) -> None:
        outcome.events.append(event)
        if event.kind == "tool" and not event.replayed and str(event.data.get("result", "")).startswith(DRY_RUN_RESULT):
            outcome.not_called.append(
                {"step": event.step, "tool": event.data.get("name"), "arguments": event.data.get("arguments")}
            )
        if on_event is not None:
            on_event(event)

    deps = WakeDeps(
        store=ro,
        # no stack defaults: the replay runs the session's own provider specs (and the what-if ones)
        settings=Settings(table_name=ro.table.name),
        clock=clock or SystemClock(),
        provider_factory=provider_factory,
        retry=retry,
        on_event=collect,
    )
    journal = ReplayJournal(ro.journals.journal_entries(run_id))
    outcome.in_doubt = run_summary(ro, run_id).in_doubt
    channel = DryChannel(ro, frozenset(i["delivery_id"] for i in outcome.in_doubt))
    agent = None
    try:
        if kind == "subagent":
            # a background subagent's run: built as its wake builds it (no prompt of a wake, no channel)
            from agentwake.wake.subagent import subagent_attempt

            agent = subagent_attempt(session, wake, deps, run_id=run_id, journal=journal, deadline=None, dry_run=True)
        else:
            spec = RunSpec(run_id=run_id, kind=kind, session_id=session.session_id, wake=wake)  # type: ignore[arg-type]
            agent = build_attempt(spec, session, deps, journal=journal, channel=channel, dry_run=True).agent
        agent.run()
    except WriteRefused:
        raise  # a bug: the replay must never get here quietly
    except Exception as exc:  # what would crash or fail the real run ends this replay in ERROR
        outcome.error_type = type(exc).__name__
        outcome.final_text = f"{type(exc).__name__}: {exc}"
    result = agent.result() if agent is not None else None
    if result is not None:
        outcome.steps = result.steps_done
        outcome.replayed_steps = result.replayed_steps
        outcome.provider_errors = dict(result.provider_errors)
        if result.finished:
            outcome.state = result.state.value
            outcome.final_text = result.completion_text
            outcome.error_type = result.error_type
        parked = getattr(result, "parked", None)
        if result.state is AgentState.PARKED and parked is not None:
            from agentwake.domain.approvals import shown_arguments

            outcome.would_park = {
                "step": parked.step,
                "index": parked.index,
                "tool": parked.gate.tool,
                "arguments": shown_arguments(parked.gate.arguments, parked.gate.rule.hide),
                "rule": parked.gate.words,
            }
            outcome.final_text = outcome.park_note
    outcome.would_deliver = list(channel.would_send)
    outcome.already_delivered = list(channel.already_delivered)
    return outcome


@dataclass
class Verdict:
    """Whether a DLQ message may be redriven after its replay."""

    message_id: str
    run_id: str | None
    outcome: ReplayOutcome | None
    reason: str = ""
    #: the run had already succeeded (a redriven copy, a waiter's other copy): nothing to replay
    settled: bool = False

    @property
    def ok(self) -> bool:
        return self.settled or (self.outcome is not None and self.outcome.ok)


def verify(store: DynamoStore, messages: Iterable[Any], **changes: Any) -> list[Verdict]:
    """Replay the run of each DLQ message (``triage.DlqMessage``); a message without a run, or whose
    run cannot be replayed, gets a verdict that is not ok with the reason; one whose run has
    succeeded since (a redriven copy left in the DLQ, a waiter's other copy) is ok, not replayed."""
    verdicts = []
    for msg in messages:
        if not msg.run_id:
            verdicts.append(Verdict(msg.message_id, None, None, "no run to replay (a permanent input error)"))
            continue
        run = store.records.get_run(msg.run_id)
        if run is not None and run.status == "succeeded":
            # its commit no longer journals the last reply: a replay would ask a model again, for nothing
            reason = "already succeeded: a redrive finds it succeeded and changes nothing (not replayed)"
            verdicts.append(Verdict(msg.message_id, msg.run_id, None, reason, settled=True))
            continue
        try:
            outcome = replay(store, msg.run_id, **changes)
        except ReplayError as exc:
            verdicts.append(Verdict(msg.message_id, msg.run_id, None, str(exc)))
            continue
        reason = "" if outcome.ok else f"the replay ends in ERROR ({outcome.error_type}): {outcome.final_text}"
        reason = "; ".join(part for part in (reason, outcome.park_note, outcome.side_effects_note) if part)
        verdicts.append(Verdict(msg.message_id, msg.run_id, outcome, reason))
    return verdicts
