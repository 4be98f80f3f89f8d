"""The session's agent, as parts: provider specs with the stack's defaults, the session's caps,
prices and tools (``agent.woken.WokenAgent``, which builds and runs them in one call)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agentwake.agent.chain import RetryPolicy
from agentwake.agent.journal import StepJournal
from agentwake.agent.ledger import Limits
from agentwake.agent.providers import build_provider
from agentwake.agent.providers.base import Provider
from agentwake.agent.runner import DeliverFinal, RunEvent
from agentwake.agent.woken import Prompt, WokenAgent
from agentwake.clock import Clock
from agentwake.delivery import DeliveryChannel
from agentwake.errors import ConfigError

if TYPE_CHECKING:
    from agentwake.agent.subagents import SubagentSpec
    from agentwake.agent.tools import TaskStarter, Tool
    from agentwake.agent.tools.cancel_task import TaskCanceller
    from agentwake.domain.models import SessionConfig
    from agentwake.settings import Settings


def with_stack_defaults(spec: dict[str, Any], settings: Settings) -> dict[str, Any]:
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


def run_prices(session: SessionConfig, settings: Settings | None) -> dict[str, Any]:
    """The price table the run's usage is estimated with: the session's prices over the stack's."""
    prices: dict[str, Any] = dict(getattr(settings, "prices", None) or {})
    for key, price in (getattr(session, "prices", None) or {}).items():
        prices[key] = price.model_dump() if hasattr(price, "model_dump") else dict(price)
    return prices


def session_limits(session: SessionConfig) -> Limits:
    """A run's caps and budgets, as the session sets them."""
    return Limits(
        max_deliveries_per_run=getattr(session, "max_deliveries_per_run", None),
        max_tokens_per_run=getattr(session, "max_tokens_per_run", None),
        max_tokens_per_day=getattr(session, "max_tokens_per_day", None),
        max_deliveries_per_day=getattr(session, "max_deliveries_per_day", None),
    )


def session_agent(
    *,
    session: SessionConfig,
    run_id: str,
    prompt: Prompt,
    journal: StepJournal,
    channel: DeliveryChannel,
    clock: Clock,
    deadline: float | None,
    settings: Settings | None = None,
    provider_factory: Callable[[dict[str, Any]], Provider] = build_provider,
    retry: RetryPolicy | None = None,
    on_event: Callable[[RunEvent], None] | None = None,
    tokens_today: int = 0,
    deliveries_today: int = 0,
    delivered: list[str] | None = None,
    dry_run: bool = False,
    extra_tools: list[Any] | None = None,
    start_task: TaskStarter | None = None,
    cancel_tasks: TaskCanceller | None = None,
) -> WokenAgent:
    """The session's agent, not yet built: ``WokenAgent.run`` builds and runs it. ``tokens_today``,
    ``deliveries_today``: the session's counters of today; ``delivered``: the deliveries earlier
    attempts made; ``start_task``: starts a background tool's or subagent's task (None: none can start)."""
    if not session.providers:  # stored by an older version (put_session refuses it now): never run scripted
        from agentwake.trust.session_checks import no_providers_message

        raise ConfigError(no_providers_message(session.session_id))
    policy_final: DeliverFinal = getattr(session, "deliver_final", "never")
    return WokenAgent(
        run_id=run_id,
        session_id=session.session_id,
        role=session.role,
        prompt=prompt,
        providers=[with_stack_defaults(spec, settings) if settings is not None else spec for spec in session.providers],
        provider_factory=provider_factory,
        retry=retry
        or RetryPolicy(max_attempts=session.retry_max_attempts, base_delay=session.retry_base_delay_ms / 1000),
        clock=clock,
        deadline=deadline,
        journal=journal,
        channel=channel,
        limits=session_limits(session),
        max_steps=session.max_steps,
        deliver_final=policy_final,
        max_repeated_tool_calls=getattr(session, "max_repeated_tool_calls", None),
        tools=list(getattr(session, "tools", None) or []),
        extra_tools=list(extra_tools or ()),
        tokens_today=tokens_today,
        deliveries_today=deliveries_today,
        delivered=list(delivered or ()),
        prices=run_prices(session, settings),
        on_event=on_event,
        dry_run=dry_run,
        cancel_tasks=cancel_tasks,
        start_task=start_task,
        handoffs=_handoffs(
            session,
            clock=clock,
            deadline=deadline,
            settings=settings,
            provider_factory=provider_factory,
            retry=retry,
            start=start_task,
        ),
    )


