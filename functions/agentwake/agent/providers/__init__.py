"""The provider factory: a spec (as stored in a session's config) in, a provider out.

Provider modules are imported only when a session uses them, so the cold-start path carries no
HTTP client and no Bedrock client it does not need. The specs live in ``spec`` (re-exported here),
which the adapters import instead of this package.
"""

from __future__ import annotations

from typing import Any

from agentwake.agent.providers.base import Provider
from agentwake.agent.providers.spec import (
    INLINE_KEY_FIELDS,
    PROVIDER_TYPES,
    BedrockSpec,
    OpenAISpec,
    ProviderSpec,
    ScriptedSpec,
    parse_spec,
)
from agentwake.errors import ConfigError

__all__ = [
    "INLINE_KEY_FIELDS",
    "PROVIDER_TYPES",
    "BedrockSpec",
    "OpenAISpec",
    "Provider",
    "ProviderSpec",
    "ScriptedSpec",
    "build_provider",
    "parse_spec",
]


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
