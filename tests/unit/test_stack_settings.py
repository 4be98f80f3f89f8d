"""The CLI checks a session config by the rules of the stack it found: the functions' settings,
learnt from the AGENTWAKE_* environment, a local stack's recorded function environment, or a
CloudFormation stack's parameters (agentwake_ops.stack_settings)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentwake.domain.models import SessionConfig
from agentwake.errors import ConfigError, SecretRefRefused
from agentwake.trust.session_checks import check_session
from agentwake_ops.context import OpsOptions, discover
from agentwake_ops.stack_settings import config_rules


def session_config(session_id: str, providers: list[dict[str, Any]]) -> SessionConfig:
    return SessionConfig(session_id=session_id, providers=providers)


def _openai(ref: str, base_url: str = "https://llm.example.com/v1") -> list[dict[str, Any]]:
    return [{"type": "openai", "base_url": base_url, "model": "m", "api_key_ref": ref}]


class _Stack:
    """describe_stacks of a deployed stack with its own prefixes."""

    region_name = "eu-west-1"

    def client(self, *_: Any, **__: Any) -> Any:
        return self

    def describe_stacks(self, StackName: str) -> dict[str, Any]:  # noqa: N803 -- boto3's name
        return {
            "Stacks": [
                {
                    "Outputs": [{"OutputKey": "AgentTableName", "OutputValue": "t"}],
                    "Parameters": [
                        {"ParameterKey": "SecretsPrefix", "ParameterValue": "team-a/"},
                        {"ParameterKey": "SsmPathPrefix", "ParameterValue": "/team-a/"},
                        {"ParameterKey": "OpenAIApiKeySecretArn", "ParameterValue": ""},
                        {"ParameterKey": "MaxReceiveCount", "ParameterValue": "5"},
                    ],
                }
            ]
        }


def test_a_cloudformation_stack_is_checked_by_its_parameters() -> None:
    # GIVEN a deployed stack found through CloudFormation, with SecretsPrefix team-a/
    found = discover(OpsOptions(stack_name="s"), {}, read_local_state=lambda: None, session_factory=lambda *_: _Stack())
    rules = config_rules(found.settings)
    # THEN its prefixes are the rules, and its outbound policy is the template's (strict)
    assert rules.scope.secrets_prefix == "team-a/" and rules.scope.ssm_path_prefix == "/team-a/"
    assert not rules.policy.allow_http and not rules.policy.allow_loopback
    check_session(session_config("s", providers=_openai("secretsmanager:team-a/k")), rules)
    with pytest.raises(SecretRefRefused, match="'team-a/'"):
        check_session(session_config("s", providers=_openai("secretsmanager:agentwake/k")), rules)
    with pytest.raises(ConfigError, match="plain http"):
        check_session(session_config("s", providers=_openai("ssm:/team-a/k", "http://llm.example.com/v1")), rules)


def test_a_local_stack_is_checked_by_its_recorded_function_environment(tmp_path: Path) -> None:
    # GIVEN a local stack whose functions' environment (env.json) allows loopback over plain http
    env_file = tmp_path / "env.json"
    function_env = {
        "AGENTWAKE_TABLE": "t",
        "AGENTWAKE_SSM_PATH_PREFIX": "/local/",
        "AGENTWAKE_OUTBOUND_ALLOW_LOOPBACK": "1",
        "AGENTWAKE_OUTBOUND_ALLOW_HTTP": "1",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:1",
    }
    env_file.write_text(json.dumps({"BackgroundResultFunction": function_env}), encoding="utf-8")
    state = {"endpoint_url": "http://127.0.0.1:1", "outputs": {"AgentTableName": "t"}, "env_file": str(env_file)}
    found = discover(OpsOptions(), {}, read_local_state=lambda: state)
    rules = config_rules(found.settings)
    assert found.source == "local" and "AWS_ENDPOINT_URL" not in found.settings
    assert rules.policy.allow_http and rules.policy.allow_loopback and rules.scope.ssm_path_prefix == "/local/"
    check_session(session_config("s", providers=_openai("ssm:/local/k", "http://127.0.0.1:11434/v1")), rules)


def test_the_environment_is_checked_by_its_own_variables() -> None:
    found = discover(OpsOptions(), {"AGENTWAKE_TABLE": "t", "AGENTWAKE_SECRETS_PREFIX": "env-team/"})
    rules = config_rules(found.settings)
    assert rules.scope.secrets_prefix == "env-team/" and not rules.policy.allow_http
