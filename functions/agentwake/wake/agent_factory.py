"""Build the woken agent's runner from a session's config: provider chain (with the stack's defaults), tools."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentwake.agent.chain import ProviderChain, RetryPolicy
from agentwake.agent.clock import Clock
from agentwake.agent.journal import StepJournal
from agentwake.agent.ledger import RunLedger
from agentwake.agent.providers import build_provider
from agentwake.agent.providers.base import Provider
from agentwake.agent.runner import DeliverFinal, RunEvent, Runner
from agentwake.agent.tools import ToolContext, ToolRegistry
from agentwake.agent.tools.send_message import SendMessageToUser
from agentwake.conversation import Message
from agentwake.delivery import DeliveryChannel
from agentwake.errors import ConfigError


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
    ledger: RunLedger,
    dry_run: bool = False,
) -> Runner:
    """The session's runner. ``ledger`` carries its caps and budgets (``wake.attempt.session_ledger``)."""
    if not session.providers:  # stored by an older version (put_session refuses it now): never run scripted
        from agentwake.session_checks import no_providers_message

        raise ConfigError(no_providers_message(session.session_id))
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
        ledger=ledger,
        max_repeated_tool_calls=getattr(session, "max_repeated_tool_calls", None),
        deliver_final=policy_final,
    )


def _declared_tools(session: Any) -> list[Any]:
    """HTTP and Python tools the session declares (their modules load only when it declares some)."""
    specs = getattr(session, "tools", None) or []
    if not specs:
        return []
    from agentwake.agent.tools.config import build_tools

    return build_tools(list(specs), session_id=session.session_id)
