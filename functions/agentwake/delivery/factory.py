"""Build the delivery channel a session's config names (docs/channels.md).

A session's ``delivery`` is one channel, e.g. ``{"type": "log"}``, ``{"type": "webhook", "url":
"https://..."}``, ``{"type": "slack", "channel": "C0123"}``, or a route over up to four: ``{"type":
"first", "channels": [{"type": "websocket"}, {"type": "slack", "channel": "C0123"}]}`` (push to the
open page, else Slack) or ``{"type": "each", "channels": [...]}`` (every one). Unknown keys are
refused: a misspelt ``secret_ref`` must not quietly turn into unsigned deliveries. An adapter's
module is imported only when a session uses it (cold start).

API base URLs (Slack, Telegram) and the push endpoint are stack settings, never session fields.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from agentwake.delivery import DeliveryChannel

# shown by ``agentwake sessions put --help`` and docs/channels.md (plain data: the CLI's help loads no pydantic)
from agentwake.delivery.examples import CHANNEL_EXAMPLES as CHANNEL_EXAMPLES
from agentwake.errors import ConfigError, describe_validation_error


class _Spec(BaseModel):
    # built on first use: a wake validates only the channel type its session names (cold start)
    model_config = ConfigDict(extra="forbid", defer_build=True)

    #: keys the target's receipts and in-doubt sends (a route's targets need distinct names)
    name: str | None = Field(default=None, min_length=1, max_length=40, pattern=r"^[A-Za-z0-9_.-]+$")

    def target(self) -> str:
        return self.name or str(self.type)  # type: ignore[attr-defined]


class LogSpec(_Spec):
    type: Literal["log"] = "log"


class WebhookSpec(_Spec):
    type: Literal["webhook"] = "webhook"
    url: str = Field(min_length=1)
    #: where the signing secret comes from; omit for unsigned deliveries
    secret_ref: str | None = None
    timeout: float = Field(default=5.0, gt=0)


class WebSocketSpec(_Spec):
    """Push to every page of the session open on the stack's WebSocket API."""

    type: Literal["websocket"] = "websocket"


class SlackSpec(_Spec):
    type: Literal["slack"] = "slack"
    #: a conversation id: C… (public), G… (private), D… (direct message)
    channel: str = Field(pattern=r"^[CGD][A-Z0-9]{2,}$")
    #: post into this thread (the parent message's ts)
    thread_ts: str | None = Field(default=None, pattern=r"^\d+\.\d+$")
    #: the bot token's secret ref; default: the stack's SlackBotTokenSecretArn
    token_ref: str | None = None


class TelegramSpec(_Spec):
    type: Literal["telegram"] = "telegram"
    #: a chat id (negative for groups) or a public @channelname
    chat_id: int | str
    message_thread_id: int | None = None
    token_ref: str | None = None
    #: after a crash between a send and its journal write, Telegram cannot tell whether the message
    #: went: ``dead_letter`` (default) asks an operator; ``resend`` sends again (the user may see it twice)
    unconfirmed: Literal["dead_letter", "resend"] = "dead_letter"

    @model_validator(mode="after")
    def _chat(self) -> TelegramSpec:
        if isinstance(self.chat_id, str) and not re.fullmatch(r"@[A-Za-z][A-Za-z0-9_]{3,}", self.chat_id):
            raise ValueError("chat_id must be a number or a public @channelname")
        return self


class SnsSpec(_Spec):
    type: Literal["sns"] = "sns"
    topic_arn: str = Field(pattern=r"^arn:aws[a-z-]*:sns:[a-z0-9-]+:\d{12}:[A-Za-z0-9_-]{1,256}(\.fifo)?$")


LeafSpec = Annotated[
    LogSpec | WebhookSpec | WebSocketSpec | SlackSpec | TelegramSpec | SnsSpec, Field(discriminator="type")
]


class _RouteSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    channels: list[LeafSpec] = Field(min_length=1, max_length=4)

    @model_validator(mode="after")
    def _distinct(self) -> _RouteSpec:
        names = [c.target() for c in self.channels]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"two channels are named {twice[0]!r}: give each a distinct name")
        return self


class FirstSpec(_RouteSpec):
    """The first channel that takes the delivery (only a WebSocket with no open page declines)."""

    type: Literal["first"] = "first"


