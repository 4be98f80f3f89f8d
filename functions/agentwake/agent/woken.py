"""The woken agent of one attempt: built from its parts and run in one call, with a plain value back.

The wake gathers the parts (``wake/agent_factory.py``: provider specs with the stack's defaults, the
session's caps and prices, the journal, the channel, today's counters, the prompt). ``run`` then
does the agent's side in order: the ledger (the session's caps, today's counters, the deliveries
earlier attempts made), the opening messages from the prompt port (told what the run may still
send), the provider chain, the tools, the runner; it runs, and says how the run ended as a
``RunResult`` the commit, the failure record, the note and the metrics read without calling back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from agentwake.agent.chain import ProviderChain, RetryPolicy
from agentwake.agent.ledger import Limits, ModelCall, RunLedger
from agentwake.agent.runner import AgentState, DeliverFinal, RunEvent, Runner
from agentwake.agent.tools import TaskStarter, Tool, ToolContext, ToolRegistry
from agentwake.agent.tools.send_message import SendMessageToUser
from agentwake.errors import ConfigError

if TYPE_CHECKING:
    from agentwake.agent.gate import ParkRequest
    from agentwake.agent.journal import StepJournal
    from agentwake.agent.providers.base import Provider
    from agentwake.agent.tools.cancel_task import TaskCanceller
    from agentwake.clock import Clock
    from agentwake.delivery import DeliveryChannel
    from agentwake.domain.conversation import Message


class Prompt(Protocol):
    """The opening messages of the run, told how many messages it may still send (None: uncapped)
    and how many earlier attempts of it already sent."""

    def messages(self, *, deliveries_left: int | None, deliveries_made: int) -> list[Message]: ...


@dataclass(frozen=True)
class RunResult:
    """How one attempt's run ended (or stood when it crashed): a plain value."""

    state: AgentState
    steps_done: int
    replayed_steps: int
    #: the final answer (DONE) or why the run failed (ERROR)
    completion_text: str
    error_type: str | None
    provider_errors: dict[str, str]
    #: delivery id of the final answer when deliver_final sent it, or why it was not delivered
    final_delivery_id: str | None
    final_not_delivered: str | None
    #: messages ``send_message_to_user`` delivered in this run (every attempt), the final answer not counted
    messages_sent: int
    #: how many times the provider chain moved to a later provider
    failovers: int
    #: the model calls of the run (journaled ones too, ``replayed``)
    calls: tuple[ModelCall, ...]
    #: tokens, latency and estimated cost (agentwake.agent.ledger.usage_totals), priced
    usage: dict[str, Any]
    #: the call the run waits on for a person's decision (state PARKED; issue 35), else None
    parked: ParkRequest | None = None

    @property
    def finished(self) -> bool:
        return self.state in (AgentState.DONE, AgentState.ERROR, AgentState.PARKED)


