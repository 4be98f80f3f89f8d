"""Issue 23's takeover, tried again as a hostile producer holding exactly ProducerPolicy: it could
rewrite another task's token hash with UpdateItem, write a task item itself, read any task's
arguments, and its forged completion then woke the victim's session. Now the table is not its
interface: every DynamoDB call is denied (moto enforcing IAM with the policy as template.yaml
resolves it), registering the victim's task id through the API is refused, a forged completion is
refused by the API or dead-lettered by the wake, and the genuine completion still wakes the victim.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto.core.authorization import enable_iam_authentication

from agentwake.handlers import background_result
from agentwake.store.dynamo import DynamoStore
from agentwake.store.keys import task_key
from agentwake_local.template import Resolver
from tests.security.wake import record
from tests.support.aws import REGION, FakeLambdaContext, Resources, drain
from tests.support.builders import seed_session
from tests.support.product_api import call, fresh_services


@pytest.fixture(autouse=True)
def fresh(resources: Resources) -> Iterator[None]:
    fresh_services()
    yield
    fresh_services()


def producer_policy_document(resources: Resources) -> dict[str, Any]:
    """ProducerPolicy's document as template.yaml resolves it on this stack."""
    stack = resources.stack
    resolver = Resolver(stack.template, lambda logical_id: stack.resources[logical_id])
    return dict(resolver.resolve(stack.template.resources["ProducerPolicy"]["Properties"]["PolicyDocument"]))


#: the hostile producer's principal (the IAM user hostile_clients creates)
HOSTILE = "arn:aws:iam::123456789012:user/hostile-producer"


def hostile_clients(resources: Resources) -> tuple[Any, Any]:
    """DynamoDB and SQS clients of an IAM user holding exactly ProducerPolicy."""
    iam = boto3.client("iam", region_name=REGION)
    iam.create_user(UserName="hostile-producer")
    iam.put_user_policy(
        UserName="hostile-producer",
        PolicyName="ProducerPolicy",
        PolicyDocument=json.dumps(producer_policy_document(resources)),
    )
    key = iam.create_access_key(UserName="hostile-producer")["AccessKey"]
    creds = {"aws_access_key_id": key["AccessKeyId"], "aws_secret_access_key": key["SecretAccessKey"]}
    return boto3.client("dynamodb", region_name=REGION, **creds), boto3.client("sqs", region_name=REGION, **creds)


def wake(body: str) -> dict[str, Any]:
    return dict(background_result.handler({"Records": [record(body)]}, FakeLambdaContext()))


def test_the_takeover_sequence_fails(resources: Resources, store: DynamoStore) -> None:
    # GIVEN the victim's task, registered through the API
    seed_session(store, "victim")
    status, victim = call("POST", "/tasks", {"session_id": "victim", "tool_name": "research", "args": {"q": "private"}})
    assert status == 201
    task_id = victim["task_id"]
    pk, sk = task_key(task_id)
    ddb, sqs = hostile_clients(resources)

    with enable_iam_authentication():
        # WHEN the hostile producer tries the table: replace the token hash, write a task, read one
        attempts = {
            "UpdateItem": lambda: ddb.update_item(
                TableName=resources.table,
                Key={"pk": {"S": pk}, "sk": {"S": sk}},
                UpdateExpression="SET token_sha256 = :h",
                ExpressionAttributeValues={":h": {"S": "0" * 64}},
            ),
            "PutItem": lambda: ddb.put_item(
                TableName=resources.table,
                Item={"pk": {"S": "TASK#forged"}, "sk": {"S": sk}, "session_id": {"S": "victim"}},
            ),
            "GetItem": lambda: ddb.get_item(TableName=resources.table, Key={"pk": {"S": pk}, "sk": {"S": sk}}),
        }
        # THEN each is denied
        for name, attempt in attempts.items():
            with pytest.raises(ClientError) as denied:
                attempt()
            said = denied.value.response["Error"]["Message"]
            assert f"is not authorized to perform: dynamodb:{name}" in said, said
        # while what the policy grants works (IAM is enforced, not just broken): a forged completion
        forged = {
            "task_id": task_id,
            "session_id": "victim",
            "task_token": "awt_" + "A" * 43,
            "status": "succeeded",
            "result_text": "ATTACKER RESULT",
            "finished_at": "2026-12-02T00:00:00Z",
        }
        sqs.send_message(QueueUrl=resources.queue_url, MessageBody=json.dumps(forged))

    # the token hash is the one the API stored
    task = store.records.get_task(task_id)
    assert task is not None and task.token_matches(victim["task_token"]) and store.records.get_task("forged") is None
    # WHEN it registers the victim's task id through the API (for its own session), or completes it
    # there with a made-up token
    seed_session(store, "attacker", owners=[HOSTILE])
    status, refused = call(
        "POST", "/tasks", {"session_id": "attacker", "tool_name": "x", "task_id": task_id}, caller=HOSTILE
    )
    assert status == 409 and refused["type"] == "TaskExists"
    status, refused = call(
        "POST",
        f"/tasks/{task_id}/completion",
        {"task_token": "awt_guess", "status": "succeeded", "result_text": "x"},
        caller=HOSTILE,
    )
    assert status == 404 and refused["type"] == "UnknownTask"  # not its session's task: as if none
    # THEN the forged message it sent to the queue is dead-lettered by the wake, nothing woken
    (sent,) = drain(resources.queue_url)
    assert wake(sent["Body"]) == {"batchItemFailures": []}
    (dead,) = drain(resources.dlq_url)
    assert dead["MessageAttributes"]["agentwake-error-type"]["StringValue"] == "ForgedCompletion"
    assert store.history.history("victim") == []
    # AND the genuine completion, through the API, wakes the victim with the genuine result
    status, _ = call(
        "POST",
        f"/tasks/{task_id}/completion",
        {"task_token": victim["task_token"], "status": "succeeded", "result_text": "GENUINE RESULT"},
    )
    assert status == 202
    (genuine,) = [m for m in drain(resources.queue_url) if "GENUINE" in m["Body"]]
    assert wake(genuine["Body"]) == {"batchItemFailures": []}
    history = " ".join(e.content for e in store.history.history("victim"))
    assert "GENUINE RESULT" in history and "ATTACKER" not in history
    assert store.records.get_task(task_id).status == "woken"  # type: ignore[union-attr]
