"""Build the delivery channel a session's config names.

Session configs look like ``{"type": "log"}`` or ``{"type": "webhook", "url": "https://...",
"secret_ref": "env:NAME" | "secretsmanager:ID" | "ssm:/name", "timeout": 5}`` (``secret_ref`` and
``timeout`` optional). Unknown keys are refused: a misspelt ``secret_ref`` must not quietly turn
into unsigned deliveries. The webhook adapter is imported only when a session uses it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from agentwake.delivery import DeliveryChannel
from agentwake.errors import ConfigError, describe_validation_error


class _Spec(BaseModel):
    # built on first use: a wake validates only the channel type its session names (cold start)
    model_config = ConfigDict(extra="forbid", defer_build=True)


class LogSpec(_Spec):
    type: Literal["log"] = "log"


class WebhookSpec(_Spec):
    type: Literal["webhook"] = "webhook"
    url: str = Field(min_length=1)
    #: where the signing secret comes from; omit for unsigned deliveries
    secret_ref: str | None = None
    timeout: float = Field(default=5.0, gt=0)


DeliverySpec = Annotated[LogSpec | WebhookSpec, Field(discriminator="type")]
_SPECS: dict[str, type[LogSpec | WebhookSpec]] = {"log": LogSpec, "webhook": WebhookSpec}


def parse_spec(raw: Any) -> LogSpec | WebhookSpec:
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


def build_channel(spec: dict[str, Any]) -> DeliveryChannel:
    """Build one delivery channel from its session config. Raises ConfigError if it cannot be built."""
    parsed = parse_spec(spec)
    if isinstance(parsed, LogSpec):
        from agentwake.delivery.log import LogChannel

        return LogChannel()
    from agentwake.delivery.webhook import WebhookChannel
    from agentwake.trust.secrets import resolve_secret

    secret = resolve_secret(parsed.secret_ref) if parsed.secret_ref is not None else None
    # OutboundRefused (a ConfigError) for a URL that can never be sent to: scheme, IP literal
    return WebhookChannel(parsed.url, secret, timeout=parsed.timeout)
