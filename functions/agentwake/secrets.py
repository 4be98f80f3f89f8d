"""Resolve secret references: ``env:NAME``, ``secretsmanager:ARN_OR_NAME``, ``ssm:/param/name``.

AWS lookups go through Powertools Parameters (cached), imported only when a reference needs them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from agentwake.errors import ConfigError


def resolve_secret(ref: str, environ: Mapping[str, str] | None = None) -> str:
    scheme, sep, target = ref.partition(":")
    if not sep or not target:
        raise ConfigError(f"secret reference {ref!r} must look like env:NAME, secretsmanager:ID or ssm:NAME")
    if scheme == "env":
        env = os.environ if environ is None else environ
        value = env.get(target)
        if not value:
            raise ConfigError(f"environment variable {target} (from {ref!r}) is not set")
        return value
    if scheme == "secretsmanager":
        from aws_lambda_powertools.utilities import parameters

        try:
            return str(parameters.get_secret(target, max_age=300))
        except Exception as exc:
            raise ConfigError(f"cannot read secret {target!r}: {exc}") from exc
    if scheme == "ssm":
        from aws_lambda_powertools.utilities import parameters

        try:
            return str(parameters.get_parameter(target, decrypt=True, max_age=300))
        except Exception as exc:
            raise ConfigError(f"cannot read SSM parameter {target!r}: {exc}") from exc
    raise ConfigError(f"unknown secret scheme {scheme!r} in {ref!r} (use env:, secretsmanager: or ssm:)")