def _handoffs(
    session: SessionConfig,
    *,
    clock: Clock,
    deadline: float | None,
    settings: Settings | None,
    provider_factory: Callable[[dict[str, Any]], Provider],
    retry: RetryPolicy | None,
    start: TaskStarter | None,
) -> list[Tool]:
    """The hand-off tools of the session's subagents (their modules load only when it has some)."""
    if not session.subagents:
        return []
    from agentwake.agent.journal import InMemoryJournal
    from agentwake.agent.subagents import parse_subagents
    from agentwake.wake.subagent_tools import subagent_tools

    def build(spec: SubagentSpec, run_id: str, task: str, until: float | None, dry_run: bool) -> WokenAgent:
        # journaled as a whole by the main run's step (the tool result), not step by step
        return subagent_agent(
            session=session,
            spec=spec,
            run_id=run_id,
            task=task,
            journal=InMemoryJournal(),
            clock=clock,
            deadline=until,
            settings=settings,
            provider_factory=provider_factory,
            retry=retry,
            dry_run=dry_run,
        )

    specs = parse_subagents(session.subagents, session.tools, session_id=session.session_id)
    return subagent_tools(specs, build=build, clock=clock, deadline=deadline, start=start)


def subagent_agent(
    *,
    session: SessionConfig,
    spec: SubagentSpec,
    run_id: str,
    task: str,
    journal: StepJournal,
    clock: Clock,
    deadline: float | None,
    settings: Settings | None = None,
    provider_factory: Callable[[dict[str, Any]], Provider] = build_provider,
    retry: RetryPolicy | None = None,
    on_event: Callable[[RunEvent], None] | None = None,
    dry_run: bool = False,
) -> WokenAgent:
    """A subagent of ``session``, not yet built, for a foreground hand-off or a ``sub:`` run: its
    persona, providers (the session's when it names none), step limit and the session's tools it
    names; no send_message_to_user (no channel), no hand-off tools, no final delivery. The session's
    run token budget applies to it; its daily limits count only the main agent's runs."""
    from agentwake.agent.subagents import SubagentPrompt

    providers = spec.providers or session.providers
    if not providers:
        from agentwake.trust.session_checks import no_providers_message

        raise ConfigError(no_providers_message(session.session_id))
    return WokenAgent(
        run_id=run_id,
        session_id=session.session_id,
        role="user",
        prompt=SubagentPrompt(persona=spec.persona, task=task),
        providers=[with_stack_defaults(p, settings) if settings is not None else p for p in providers],
        provider_factory=provider_factory,
        retry=retry
        or RetryPolicy(max_attempts=session.retry_max_attempts, base_delay=session.retry_base_delay_ms / 1000),
        clock=clock,
        deadline=deadline,
        journal=journal,
        channel=None,
        limits=Limits(max_deliveries_per_run=None, max_tokens_per_run=session.max_tokens_per_run),
        max_steps=spec.max_steps,
        deliver_final="never",
        max_repeated_tool_calls=session.max_repeated_tool_calls,
        # a background tool runs inside the subagent's own run (it is the detached work already)
        tools=[
            {k: v for k, v in t.items() if k != "background"}
            for t in session.tools
            if isinstance(t, dict) and t.get("name") in spec.tools
        ],
        prices=run_prices(session, settings),
        on_event=on_event,
        dry_run=dry_run,
    )
