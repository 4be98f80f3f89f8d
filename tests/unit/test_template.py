"""template.yaml keeps the promises the runtime relies on: retries end in a DLQ that outlives its
source, batch item failures are reported, cron failures land on a queue, every grant is scoped, and
the environment carries the names of docs/architecture.md."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cfnlint.api import ManualArgs, lint
from cfnlint.decode.cfn_yaml import loads

from agentwake.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"
ARCHITECTURE = ROOT / "docs" / "architecture.md"

FOURTEEN_DAYS = 14 * 24 * 3600
FUNCTIONS = {
    "BackgroundResultFunction": "agentwake.handlers.background_result.handler",
    "CronWakeFunction": "agentwake.handlers.cron_wake.handler",
    "BackgroundWorkFunction": "agentwake.handlers.background_work.handler",
}
TABLES = ("AgentTable",)
QUEUES = (
    "BackgroundResultQueue",
    "BackgroundResultDLQ",
    "BackgroundWorkQueue",
    "BackgroundWorkDLQ",
    "CronFailureQueue",
    "SchedulerDLQ",
)


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return loads(TEMPLATE.read_text(), str(TEMPLATE))


@pytest.fixture(scope="module")
def lint_matches() -> list[Any]:
    """cfn-lint once per session: it takes a few seconds."""
    return lint(TEMPLATE.read_text(), config=ManualArgs(regions=["us-east-1"]))


def resources(template: dict[str, Any]) -> dict[str, Any]:
    return template["Resources"]


def props(template: dict[str, Any], logical_id: str) -> dict[str, Any]:
    return template["Resources"][logical_id]["Properties"]


def default(template: dict[str, Any], parameter: str) -> Any:
    return template["Parameters"][parameter]["Default"]


def function(template: dict[str, Any], logical_id: str) -> dict[str, Any]:
    """A function's properties with Globals.Function merged under them, as SAM does."""
    merged = dict(template["Globals"]["Function"])
    merged.update(props(template, logical_id))
    return merged


