"""Provider specs as a session's config stores them, and their validation.

The adapters (``bedrock``, ``openai_compat``) build themselves from these types, and the package
(``agentwake.agent.providers``) builds an adapter from one; both import this module, neither the
other, so the package can load its adapters lazily without an import circle.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agentwake.agent.providers.scripted import ScriptStep
from agentwake.errors import ConfigError, describe_validation_error

#: fields that would carry a key inline; refused with a pointer to ``api_key_ref``
INLINE_KEY_FIELDS = ("api_key", "apiKey", "key", "token", "authorization")


class _Spec(BaseModel):
    # built on first use: a wake validates only the provider types its session names (cold start)
    model_config = ConfigDict(extra="forbid", defer_build=True)

    #: unique within a chain; fallbacks with the same id are dropped
    id: str = ""


class ScriptedSpec(_Spec):
    type: Literal["scripted"] = "scripted"
    script: list[ScriptStep] = []

    @model_validator(mode="after")
    def _default_id(self) -> ScriptedSpec:
        self.id = self.id or "scripted"
        return self


class OpenAISpec(_Spec):
    """Any OpenAI-compatible chat-completions endpoint."""

    type: Literal["openai"] = "openai"
    base_url: str
    model: str
    #: where the API key comes from: ``env:AGENTWAKE_SECRET_NAME``, ``secretsmanager:agentwake/NAME``
    #: or ``ssm:/agentwake/name`` (scoped: see agentwake.trust.secrets). Never the key itself.
    api_key_ref: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_inline_key(cls, data: Any) -> Any:
        if isinstance(data, dict) and any(k in data for k in INLINE_KEY_FIELDS):
            raise ValueError(
                "an inline api_key is not allowed (it would be stored in the session config and shown "
                "wherever the config is): store the key as a secret and name it with api_key_ref, e.g. "
                "env:AGENTWAKE_SECRET_LLM_KEY, secretsmanager:agentwake/llm-key or ssm:/agentwake/llm-key"
            )
        return data

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        if not v.lower().startswith(("https://", "http://")):
            raise ValueError("base_url must be an https:// URL")
        return v

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
_SPECS: dict[str, type[ScriptedSpec | OpenAISpec | BedrockSpec]] = {
    "scripted": ScriptedSpec,
    "openai": OpenAISpec,
    "bedrock": BedrockSpec,
}


#: the provider types a spec may name
PROVIDER_TYPES = ("scripted", "openai", "bedrock")


def parse_spec(raw: dict[str, Any]) -> ScriptedSpec | OpenAISpec | BedrockSpec:
    """Validate a spec; a ConfigError says in one line which type or field is wrong (never a value:
    a spec may carry secrets' names and URLs)."""
    allowed = ", ".join(PROVIDER_TYPES)
    if not isinstance(raw, dict):
        raise ConfigError(f"a provider spec must be a JSON object with a type ({allowed}), got {type(raw).__name__}")
    kind = raw.get("type")
    if kind is None:
        raise ConfigError(f"a provider spec needs a type: one of {allowed}")
    # the spec class is picked by "type" (validating the whole union would build every spec model)
    cls = _SPECS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ConfigError(f"unknown provider type {str(kind)[:40]!r}: the allowed types are {allowed}")
    try:
        return cls.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(
            f"invalid {kind} provider spec: {describe_validation_error(exc, whole='(spec)', limit=5)}"
        ) from exc
