"""The environment, as one model validated once at cold start. Logic receives Settings; it never
reads ``os.environ``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import lru_cache

from pydantic import BaseModel, ConfigDict, Field

from agentwake.errors import ConfigError


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True)

    table_name: str = Field(min_length=1)
    idempotency_table: str | None = None
    result_queue_url: str | None = None
    result_dlq_url: str | None = None
    schedule_group: str | None = None
    run_timeout_margin_ms: int = Field(default=5000, ge=0)
    #: a run is not started with less of the invocation left than this (it is handed back instead)
    min_run_budget_ms: int = Field(default=20_000, ge=0)
    #: how long journal items live (DynamoDB TTL), long enough to cover the DLQ retention
    journal_ttl_days: int = Field(default=15, ge=1)
    bedrock_model_id: str | None = None
    openai_base_url: str | None = None
    openai_api_key_secret_arn: str | None = None
    #: secretsmanager: references must name a secret starting with this (stack parameter SecretsPrefix)
    secrets_prefix: str = Field(default="agentwake/", min_length=1)
    #: ssm: references must name a parameter under this path (stack parameter SsmPathPrefix)
    ssm_path_prefix: str = Field(default="/agentwake/", min_length=2)
    #: outbound HTTP (providers, webhooks) may reach loopback addresses: the local stack and tests only
    outbound_allow_loopback: bool = False
    #: outbound HTTP may use plain http:// (the local stack and tests only; deployed: https only)
    outbound_allow_http: bool = False
    endpoint_url: str | None = None
    region: str | None = None
    #: print each run's steps to stderr (local use: AGENTWAKE_TRANSCRIPT=1)
    transcript: bool = False

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env

        def get(name: str) -> str | None:
            value = env.get(name)
            return value if value else None

        table = get("AGENTWAKE_TABLE")
        if not table:
            raise ConfigError("AGENTWAKE_TABLE is not set: point it at the agent table (see template.yaml)")
        return cls(
            table_name=table,
            idempotency_table=get("AGENTWAKE_IDEMPOTENCY_TABLE"),
            result_queue_url=get("AGENTWAKE_RESULT_QUEUE_URL"),
            result_dlq_url=get("AGENTWAKE_RESULT_DLQ_URL"),
            schedule_group=get("AGENTWAKE_SCHEDULE_GROUP"),
            run_timeout_margin_ms=int(get("AGENTWAKE_RUN_TIMEOUT_MARGIN_MS") or 5000),
            min_run_budget_ms=int(get("AGENTWAKE_MIN_RUN_BUDGET_MS") or 20_000),
            journal_ttl_days=int(get("AGENTWAKE_JOURNAL_TTL_DAYS") or 15),
            bedrock_model_id=get("AGENTWAKE_BEDROCK_MODEL_ID"),
            openai_base_url=get("AGENTWAKE_OPENAI_BASE_URL"),
            openai_api_key_secret_arn=get("AGENTWAKE_OPENAI_API_KEY_SECRET_ARN"),
            secrets_prefix=get("AGENTWAKE_SECRETS_PREFIX") or "agentwake/",
            ssm_path_prefix=get("AGENTWAKE_SSM_PATH_PREFIX") or "/agentwake/",
            outbound_allow_loopback=_flag(get("AGENTWAKE_OUTBOUND_ALLOW_LOOPBACK")),
            outbound_allow_http=_flag(get("AGENTWAKE_OUTBOUND_ALLOW_HTTP")),
            endpoint_url=get("AWS_ENDPOINT_URL"),
            region=get("AWS_REGION") or get("AWS_DEFAULT_REGION"),
            transcript=_flag(get("AGENTWAKE_TRANSCRIPT")),
        )


def _flag(value: str | None) -> bool:
    return (value or "").lower() in ("1", "true", "yes")


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings.from_env()
