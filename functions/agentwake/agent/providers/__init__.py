"""Provider specs (as stored in a session's config) and the factory that builds them.

Provider modules are imported only when a session uses them, so the cold-start path carries no
HTTP client and no Bedrock client it does not need.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from agentwake.agent.providers.base import Provider
from agentwake.agent.providers.scripted import ScriptStep
from agentwake.errors import ConfigError


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    #: unique within a chain; fallbacks with the same id are dropped
    id: str = ""


class ScriptedSpec(_Spec):
    type: Literal["scripted"] = "scripted"
    script: list[ScriptStep] = Field(default_factory=list)

    @model_validator(mode="after")
    def _default_id(self) -> ScriptedSpec:
        self.id = self.id or "scripted"
        return self


class OpenAISpec(_Spec):
    """Any OpenAI-compatible chat-completions endpoint."""

    type: Literal["openai"] = "openai"
    base_url: str
    model: str
    #: where the API key comes from: ``env:NAME``, ``secretsmanager:ARN_OR_NAME`` or ``ssm:/param/name``
    api_key_ref: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None

    @model_validator(mode="after")
    def _default_id(self) -> OpenAISpec:
        self.id = self.id or f"openai:{self.model}"
        return self


class BedrockSpec(_Spec):
    """Amazon Bedrock through the Converse API."""

    type: Literal["bedrock"] = "bedrock"
    model_id: str
    region: str | None = None
    max_tokens: int = 1024
    temperature: float | None = None

    @model_validator(mode="after")
    def _default_id(self) -> BedrockSpec:
        self.id = self.id or f"bedrock:{self.model_id}"
        return self


ProviderSpec = Annotated[ScriptedSpec | OpenAISpec | BedrockSpec, Field(discriminator="type")]
_SPEC_ADAPTER: TypeAdapter[Any] = TypeAdapter(ProviderSpec)


#: the provider types a spec may name
PROVIDER_TYPES = ("scripted", "openai", "bedrock")


def parse_spec(raw: dict[str, Any]) -> ScriptedSpec | OpenAISpec | BedrockSpec:
    """Validate a spec; a ConfigError says in one line which type or field is wrong."""
    from pydantic import ValidationError

    allowed = ", ".join(PROVIDER_TYPES)
    if not isinstance(raw, dict):
        raise ConfigError(f"a provider spec must be a JSON object with a type ({allowed}), got {type(raw).__name__}")
    kind = raw.get("type")
    if kind is None:
        raise ConfigError(f"a provider spec needs a type: one of {allowed}")
    if kind not in PROVIDER_TYPES:
        raise ConfigError(f"unknown provider type {kind!r}: the allowed types are {allowed}")
    try:
        return _SPEC_ADAPTER.validate_python(raw)  # type: ignore[no-any-return]
    except ValidationError as exc:
        # loc starts with the union's tag (the type): name the spec's own fields only
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'][1:]) or '(spec)'}: {e['msg']}" for e in exc.errors()[:5]
        )
        raise ConfigError(f"invalid {kind} provider spec: {problems}") from exc


def build_provider(spec: ScriptedSpec | OpenAISpec | BedrockSpec | dict[str, Any]) -> Provider:
    """Build one provider from its spec. Raises ConfigError for anything that cannot be built."""
    if isinstance(spec, dict):
        spec = parse_spec(spec)
    if isinstance(spec, ScriptedSpec):
        from agentwake.agent.providers.scripted import ScriptedProvider

        return ScriptedProvider(id=spec.id, script=list(spec.script))
    if isinstance(spec, OpenAISpec):
        from agentwake.agent.providers.openai_compat import OpenAICompatProvider

        return OpenAICompatProvider.from_spec(spec)
    if isinstance(spec, BedrockSpec):
        from agentwake.agent.providers.bedrock import BedrockProvider

        return BedrockProvider.from_spec(spec)
    raise ConfigError(f"unknown provider type {type(spec).__name__}")