def statements(node: Any) -> Iterator[dict[str, Any]]:
    """Every IAM statement anywhere in the template, including inside Fn::If branches."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "Statement":
                yield from (value if isinstance(value, list) else [value])
            yield from statements(value)
    elif isinstance(node, list):
        for item in node:
            yield from statements(item)


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def architecture_names(pattern: str) -> set[str]:
    return set(re.findall(pattern, ARCHITECTURE.read_text(), re.MULTILINE))


# ------------------------------------------------------------------ cfn-lint


def test_cfn_lint_reports_no_errors(lint_matches: list[Any]) -> None:
    # GIVEN the template WHEN cfn-lint checks it THEN there is no error (warnings shown for context)
    errors = [m for m in lint_matches if m.rule.id.startswith("E")]
    others = [m for m in lint_matches if not m.rule.id.startswith("E")]
    assert not errors, (
        "cfn-lint errors:\n" + "\n".join(map(str, errors)) + "\nother findings:\n" + "\n".join(map(str, others))
    )


# ------------------------------------------------------------------ names agreed in docs/architecture.md


def test_every_logical_id_of_the_architecture_exists(template: dict[str, Any]) -> None:
    ids = architecture_names(r"^\| `([A-Za-z]+)` \|")
    assert ids, "no logical ids found in docs/architecture.md"
    assert ids <= set(resources(template)), ids - set(resources(template))


def test_environment_carries_every_name_of_the_architecture(template: dict[str, Any]) -> None:
    env = template["Globals"]["Function"]["Environment"]["Variables"]
    names = (
        architecture_names(r"`((?:AGENTWAKE|POWERTOOLS)_[A-Z_]+)`") - Settings.local_only() - Settings.per_function()
    )
    assert names, "no environment names found in docs/architecture.md"
    assert names <= set(env), names - set(env)
    assert env["AGENTWAKE_RUN_TIMEOUT_MARGIN_MS"] == "5000"
    assert env["POWERTOOLS_SERVICE_NAME"] == "agentwake"
    assert env["AGENTWAKE_TABLE"] == {"Ref": "AgentTable"}
    # no Powertools Idempotency table: the run record, lease and conditional commit give one outcome
    assert not any("IDEMPOTENCY" in name for name in env)
    assert env["AGENTWAKE_RESULT_QUEUE_URL"] == {"Ref": "BackgroundResultQueue"}
    assert env["AGENTWAKE_RESULT_DLQ_URL"] == {"Ref": "BackgroundResultDLQ"}
    assert env["AGENTWAKE_SCHEDULE_GROUP"] == {"Ref": "ScheduleGroup"}
    # AWS_ENDPOINT_URL is for `sam local invoke` against the local stack only: unless the
    # LocalEndpointUrl parameter is given, it is not declared at all (unset on AWS)
    assert env["AWS_ENDPOINT_URL"] == {
        "Fn::If": ["HasLocalEndpoint", {"Ref": "LocalEndpointUrl"}, {"Ref": "AWS::NoValue"}]
    }
    assert template["Parameters"]["LocalEndpointUrl"]["Default"] == ""


# ------------------------------------------------------------------ functions


@pytest.mark.parametrize("logical_id", sorted(FUNCTIONS))
def test_function_runtime_architecture_alias_and_handler(template: dict[str, Any], logical_id: str) -> None:
    fn = function(template, logical_id)
    assert resources(template)[logical_id]["Type"] == "AWS::Serverless::Function"
    assert fn["Runtime"] == "python3.13"
    assert fn["Architectures"] == ["arm64"]
    assert fn["AutoPublishAlias"] == "live"
    # active tracing off: docs/architecture.md#tracing says why
    assert fn["Tracing"] == "PassThrough"
    assert fn["Timeout"] == {"Ref": "FunctionTimeout"}
    assert fn["CodeUri"] == "functions/"
    assert fn["Handler"] == FUNCTIONS[logical_id]
    assert (ROOT / "functions" / "agentwake").is_dir()


@pytest.mark.parametrize("logical_id", sorted(FUNCTIONS))
def test_functions_are_built_by_the_makefile_that_ships_bytecode(template: dict[str, Any], logical_id: str) -> None:
    # GIVEN a function of the template
    # THEN sam build builds it with functions/Makefile (bytecode for the read-only /var/task:
    # tests/architecture/test_lambda_bundle.py checks what it makes), through the target named after it
    assert resources(template)[logical_id]["Metadata"] == {"BuildMethod": "makefile"}
    makefile = (ROOT / "functions" / "Makefile").read_text()
    assert re.search(rf"^[^#\n]*\bbuild-{logical_id}\b[^\n]*:", makefile, re.MULTILINE), f"no build-{logical_id} target"


def test_background_results_arrive_by_sqs_with_partial_batch_responses(template: dict[str, Any]) -> None:
    events = props(template, "BackgroundResultFunction")["Events"]
    (event,) = events.values()
    assert event["Type"] == "SQS"
    p = event["Properties"]
    assert p["Queue"] == {"Fn::GetAtt": ["BackgroundResultQueue", "Arn"]}
    assert p["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert p["BatchSize"] == {"Ref": "BatchSize"}
    assert p["ScalingConfig"] == {"MaximumConcurrency": {"Ref": "MaximumConcurrency"}}
    assert default(template, "BatchSize") == 10
    assert default(template, "MaximumConcurrency") == 5
    assert template["Parameters"]["MaximumConcurrency"]["MinValue"] == 2


def test_background_work_arrives_by_sqs_one_record_at_a_time_with_partial_batch_responses(
    template: dict[str, Any],
) -> None:
    # GIVEN the function that runs background tools, subagents and deadline checks
    (event,) = props(template, "BackgroundWorkFunction")["Events"].values()
    # THEN it reads its own queue, one record per invocation (a tool may run minutes), and reports
    # the records that failed alone
    assert event["Type"] == "SQS"
    p = event["Properties"]
    assert p["Queue"] == {"Fn::GetAtt": ["BackgroundWorkQueue", "Arn"]}
    assert p["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert p["BatchSize"] == 1
    assert p["ScalingConfig"] == {"MaximumConcurrency": {"Ref": "MaximumConcurrency"}}
    # AND it finds its queue and its DLQ through the environment
    env = template["Globals"]["Function"]["Environment"]["Variables"]
    assert env["AGENTWAKE_WORK_QUEUE_URL"] == {"Ref": "BackgroundWorkQueue"}
    assert env["AGENTWAKE_WORK_DLQ_URL"] == {"Ref": "BackgroundWorkDLQ"}


def test_failed_cron_wakes_go_to_the_failure_queue(template: dict[str, Any]) -> None:
    config = props(template, "CronWakeFunction")["EventInvokeConfig"]
    assert config["MaximumRetryAttempts"] == {"Ref": "CronMaximumRetryAttempts"}
    assert config["DestinationConfig"]["OnFailure"] == {
        "Type": "SQS",
        "Destination": {"Fn::GetAtt": ["CronFailureQueue", "Arn"]},
    }
    parameter = template["Parameters"]["CronMaximumRetryAttempts"]
    assert (parameter["Default"], parameter["MinValue"], parameter["MaxValue"]) == (2, 0, 2)
    assert "Events" not in props(template, "CronWakeFunction"), "schedules are created per job, not here"


@pytest.mark.parametrize("logical_id", sorted(FUNCTIONS))
def test_each_function_has_a_log_group_with_retention(template: dict[str, Any], logical_id: str) -> None:
    group = props(template, f"{logical_id}LogGroup")
    assert group["LogGroupName"] == {"Fn::Sub": f"/aws/lambda/${{{logical_id}}}"}
    assert group["RetentionInDays"] == 30


# ------------------------------------------------------------------ queues


@pytest.mark.parametrize(
    "source,dlq", [("BackgroundResultQueue", "BackgroundResultDLQ"), ("BackgroundWorkQueue", "BackgroundWorkDLQ")]
)
def test_background_queues_are_redriven_to_their_dlq_after_max_receive_count(
    template: dict[str, Any], source: str, dlq: str
) -> None:
    redrive = props(template, source)["RedrivePolicy"]
    assert redrive["deadLetterTargetArn"] == {"Fn::GetAtt": [dlq, "Arn"]}
    assert redrive["maxReceiveCount"] == {"Ref": "MaxReceiveCount"}
    assert default(template, "MaxReceiveCount") == 5


def test_visibility_timeout_default_is_at_least_six_function_timeouts(template: dict[str, Any]) -> None:
    # AWS guidance: a Lambda SQS source's visibility timeout is >= 6 x the function timeout, or a
    # record still being processed reappears and runs twice. CloudFormation cannot multiply, so the
    # two defaults are checked here.
    assert props(template, "BackgroundResultQueue")["VisibilityTimeout"] == {"Ref": "QueueVisibilityTimeout"}
    assert default(template, "QueueVisibilityTimeout") >= 6 * default(template, "FunctionTimeout")
    assert default(template, "FunctionTimeout") == 120


@pytest.mark.parametrize(
    "source_id,dlq_id", [("BackgroundResultQueue", "BackgroundResultDLQ"), ("BackgroundWorkQueue", "BackgroundWorkDLQ")]
)
def test_dlq_outlives_its_source(template: dict[str, Any], source_id: str, dlq_id: str) -> None:
    # A standard queue's DLQ keeps the original enqueue time: a shorter retention loses messages.
    source = props(template, source_id)["MessageRetentionPeriod"]
    dlq = props(template, dlq_id)["MessageRetentionPeriod"]
    assert source == 4 * 24 * 3600
    assert dlq == FOURTEEN_DAYS
    assert dlq > source
    assert props(template, "CronFailureQueue")["MessageRetentionPeriod"] == FOURTEEN_DAYS
    assert props(template, "SchedulerDLQ")["MessageRetentionPeriod"] == FOURTEEN_DAYS


@pytest.mark.parametrize(
    "source_id,dlq_id", [("BackgroundResultQueue", "BackgroundResultDLQ"), ("BackgroundWorkQueue", "BackgroundWorkDLQ")]
)
def test_dlq_allows_redrive_from_its_source_queue_only(template: dict[str, Any], source_id: str, dlq_id: str) -> None:
    # The source's ARN is spelled out (its RedrivePolicy already depends on the DLQ: no cycle),
    # so it must match the source's QueueName.
    allow = props(template, dlq_id)["RedriveAllowPolicy"]
    assert allow["redrivePermission"] == "byQueue"
    (arn,) = allow["sourceQueueArns"]
    name = props(template, source_id)["QueueName"]["Fn::Sub"]
    assert arn == {"Fn::Sub": f"arn:${{AWS::Partition}}:sqs:${{AWS::Region}}:${{AWS::AccountId}}:{name}"}


@pytest.mark.parametrize("logical_id", QUEUES)
def test_every_queue_is_encrypted(template: dict[str, Any], logical_id: str) -> None:
    assert resources(template)[logical_id]["Type"] == "AWS::SQS::Queue"
    p = props(template, logical_id)
    assert p.get("SqsManagedSseEnabled") is True or "KmsMasterKeyId" in p


def test_every_queue_of_the_template_is_checked(template: dict[str, Any]) -> None:
    queues = {k for k, v in resources(template).items() if v["Type"] == "AWS::SQS::Queue"}
    assert queues == set(QUEUES)


# ------------------------------------------------------------------ tables


@pytest.mark.parametrize("logical_id", TABLES)
def test_every_table_is_encrypted_recoverable_and_on_demand(template: dict[str, Any], logical_id: str) -> None:
    p = props(template, logical_id)
    assert p["SSESpecification"]["SSEEnabled"] is True
    assert p["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True
    assert p["BillingMode"] == "PAY_PER_REQUEST"


def test_every_table_of_the_template_is_checked(template: dict[str, Any]) -> None:
    tables = {k for k, v in resources(template).items() if v["Type"] == "AWS::DynamoDB::Table"}
    assert tables == set(TABLES)


def test_agent_table_keys_index_ttl_and_protection(template: dict[str, Any]) -> None:
    table = resources(template)["AgentTable"]
    p = table["Properties"]
    assert p["KeySchema"] == [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ]
    gsi, tree, listing, upgrade = p["GlobalSecondaryIndexes"]
    assert gsi["IndexName"] == "gsi1"
    assert [k["AttributeName"] for k in gsi["KeySchema"]] == ["gsi1pk", "gsi1sk"]
    assert gsi["Projection"] == {"ProjectionType": "ALL"}
    # the tree of a session (and runs by day written before gsi4)
    assert tree["IndexName"] == "gsi2"
    assert [k["AttributeName"] for k in tree["KeySchema"]] == ["gsi2pk", "gsi2sk"]
    assert tree["Projection"] == {"ProjectionType": "ALL"}
    # a session's runs and tasks, and runs by time (agentwake runs list without --session): keys only,
    # so that a commit's change of status writes nothing on them (issue 37)
    assert listing["IndexName"] == "gsi3"
    assert [k["AttributeName"] for k in listing["KeySchema"]] == ["gsi3pk", "gsi3sk"]
    assert listing["Projection"] == {"ProjectionType": "KEYS_ONLY"}
    condition, by_day, nothing = upgrade["Fn::If"]
    assert (condition, nothing) == ("AddRunsByDayIndex", {"Ref": "AWS::NoValue"})
    assert by_day["IndexName"] == "gsi4"
    assert [k["AttributeName"] for k in by_day["KeySchema"]] == ["gsi4pk", "gsi4sk"]
    assert by_day["Projection"] == {"ProjectionType": "KEYS_ONLY"}
    # one index added per deploy over an older stack: gsi4 waits for the second when asked to
    assert template["Conditions"]["AddRunsByDayIndex"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "UpgradeStep"}, "gsi3-only"]}]
    }
    assert default(template, "UpgradeStep") == "all"
    attributes = p["AttributeDefinitions"]
    assert {a["AttributeName"]: a["AttributeType"] for a in attributes if "AttributeName" in a} == {
        "pk": "S",
        "sk": "S",
        **{f"gsi{n}{part}": "S" for n in range(1, 4) for part in ("pk", "sk")},
    }
    # gsi4's keys are defined with it (DynamoDB refuses an attribute definition no key uses)
    assert [a["Fn::If"] for a in attributes if "Fn::If" in a] == [
        ["AddRunsByDayIndex", {"AttributeName": f"gsi4{part}", "AttributeType": "S"}, {"Ref": "AWS::NoValue"}]
        for part in ("pk", "sk")
    ]
    assert p["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    assert p["DeletionProtectionEnabled"] == {"Fn::If": ["ProtectTables", True, False]}
    assert template["Conditions"]["ProtectTables"] == {"Fn::Equals": [{"Ref": "TableDeletionProtection"}, "true"]}
    assert default(template, "TableDeletionProtection") == "true"
    assert table["DeletionPolicy"] == table["UpdateReplacePolicy"] == "Retain"


# ------------------------------------------------------------------ scheduler and IAM


def test_scheduler_role_invokes_only_the_cron_alias_and_dead_letters_to_its_queue(
    template: dict[str, Any],
) -> None:
    role = props(template, "SchedulerRole")
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "scheduler.amazonaws.com"}
    assert trust["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
    assert trust["Condition"]["ArnEquals"] == {"aws:SourceArn": {"Fn::GetAtt": ["ScheduleGroup", "Arn"]}}
    # the invoke grant is a policy of its own, so that the functions' environment may name the role
    invoke = props(template, "SchedulerRoleInvokePolicy")
    assert invoke["Roles"] == [{"Ref": "SchedulerRole"}]
    granted = {
        action: s["Resource"]
        for document in [p["PolicyDocument"] for p in role["Policies"]] + [invoke["PolicyDocument"]]
        for s in document["Statement"]
        for action in as_list(s["Action"])
    }
    assert granted == {
        "lambda:InvokeFunction": {"Ref": "CronWakeFunction.Alias"},
        "sqs:SendMessage": {"Fn::GetAtt": ["SchedulerDLQ", "Arn"]},
    }
    assert props(template, "ScheduleGroup")["Name"] == {"Fn::Sub": "${AWS::StackName}-jobs"}


def identity_statements(template: dict[str, Any]) -> list[dict[str, Any]]:
    """Allow statements of identity policies (roles, functions): not key or queue resource policies,
    whose ``Resource: "*"`` means "this key"/"this queue", and not Deny statements."""
    found = []
    for resource in template["Resources"].values():
        properties = resource.get("Properties", {})
        for key in ("Policies", "AssumeRolePolicyDocument"):
            found += [s for s in statements(properties.get(key)) if s.get("Effect") == "Allow"]
    return found


def test_no_iam_statement_grants_a_wildcard_action_or_an_unscoped_resource(template: dict[str, Any]) -> None:
    found = identity_statements(template)
    assert len(found) >= 8, "the statement walker found too few statements"
    for statement in found:
        assert "NotAction" not in statement and "NotResource" not in statement, statement
        for action in as_list(statement["Action"]):
            assert "*" not in action, statement
        if statement["Action"] != "sts:AssumeRole":
            assert "Resource" in statement, statement
            assert all(resource != "*" for resource in as_list(statement["Resource"])), statement


def policies(template: dict[str, Any], logical_id: str) -> list[Any]:
    return props(template, logical_id)["Policies"]


def table_grants(template: dict[str, Any], logical_id: str) -> dict[str, set[str]]:
    """Table logical id -> the DynamoDB actions the function is granted on it."""
    out: dict[str, set[str]] = {}
    for statement in statements(policies(template, logical_id)):
        actions = [a for a in as_list(statement["Action"]) if a.startswith("dynamodb:")]
        for resource in as_list(statement["Resource"]):
            if actions and isinstance(resource, dict) and "Fn::GetAtt" in resource:
                out.setdefault(resource["Fn::GetAtt"][0], set()).update(actions)
    return out


@pytest.mark.parametrize("logical_id", sorted(FUNCTIONS))
def test_the_functions_that_run_the_agent_may_query_the_jobs_index(template: dict[str, Any], logical_id: str) -> None:
    # the agent's schedule_wake counts its session's pending wakes from the jobs (gsi1's JOBS
    # partition: Records.list_jobs): a Query of an index needs the index's own ARN
    indexes = [
        (s["Action"], r)
        for s in statements(policies(template, logical_id))
        for r in as_list(s["Resource"])
        if "/index/" in repr(r)
    ]
    assert indexes == [("dynamodb:Query", {"Fn::Sub": "${AgentTable.Arn}/index/gsi1"})]


@pytest.mark.parametrize("logical_id", sorted(FUNCTIONS))
def test_functions_get_exactly_the_dynamodb_actions_the_code_uses(template: dict[str, Any], logical_id: str) -> None:
    # no policy template that grants more (DynamoDBCrudPolicy has Scan and BatchWriteItem)
    assert not [p for p in policies(template, logical_id) if isinstance(p, dict) and "DynamoDBCrudPolicy" in p]
    grants = table_grants(template, logical_id)
    assert grants == {
        "AgentTable": {
            "dynamodb:GetItem",
            "dynamodb:PutItem",
            "dynamodb:UpdateItem",
            "dynamodb:DeleteItem",
            "dynamodb:Query",
            "dynamodb:BatchGetItem",
            # no ConditionCheckItem: no transaction of a wake checks an item it does not write
        },
    }
    every_action = {a for s in statements(template["Resources"]) for a in as_list(s.get("Action", []))}
    assert "dynamodb:Scan" not in every_action
    # BatchWriteItem: only the product API, whose session delete removes that session's partition
    writers = {n for n in resources(template) if "dynamodb:BatchWriteItem" in repr(resources(template)[n])}
    assert writers == {"ProductApiFunction"}


@pytest.mark.parametrize("logical_id", sorted(FUNCTIONS))
def test_secret_grants_are_exactly_the_stack_prefixes(template: dict[str, Any], logical_id: str) -> None:
    # GIVEN the secret scoping parameters, with the defaults agentwake.trust.secrets uses
    assert default(template, "SecretsPrefix") == "agentwake/"
    assert default(template, "SsmPathPrefix") == "/agentwake/"
    env = template["Globals"]["Function"]["Environment"]["Variables"]
    assert env["AGENTWAKE_SECRETS_PREFIX"] == {"Ref": "SecretsPrefix"}
    assert env["AGENTWAKE_SSM_PATH_PREFIX"] == {"Ref": "SsmPathPrefix"}
    by_sid = {s.get("Sid"): s for s in statements(policies(template, logical_id))}
    # THEN Secrets Manager and SSM are readable exactly under the prefixes
    prefix_arn = "arn:${AWS::Partition}:secretsmanager:${AWS::Region}:${AWS::AccountId}:secret:${SecretsPrefix}*"
    param_arn = "arn:${AWS::Partition}:ssm:${AWS::Region}:${AWS::AccountId}:parameter${SsmPathPrefix}*"
    assert by_sid["ScopedSecrets"]["Action"] == "secretsmanager:GetSecretValue"
    assert by_sid["ScopedSecrets"]["Resource"] == {"Fn::Sub": prefix_arn}
    assert by_sid["ScopedParameters"]["Action"] == "ssm:GetParameter"
    assert by_sid["ScopedParameters"]["Resource"] == {"Fn::Sub": param_arn}
    # AND kms:Decrypt only through SSM / Secrets Manager, for those parameters / secrets only
    ssm_kms = by_sid["DecryptScopedParameters"]
    assert ssm_kms["Action"] == "kms:Decrypt"
    assert ssm_kms["Condition"]["StringEquals"] == {"kms:ViaService": {"Fn::Sub": "ssm.${AWS::Region}.amazonaws.com"}}
    assert ssm_kms["Condition"]["StringLike"] == {"kms:EncryptionContext:PARAMETER_ARN": {"Fn::Sub": param_arn}}
    sm_kms = by_sid["DecryptScopedSecrets"]
    assert sm_kms["Condition"]["StringEquals"] == {
        "kms:ViaService": {"Fn::Sub": "secretsmanager.${AWS::Region}.amazonaws.com"}
    }
    assert sm_kms["Condition"]["StringLike"] == {"kms:EncryptionContext:SecretARN": {"Fn::Sub": prefix_arn}}


def test_alarm_topic_key_lets_cloudwatch_publish(template: dict[str, Any]) -> None:
    # GIVEN the alarm topic: encrypted with the stack's own key, not the AWS managed alias/aws/sns
    assert props(template, "AlarmTopic")["KmsMasterKeyId"] == {"Ref": "AlarmTopicKey"}
    key = props(template, "AlarmTopicKey")
    assert key["EnableKeyRotation"] is True
    # THEN the key policy lets CloudWatch (the alarms) encrypt messages for the topic
    by_sid = {s["Sid"]: s for s in key["KeyPolicy"]["Statement"]}
    cloudwatch = by_sid["CloudWatchAlarmsPublishToTheTopic"]
    assert cloudwatch["Effect"] == "Allow"
    assert cloudwatch["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
    assert set(as_list(cloudwatch["Action"])) == {"kms:Decrypt", "kms:GenerateDataKey*"}
    # AND the account keeps control of the key through IAM
    assert by_sid["AccountManagesTheKeyThroughIam"]["Principal"] == {
        "AWS": {"Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:root"}
    }


def test_only_this_accounts_alarms_may_use_the_alarm_topic_key(template: dict[str, Any]) -> None:
    # GIVEN the key policy's grant to the CloudWatch service principal
    by_sid = {s["Sid"]: s for s in props(template, "AlarmTopicKey")["KeyPolicy"]["Statement"]}
    cloudwatch = by_sid["CloudWatchAlarmsPublishToTheTopic"]
    # THEN CloudWatch may use it only on behalf of this account's alarms in this Region (the
    # confused-deputy guard: another account's alarm cannot make CloudWatch use this key)
    assert cloudwatch["Condition"] == {
        "StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}},
        "ArnLike": {
            "aws:SourceArn": {"Fn::Sub": "arn:${AWS::Partition}:cloudwatch:${AWS::Region}:${AWS::AccountId}:alarm:*"}
        },
    }


def test_every_queue_refuses_requests_without_tls(template: dict[str, Any]) -> None:
    policy = props(template, "QueuesRequireTls")
    assert {q["Ref"] for q in policy["Queues"]} == set(QUEUES)
    [deny] = policy["PolicyDocument"]["Statement"]
    assert deny["Effect"] == "Deny" and deny["Principal"] == "*" and deny["Action"] == "sqs:*"
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert {r["Fn::GetAtt"][0] for r in deny["Resource"]} == set(QUEUES)


def test_cron_reserved_concurrency_is_a_parameter_off_by_default(template: dict[str, Any]) -> None:
    assert default(template, "CronReservedConcurrency") == -1
    assert props(template, "CronWakeFunction")["ReservedConcurrentExecutions"] == {
        "Fn::If": ["HasCronReservedConcurrency", {"Ref": "CronReservedConcurrency"}, {"Ref": "AWS::NoValue"}]
    }


def test_the_unsigned_chat_routes_are_throttled_and_their_function_may_be_capped(template: dict[str, Any]) -> None:
    # the only routes without SigV4: API Gateway refuses a flood before it invokes anything
    routes = props(template, "ProductApi")["RouteSettings"]
    unsigned = {
        event["Properties"]["Method"] + " " + event["Properties"]["Path"]
        for event in props(template, "ChannelCallbackFunction")["Events"].values()
        if event["Properties"].get("Auth", {}).get("Authorizer") == "NONE"
    }
    assert unsigned == {"POST /channels/slack/interactions", "POST /channels/telegram/updates"} == set(routes)
    for settings in routes.values():
        assert settings == {
            "ThrottlingRateLimit": {"Ref": "ChannelCallbackRateLimit"},
            "ThrottlingBurstLimit": {"Ref": "ChannelCallbackBurstLimit"},
        }
    assert (default(template, "ChannelCallbackRateLimit"), default(template, "ChannelCallbackBurstLimit")) == (10, 20)
    assert default(template, "ChannelCallbackReservedConcurrency") == -1
    assert props(template, "ChannelCallbackFunction")["ReservedConcurrentExecutions"] == {
        "Fn::If": [
            "HasChannelCallbackReservedConcurrency",
            {"Ref": "ChannelCallbackReservedConcurrency"},
            {"Ref": "AWS::NoValue"},
        ]
    }


def test_deployed_outbound_policy_is_https_only_without_loopback(template: dict[str, Any]) -> None:
    env = template["Globals"]["Function"]["Environment"]["Variables"]
    assert env["AGENTWAKE_OUTBOUND_ALLOW_LOOPBACK"] == "false"
    assert env["AGENTWAKE_OUTBOUND_ALLOW_HTTP"] == "false"


def sqs_grants(template: dict[str, Any], logical_id: str) -> set[tuple[str, str]]:
    """(action, queue logical id) of every SQS action a function's own policies grant."""
    return {
        (action, resource["Fn::GetAtt"][0])
        for statement in statements(policies(template, logical_id))
        for action in as_list(statement["Action"])
        if action.startswith("sqs:")
        for resource in as_list(statement["Resource"])
    }