class EachSpec(_RouteSpec):
    """Every channel, each with its own receipt."""

    type: Literal["each"] = "each"


DeliverySpec = Annotated[
    LogSpec | WebhookSpec | WebSocketSpec | SlackSpec | TelegramSpec | SnsSpec | FirstSpec | EachSpec,
    Field(discriminator="type"),
]
Leaf = LogSpec | WebhookSpec | WebSocketSpec | SlackSpec | TelegramSpec | SnsSpec
AnySpec = Leaf | FirstSpec | EachSpec
_SPECS: dict[str, type[AnySpec]] = {
    "log": LogSpec,
    "webhook": WebhookSpec,
    "websocket": WebSocketSpec,
    "slack": SlackSpec,
    "telegram": TelegramSpec,
    "sns": SnsSpec,
    "first": FirstSpec,
    "each": EachSpec,
}


def parse_spec(raw: Any) -> AnySpec:
    if not isinstance(raw, dict):
        raise ConfigError(f"a delivery spec must be an object like {{'type': 'log'}}, got {type(raw).__name__}")
    cls = _SPECS.get(raw.get("type"))  # type: ignore[arg-type]
    try:
        if cls is None:  # the union says what is wrong with the type
            return TypeAdapter(DeliverySpec).validate_python(raw)  # type: ignore[no-any-return]
        return cls.model_validate(raw)
    except ValidationError as exc:
        problems = describe_validation_error(exc, whole="(spec)")
        raise ConfigError(f"invalid delivery spec (type {raw.get('type')!r}): {problems}") from exc


def build_channel(spec: dict[str, Any], kit: Any = None) -> DeliveryChannel:
    """Build one delivery channel (or route) from its session config. Raises ConfigError if it
    cannot be built. ``kit``: a :class:`agentwake.delivery.kit.ChannelKit` (settings, clock, AWS
    clients, connections); channels other than log and webhook need it."""
    return build_parsed(parse_spec(spec), kit)


def build_parsed(parsed: AnySpec, kit: Any) -> DeliveryChannel:
    if isinstance(parsed, FirstSpec | EachSpec):
        from agentwake.delivery.intents import guarded
        from agentwake.delivery.route import RouteChannel

        kit = _kit(kit)
        leaves = [guarded(_build_leaf(leaf, kit), leaf, kit, in_route=True) for leaf in parsed.channels]
        return RouteChannel(parsed, leaves)
    channel = _build_leaf(parsed, kit)
    if getattr(kit, "intents", None) is not None and getattr(channel, "confirms", "receiver") != "receiver":
        from agentwake.delivery.intents import guarded  # a channel no receiver dedups (Slack, Telegram)

        return guarded(channel, parsed, kit)  # type: ignore[no-any-return]
    return channel


def _kit(kit: Any) -> Any:
    if kit is not None:
        return kit
    from agentwake.delivery.kit import ChannelKit
    from agentwake.settings import get_settings

    return ChannelKit(settings=get_settings())


def _build_leaf(parsed: Leaf, kit: Any) -> DeliveryChannel:
    if isinstance(parsed, LogSpec):
        from agentwake.delivery.log import LogChannel

        return LogChannel(name=parsed.target())
    if isinstance(parsed, WebhookSpec):
        from agentwake.delivery.webhook import WebhookChannel
        from agentwake.trust.secrets import resolve_secret

        secret = resolve_secret(parsed.secret_ref) if parsed.secret_ref is not None else None
        # OutboundRefused (a ConfigError) for a URL that can never be sent to: scheme, IP literal
        return WebhookChannel(parsed.url, secret, timeout=parsed.timeout, name=parsed.target())
    kit = _kit(kit)
    if isinstance(parsed, WebSocketSpec):
        from agentwake.delivery.websocket import WebSocketChannel

        return WebSocketChannel(parsed, kit)
    if isinstance(parsed, SlackSpec):
        from agentwake.delivery.slack import SlackChannel

        return SlackChannel(parsed, kit)
    if isinstance(parsed, TelegramSpec):
        from agentwake.delivery.telegram import TelegramChannel

        return TelegramChannel(parsed, kit)
    from agentwake.delivery.sns import SnsChannel

    return SnsChannel(parsed, kit)
