"""Resolve secret references: ``env:NAME``, ``secretsmanager:NAME_OR_ARN``, ``ssm:/param/name``.

References are scoped, and a reference outside its scope is refused before any call:

- ``env:`` names only variables starting with ``AGENTWAKE_SECRET_`` (never the function's own
  ``AWS_SECRET_ACCESS_KEY`` or any other variable of its environment);
- ``secretsmanager:`` only secrets whose name starts with the stack's ``SecretsPrefix``
  (``AGENTWAKE_SECRETS_PREFIX``), or exactly the stack's ``OpenAIApiKeySecretArn``;
- ``ssm:`` only parameters under the stack's ``SsmPathPrefix`` (``AGENTWAKE_SSM_PATH_PREFIX``);
- neither with ``..`` in the name (a path that reads as leaving the prefix is refused, whatever
  the service would make of it).

The same check runs when a session config is written (agentwake.trust.session_checks), so a reference
outside the scope is refused by ``sessions put`` and ``put_session`` with this module's message.

template.yaml turns the same prefixes into the functions' IAM grants, so what this module allows
is exactly what the deployed function may read. Every resolved value is registered with the
redactor (agentwake.trust.redact). AWS lookups go through Powertools Parameters (cached), imported only
when a reference needs them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from agentwake.errors import ConfigError, SecretRefRefused
from agentwake.trust.redact import redact, register_secret

ENV_PREFIX = "AGENTWAKE_SECRET_"
DEFAULT_SECRETS_PREFIX = "agentwake/"
DEFAULT_SSM_PATH_PREFIX = "/agentwake/"


@dataclass(frozen=True)
class SecretScope:
    """Where secret references may point (the stack parameters SecretsPrefix and SsmPathPrefix)."""

    secrets_prefix: str = DEFAULT_SECRETS_PREFIX
    ssm_path_prefix: str = DEFAULT_SSM_PATH_PREFIX
    #: one Secrets Manager ARN allowed besides the prefix (the stack's OpenAIApiKeySecretArn)
    extra_secret_arn: str | None = None
    #: the stack's bot tokens (SlackBotTokenSecretArn, TelegramBotTokenSecretArn), allowed besides the
    #: prefix only where a channel's bot token is resolved or checked (``check_ref(bot_token=True)``)
    channel_secret_arns: tuple[str, ...] = ()
    #: the stack's callback secrets (SlackSigningSecretArn, TelegramWebhookSecretArn), allowed only where
    #: the channel callback endpoint resolves them (``check_ref(callback=True)``): never a bot token
    callback_secret_arns: tuple[str, ...] = ()

    @classmethod
    def from_settings(cls, settings: object) -> SecretScope:
        refs = (getattr(settings, "slack_token_ref", None), getattr(settings, "telegram_token_ref", None))
        callback = (
            getattr(settings, "slack_signing_secret_ref", None),
            getattr(settings, "telegram_webhook_secret_ref", None),
        )
        return cls(
            callback_secret_arns=tuple(
                r.partition(":")[2] for r in callback if isinstance(r, str) and r.startswith("secretsmanager:")
            ),
            secrets_prefix=getattr(settings, "secrets_prefix", DEFAULT_SECRETS_PREFIX),
            ssm_path_prefix=getattr(settings, "ssm_path_prefix", DEFAULT_SSM_PATH_PREFIX),
            extra_secret_arn=getattr(settings, "openai_api_key_secret_arn", None),
            channel_secret_arns=tuple(
                r.partition(":")[2] for r in refs if isinstance(r, str) and r.startswith("secretsmanager:")
            ),
        )


def default_scope() -> SecretScope:
    """The scope of this deployment (from Settings); the built-in prefixes where there are none."""
    from agentwake.settings import get_settings

    try:
        return SecretScope.from_settings(get_settings())
    except ConfigError:
        return SecretScope()


def secret_name(target: str) -> str:
    """The secret's name from a name or an ARN (``arn:...:secret:NAME-AbCdEf`` keeps its suffix)."""
    if target.startswith("arn:"):
        _, sep, name = target.partition(":secret:")
        return name if sep else ""
    return target


def own_prefixes(scope: SecretScope, session_id: str) -> tuple[str, str]:
    """Where a session's own secrets live: a Secrets Manager name prefix and an SSM path."""
    return f"{scope.secrets_prefix}sessions/{session_id}/", f"{scope.ssm_path_prefix}sessions/{session_id}/"


