"""Build the woken agent from a session's config: provider chain, tools, delivery channel."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentwake.agent.chain import ProviderChain, RetryPolicy
from agentwake.agent.clock import Clock
from agentwake.agent.journal import StepJournal
from agentwake.agent.ledger import Limits, RunLedger
from agentwake.agent.providers import build_provider
from agentwake.agent.providers.base import Provider
from agentwake.agent.runner import DeliverFinal, RunEvent, Runner
from agentwake.agent.tools import ToolContext, ToolRegistry
from agentwake.agent.tools.send_message import SendMessageToUser
from agentwake.agent.types import Message
from agentwake.delivery import Delivery, DeliveryChannel
from agentwake.errors import ConfigError, StepInterrupted


class RecordingChannel:
    """Sends through the target session's own channel; a delivery already recorded is never sent
    again, and each delivered message is appended to that session's history whatever the run's
    outcome later: the DynamoDB journal stages it and writes it in the same transaction as the
    step that reports the send — the tool result, or for deliver_final's answer its
    ``final.delivery`` entry, which the commit writes (docs/durability.md).

    The at-least-once edge: a crash after ``send`` and before the transaction that records the
    delivery (the tool step's write; for deliver_final's answer, the commit) means a retry sends the
    same delivery id again; receivers drop it by ``X-Agentwake-Delivery-Id``.
    """

    def __init__(self, channel_for: Callable[[str], DeliveryChannel], recorder: Any, counters: Any = None) -> None:
        self.channel_for = channel_for
        self.recorder = recorder
        #: the session's daily counters (agentwake.store.daily), counted in the delivery's own write
        self.counters = counters
        self.sent: list[Delivery] = []

    def send(self, delivery: Delivery) -> None:
        if self.recorder.has_delivery(delivery.run_id, delivery.delivery_id):
            return
        before_send = getattr(self.recorder, "before_send", None)
        if before_send is not None:
            before_send()  # every step kept back so far is durable before anything leaves
        # DeliveryError here (incl. an unknown target session) is a tool result the model sees
        self.channel_for(delivery.session_id).send(delivery)
        self.sent.append(delivery)
        try:
            extra: dict[str, Any] = {}
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


def with_stack_defaults(spec: dict[str, Any], settings: Any) -> dict[str, Any]:
    """Fill what a provider spec leaves out from the stack's parameters (BedrockModelId,
    OpenAIBaseUrl, OpenAIApiKeySecretArn), so a session may say just ``{"type": "bedrock"}``."""
    spec = dict(spec)
    if spec.get("type") == "bedrock" and not spec.get("model_id") and settings.bedrock_model_id:
        spec["model_id"] = settings.bedrock_model_id
    if spec.get("type") == "openai":
        if not spec.get("base_url") and settings.openai_base_url:
            spec["base_url"] = settings.openai_base_url
        if not spec.get("api_key_ref") and settings.openai_api_key_secret_arn:
            spec["api_key_ref"] = f"secretsmanager:{settings.openai_api_key_secret_arn}"
    return spec


def build_runner(
    *,
    session: Any,
    run_id: str,
    messages: list[Message],
    journal: StepJournal,
    channel: DeliveryChannel,
    clock: Clock,
    deadline: float | None,
    settings: Any = None,
    provider_factory: Callable[[dict[str, Any]], Provider] = build_provider,
    retry: RetryPolicy | None = None,
    on_event: Callable[[RunEvent], None] | None = None,
    dry_run: bool = False,
    ledger: RunLedger | None = None,
) -> Runner:
    """The session's runner. ``ledger`` carries its caps and budgets (``session_ledger``)."""
    if not session.providers:
        raise ConfigError(f"session {session.session_id} has no providers")
    specs = [with_stack_defaults(spec, settings) if settings is not None else spec for spec in session.providers]
    providers = [provider_factory(spec) for spec in specs]
    try:
        policy = retry or RetryPolicy(
            max_attempts=session.retry_max_attempts, base_delay=session.retry_base_delay_ms / 1000
        )
        chain = ProviderChain(providers, retry=policy, clock=clock, deadline=deadline)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    policy_final: DeliverFinal = getattr(session, "deliver_final", "never")
    return Runner(
        model=chain,
        tools=ToolRegistry(
            [SendMessageToUser(channel, final_answer_delivered=policy_final), *_declared_tools(session)]
        ),
        messages=messages,
        context=ToolContext(run_id=run_id, session_id=session.session_id, role=session.role, dry_run=dry_run),
        journal=journal,
        max_steps=session.max_steps,
        on_event=on_event,
        ledger=ledger if ledger is not None else session_ledger(session),
        max_repeated_tool_calls=getattr(session, "max_repeated_tool_calls", None),
        deliver_final=policy_final,
    )


def session_ledger(session: Any, *, tokens_today: int = 0, deliveries_today: int = 0) -> RunLedger:
    """A run's ledger with the session's caps and budgets (and today's counters, if it has daily ones)."""
    return RunLedger(
        Limits(
            max_deliveries_per_run=getattr(session, "max_deliveries_per_run", None),
            max_tokens_per_run=getattr(session, "max_tokens_per_run", None),
            max_tokens_per_day=getattr(session, "max_tokens_per_day", None),
            max_deliveries_per_day=getattr(session, "max_deliveries_per_day", None),
        ),
        tokens_today=tokens_today,
        deliveries_today=deliveries_today,
    )


def _declared_tools(session: Any) -> list[Any]:
    """HTTP and Python tools the session declares (their modules load only when it declares some)."""
    specs = getattr(session, "tools", None) or []
    if not specs:
        return []
    from agentwake.agent.tools.config import build_tools

    return build_tools(list(specs), session_id=session.session_id)
