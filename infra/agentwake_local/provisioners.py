"""One provisioner per CloudFormation type: resolved Properties in, a ``Resource`` out.

Each is idempotent (get-or-create) so that a second process can attach to a running local stack
by provisioning the same template again. Add a type here and it appears locally with no other
change; ``provision.provision`` skips types that have no entry in ``PROVISIONERS``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from agentwake_local.template import Resource, Template, TemplateError, as_bool, as_int, physical_name

logger = logging.getLogger(__name__)


@dataclass
class ProvisionContext:
    template: Template
    endpoint_url: str | None
    session: Any
    _clients: dict[str, Any] = field(default_factory=dict)

    def client(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = self.session.client(
                service, endpoint_url=self.endpoint_url, region_name=self.template.region
            )
        return self._clients[service]


Provisioner = Callable[[ProvisionContext, str, dict[str, Any]], Resource]


def _error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _attribute_str(value: Any) -> str:
    """SQS/SNS attributes are strings; policies given as objects become JSON."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def _tags_dict(tags: Any) -> dict[str, str]:
    if isinstance(tags, dict):
        return {str(k): str(v) for k, v in tags.items()}
    return {str(tag["Key"]): str(tag["Value"]) for tag in tags or []}


def _tags_list(tags: Any) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in _tags_dict(tags).items()]


# --------------------------------------------------------------------------------------------
# DynamoDB


def _throughput(raw: Any) -> dict[str, int]:
    raw = raw or {}
    return {
        "ReadCapacityUnits": as_int(raw.get("ReadCapacityUnits"), 5) or 5,
        "WriteCapacityUnits": as_int(raw.get("WriteCapacityUnits"), 5) or 5,
    }


def _index(raw: Mapping[str, Any], provisioned: bool, *, global_index: bool) -> dict[str, Any]:
    index: dict[str, Any] = {
        "IndexName": raw["IndexName"],
        "KeySchema": raw["KeySchema"],
        "Projection": raw.get("Projection") or {"ProjectionType": "ALL"},
    }
    if global_index and provisioned:
        index["ProvisionedThroughput"] = _throughput(raw.get("ProvisionedThroughput"))
    return index


def _create_table(ctx: ProvisionContext, name: str, props: Mapping[str, Any]) -> None:
    billing = props.get("BillingMode") or "PROVISIONED"
    provisioned = billing == "PROVISIONED"
    request: dict[str, Any] = {
        "TableName": name,
        "KeySchema": props["KeySchema"],
        "AttributeDefinitions": props["AttributeDefinitions"],
        "BillingMode": billing,
    }
    if provisioned:
        request["ProvisionedThroughput"] = _throughput(props.get("ProvisionedThroughput"))
    if props.get("GlobalSecondaryIndexes"):
        request["GlobalSecondaryIndexes"] = [
            _index(gsi, provisioned, global_index=True) for gsi in props["GlobalSecondaryIndexes"]
        ]
    if props.get("LocalSecondaryIndexes"):
        request["LocalSecondaryIndexes"] = [
            _index(lsi, provisioned, global_index=False) for lsi in props["LocalSecondaryIndexes"]
        ]
    stream = props.get("StreamSpecification")
    if stream and stream.get("StreamViewType"):
        request["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": stream["StreamViewType"]}
    sse = props.get("SSESpecification")
    if sse:
        request["SSESpecification"] = {"Enabled": as_bool(sse.get("SSEEnabled"))}
        for key in ("SSEType", "KMSMasterKeyId"):
            if sse.get(key):
                request["SSESpecification"][key] = sse[key]
    for key in ("TableClass", "DeletionProtectionEnabled"):
        if key in props:
            request[key] = props[key]
    if props.get("Tags"):
        request["Tags"] = _tags_list(props["Tags"])
    ctx.client("dynamodb").create_table(**request)


def provision_table(ctx: ProvisionContext, logical_id: str, props: dict[str, Any]) -> Resource:
    ddb = ctx.client("dynamodb")
    name = physical_name(ctx.template, logical_id, props.get("TableName"), 255)
    try:
        table = ddb.describe_table(TableName=name)["Table"]
    except ClientError as exc:
        if _error_code(exc) != "ResourceNotFoundException":
            raise
        _create_table(ctx, name, props)
        table = ddb.describe_table(TableName=name)["Table"]

    ttl = props.get("TimeToLiveSpecification")
    if ttl and as_bool(ttl.get("Enabled")):
        current = ddb.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
        if current.get("TimeToLiveStatus") not in ("ENABLED", "ENABLING"):
            ddb.update_time_to_live(
                TableName=name,
                TimeToLiveSpecification={"AttributeName": ttl["AttributeName"], "Enabled": True},
            )
    pitr = props.get("PointInTimeRecoverySpecification")
    if pitr and as_bool(pitr.get("PointInTimeRecoveryEnabled")):
        try:
            ddb.update_continuous_backups(
                TableName=name,
                PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True},
            )
        except ClientError as exc:  # not essential locally
            logger.debug("%s: point-in-time recovery not set locally: %s", logical_id, exc)

    attributes = {"Arn": table["TableArn"]}
    if table.get("LatestStreamArn"):
        attributes["StreamArn"] = table["LatestStreamArn"]
    return Resource(logical_id, "AWS::DynamoDB::Table", name, attributes, props, provisioned=True)