@pytest.mark.parametrize("logical_id", sorted(FUNCTIONS))
def test_no_function_uses_an_sqs_policy_template(template: dict[str, Any], logical_id: str) -> None:
    # SAM's SQSSendMessagePolicy expands to sqs:SendMessage* (SendMessageBatch too): the code sends
    # one message at a time, so each function states exactly sqs:SendMessage instead
    templates = [
        p for p in policies(template, logical_id) if isinstance(p, dict) and any(k.startswith("SQS") for k in p)
    ]
    assert templates == []


def test_the_background_function_sends_exactly_to_the_result_dlq_and_back_to_its_queue(
    template: dict[str, Any],
) -> None:
    # permanent input errors go to the DLQ; a result waiting for its busy session re-sends itself
    # and a woken agent's background tool starts its task's work
    assert sqs_grants(template, "BackgroundResultFunction") == {
        ("sqs:SendMessage", "BackgroundResultDLQ"),
        ("sqs:SendMessage", "BackgroundResultQueue"),
        ("sqs:SendMessage", "BackgroundWorkQueue"),
    }


def test_the_work_function_completes_tasks_resends_its_work_and_dead_letters_to_its_own_dlq(
    template: dict[str, Any],
) -> None:
    # GIVEN the background-work function's own policies
    # THEN it sends exactly: a completion to the result queue, a deadline check back to its own
    # queue, a message no retry can help to its DLQ; never to another DLQ or the cron failure queue
    assert sqs_grants(template, "BackgroundWorkFunction") == {
        ("sqs:SendMessage", "BackgroundResultQueue"),
        ("sqs:SendMessage", "BackgroundWorkQueue"),
        ("sqs:SendMessage", "BackgroundWorkDLQ"),
    }
    # AND the only schedule it makes is a decided approval's re-queue of a parked cron run (a
    # one-time schedule in the stack's group, passing the scheduler role to the scheduler alone)
    own = list(statements(policies(template, "BackgroundWorkFunction")))
    scheduling = [s for s in own if any(str(a).startswith("scheduler:") for a in as_list(s["Action"]))]
    assert [as_list(s["Action"]) for s in scheduling] == [["scheduler:CreateSchedule"]]
    passing = [s for s in own if "iam:PassRole" in as_list(s["Action"])]
    assert len(passing) == 1
    assert passing[0]["Condition"] == {"StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}}


def test_only_the_cron_function_sends_to_the_cron_failure_queue_and_only_there(template: dict[str, Any]) -> None:
    # GIVEN every sqs:SendMessage statement of each function's own policies
    def sends(logical_id: str) -> list[Any]:
        return [s for s in statements(policies(template, logical_id)) if "sqs:SendMessage" in as_list(s["Action"])]

    # THEN the cron function may send exactly to CronFailureQueue (a permanent failure goes there at
    # once) and to the result queue (its release hands the session to a waiting result: a newer
    # copy); SAM adds the same exact grant for the OnFailure destination (its
    # sqs_send_message_role_policy: sqs:SendMessage on the destination's ARN, nothing more)
    assert sends("CronWakeFunction") == [
        {
            "Sid": "CronFailureQueueSend",
            "Effect": "Allow",
            "Action": "sqs:SendMessage",
            "Resource": {"Fn::GetAtt": ["CronFailureQueue", "Arn"]},
        },
        {
            "Sid": "HandOffToResults",
            "Effect": "Allow",
            "Action": "sqs:SendMessage",
            "Resource": {"Fn::GetAtt": ["BackgroundResultQueue", "Arn"]},
        },
        {
            "Sid": "StartBackgroundWork",
            "Effect": "Allow",
            "Action": "sqs:SendMessage",
            "Resource": {"Fn::GetAtt": ["BackgroundWorkQueue", "Arn"]},
        },
    ]
    assert sqs_grants(template, "CronWakeFunction") == {
        ("sqs:SendMessage", "CronFailureQueue"),
        ("sqs:SendMessage", "BackgroundResultQueue"),
        ("sqs:SendMessage", "BackgroundWorkQueue"),
    }
    # AND the background function may not
    assert "CronFailureQueue" not in {queue for _, queue in sqs_grants(template, "BackgroundResultFunction")}
    assert "CronFailureQueue" not in {queue for _, queue in sqs_grants(template, "BackgroundWorkFunction")}
    # AND the handler finds the queue through the environment
    env = template["Globals"]["Function"]["Environment"]["Variables"]
    assert env["AGENTWAKE_CRON_FAILURE_QUEUE_URL"] == {"Ref": "CronFailureQueue"}


@pytest.mark.parametrize("logical_id", sorted(FUNCTIONS))
def test_secret_is_readable_only_when_the_parameter_is_set(template: dict[str, Any], logical_id: str) -> None:
    assert default(template, "OpenAIApiKeySecretArn") == ""
    assert template["Conditions"]["HasOpenAIApiKeySecret"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "OpenAIApiKeySecretArn"}, ""]}]
    }
    gated = [p["Fn::If"] for p in policies(template, logical_id) if isinstance(p, dict) and "Fn::If" in p]
    openai = [g for g in gated if g[0] == "HasOpenAIApiKeySecret"]
    assert len(openai) == 1
    condition, when_set, when_unset = openai[0]
    assert when_unset == {"Ref": "AWS::NoValue"}
    assert when_set["Statement"] == [
        {"Effect": "Allow", "Action": "secretsmanager:GetSecretValue", "Resource": {"Ref": "OpenAIApiKeySecretArn"}}
    ]
    # AND unconditionally, only the SecretsPrefix secrets (test_secret_grants_are_exactly_the_stack_prefixes)
    ungated = [p for p in policies(template, logical_id) if not (isinstance(p, dict) and "Fn::If" in p)]
    reads = [s for s in statements(ungated) if s["Action"] == "secretsmanager:GetSecretValue"]
    assert [s["Sid"] for s in reads] == ["ScopedSecrets"]