def check_own_ref(ref: str, scheme: str, target: str, scope: SecretScope, session_id: str) -> None:
    """A reference a product writes over the API (``scheme``/``target``: as ``check_ref`` parsed it)
    must name one of the session's own secrets: the stack's prefixes are shared by every product on
    the stack, and a reference to another's secret would send it wherever this config says.
    Raises SecretRefRefused."""
    secrets_at, ssm_at = own_prefixes(scope, session_id)
    if scheme == "secretsmanager" and secret_name(target).startswith(secrets_at):
        return
    if scheme == "ssm" and target.startswith(ssm_at):
        return
    raise SecretRefRefused(
        f"secret reference {ref[:200]!r} is refused: over the product API a session names only its own secrets, "
        f"secretsmanager:{secrets_at}NAME or ssm:{ssm_at}NAME (an operator may set others with agentwake sessions put)"
    )


def check_ref(
    ref: str, scope: SecretScope | None = None, *, bot_token: bool = False, callback: bool = False
) -> tuple[str, str]:
    """``(scheme, target)`` of a reference inside the scope; raises ConfigError / SecretRefRefused.
    ``bot_token``: the reference is a Slack/Telegram channel's bot token, which may also name the
    stack's bot-token secrets (no other reference may: a webhook's secret_ref naming the Slack
    token would send it to the webhook). ``callback``: the channel callback endpoint's signing or
    webhook secret, which may name the stack's SlackSigningSecretArn / TelegramWebhookSecretArn."""
    scheme, sep, target = ref.partition(":")
    if not sep or not target:
        raise ConfigError(
            f"secret reference {ref!r} must look like env:{ENV_PREFIX}NAME, secretsmanager:NAME or ssm:/NAME"
        )
    scope = scope or default_scope()
    if scheme == "env":
        if not target.startswith(ENV_PREFIX) or target == ENV_PREFIX:
            raise SecretRefRefused(
                f"secret reference {ref!r} is refused: env: references must name a variable starting with {ENV_PREFIX!r}"
            )
        return scheme, target
    if scheme == "secretsmanager":
        name = secret_name(target)
        prefix = scope.secrets_prefix
        if (
            (scope.extra_secret_arn and target == scope.extra_secret_arn)
            or (bot_token and target in scope.channel_secret_arns)
            or (callback and target in scope.callback_secret_arns)
            or (prefix and name.startswith(prefix) and len(name) > len(prefix) and "*" not in name and ".." not in name)
        ):
            return scheme, target
        raise SecretRefRefused(
            f"secret reference {ref!r} is refused: secretsmanager: references must name a secret starting with "
            f"{prefix!r} (stack parameter SecretsPrefix), without '..'"
        )
    if scheme == "ssm":
        prefix = scope.ssm_path_prefix
        if prefix and target.startswith(prefix) and len(target) > len(prefix) and ".." not in target:
            return scheme, target
        raise SecretRefRefused(
            f"secret reference {ref!r} is refused: ssm: references must name a parameter under {prefix!r} "
            f"(stack parameter SsmPathPrefix), without '..'"
        )
    raise ConfigError(f"unknown secret scheme {scheme!r} in {ref!r} (use env:, secretsmanager: or ssm:)")


def resolve_secret(
    ref: str,
    environ: Mapping[str, str] | None = None,
    *,
    scope: SecretScope | None = None,
    bot_token: bool = False,
    callback: bool = False,
) -> str:
    scheme, target = check_ref(ref, scope, bot_token=bot_token, callback=callback)
    if scheme == "env":
        env = os.environ if environ is None else environ
        value = env.get(target)
        if not value:
            raise ConfigError(f"environment variable {target} (from {ref!r}) is not set")
        register_secret(value)
        return value
    from aws_lambda_powertools.utilities import parameters

    try:
        if scheme == "secretsmanager":
            value = str(parameters.get_secret(target, max_age=300))
        else:
            value = str(parameters.get_parameter(target, decrypt=True, max_age=300))
    except Exception as exc:
        what = "secret" if scheme == "secretsmanager" else "SSM parameter"
        raise ConfigError(f"cannot read {what} {target!r}: {redact(str(exc))}") from exc
    register_secret(value)
    return value
