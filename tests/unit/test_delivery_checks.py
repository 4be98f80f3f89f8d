"""A session's delivery is checked when it is written, by what the stack offers the channels
(trust/session_checks.py): every leaf of a first/each route, token refs scoped like every secret
reference, SNS topics under NotifyTopicPrefix, websocket only with a push API, Slack and Telegram
only with a bot token."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from agentwake.domain.models import SessionConfig
from agentwake.errors import ConfigError, SecretRefRefused
from agentwake.settings import Settings
from agentwake.trust.session_checks import ConfigRules, check_session, secret_refs

PREFIX = "arn:aws:sns:eu-west-1:123456789012:agentwake-notify-"
FULL_STACK = {
    "AGENTWAKE_NOTIFY_TOPIC_PREFIX": PREFIX,
    "AGENTWAKE_PUSH_ENDPOINT": "https://abc.execute-api.eu-west-1.amazonaws.com/v1",
    "AGENTWAKE_SLACK_TOKEN_REF": "secretsmanager:arn:aws:secretsmanager:eu-west-1:123456789012:secret:slack-AbCdEf",
    "AGENTWAKE_TELEGRAM_TOKEN_REF": "secretsmanager:arn:aws:secretsmanager:eu-west-1:123456789012:secret:tg-AbCdEf",
}
#: a deployed stack with none of the channel parameters set (the template passes "" then)
BARE_STACK = dict.fromkeys(FULL_STACK, "")


def rules(env: dict[str, str]) -> ConfigRules:
    """The rules inside a function of a stack whose functions' variables are ``env``."""
    return ConfigRules.from_settings(Settings.from_env({"AGENTWAKE_TABLE": "t", **env}))


def check(delivery: dict[str, Any], env: dict[str, str], **extra: Any) -> None:
    config = SessionConfig(session_id="s1", providers=[{"type": "scripted"}], delivery=delivery)
    check_session(config, replace(rules(env), **extra))


SLACK = {"type": "slack", "channel": "C0123ABCD"}
TELEGRAM = {"type": "telegram", "chat_id": -1001234567890}


def test_an_sns_topic_must_be_under_the_stack_prefix() -> None:
    check({"type": "sns", "topic_arn": PREFIX + "alerts"}, FULL_STACK)
    # WHEN the topic is another one THEN the error names the prefix and the stack parameter
    with pytest.raises(ConfigError, match=r"must start with arn:aws:sns:.*agentwake-notify-.*NotifyTopicPrefix"):
        check({"type": "sns", "topic_arn": "arn:aws:sns:eu-west-1:123456789012:billing"}, FULL_STACK)
    # AND a stack without the parameter refuses every topic, saying what to deploy
    with pytest.raises(
        ConfigError, match="publishes to no SNS topic: deploy it with the stack parameter NotifyTopicPrefix"
    ):
        check({"type": "sns", "topic_arn": PREFIX + "alerts"}, BARE_STACK)


def test_websocket_needs_the_stacks_push_api_also_inside_a_route() -> None:
    check({"type": "websocket"}, FULL_STACK)
    first = {"type": "first", "channels": [{"type": "websocket"}, SLACK]}
    check(first, FULL_STACK)
    for delivery in ({"type": "websocket"}, first):
        with pytest.raises(ConfigError, match="no WebSocket push API .*AGENTWAKE_PUSH_ENDPOINT"):
            check(delivery, {**FULL_STACK, "AGENTWAKE_PUSH_ENDPOINT": ""})


@pytest.mark.parametrize(
    ("spec", "variable", "parameter"),
    [
        (SLACK, "AGENTWAKE_SLACK_TOKEN_REF", "SlackBotTokenSecretArn"),
        (TELEGRAM, "AGENTWAKE_TELEGRAM_TOKEN_REF", "TelegramBotTokenSecretArn"),
    ],
)
def test_slack_and_telegram_need_a_token_their_own_or_the_stacks(
    spec: dict[str, Any], variable: str, parameter: str
) -> None:
    no_default = {**FULL_STACK, variable: ""}
    # GIVEN the stack's default token: enough
    check(spec, FULL_STACK)
    # AND without it, the spec's own token_ref under the stack's prefix
    check({**spec, "token_ref": "secretsmanager:agentwake/bot"}, no_default)
    # WHEN neither THEN the error says both ways to give one
    with pytest.raises(ConfigError, match=rf"no bot token: set its token_ref .*secretsmanager:agentwake/.*{parameter}"):
        check(spec, no_default)
    # AND the same inside an each route
    with pytest.raises(ConfigError, match="no bot token"):
        check({"type": "each", "channels": [{"type": "log"}, spec]}, no_default)