@dataclass
class WokenAgent:
    """The parts of one attempt's agent. ``run`` builds and runs it once."""

    run_id: str
    session_id: str
    role: Literal["user", "admin"]
    prompt: Prompt
    #: provider specs, in chain order, built by ``provider_factory``
    providers: list[dict[str, Any]]
    provider_factory: Callable[[dict[str, Any]], Provider]
    retry: RetryPolicy
    clock: Clock
    #: an absolute time on ``clock``: no backoff sleeps past it, no model call starts after it
    deadline: float | None
    journal: StepJournal
    #: where send_message_to_user delivers; None: the agent is not offered it (a subagent)
    channel: DeliveryChannel | None
    limits: Limits
    max_steps: int
    deliver_final: DeliverFinal = "never"
    max_repeated_tool_calls: int | None = None
    #: the session's declared HTTP and Python tools (their modules load only when it declares some)
    tools: list[Any] = field(default_factory=list)
    #: tools built by the wake for this session (its self-wake tools), offered after the declared ones
    extra_tools: list[Any] = field(default_factory=list)
    #: tools the wake built itself: the hand-off tools of the session's subagents
    handoffs: list[Tool] = field(default_factory=list)
    #: cancels the tasks this conversation's runs started (``cancel_task``, offered when the session's
    #: agent may start tasks); None: not offered
    cancel_tasks: TaskCanceller | None = None
    #: the session's counters of today, when it has daily limits
    tokens_today: int = 0
    deliveries_today: int = 0
    #: delivery ids earlier attempts made (journal order)
    delivered: list[str] = field(default_factory=list)
    #: price table by provider id or model (``usage_totals``)
    prices: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    on_event: Callable[[RunEvent], None] | None = None
    dry_run: bool = False
    #: starts a background tool's (or subagent's) task for a call (``wake.start_task``); None: none can start
    start_task: TaskStarter | None = None
    #: built by ``build`` (None until then: the attempt never started)
    runner: Runner | None = field(default=None, init=False)

    def run(self) -> RunResult:
        """Build the runner and run it to DONE or ERROR. A crash (the journal cannot be written, a
        tool's StepInterrupted, a provider spec that cannot be built) raises; ``result`` then says
        how far the run got."""
        runner = self.build()
        runner.run()
        result = self.result()
        assert result is not None
        return result

    def build(self) -> Runner:
        """Ledger, opening messages, provider chain, tools, runner (raises ConfigError for a provider
        that cannot be built or a chain without providers)."""
        ledger = RunLedger(self.limits, tokens_today=self.tokens_today, deliveries_today=self.deliveries_today)
        for delivery_id in self.delivered:
            ledger.record_delivery(delivery_id, fresh=False)
        messages = self.prompt.messages(
            deliveries_left=ledger.remaining_deliveries(), deliveries_made=len(ledger.deliveries)
        )
        providers = [self.provider_factory(spec) for spec in self.providers]
        try:
            chain = ProviderChain(providers, retry=self.retry, clock=self.clock, deadline=self.deadline)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        messaging = (
            [] if self.channel is None else [SendMessageToUser(self.channel, final_answer_delivered=self.deliver_final)]
        )
        self.runner = Runner(
            model=chain,
            tools=ToolRegistry(
                [*messaging, *self._declared_tools(), *self._task_tools(), *self.extra_tools, *self.handoffs]
            ),
            messages=messages,
            context=ToolContext(run_id=self.run_id, session_id=self.session_id, role=self.role, dry_run=self.dry_run),
            journal=self.journal,
            max_steps=self.max_steps,
            on_event=self.on_event,
            ledger=ledger,
            max_repeated_tool_calls=self.max_repeated_tool_calls,
            deliver_final=self.deliver_final,
        )
        return self.runner

    def result(self) -> RunResult | None:
        """How the run ended, or stands after a crash; None if it never started (not built)."""
        runner = self.runner
        if runner is None:
            return None
        chain = runner.model
        return RunResult(
            state=runner.state,
            steps_done=runner.steps_done,
            replayed_steps=runner.replayed_steps,
            completion_text=runner.completion_text,
            error_type=runner.error_type,
            provider_errors=dict(runner.provider_errors),
            final_delivery_id=runner.final_delivery_id,
            final_not_delivered=runner.final_not_delivered,
            messages_sent=sum(1 for d in runner.ledger.deliveries if d != runner.final_delivery_id),
            failovers=chain.failovers if isinstance(chain, ProviderChain) else 0,
            calls=tuple(runner.ledger.calls),
            usage=runner.ledger.totals(self.prices),
            parked=runner.park,
        )

    def _task_tools(self) -> list[Any]:
        if self.cancel_tasks is None:
            return []
        from agentwake.agent.tools.cancel_task import CancelTask

        return [CancelTask(self.cancel_tasks)]

    def _declared_tools(self) -> list[Any]:
        if not self.tools:
            return []
        from agentwake.agent.tools.config import build_tools

        return build_tools(list(self.tools), session_id=self.session_id, starter=self.start_task)
