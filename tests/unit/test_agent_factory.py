"""Building the agent from a session: stack defaults for provider specs, bad configs as ConfigError."""

from __future__ import annotations

import pytest

from agentwake.agent.providers import build_provider
from agentwake.errors import ConfigError
from agentwake.settings import Settings
from agentwake.wake.agent_factory import with_stack_defaults

STACK = Settings(
    table_name="t",
    bedrock_model_id="anthropic.claude-3-haiku",
    openai_base_url="http://127.0.0.1:9/v1",
    openai_api_key_secret_arn="arn:aws:secretsmanager:us-east-1:123456789012:secret:key",
)


def test_bare_provider_types_take_the_stack_parameters() -> None:
    # GIVEN specs that name only a type WHEN stack defaults are applied THEN the parameters fill them
    assert with_stack_defaults({"type": "bedrock"}, STACK)["model_id"] == "anthropic.claude-3-haiku"
    openai = with_stack_defaults({"type": "openai", "model": "m"}, STACK)
    assert openai["base_url"] == "http://127.0.0.1:9/v1"
    assert openai["api_key_ref"] == "secretsmanager:arn:aws:secretsmanager:us-east-1:123456789012:secret:key"


def test_a_session_value_wins_over_the_stack_default() -> None:
    spec = with_stack_defaults({"type": "bedrock", "model_id": "amazon.nova-lite"}, STACK)
    assert spec["model_id"] == "amazon.nova-lite"


def test_no_default_and_no_value_is_a_config_error() -> None:
    spec = with_stack_defaults({"type": "bedrock"}, Settings(table_name="t"))
    with pytest.raises(ConfigError, match="model_id"):
        build_provider(spec)