# --------------------------------------------------------------------------------------------
# SQS

_SQS_NOT_ATTRIBUTES = ("QueueName", "Tags")


def provision_queue(ctx: ProvisionContext, logical_id: str, props: dict[str, Any]) -> Resource:
    sqs = ctx.client("sqs")
    fifo = as_bool(props.get("FifoQueue"))
    name = physical_name(ctx.template, logical_id, props.get("QueueName"), 80, ".fifo" if fifo else "")
    attributes: dict[str, str] = {}
    for key, value in props.items():
        if key in _SQS_NOT_ATTRIBUTES:
            continue
        if key == "RedrivePolicy" and isinstance(value, dict) and "maxReceiveCount" in value:
            value = {**value, "maxReceiveCount": int(value["maxReceiveCount"])}
        attributes[key] = _attribute_str(value)
    request: dict[str, Any] = {"QueueName": name, "Attributes": attributes}
    if props.get("Tags"):
        request["tags"] = _tags_dict(props["Tags"])
    try:
        url = sqs.create_queue(**request)["QueueUrl"]
    except ClientError as exc:
        if _error_code(exc) not in ("QueueAlreadyExists", "QueueNameExists"):
            raise
        # Exists with other attributes (the template changed since): converge to the template.
        url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
        settable = {k: v for k, v in attributes.items() if k != "FifoQueue"}
        if settable:
            sqs.set_queue_attributes(QueueUrl=url, Attributes=settable)
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return Resource(
        logical_id,
        "AWS::SQS::Queue",
        url,
        {"Arn": arn, "QueueName": name, "QueueUrl": url},
        props,
        provisioned=True,
    )


# --------------------------------------------------------------------------------------------
# EventBridge Scheduler


def provision_schedule_group(ctx: ProvisionContext, logical_id: str, props: dict[str, Any]) -> Resource:
    scheduler = ctx.client("scheduler")
    name = physical_name(ctx.template, logical_id, props.get("Name"), 64)
    try:
        group = scheduler.get_schedule_group(Name=name)
    except ClientError as exc:
        if _error_code(exc) != "ResourceNotFoundException":
            raise
        request: dict[str, Any] = {"Name": name}
        if props.get("Tags"):
            request["Tags"] = _tags_list(props["Tags"])
        scheduler.create_schedule_group(**request)
        group = scheduler.get_schedule_group(Name=name)
    attributes = {
        "Arn": group["Arn"],
        "State": group.get("State", "ACTIVE"),
        "CreationDate": str(group.get("CreationDate", "")),
        "LastModificationDate": str(group.get("LastModificationDate", "")),
    }
    return Resource(logical_id, "AWS::Scheduler::ScheduleGroup", name, attributes, props, provisioned=True)


_SCHEDULE_KEYS = (
    "GroupName",
    "ScheduleExpression",
    "ScheduleExpressionTimezone",
    "FlexibleTimeWindow",
    "Target",
    "State",
    "Description",
    "StartDate",
    "EndDate",
    "KmsKeyArn",
)


def provision_schedule(ctx: ProvisionContext, logical_id: str, props: dict[str, Any]) -> Resource:
    """A schedule declared in the template (moto stores it; nothing fires it locally)."""
    scheduler = ctx.client("scheduler")
    name = physical_name(ctx.template, logical_id, props.get("Name"), 64)
    group = props.get("GroupName") or "default"
    try:
        schedule = scheduler.get_schedule(Name=name, GroupName=group)
    except ClientError as exc:
        if _error_code(exc) != "ResourceNotFoundException":
            raise
        request = {key: props[key] for key in _SCHEDULE_KEYS if key in props}
        request.setdefault("FlexibleTimeWindow", {"Mode": "OFF"})
        scheduler.create_schedule(Name=name, **request)
        schedule = scheduler.get_schedule(Name=name, GroupName=group)
    return Resource(logical_id, "AWS::Scheduler::Schedule", name, {"Arn": schedule["Arn"]}, props, provisioned=True)


# --------------------------------------------------------------------------------------------
# SNS