def test_a_token_ref_is_scoped_like_every_secret_reference() -> None:
    outside = "secretsmanager:billing/bot"
    alone = {**SLACK, "token_ref": outside}
    routed = {"type": "first", "channels": [{"type": "websocket"}, {**TELEGRAM, "token_ref": outside}]}
    for delivery in (alone, routed):
        with pytest.raises(SecretRefRefused, match="billing/bot"):
            check(delivery, FULL_STACK)
    # AND over the product API a token_ref names one of the session's own secrets
    with pytest.raises(SecretRefRefused, match="its own secrets"):
        check({**SLACK, "token_ref": "secretsmanager:agentwake/shared-bot"}, FULL_STACK, own_secrets_of="s1")


def test_a_webhook_inside_a_route_is_checked_as_alone() -> None:
    each = {"type": "each", "channels": [{"type": "webhook", "url": "http://127.0.0.1:9/hook"}, {"type": "log"}]}
    with pytest.raises(ConfigError, match="webhook url"):
        check(each, FULL_STACK)  # the deployed outbound policy: https only, no loopback


def test_secret_refs_collects_every_leafs_token_ref() -> None:
    config = SessionConfig(
        session_id="s1",
        providers=[{"type": "scripted"}],
        delivery={
            "type": "each",
            "channels": [
                {**SLACK, "token_ref": "ssm:/agentwake/slack"},
                {**TELEGRAM, "token_ref": "secretsmanager:agentwake/tg"},
                {"type": "webhook", "url": "https://h.example.com", "secret_ref": "ssm:/agentwake/hook"},
            ],
        },
    )
    assert secret_refs(config) == {"ssm:/agentwake/slack", "secretsmanager:agentwake/tg", "ssm:/agentwake/hook"}


def test_what_the_writer_does_not_know_of_the_stack_is_left_to_the_wake() -> None:
    # GIVEN the CLI on a stack whose channel variables it did not read (only the table's)
    cli = ConfigRules.from_env({"AGENTWAKE_TABLE": "t"})
    config = SessionConfig(
        session_id="s1",
        providers=[{"type": "scripted"}],
        delivery={"type": "first", "channels": [{"type": "websocket"}, SLACK, TELEGRAM]},
    )
    # THEN the config is not refused for what the stack may well have (the wake checks it)
    check_session(config, cli)
    check_session(config.model_copy(update={"delivery": {"type": "sns", "topic_arn": PREFIX + "a"}}), cli)
    # AND what it did read is checked
    bare = ConfigRules.from_env({"AGENTWAKE_TABLE": "t", **BARE_STACK})
    with pytest.raises(ConfigError, match="no WebSocket push API"):
        check_session(config, bare)


class _Stack:
    """describe_stacks of a deployed stack with NotifyTopicPrefix and no bot tokens."""

    region_name = "eu-west-1"

    def client(self, *_: Any, **__: Any) -> Any:
        return self

    def describe_stacks(self, StackName: str) -> dict[str, Any]:  # noqa: N803 -- boto3's name
        parameters = {"SlackBotTokenSecretArn": "", "TelegramBotTokenSecretArn": "", "NotifyTopicPrefix": "notify-"}
        return {
            "Stacks": [
                {
                    "StackId": "arn:aws:cloudformation:eu-west-1:123456789012:stack/agentwake/0f1e",
                    "Outputs": [{"OutputKey": "AgentTableName", "OutputValue": "t"}],
                    "Parameters": [{"ParameterKey": k, "ParameterValue": v} for k, v in parameters.items()],
                }
            ]
        }


def test_the_cli_on_a_cloudformation_stack_checks_its_channel_parameters() -> None:
    from agentwake_ops.context import OpsOptions, discover
    from agentwake_ops.stack_settings import config_rules

    # GIVEN a deployed stack found through CloudFormation: topics named notify-*, no bot tokens
    found = discover(OpsOptions(stack_name="s"), {}, read_local_state=lambda: None, session_factory=lambda *_: _Stack())
    cli = config_rules(found.settings)
    session = SessionConfig(session_id="s1", providers=[{"type": "scripted"}])
    # THEN its topics are those of its account and region under the prefix
    ok = "arn:aws:sns:eu-west-1:123456789012:notify-alerts"
    check_session(session.model_copy(update={"delivery": {"type": "sns", "topic_arn": ok}}), cli)
    with pytest.raises(ConfigError, match="must start with arn:aws:sns:eu-west-1:123456789012:notify-"):
        other = "arn:aws:sns:us-east-1:123456789012:notify-alerts"
        check_session(session.model_copy(update={"delivery": {"type": "sns", "topic_arn": other}}), cli)
    # AND a Slack channel without its own token is refused: the stack has none
    with pytest.raises(ConfigError, match="SlackBotTokenSecretArn"):
        check_session(session.model_copy(update={"delivery": SLACK}), cli)