#: the functions that deliver a woken agent's messages (a background subagent's run delivers nothing)
DELIVERING = ("BackgroundResultFunction", "CronWakeFunction")
#: condition -> (parameter, the statement granted when it is set): docs/channels.md "Permissions"
CHANNEL_GRANTS = {
    "HasSlackBotTokenSecret": (
        "SlackBotTokenSecretArn",
        {
            "Sid": "SlackBotToken",
            "Effect": "Allow",
            "Action": "secretsmanager:GetSecretValue",
            "Resource": {"Ref": "SlackBotTokenSecretArn"},
        },
    ),
    "HasTelegramBotTokenSecret": (
        "TelegramBotTokenSecretArn",
        {
            "Sid": "TelegramBotToken",
            "Effect": "Allow",
            "Action": "secretsmanager:GetSecretValue",
            "Resource": {"Ref": "TelegramBotTokenSecretArn"},
        },
    ),
    "HasNotifyTopics": (
        "NotifyTopicPrefix",
        {
            "Sid": "PublishNotifyTopics",
            "Effect": "Allow",
            "Action": "sns:Publish",
            "Resource": {"Fn::Sub": "arn:${AWS::Partition}:sns:${AWS::Region}:${AWS::AccountId}:${NotifyTopicPrefix}*"},
        },
    ),
}