_SNS_TOPIC_ATTRIBUTES = (
    "ArchivePolicy",
    "ContentBasedDeduplication",
    "DeliveryStatusLogging",
    "DisplayName",
    "FifoThroughputScope",
    "FifoTopic",
    "KmsMasterKeyId",
    "SignatureVersion",
    "TracingConfig",
)
_SNS_SUBSCRIPTION_ATTRIBUTES = (
    "DeliveryPolicy",
    "FilterPolicy",
    "FilterPolicyScope",
    "RawMessageDelivery",
    "RedrivePolicy",
    "ReplayPolicy",
    "SubscriptionRoleArn",
)


def provision_topic(ctx: ProvisionContext, logical_id: str, props: dict[str, Any]) -> Resource:
    sns = ctx.client("sns")
    fifo = as_bool(props.get("FifoTopic"))
    name = physical_name(ctx.template, logical_id, props.get("TopicName"), 256, ".fifo" if fifo else "")
    attributes = {
        key: _attribute_str(props[key])
        for key in _SNS_TOPIC_ATTRIBUTES
        if key in props and not isinstance(props[key], list)
    }
    request: dict[str, Any] = {"Name": name, "Attributes": attributes}
    if props.get("Tags"):
        request["Tags"] = _tags_list(props["Tags"])
    arn = sns.create_topic(**request)["TopicArn"]
    for subscription in props.get("Subscription") or []:
        _subscribe(sns, arn, subscription)
    return Resource(logical_id, "AWS::SNS::Topic", arn, {"TopicArn": arn, "TopicName": name}, props, provisioned=True)


def _subscribe(sns: Any, topic_arn: str, props: Mapping[str, Any]) -> str:
    existing = sns.list_subscriptions_by_topic(TopicArn=topic_arn).get("Subscriptions", [])
    for subscription in existing:
        if subscription["Protocol"] == props["Protocol"] and subscription["Endpoint"] == props["Endpoint"]:
            return str(subscription["SubscriptionArn"])
    attributes = {key: _attribute_str(props[key]) for key in _SNS_SUBSCRIPTION_ATTRIBUTES if key in props}
    return str(
        sns.subscribe(
            TopicArn=topic_arn,
            Protocol=props["Protocol"],
            Endpoint=props["Endpoint"],
            Attributes=attributes,
            ReturnSubscriptionArn=True,
        )["SubscriptionArn"]
    )


def provision_subscription(ctx: ProvisionContext, logical_id: str, props: dict[str, Any]) -> Resource:
    arn = _subscribe(ctx.client("sns"), props["TopicArn"], props)
    return Resource(logical_id, "AWS::SNS::Subscription", arn, {"Arn": arn}, props, provisioned=True)


# --------------------------------------------------------------------------------------------
# IAM


def provision_role(ctx: ProvisionContext, logical_id: str, props: dict[str, Any]) -> Resource:
    """The role exists so that schedules can name its ARN; its policies are stored, not enforced."""
    iam = ctx.client("iam")
    name = physical_name(ctx.template, logical_id, props.get("RoleName"), 64)
    try:
        role = iam.get_role(RoleName=name)["Role"]
    except ClientError as exc:
        if _error_code(exc) != "NoSuchEntity":
            raise
        request: dict[str, Any] = {
            "RoleName": name,
            "AssumeRolePolicyDocument": _attribute_str(props.get("AssumeRolePolicyDocument") or {}),
            "Path": props.get("Path") or "/",
        }
        for key in ("Description", "PermissionsBoundary"):
            if props.get(key):
                request[key] = props[key]
        if props.get("MaxSessionDuration"):
            request["MaxSessionDuration"] = int(props["MaxSessionDuration"])
        if props.get("Tags"):
            request["Tags"] = _tags_list(props["Tags"])
        role = iam.create_role(**request)["Role"]
    for policy in props.get("Policies") or []:
        try:
            iam.put_role_policy(
                RoleName=name,
                PolicyName=policy["PolicyName"],
                PolicyDocument=_attribute_str(policy["PolicyDocument"]),
            )
        except ClientError as exc:  # moto validates documents; a policy is not needed to run locally
            logger.warning("%s: inline policy %s not stored locally: %s", logical_id, policy.get("PolicyName"), exc)
    if props.get("ManagedPolicyArns"):
        logger.debug("%s: ManagedPolicyArns are not attached locally", logical_id)
    return Resource(
        logical_id,
        "AWS::IAM::Role",
        name,
        {"Arn": role["Arn"], "RoleId": role["RoleId"]},
        props,
        provisioned=True,
    )


PROVISIONERS: dict[str, Provisioner] = {
    "AWS::DynamoDB::Table": provision_table,
    "AWS::SQS::Queue": provision_queue,
    "AWS::Scheduler::ScheduleGroup": provision_schedule_group,
    "AWS::Scheduler::Schedule": provision_schedule,
    "AWS::SNS::Topic": provision_topic,
    "AWS::SNS::Subscription": provision_subscription,
    "AWS::IAM::Role": provision_role,
}

__all__ = ["PROVISIONERS", "ProvisionContext", "Provisioner", "TemplateError"]
