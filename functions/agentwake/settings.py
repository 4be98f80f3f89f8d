"""The environment, as one model validated once at cold start. Logic receives Settings; it never
reads ``os.environ``.

This model is the one place that declares each ``AGENTWAKE_*`` variable: its name (the field's
``validation_alias``), its default and its meaning (the field's description). template.yaml's
Globals, the operator CLI's discovery and docs/architecture.md are checked against it
(tests/unit/test_settings_names.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator

from agentwake.errors import ConfigError

#: marks a variable the deployed template leaves unset (local use only)
LOCAL_ONLY: dict[str, Any] = {"local_only": True}
#: marks a variable the template sets on one function, not in Globals
PER_FUNCTION: dict[str, Any] = {"per_function": True}
#: the most records one invocation runs side by side (a batch holds at most 10: BatchSize)
MAX_RECORD_CONCURRENCY = 10


def _env(name: str, *more: str) -> AliasChoices:
    return AliasChoices(name, *more)


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True)

    table_name: str = Field(
        min_length=1, validation_alias=_env("AGENTWAKE_TABLE", "table_name"), description="the agent table name"
    )
    result_queue_url: str | None = Field(
        default=None,
        validation_alias=_env("AGENTWAKE_RESULT_QUEUE_URL", "result_queue_url"),
        description="background-result queue URL (producers send here)",
    )
    result_dlq_url: str | None = Field(
        default=None,
        validation_alias=_env("AGENTWAKE_RESULT_DLQ_URL", "result_dlq_url"),
        description="its DLQ (permanent input errors are sent here at once)",
    )
    work_queue_url: str | None = Field(
        default=None,
        validation_alias=_env("AGENTWAKE_WORK_QUEUE_URL", "work_queue_url"),
        description="background-work queue URL (background tools, subagents and task deadlines run from here)",
    )
    work_dlq_url: str | None = Field(
        default=None,
        validation_alias=_env("AGENTWAKE_WORK_DLQ_URL", "work_dlq_url"),
        description="its DLQ (a work message no retry can help is sent here at once, with its reason)",
    )
    cron_failure_queue_url: str | None = Field(
        default=None,
        validation_alias=_env("AGENTWAKE_CRON_FAILURE_QUEUE_URL", "cron_failure_queue_url"),
        description="CronFailureQueue URL: a cron wake that fails permanently (BudgetExceeded, an invalid event) "
        "sends its record here at once instead of spending Lambda's retries",
    )
    schedule_group: str | None = Field(
        default=None,
        validation_alias=_env("AGENTWAKE_SCHEDULE_GROUP", "schedule_group"),
        description="scheduler group name",
    )
    slack_api_url: str = Field(
        default="https://slack.com/api/",
        validation_alias=_env("AGENTWAKE_SLACK_API_URL", "slack_api_url"),
        description="Slack Web API base: a stack setting, never a session field (a session cannot point a bot "
        "token at its own server)",
    )
    telegram_api_url: str = Field(
        default="https://api.telegram.org/",
        validation_alias=_env("AGENTWAKE_TELEGRAM_API_URL", "telegram_api_url"),
        description="Telegram Bot API base (a stack setting, like the Slack one)",
    )
    slack_token_ref: str | None = Field(
        default=None,
        validation_alias=_env("AGENTWAKE_SLACK_TOKEN_REF", "slack_token_ref"),
        description="the Slack bot token's secret ref (stack parameter SlackBotTokenSecretArn); a session's "
        "slack channel may name its own token_ref",
    )
    telegram_token_ref: str | None = Field(
        default=None,
        validation_alias=_env("AGENTWAKE_TELEGRAM_TOKEN_REF", "telegram_token_ref"),
        description="the Telegram bot token's secret ref (stack parameter TelegramBotTokenSecretArn)",
    )
    slack_signing_secret_ref: str | None = Field(
        default=None,
        validation_alias=_env("AGENTWAKE_SLACK_SIGNING_SECRET_REF", "slack_signing_secret_ref"),
        description="the Slack app's signing secret ref (stack parameter SlackSigningSecretArn): set, a slack "
        "channel's approval requests carry Approve/Reject buttons and POST /channels/slack/interactions "
        "verifies the clicks; unset, neither (docs/channels.md)",
    )
    telegram_webhook_secret_ref: str | None = Field(
        default=None,
        validation_alias=_env("AGENTWAKE_TELEGRAM_WEBHOOK_SECRET_REF", "telegram_webhook_secret_ref"),
        description="the secret_token given to Telegram's setWebhook (stack parameter TelegramWebhookSecretArn): "
        "set, a telegram channel's approval requests carry Approve/Reject buttons and POST "
        "/channels/telegram/updates takes the clicks; unset, neither (docs/channels.md)",
    )
    notify_topic_prefix: str | None = Field(
        default=None,
        validation_alias=_env("AGENTWAKE_NOTIFY_TOPIC_PREFIX", "notify_topic_prefix"),
        description="an sns channel's topic ARN must start with this (stack parameter NotifyTopicPrefix; IAM "
        "grants exactly these topics); unset: no sns channel",
    )
    push_endpoint: str | None = Field(
        default=None,
        validation_alias=_env("AGENTWAKE_PUSH_ENDPOINT", "push_endpoint"),
        description="the WebSocket API's connections endpoint (https://…/v1) a websocket delivery posts to; "
        "unset: no websocket channel",
    )
    push_url: str | None = Field(
        default=None,
        validation_alias=_env("AGENTWAKE_PUSH_URL", "push_url"),
        description="the WebSocket API's wss:// URL a browser connects to with a push ticket",
    )
    push_max_connections: int = Field(
        default=10,
        ge=1,
        le=1000,
        validation_alias=_env("AGENTWAKE_PUSH_MAX_CONNECTIONS", "push_max_connections"),
        description="open pages one session may have at once; a connect past it is refused",
    )
    run_timeout_margin_ms: int = Field(
        default=5000,
        ge=0,
        validation_alias=_env("AGENTWAKE_RUN_TIMEOUT_MARGIN_MS", "run_timeout_margin_ms"),
        description="margin kept before the Lambda deadline",
    )
    min_run_budget_ms: int = Field(
        default=20_000,
        ge=0,
        validation_alias=_env("AGENTWAKE_MIN_RUN_BUDGET_MS", "min_run_budget_ms"),
        description="a run is not started with less of the invocation left; the record is retried",
    )
    record_concurrency: int = Field(
        default=1,
        ge=1,
        le=MAX_RECORD_CONCURRENCY,
        validation_alias=_env("AGENTWAKE_RECORD_CONCURRENCY", "record_concurrency"),
        description="records of different sessions one invocation of the background functions runs side by "
        "side (stack parameter BackgroundRecordConcurrency); 1 runs them one after another",
    )
    journal_ttl_days: int = Field(
        default=22,
        ge=1,
        validation_alias=_env("AGENTWAKE_JOURNAL_TTL_DAYS", "journal_ttl_days"),
        description=(
            "how long journal items live (DynamoDB TTL): the DLQ's 14 days + the longest approval wait (7) + 1, "
            "so a run that waited for a person and then failed stays redrivable for the DLQ's whole life"
        ),
    )
    session_wait_limit_s: int = Field(
        default=3600,
        ge=1,
        validation_alias=_env("AGENTWAKE_SESSION_WAIT_LIMIT_S", "session_wait_limit_s"),
        description="how long a wake waits for its busy session before it gives up as SessionBusy "
        "(stack parameter SessionWaitLimit)",
    )
    max_receive_count: int = Field(
        default=5,
        ge=1,
        le=1000,
        description="the result queue's maxReceiveCount (template MaxReceiveCount): the attempts a result gets, "
        "counted across the copies re-sent while it waited for its session",
        validation_alias=_env("AGENTWAKE_MAX_RECEIVE_COUNT", "max_receive_count"),
    )
    session_wait_max_delay_s: int = Field(
        default=300,
        ge=1,
        le=900,
        validation_alias=_env("AGENTWAKE_SESSION_WAIT_MAX_DELAY_S", "session_wait_max_delay_s"),
        description="longest pause between two tries of a waiting wake (stack parameter SessionWaitMaxDelay; "
        "SQS allows 900)",
    )
    live_turn_max_hold_s: int = Field(
        default=300,
        ge=1,
        le=86400,
        validation_alias=_env("AGENTWAKE_LIVE_TURN_MAX_HOLD_S", "live_turn_max_hold_s"),
        description="the most one live turn holds its session, renewals included; a renewal past it is refused "
        "and the session handed to the next waiter",
    )
    session_wait_list_max: int = Field(
        default=100,
        ge=1,
        le=1000,
        validation_alias=_env("AGENTWAKE_SESSION_WAIT_LIST_MAX", "session_wait_list_max"),
        description="how many wakes may wait on one session's wait list; one more is dead-lettered as "
        "WaitListFull (stack parameter SessionWaitListMax)",
    )
    scheduler_role_arn: str | None = Field(
        default=None,
        validation_alias=_env("AGENTWAKE_SCHEDULER_ROLE_ARN", "scheduler_role_arn"),
        description="role of job schedules; a cron wake waiting for its session schedules itself with it",
    )
    cron_function_arn: str | None = Field(
        default=None,
        validation_alias=_env("AGENTWAKE_CRON_FUNCTION_ARN", "cron_function_arn"),
        description="the cron function's `live` alias: what the wakes an agent schedules for itself invoke. Set on "
        "the background-result function only (the cron function knows its own ARN; in Globals it would be a cycle)",
        json_schema_extra=PER_FUNCTION,
    )
    scheduler_dlq_arn: str | None = Field(
        default=None,
        validation_alias=_env("AGENTWAKE_SCHEDULER_DLQ_ARN", "scheduler_dlq_arn"),
        description="dead-letter queue of job schedules (and of a waiting cron wake's one-time schedule)",
    )
    bedrock_model_id: str | None = Field(
        default=None,
        validation_alias=_env("AGENTWAKE_BEDROCK_MODEL_ID", "bedrock_model_id"),
        description="default model for Bedrock provider specs that leave it out",
    )
    openai_base_url: str | None = Field(
        default=None,
        validation_alias=_env("AGENTWAKE_OPENAI_BASE_URL", "openai_base_url"),
        description="default base URL for OpenAI-compatible provider specs that leave it out",
    )
    openai_api_key_secret_arn: str | None = Field(
        default=None,
        validation_alias=_env("AGENTWAKE_OPENAI_API_KEY_SECRET_ARN", "openai_api_key_secret_arn"),
        description="default API-key secret for OpenAI-compatible provider specs that leave it out",
    )
    secrets_prefix: str = Field(
        default="agentwake/",
        min_length=1,
        validation_alias=_env("AGENTWAKE_SECRETS_PREFIX", "secrets_prefix"),
        description="secretsmanager: references must name a secret starting with this (stack parameter SecretsPrefix)",
    )
    ssm_path_prefix: str = Field(
        default="/agentwake/",
        min_length=2,
        validation_alias=_env("AGENTWAKE_SSM_PATH_PREFIX", "ssm_path_prefix"),
        description="ssm: references must name a parameter under this path (stack parameter SsmPathPrefix)",
    )
    outbound_allow_loopback: bool = Field(
        default=False,
        validation_alias=_env("AGENTWAKE_OUTBOUND_ALLOW_LOOPBACK", "outbound_allow_loopback"),
        description="outbound HTTP may reach loopback addresses (the local stack and tests; deployed: false)",
    )
    outbound_allow_http: bool = Field(
        default=False,
        validation_alias=_env("AGENTWAKE_OUTBOUND_ALLOW_HTTP", "outbound_allow_http"),
        description="outbound HTTP may use plain http:// (the local stack and tests; deployed: https only)",
    )
    endpoint_url: str | None = Field(
        default=None,
        validation_alias=_env("AWS_ENDPOINT_URL", "endpoint_url"),
        description="set locally to the embedded moto server; unset on AWS",
    )
    region: str | None = Field(
        default=None, validation_alias=_env("AWS_REGION", "AWS_DEFAULT_REGION", "region"), description="AWS region"
    )
    transcript: bool = Field(
        default=False,
        validation_alias=_env("AGENTWAKE_TRANSCRIPT", "transcript"),
        description="print each run's steps to stdout (the demo sets it)",
        json_schema_extra=LOCAL_ONLY,
    )

    prices: dict[str, dict[str, float]] = Field(
        default_factory=dict,
        validation_alias=_env("AGENTWAKE_PRICES", "prices"),
        description=(
            "optional price table for estimated run costs, JSON: provider id or model -> "
            "{input_per_mtok, output_per_mtok} in USD (template parameter PriceTable; see docs/woken-agent.md)"
        ),
    )

    @field_validator("prices", mode="before")
    @classmethod
    def _price_table(cls, value: object) -> object:
        return _prices(value) if isinstance(value, str) else value

    @field_validator("transcript", "outbound_allow_loopback", "outbound_allow_http", mode="before")
    @classmethod
    def _flag(cls, value: object) -> object:
        return value.lower() in ("1", "true", "yes") if isinstance(value, str) else value

    @classmethod
    def env_names(cls) -> dict[str, str]:
        """Environment variable -> field name, for every variable this model reads."""
        names: dict[str, str] = {}
        for field_name, info in cls.model_fields.items():
            alias = info.validation_alias
            if isinstance(alias, AliasChoices):
                for choice in alias.choices:
                    if isinstance(choice, str) and choice.isupper():
                        names[choice] = field_name
        return names

    @classmethod
    def local_only(cls) -> set[str]:
        """Variables only the local stack (or a developer) sets; template.yaml leaves them out."""
        return {
            env
            for env, name in cls.env_names().items()
            if _is_local_only(cls.model_fields[name].json_schema_extra) or not env.startswith("AGENTWAKE_")
        }

    @classmethod
    def per_function(cls) -> set[str]:
        """Variables template.yaml sets on one function's own Environment instead of in Globals."""
        return {
            env
            for env, name in cls.env_names().items()
            if (cls.model_fields[name].json_schema_extra or {}) == PER_FUNCTION  # type: ignore[comparison-overlap]
        }

    @classmethod
    def env_name(cls, field_name: str) -> str:
        """The (first) environment variable of a field, e.g. ``env_name("table_name") == "AGENTWAKE_TABLE"``."""
        return next(env for env, name in cls.env_names().items() if name == field_name)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        values = {name: env[name] for name in cls.env_names() if env.get(name)}
        if "AGENTWAKE_TABLE" not in values:
            raise ConfigError("AGENTWAKE_TABLE is not set: point it at the agent table (see template.yaml)")
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            problems = "; ".join(f"{e['loc'][0] if e['loc'] else '(environment)'}: {e['msg']}" for e in exc.errors())
            raise ConfigError(f"invalid environment: {problems}") from None


def _prices(raw: str | None) -> dict[str, dict[str, float]]:
    """AGENTWAKE_PRICES: a JSON object of provider id or model → {input_per_mtok, output_per_mtok}."""
    if not raw:
        return {}
    try:
        table = json.loads(raw)
        if not isinstance(table, dict):
            raise ValueError("not a JSON object")
        out = {}
        for key, price in table.items():
            if not isinstance(price, dict) or set(price) != {"input_per_mtok", "output_per_mtok"}:
                raise ValueError(f"{key!r} needs exactly input_per_mtok and output_per_mtok")
            out[str(key)] = {k: float(v) for k, v in price.items() if float(v) >= 0}
            if len(out[str(key)]) != 2:
                raise ValueError(f"{key!r} has a negative price")
        return out
    except (ValueError, TypeError) as exc:
        raise ConfigError(
            'AGENTWAKE_PRICES must be a JSON object like {"bedrock:amazon.nova-lite-v1:0": '
            f'{{"input_per_mtok": 0.06, "output_per_mtok": 0.24}}}}: {exc}'
        ) from exc


def _is_local_only(extra: object) -> bool:
    return isinstance(extra, dict) and bool(extra.get("local_only"))


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings.from_env()