@pytest.mark.parametrize("logical_id", DELIVERING)
def test_delivering_functions_read_the_bot_tokens_and_publish_to_notify_topics_only_when_set(
    template: dict[str, Any], logical_id: str
) -> None:
    gated = {
        p["Fn::If"][0]: p["Fn::If"][1:] for p in policies(template, logical_id) if isinstance(p, dict) and "Fn::If" in p
    }
    for condition, (parameter, statement) in CHANNEL_GRANTS.items():
        # GIVEN a parameter empty by default, and its condition "is set"
        assert default(template, parameter) == ""
        assert template["Conditions"][condition] == {"Fn::Not": [{"Fn::Equals": [{"Ref": parameter}, ""]}]}
        # THEN exactly that secret / those topics are granted when it is set, nothing when it is not
        when_set, when_unset = gated[condition]
        assert when_set["Statement"] == [statement], condition
        assert when_unset == {"Ref": "AWS::NoValue"}
    # AND nothing else of the function's policies publishes to SNS
    publishes = [s for s in statements(policies(template, logical_id)) if "sns:Publish" in as_list(s["Action"])]
    assert [s["Sid"] for s in publishes] == ["PublishNotifyTopics"]


def test_the_functions_that_deliver_nothing_get_no_channel_grant(template: dict[str, Any]) -> None:
    for logical_id in ("BackgroundWorkFunction", "ProductApiFunction"):
        found = [
            s
            for s in statements(policies(template, logical_id))
            if s.get("Sid") in ("SlackBotToken", "TelegramBotToken", "PublishNotifyTopics")
        ]
        assert found == [], logical_id
    # AND the functions see the topics' ARN prefix and the tokens' refs as the parameters say
    env = template["Globals"]["Function"]["Environment"]["Variables"]
    prefix = env["AGENTWAKE_NOTIFY_TOPIC_PREFIX"]["Fn::If"]
    assert prefix[0] == "HasNotifyTopics"
    assert prefix[1] == {"Fn::Sub": "arn:${AWS::Partition}:sns:${AWS::Region}:${AWS::AccountId}:${NotifyTopicPrefix}"}
    assert env["AGENTWAKE_SLACK_TOKEN_REF"]["Fn::If"][0] == "HasSlackBotTokenSecret"
    assert env["AGENTWAKE_TELEGRAM_TOKEN_REF"]["Fn::If"][0] == "HasTelegramBotTokenSecret"


