"""The suite's AWS resources are template.yaml's, provisioned by the local stack's provisioner."""

from __future__ import annotations

import boto3

from agentwake_local.template import Resolver, load_template
from tests.support.aws import REGION, TEMPLATE_PATH, Resources


def test_the_test_table_has_the_templates_ttl_and_gsis(resources: Resources) -> None:
    # GIVEN what template.yaml declares for the agent table
    template = load_template(TEMPLATE_PATH)
    declared = template.resources["AgentTable"]["Properties"]
    ddb = boto3.client("dynamodb", region_name=REGION)

    # WHEN the test fixture's table is described
    table = ddb.describe_table(TableName=resources.table)["Table"]
    ttl = ddb.describe_time_to_live(TableName=resources.table)["TimeToLiveDescription"]

    # THEN it has the template's TTL attribute, key schema and GSIs (not a hand-written copy)
    assert ttl["TimeToLiveStatus"] == "ENABLED"
    assert ttl["AttributeName"] == declared["TimeToLiveSpecification"]["AttributeName"]
    assert table["KeySchema"] == declared["KeySchema"]
    gsis = Resolver(template, None).resolve(declared["GlobalSecondaryIndexes"])  # as a fresh stack has them
    declared_gsis = {g["IndexName"]: (g["KeySchema"], g["Projection"]) for g in gsis}
    actual_gsis = {g["IndexName"]: (g["KeySchema"], g["Projection"]) for g in table.get("GlobalSecondaryIndexes", [])}
    assert actual_gsis == declared_gsis and len(declared_gsis) == 4


def test_the_test_queues_carry_the_templates_redrive_policy(resources: Resources) -> None:
    # GIVEN the results queue provisioned for the tests (MaxReceiveCount=5)
    sqs = boto3.client("sqs", region_name=REGION)
    attrs = sqs.get_queue_attributes(QueueUrl=resources.queue_url, AttributeNames=["All"])["Attributes"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=resources.dlq_url, AttributeNames=["QueueArn"])["Attributes"]
    # THEN its redrive policy points at the DLQ and the visibility timeout is the template's parameter
    import json

    policy = json.loads(attrs["RedrivePolicy"])
    assert policy["deadLetterTargetArn"] == dlq_arn["QueueArn"]
    assert int(policy["maxReceiveCount"]) == 5
    declared = load_template(TEMPLATE_PATH)
    assert int(attrs["VisibilityTimeout"]) == int(declared.parameters["QueueVisibilityTimeout"])
