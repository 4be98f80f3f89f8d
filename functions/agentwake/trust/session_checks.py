"""A session config is checked when it is written, by the rules its wake applies.

``sessions put`` and the store's ``put_session`` both call :func:`check_session`, so a config that
can never run is refused where it is written (one ``ConfigError`` line), not at its first wake:

- it names its providers (no default provider: the scripted one runs only where a config names it);
- each provider, delivery and tool spec parses as the wake parses it;
- its subagents (``agentwake.agent.subagents``) parse, name only tools the session declares (never
  ``send_message_to_user`` or a hand-off tool), and their providers pass the provider checks;
- every secret reference is inside the stack's scope (``agentwake.trust.secrets.check_ref``: the
  ``env:`` prefix, the stack's ``SecretsPrefix`` / ``SsmPathPrefix``, no ``..``);
- a Python tool is installed, where the stack's functions run in this Python environment (the
  local stack seen from its CLI: ``ConfigRules.python_tools_here``); a Lambda bundle's packages
  are not visible from the CLI, so there the wake checks it;
- every outbound URL passes the stack's outbound policy as far as it can be judged without DNS
  (``agentwake.trust.outbound.check_url(resolve=False)``: scheme, credentials, numeric and literal
  hosts); names are resolved and checked again at the wake;
- its delivery channels, each leaf of a ``first``/``each`` route, are ones the stack offers
  (:class:`StackChannels`): an SNS topic under its ``NotifyTopicPrefix``, ``websocket`` only with its
  push API, Slack and Telegram with a bot token (the spec's ``token_ref``, scoped like every secret
  reference, or the stack's ``SlackBotTokenSecretArn`` / ``TelegramBotTokenSecretArn``).

The rules are those of the stack the config is written to: inside a function, its Settings; in
the CLI, the settings of the stack it discovered (``ConfigRules.from_env``). Both checks are the
runtime's own functions, so the messages are the ones the wake would give.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentwake.errors import ConfigError
from agentwake.trust.outbound import OutboundPolicy
from agentwake.trust.secrets import SecretScope

if TYPE_CHECKING:
    from agentwake.domain.models import SessionConfig

#: where an operator sees a session config with its provider chain
EXAMPLE_COMMAND = "agentwake sessions put --help"


def no_providers_message(session_id: str) -> str:
    return (
        f"session {session_id} names no providers: give its provider chain (primary first), e.g. "
        f'agentwake sessions put {session_id} --provider \'{{"type": "bedrock", "model_id": "..."}}\' '
        f"(an example: {EXAMPLE_COMMAND}); the scripted provider runs only where a config names it"
    )


@dataclass(frozen=True)
class StackChannels:
    """What a stack offers delivery channels (its Settings). A field that is None is not known where
    the config is written (the CLI on a stack whose functions' variables it did not read): the wake
    checks it then."""

    #: an sns topic's ARN starts with this ("" : the stack has no NotifyTopicPrefix)
    notify_topic_prefix: str | None = None
    #: the stack has a WebSocket push API (AGENTWAKE_PUSH_ENDPOINT)
    push: bool | None = None
    #: a default Slack / Telegram bot token (SlackBotTokenSecretArn / TelegramBotTokenSecretArn)
    slack_token: bool | None = None
    telegram_token: bool | None = None

    @classmethod
    def from_settings(cls, settings: Any, known: Mapping[str, str] | None = None) -> StackChannels:
        """The channels of a stack with ``settings``; ``known``: where only some variables were
        read (a CLI's view of the stack), those present in it are known, the others None."""

        def seen(name: str, value: Any) -> Any:
            return value if known is None or name in known else None

        return cls(
            notify_topic_prefix=seen("AGENTWAKE_NOTIFY_TOPIC_PREFIX", settings.notify_topic_prefix or ""),
            push=seen("AGENTWAKE_PUSH_ENDPOINT", bool(settings.push_endpoint)),
            slack_token=seen("AGENTWAKE_SLACK_TOKEN_REF", bool(settings.slack_token_ref)),
            telegram_token=seen("AGENTWAKE_TELEGRAM_TOKEN_REF", bool(settings.telegram_token_ref)),
        )


@dataclass(frozen=True)
class ConfigRules:
    """What a stack's wakes allow: its secret scope, its outbound policy and its channels."""

    scope: SecretScope = field(default_factory=SecretScope)
    policy: OutboundPolicy = field(default_factory=OutboundPolicy)
    channels: StackChannels = field(default_factory=StackChannels)
    #: the stack's functions run in this Python environment (the local stack, seen from its CLI):
    #: a Python tool must then be installed here. Elsewhere (a Lambda bundle) it is checked at the wake.
    python_tools_here: bool = False
    #: a config written over the product API for this session: a secret reference it adds must name
    #: the session's own secrets (``trust.secrets.check_own_ref``); those in ``kept`` (on the session
    #: already, set by an operator) stay as they are
    own_secrets_of: str | None = None
    kept: frozenset[str] = frozenset()
    #: not a check: the walk collects the config's secret references here (``secret_refs``)
    collect: list[str] | None = None

    @classmethod
    def from_settings(cls, settings: Any) -> ConfigRules:
        return cls(
            scope=SecretScope.from_settings(settings),
            policy=OutboundPolicy.from_settings(settings),
            channels=StackChannels.from_settings(settings),
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str], *, python_tools_here: bool = False) -> ConfigRules:
        """The rules of a function whose environment is ``env`` (``AGENTWAKE_SECRETS_PREFIX``,
        ``AGENTWAKE_OUTBOUND_ALLOW_*``, ...), read by the same Settings model the function reads."""
        from agentwake.settings import Settings

        settings = Settings.from_env({"AGENTWAKE_TABLE": "config-check", **env})
        return cls(
            scope=SecretScope.from_settings(settings),
            policy=OutboundPolicy.from_settings(settings),
            channels=StackChannels.from_settings(settings, known=env),
            python_tools_here=python_tools_here,
        )


def default_rules() -> ConfigRules:
    """This process's stack (its Settings); the deployed defaults where there are none."""
    from agentwake.settings import get_settings

    try:
        return ConfigRules.from_settings(get_settings())
    except ConfigError:
        return ConfigRules()


def check_session(config: SessionConfig, rules: ConfigRules | None = None) -> None:
    """Raise ConfigError (SecretRefRefused, OutboundRefused) for a config its wake would refuse."""
    rules = rules or default_rules()
    if not config.providers:
        raise ConfigError(no_providers_message(config.session_id))
    for raw in config.providers:
        _check_provider(raw, rules)
    _check_delivery(config.delivery, rules)
    for raw in config.tools:
        _check_tool(raw, rules, config.session_id)
    _check_subagents(config, rules)


def secret_refs(config: SessionConfig) -> frozenset[str]:
    """Every secret reference ``config`` names (providers, delivery, tools): the same walk as the checks."""
    found: list[str] = []
    collecting = ConfigRules(collect=found)
    for raw in config.providers:
        _check_provider(raw, collecting)
    _check_delivery(config.delivery, collecting)
    for raw in config.tools:
        _check_tool(raw, collecting, config.session_id)
    _check_subagents(config, collecting)
    return frozenset(found)


def _check_ref(ref: str | None, rules: ConfigRules, *, bot_token: bool = False) -> None:
    if ref is None:
        return
    if rules.collect is not None:
        rules.collect.append(ref)
        return
    from agentwake.trust.secrets import check_own_ref, check_ref

    scheme, target = check_ref(ref, rules.scope, bot_token=bot_token)
    if rules.own_secrets_of is not None and ref not in rules.kept:
        check_own_ref(ref, scheme, target, rules.scope, rules.own_secrets_of)


def _check_url(url: str, what: str, rules: ConfigRules) -> None:
    if rules.collect is not None:
        return
    from agentwake.trust.outbound import check_url

    check_url(url, rules.policy, what=what, resolve=False)


def _check_provider(raw: Any, rules: ConfigRules) -> None:
    from agentwake.agent.providers.spec import OpenAISpec, parse_spec

    spec = parse_spec(raw)
    if isinstance(spec, OpenAISpec):
        # the URL the provider posts to, named as the provider names it (openai_compat)
        _check_url(spec.base_url.rstrip("/") + "/chat/completions", f"provider {spec.id} base_url", rules)
        _check_ref(spec.api_key_ref, rules)


def _check_delivery(raw: Any, rules: ConfigRules) -> None:
    """The session's delivery: one channel, or each channel of a ``first``/``each`` route."""
    from agentwake.delivery.factory import EachSpec, FirstSpec, parse_spec

    spec = parse_spec(raw)
    for leaf in spec.channels if isinstance(spec, FirstSpec | EachSpec) else [spec]:
        _check_channel(leaf, rules)


def _check_channel(spec: Any, rules: ConfigRules) -> None:
    from agentwake.delivery.factory import SlackSpec, SnsSpec, TelegramSpec, WebhookSpec, WebSocketSpec

    stack = rules.channels
    checking = rules.collect is None
    if isinstance(spec, WebhookSpec):
        _check_url(spec.url, "webhook url", rules)
        _check_ref(spec.secret_ref, rules)
    elif isinstance(spec, SlackSpec | TelegramSpec):
        _check_ref(spec.token_ref, rules, bot_token=True)
        default = stack.slack_token if isinstance(spec, SlackSpec) else stack.telegram_token
        if checking and spec.token_ref is None and default is False:
            raise ConfigError(_no_token_message(spec, rules.scope.secrets_prefix))
    elif isinstance(spec, SnsSpec):
        if checking and stack.notify_topic_prefix is not None:
            from agentwake.delivery.sns import check_topic

            check_topic(spec.topic_arn, stack.notify_topic_prefix)
    elif isinstance(spec, WebSocketSpec) and checking and stack.push is False:
        raise ConfigError(
            "websocket channel: this stack has no WebSocket push API (its functions' AGENTWAKE_PUSH_ENDPOINT is "
            "unset), so no page can be connected to deliver to: deploy the stack with its push API, or choose "
            'another channel (e.g. {"type": "first", "channels": [{"type": "websocket"}, {"type": "slack", '
            '"channel": "C0123ABCD"}]} once it has one)'
        )


def _no_token_message(spec: Any, secrets_prefix: str) -> str:
    from agentwake.delivery.factory import SlackSpec

    if isinstance(spec, SlackSpec):
        kind, where, parameter, example = "slack", f"channel {spec.channel}", "SlackBotTokenSecretArn", "slack-bot"
    else:
        kind, where, parameter, example = (
            "telegram",
            f"chat {spec.chat_id}",
            "TelegramBotTokenSecretArn",
            "telegram-bot",
        )
    return (
        f"{kind} channel ({where}) has no bot token: set its token_ref to the secret holding it (e.g. "
        f'"token_ref": "secretsmanager:{secrets_prefix}{example}", under the stack\'s SecretsPrefix), or deploy the '
        f"stack with the parameter {parameter} (the token every {kind} channel uses by default)"
    )


def _check_subagents(config: SessionConfig, rules: ConfigRules) -> None:
    """Each subagent's spec and tools (``parse_subagents``), and its providers as the session's."""
    if not config.subagents:
        return
    from agentwake.agent.subagents import parse_subagents

    for spec in parse_subagents(config.subagents, config.tools, session_id=config.session_id):
        for raw in spec.providers:
            _check_provider(raw, rules)


def _check_tool(raw: Any, rules: ConfigRules, session_id: str) -> None:
    from agentwake.agent.tools.config import parse_tool_spec
    from agentwake.agent.tools.http import HttpToolSpec

    spec = parse_tool_spec(raw)
    if isinstance(spec, HttpToolSpec):
        _check_url(spec.url, f"url of tool {spec.name!r}", rules)
        _check_ref(spec.secret_ref, rules)
    elif rules.python_tools_here:
        from agentwake.agent.tools.entry_points import installed, missing_tool_message

        available = installed()
        if spec.name not in available:
            raise ConfigError(missing_tool_message(spec.name, session_id, available))