@pytest.mark.parametrize("logical_id", sorted(FUNCTIONS))
def test_bedrock_is_scoped_to_models_and_inference_profiles(template: dict[str, Any], logical_id: str) -> None:
    bedrock = [s for s in statements(policies(template, logical_id)) if "bedrock" in repr(s["Action"])]
    assert bedrock
    for statement in bedrock:
        assert as_list(statement["Action"]) == ["bedrock:InvokeModel"]
        for resource in as_list(statement["Resource"]):
            assert re.search(r":bedrock:.*:(foundation-model|inference-profile)/\*$", resource["Fn::Sub"]), resource
        if ":bedrock:*:" in repr(statement["Resource"]):
            # other regions only through this account's inference profiles in this region
            assert "bedrock:InferenceProfileArn" in statement["Condition"]["StringLike"]


@pytest.mark.parametrize("logical_id", ["CronWakeFunction", "BackgroundResultFunction"])
def test_the_functions_that_run_cron_wakes_may_manage_only_schedules_of_their_group(
    template: dict[str, Any], logical_id: str
) -> None:
    # the background function runs a cron wake its release handed the session to (one wait list),
    # or hands it on through a one-time schedule: it needs what a cron wake needs, no more
    scheduler = [s for s in statements(policies(template, logical_id)) if "scheduler:" in repr(s["Action"])]
    actions = sorted(set(action for s in scheduler for action in as_list(s["Action"])))
    # run-once jobs delete their schedule; a cron wake waiting for its session creates a one-time
    # one; a job paused after failed runs in a row reads its schedule and writes it back disabled
    assert actions == [
        "scheduler:CreateSchedule",
        "scheduler:DeleteSchedule",
        "scheduler:GetSchedule",
        "scheduler:UpdateSchedule",
    ]
    for statement in scheduler:
        assert statement["Resource"] == {
            "Fn::Sub": "arn:${AWS::Partition}:scheduler:${AWS::Region}:${AWS::AccountId}:schedule/${ScheduleGroup}/*"
        }
    # and may pass only the Scheduler role, only to the Scheduler
    [passes] = [s for s in statements(policies(template, logical_id)) if s["Action"] == "iam:PassRole"]
    assert passes["Resource"] == {"Fn::GetAtt": ["SchedulerRole", "Arn"]}
    assert passes["Condition"] == {"StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}}


def test_the_product_api_manages_no_schedule(template: dict[str, Any]) -> None:
    assert "scheduler:" not in repr(policies(template, "ProductApiFunction"))
    assert "iam:PassRole" not in repr(policies(template, "ProductApiFunction"))


# ------------------------------------------------------------------ outputs


def test_outputs(template: dict[str, Any]) -> None:
    assert set(template["Outputs"]) == {
        "BackgroundResultQueueUrl",
        "BackgroundResultDLQUrl",
        "BackgroundWorkQueueUrl",
        "BackgroundWorkDLQUrl",
        "CronFailureQueueUrl",
        "SchedulerDLQUrl",
        "SchedulerDLQArn",
        "AgentTableName",
        "ScheduleGroupName",
        "SchedulerRoleArn",
        "BackgroundResultFunctionArn",
        "CronWakeFunctionArn",
        "CronWakeFunctionAliasArn",
        "BackgroundWorkFunctionArn",
        "AlarmTopicArn",
        "DashboardName",
        "ProducerPolicyArn",
        "ProductApiUrl",
        "ProductApiFunctionArn",
        "PushApiUrl",
    }
    assert template["Outputs"]["CronWakeFunctionAliasArn"]["Value"] == {"Ref": "CronWakeFunction.Alias"}


def test_every_dlq_has_an_alarm_that_notifies_the_topic(template: dict[str, Any]) -> None:
    # GIVEN the template's alarms
    resources = template["Resources"]
    alarms = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::CloudWatch::Alarm"]
    # THEN each DLQ has a depth alarm: > 0 visible messages, missing data not breaching, to the topic
    watched = set()
    for a in alarms:
        if a["MetricName"] == "ApproximateNumberOfMessagesVisible":
            assert a["Namespace"] == "AWS/SQS"
            assert a["Threshold"] == 0 and a["ComparisonOperator"] == "GreaterThanThreshold"
            assert a["TreatMissingData"] == "notBreaching"
            watched.add(a["Dimensions"][0]["Value"]["Fn::GetAtt"][0])
        assert a["AlarmActions"] == [{"Ref": "AlarmTopic"}]
    assert watched == {"BackgroundResultDLQ", "BackgroundWorkDLQ", "CronFailureQueue", "SchedulerDLQ"}
    # AND the RunFailed metric has its alarm, in the Powertools namespace with the service dimension
    [run_failed] = [a for a in alarms if a["MetricName"] == "RunFailed"]
    assert run_failed["Namespace"] == {"Ref": "MetricsNamespace"}
    assert run_failed["Dimensions"] == [{"Name": "service", "Value": "agentwake"}]
    # AND a job that paused itself (JobPaused, emitted by the cron wake) alarms the same way
    [paused] = [a for a in alarms if a["MetricName"] == "JobPaused"]
    assert paused["Namespace"] == {"Ref": "MetricsNamespace"} and paused["Threshold"] == 0
    assert paused["Dimensions"] == [{"Name": "service", "Value": "agentwake"}]
    # AND an approval left waiting (ApprovalPendingAge, reported by each pending request's chain at least
    # every 900 s) alarms past the ApprovalAgeAlarmSeconds parameter: 4 hours unless set
    [waiting] = [a for a in alarms if a["MetricName"] == "ApprovalPendingAge"]
    assert resources["ApprovalWaitingAlarm"]["Properties"] is waiting
    assert waiting["Namespace"] == {"Ref": "MetricsNamespace"}
    assert waiting["Dimensions"] == [{"Name": "service", "Value": "agentwake"}]
    assert (waiting["Statistic"], waiting["Period"], waiting["ComparisonOperator"]) == (
        "Maximum",
        900,
        "GreaterThanThreshold",
    )
    assert waiting["Threshold"] == {"Ref": "ApprovalAgeAlarmSeconds"} and waiting["TreatMissingData"] == "notBreaching"
    assert template["Parameters"]["ApprovalAgeAlarmSeconds"]["Default"] == 14400
    # AND the e-mail subscription exists only when an address is given
    assert resources["AlarmEmailSubscription"]["Condition"] == "HasAlarmEmail"


def test_dashboard_body_is_json_with_the_metrics_operators_need(template: dict[str, Any]) -> None:
    import json as _json
    import re

    body_template, _vars = template["Resources"]["Dashboard"]["Properties"]["DashboardBody"]["Fn::Sub"]
    body = _json.loads(re.sub(r"\$\{[^}]+\}", "X", body_template))
    titles = {w["properties"]["title"] for w in body["widgets"]}
    assert titles == {
        "Runs",
        "DLQ depths",
        "Provider failovers",
        "Steps per run",
        "Duration (p90, ms)",
        "Busy sessions",
    }
    [busy] = [w for w in body["widgets"] if w["properties"]["title"] == "Busy sessions"]
    shown = {m[1] for m in busy["properties"]["metrics"]}
    assert shown == {"SessionBusy", "SessionWaitExceeded", "SessionWait"}


# ------------------------------------------------------------------ the product API and producers


def api_routes(template: dict[str, Any]) -> set[tuple[str, str]]:
    """(METHOD, path) of every HttpApi event of ProductApiFunction."""
    events = props(template, "ProductApiFunction")["Events"]
    assert all(e["Type"] == "HttpApi" and e["Properties"]["ApiId"] == {"Ref": "ProductApi"} for e in events.values())
    return {(e["Properties"]["Method"], e["Properties"]["Path"]) for e in events.values()}


def test_the_product_api_requires_sigv4_on_every_route(template: dict[str, Any]) -> None:
    # GIVEN the HTTP API: IAM authorization by default, and no route opting out of it
    api = resources(template)["ProductApi"]
    assert api["Type"] == "AWS::Serverless::HttpApi"
    assert api["Properties"]["Auth"] == {"EnableIamAuthorizer": True, "DefaultAuthorizer": "AWS_IAM"}
    events = props(template, "ProductApiFunction")["Events"]
    assert not [name for name, e in events.items() if "Auth" in e["Properties"]]
    # THEN its routes are the OpenAPI document's (schemas/product-api.openapi.json)
    doc = json.loads((ROOT / "schemas" / "product-api.openapi.json").read_text())
    assert api_routes(template) == {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    assert function(template, "ProductApiFunction")["Handler"] == "agentwake.handlers.product_api.handler"
    assert function(template, "ProductApiFunction")["Timeout"] < 30  # the HTTP API's integration limit
    # built and run like the other functions, with its own log group
    assert resources(template)["ProductApiFunction"]["Metadata"] == {"BuildMethod": "makefile"}
    assert (
        function(template, "ProductApiFunction")["Runtime"],
        function(template, "ProductApiFunction")["CodeUri"],
    ) == (
        "python3.13",
        "functions/",
    )
    group = props(template, "ProductApiFunctionLogGroup")
    assert group["LogGroupName"] == {"Fn::Sub": "/aws/lambda/${ProductApiFunction}"} and group["RetentionInDays"] == 30


def test_the_product_api_function_gets_exactly_what_its_routes_use(template: dict[str, Any]) -> None:
    assert table_grants(template, "ProductApiFunction") == {
        "AgentTable": {
            "dynamodb:GetItem",
            "dynamodb:PutItem",
            "dynamodb:UpdateItem",
            "dynamodb:DeleteItem",
            "dynamodb:BatchWriteItem",  # DELETE /sessions/{id}: the session's partition
            "dynamodb:BatchGetItem",  # a page of a session's tasks, named by the keys-only gsi3
            "dynamodb:Query",
            "dynamodb:ConditionCheckItem",
        }
    }
    sends = [s for s in statements(policies(template, "ProductApiFunction")) if s["Action"] == "sqs:SendMessage"]
    # completions, a hand-off; a task's deadline check, the start of a background tool or subagent
    assert [s["Resource"] for s in sends] == [
        {"Fn::GetAtt": ["BackgroundResultQueue", "Arn"]},
        {"Fn::GetAtt": ["BackgroundWorkQueue", "Arn"]},
    ]
    # a session's tasks are listed from gsi3 and (registered before it) gsi1: Query on those indexes only
    (index,) = [s for s in statements(policies(template, "ProductApiFunction")) if "/index/" in repr(s["Resource"])]
    assert (index["Action"], index["Resource"]) == (
        "dynamodb:Query",
        [{"Fn::Sub": "${AgentTable.Arn}/index/gsi1"}, {"Fn::Sub": "${AgentTable.Arn}/index/gsi3"}],
    )
    others = {
        a
        for s in statements(policies(template, "ProductApiFunction"))
        for a in as_list(s["Action"])
        if not a.startswith("dynamodb:")
    }
    assert others == {"sqs:SendMessage"}


def producer_policy(template: dict[str, Any]) -> list[dict[str, Any]]:
    return list(props(template, "ProducerPolicy")["PolicyDocument"]["Statement"])


def test_producer_policy_has_no_dynamodb_action(template: dict[str, Any]) -> None:
    # GIVEN the policy a chat app's or producer's role attaches
    actions = {a for s in producer_policy(template) for a in as_list(s["Action"])}
    # THEN it cannot touch the table at all: no task token, session or status can be rewritten
    assert not [a for a in actions if a.lower().startswith("dynamodb:")]
    assert actions == {"execute-api:Invoke", "sqs:SendMessage"}
    assert all(s["Effect"] == "Allow" and "NotAction" not in s for s in producer_policy(template))


def test_producer_policy_invokes_exactly_the_api_routes(template: dict[str, Any]) -> None:
    (invoke,) = [s for s in producer_policy(template) if s["Action"] == "execute-api:Invoke"]
    prefix = "arn:${AWS::Partition}:execute-api:${AWS::Region}:${AWS::AccountId}:${ProductApi}/*/"
    granted = set()
    for resource in as_list(invoke["Resource"]):
        text = resource["Fn::Sub"]
        assert text.startswith(prefix), text
        method, _, path = text.removeprefix(prefix).partition("/")
        granted.add((method, "/" + path))
    assert granted == {(m, re.sub(r"\{[a-z_]+\}", "*", p)) for m, p in api_routes(template)}
    (send,) = [s for s in producer_policy(template) if s["Action"] == "sqs:SendMessage"]
    # completions only: never the work queue, whose messages carry task tokens and name the work to run
    assert send["Resource"] == {"Fn::GetAtt": ["BackgroundResultQueue", "Arn"]}


def test_the_chats_callbacks_are_the_only_unsigned_routes_and_their_function_holds_least_privilege(
    template: dict[str, Any],
) -> None:
    # GIVEN ChannelCallbackFunction: Slack's interactivity and Telegram's webhook (docs/channels.md)
    fn = function(template, "ChannelCallbackFunction")
    assert fn["Handler"] == "agentwake.handlers.channel_callback.handler" and fn["CodeUri"] == "functions/"
    assert resources(template)["ChannelCallbackFunction"]["Metadata"] == {"BuildMethod": "makefile"}
    group = props(template, "ChannelCallbackFunctionLogGroup")
    assert group["LogGroupName"] == {"Fn::Sub": "/aws/lambda/${ChannelCallbackFunction}"}
    # THEN its two routes, on the product API, are the only ones without SigV4 (the platforms cannot
    # sign: the function verifies their secret)
    routes = {
        (e["Properties"]["Method"], e["Properties"]["Path"]): e["Properties"].get("Auth") for e in fn["Events"].values()
    }
    assert routes == {
        ("POST", "/channels/slack/interactions"): {"Authorizer": "NONE"},
        ("POST", "/channels/telegram/updates"): {"Authorizer": "NONE"},
    }
    assert all(e["Properties"]["ApiId"] == {"Ref": "ProductApi"} for e in fn["Events"].values())
    unsigned = {
        n
        for n, r in resources(template).items()
        if r["Type"] == "AWS::Serverless::Function"
        and any("Auth" in e.get("Properties", {}) for e in r["Properties"].get("Events", {}).values())
    }
    assert unsigned == {"ChannelCallbackFunction"}
    # AND it reads and writes items (the request, its delivery's marker, the decision), nudges the
    # work queue, and reads its callback secrets and the bot tokens only when each is set
    assert table_grants(template, "ChannelCallbackFunction") == {
        "AgentTable": {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"}
    }
    ungated = [p for p in policies(template, "ChannelCallbackFunction") if not (isinstance(p, dict) and "Fn::If" in p)]
    others = {(a, json.dumps(s["Resource"])) for s in statements(ungated) for a in as_list(s["Action"])}
    assert {a for a, _ in others if not a.startswith("dynamodb:")} == {"sqs:SendMessage"}
    assert ("sqs:SendMessage", json.dumps({"Fn::GetAtt": ["BackgroundWorkQueue", "Arn"]})) in others
    gated = {
        p["Fn::If"][0]: p["Fn::If"][1:]
        for p in policies(template, "ChannelCallbackFunction")
        if isinstance(p, dict) and "Fn::If" in p
    }
    wanted = {
        "HasSlackSigningSecret": ("SlackSigningSecretArn", "SlackSigningSecret"),
        "HasTelegramWebhookSecret": ("TelegramWebhookSecretArn", "TelegramWebhookSecret"),
        "HasSlackBotTokenSecret": ("SlackBotTokenSecretArn", "SlackBotToken"),
        "HasTelegramBotTokenSecret": ("TelegramBotTokenSecretArn", "TelegramBotToken"),
    }
    assert set(gated) == set(wanted)
    for condition, (parameter, sid) in wanted.items():
        assert default(template, parameter) == ""
        assert template["Conditions"][condition] == {"Fn::Not": [{"Fn::Equals": [{"Ref": parameter}, ""]}]}
        when_set, when_unset = gated[condition]
        assert when_set["Statement"] == [
            {"Sid": sid, "Effect": "Allow", "Action": "secretsmanager:GetSecretValue", "Resource": {"Ref": parameter}}
        ]
        assert when_unset == {"Ref": "AWS::NoValue"}
    # AND no other function may read the callback secrets
    readers = {
        n
        for n, r in resources(template).items()
        if "SlackSigningSecretArn" in repr(r.get("Properties", {}).get("Policies"))
    }
    assert readers == {"ChannelCallbackFunction"}


# ------------------------------------------------------------------ WebSocket push (docs/channels.md)


def test_the_push_api_connects_pages_through_its_small_function_only(template: dict[str, Any]) -> None:
    # GIVEN the WebSocket API: $connect and $disconnect only (a page only receives), stage v1
    api = resources(template)["PushApi"]
    assert api["Type"] == "AWS::Serverless::WebSocketApi"
    assert api["Properties"]["StageName"] == "v1"
    assert api["Properties"]["Routes"] == {
        "$connect": {"FunctionArn": {"Fn::GetAtt": ["PushConnectionFunction", "Arn"]}},
        "$disconnect": {"FunctionArn": {"Fn::GetAtt": ["PushConnectionFunction", "Arn"]}},
    }
    fn = function(template, "PushConnectionFunction")
    assert fn["Handler"] == "agentwake.handlers.push_connection.handler" and fn["CodeUri"] == "functions/"
    assert resources(template)["PushConnectionFunction"]["Metadata"] == {"BuildMethod": "makefile"}
    group = props(template, "PushConnectionFunctionLogGroup")
    assert group["LogGroupName"] == {"Fn::Sub": "/aws/lambda/${PushConnectionFunction}"}
    # THEN its function reads and writes items, nothing else (a ticket, the connection items)
    assert table_grants(template, "PushConnectionFunction") == {
        "AgentTable": {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem", "dynamodb:Query"}
    }
    others = {
        a
        for s in statements(policies(template, "PushConnectionFunction"))
        for a in as_list(s["Action"])
        if not a.startswith("dynamodb:")
    }
    assert others == set()
    assert template["Outputs"]["PushApiUrl"]["Value"] == {
        "Fn::Sub": "wss://${PushApi}.execute-api.${AWS::Region}.${AWS::URLSuffix}/v1"
    }


#: the functions that deliver (a run's channels): the work function runs tools, subagents and
#: deadline checks, none of which delivers (docs/channels.md)
DELIVERING = ("BackgroundResultFunction", "CronWakeFunction")


def test_the_wake_functions_may_only_post_to_open_pages(template: dict[str, Any]) -> None:
    env = template["Globals"]["Function"]["Environment"]["Variables"]
    assert env["AGENTWAKE_PUSH_ENDPOINT"] == {
        "Fn::Sub": "https://${PushApi}.execute-api.${AWS::Region}.${AWS::URLSuffix}/v1"
    }
    assert env["AGENTWAKE_PUSH_URL"] == {"Fn::Sub": "wss://${PushApi}.execute-api.${AWS::Region}.${AWS::URLSuffix}/v1"}
    arn = "arn:${AWS::Partition}:execute-api:${AWS::Region}:${AWS::AccountId}:${PushApi}/v1/POST/@connections/*"
    for logical_id in DELIVERING:
        manage = [
            s
            for s in statements(policies(template, logical_id))
            if "execute-api:ManageConnections" in as_list(s["Action"])
        ]
        assert [(s["Action"], s["Resource"]) for s in manage] == [("execute-api:ManageConnections", {"Fn::Sub": arn})]
    # nobody else manages connections (the product API issues tickets; it never posts)
    holders = {n for n, r in resources(template).items() if "execute-api:ManageConnections" in repr(r)}
    assert holders == set(DELIVERING)
