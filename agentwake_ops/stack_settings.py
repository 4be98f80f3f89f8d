"""The settings of the stack the CLI found, as its functions see them (``AGENTWAKE_*`` variables).

``sessions put`` checks a config by the rules the stack's wakes apply (its secret prefixes, its
outbound policy: ``agentwake.trust.session_checks``), so it needs the functions' settings, learnt where
the stack was found:

- the ``AGENTWAKE_*`` environment: those variables (the same ones the functions read);
- a running local stack: the functions' environment it recorded (``env_file`` of its state, the
  file ``sam local invoke --env-vars`` takes), its local outbound allowances included;
- a CloudFormation stack: its parameters ``SecretsPrefix``, ``SsmPathPrefix`` and
  ``OpenAIApiKeySecretArn`` (the template passes them to the functions as they are), and the
  channels' ``SlackBotTokenSecretArn``, ``TelegramBotTokenSecretArn`` and ``NotifyTopicPrefix`` as the
  template derives the functions' variables from them; the outbound policy is the template's,
  strict, which is also what an absent variable means.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentwake.trust.session_checks import ConfigRules

#: stack parameter -> the Settings field the template sets from it
PARAMETER_FIELDS = {
    "SecretsPrefix": "secrets_prefix",
    "SsmPathPrefix": "ssm_path_prefix",
    "OpenAIApiKeySecretArn": "openai_api_key_secret_arn",
}
#: stack parameter -> the Settings field the template sets to ``secretsmanager:`` + it ("" when empty)
TOKEN_PARAMETER_FIELDS = {
    "SlackBotTokenSecretArn": "slack_token_ref",
    "TelegramBotTokenSecretArn": "telegram_token_ref",
}
#: the function whose environment stands for the stack's (every function gets the same AGENTWAKE_*)
FUNCTION = "BackgroundResultFunction"


def _agentwake_vars(env: Mapping[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in env.items() if k.startswith("AGENTWAKE_") and v is not None}


def from_env(env: Mapping[str, str]) -> dict[str, str]:
    return _agentwake_vars(env)


def from_local_state(state: Mapping[str, Any]) -> dict[str, str]:
    """The local functions' environment as the local stack recorded it ({} if it cannot be read)."""
    try:
        functions = json.loads(Path(str(state["env_file"])).read_text(encoding="utf-8"))
    except (KeyError, OSError, ValueError):
        return {}
    env = functions.get(FUNCTION) or next(iter(functions.values()), {})
    return _agentwake_vars(env) if isinstance(env, dict) else {}


def from_parameters(parameters: Iterable[Mapping[str, Any]], stack_id: str | None = None) -> dict[str, str]:
    """A CloudFormation stack's parameters (``describe_stacks``) as the functions' variables.
    ``stack_id`` (the stack's ARN) gives the partition, region and account of its SNS topics."""
    from agentwake.settings import Settings

    values = {p.get("ParameterKey"): p.get("ParameterValue") for p in parameters}
    out = {Settings.env_name(name): str(values[key]) for key, name in PARAMETER_FIELDS.items() if values.get(key)}
    # the channels' settings, known also when empty (the stack then has no such token or topic)
    for key, name in TOKEN_PARAMETER_FIELDS.items():
        if key in values:
            out[Settings.env_name(name)] = f"secretsmanager:{values[key]}" if values[key] else ""
    arn = (stack_id or "").split(":")
    if "NotifyTopicPrefix" in values and len(arn) > 4 and arn[0] == "arn":
        prefix = values["NotifyTopicPrefix"] or ""
        topics = f"arn:{arn[1]}:sns:{arn[3]}:{arn[4]}:{prefix}" if prefix else ""
        out[Settings.env_name("notify_topic_prefix")] = topics
    return out


def config_rules(settings: Mapping[str, str], *, source: str = "") -> ConfigRules:
    """The rules the stack's wakes apply to a session config (agentwake.trust.session_checks). The local
    stack (``source`` "local") runs its functions in this Python environment: its Python tools must
    be installed here."""
    from agentwake.trust.session_checks import ConfigRules

    return ConfigRules.from_env(settings, python_tools_here=source == "local")
