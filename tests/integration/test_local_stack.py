"""The embedded local AWS, end to end on a toy template: provisioning, the in-process Lambda runtime,
the SQS poller with partial batch responses and redrive, async invocation with its destination.

One moto server for the module; every test resets it and provisions the toy template afresh.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agentwake_local.functions import FunctionSpec
from agentwake_local.lambda_runtime import invoke as lambda_invoke
from agentwake_local.server import MotoServer
from agentwake_local.stack import LocalStackRuntime, read_state, state_path

TOY_DIR = (Path(__file__).parent / "toy").resolve()
TEMPLATE = TOY_DIR / "template.yaml"
STACK = "agentwake-local"


@pytest.fixture(scope="module")
def server():
    with MotoServer() as moto_server:
        yield moto_server


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AGENTWAKE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def local(server: MotoServer, home: Path):
    server.reset()
    runtime = LocalStackRuntime().start(TEMPLATE, visibility_timeout_override=0, server=server)
    yield runtime
    runtime.stop()


@pytest.fixture
def calls(local: LocalStackRuntime) -> list[dict[str, Any]]:
    """The toy handlers' call log (the same module object the local runtime imports)."""
    if str(TOY_DIR) not in sys.path:
        sys.path.insert(0, str(TOY_DIR))
    toy_handlers = importlib.import_module("toy_handlers")
    toy_handlers.CALLS.clear()
    return toy_handlers.CALLS


def send(local: LocalStackRuntime, queue: str, *bodies: str, **kwargs: Any) -> list[str]:
    sqs = local.client("sqs")
    return [
        sqs.send_message(QueueUrl=local.stack.queue_url(queue), MessageBody=body, **kwargs)["MessageId"]
        for body in bodies
    ]


def receive_all(local: LocalStackRuntime, queue: str) -> list[dict[str, Any]]:
    response = local.client("sqs").receive_message(
        QueueUrl=local.stack.queue_url(queue), MaxNumberOfMessages=10, AttributeNames=["All"]
    )
    return response.get("Messages", [])


def visible_count(local: LocalStackRuntime, queue: str) -> int:
    attributes = local.client("sqs").get_queue_attributes(
        QueueUrl=local.stack.queue_url(queue), AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"])


def deliveries(calls: list[dict[str, Any]], message_id: str) -> list[dict[str, Any]]:
    """Every record with ``message_id`` the batch handler was given, in order."""
    return [
        record
        for call in calls
        if call["kind"] == "batch"
        for record in call["event"]["Records"]
        if record["messageId"] == message_id
    ]


# -- provisioning -----------------------------------------------------------------------------


def test_provisioning_creates_exactly_the_templates_resources(local: LocalStackRuntime) -> None:
    # GIVEN the toy template provisioned with default parameters (Stage=test, so IsProd is false)
    # WHEN listing what exists in the local AWS
    tables = local.client("dynamodb").list_tables()["TableNames"]
    queues = local.client("sqs").list_queues().get("QueueUrls", [])
    groups = [g["Name"] for g in local.client("scheduler").list_schedule_groups()["ScheduleGroups"]]
    roles = [r["RoleName"] for r in local.client("iam").list_roles()["Roles"]]

    # THEN exactly the template's resources exist, under {StackName}-{LogicalId} or their own names
    assert tables == [f"{STACK}-ToyTable"]
    assert sorted(q.rsplit("/", 1)[-1] for q in queues) == sorted(
        [f"{STACK}-WorkQueue", f"{STACK}-work-dlq", f"{STACK}-PlainQueue", f"{STACK}-FailureQueue"]
    )
    assert sorted(groups) == sorted(["default", f"{STACK}-jobs"])
    assert roles == [f"{STACK}-ToySchedulerRole"]
    # AND a type without a local provisioner is skipped, conditional resources are absent
    assert local.stack.skipped == {"ToyAlarm": "AWS::CloudWatch::Alarm"}
    assert "ProdOnlyQueue" not in local.stack.resources
    # AND Ref/GetAtt values are what CloudFormation returns
    assert local.stack.ref("WorkQueue") == next(q for q in queues if q.endswith("-WorkQueue"))
    assert local.stack.get_att("WorkDLQ", "QueueName") == f"{STACK}-work-dlq"
    assert local.stack.ref("ToyGroup") == f"{STACK}-jobs"
    assert local.stack.get_att("ToySchedulerRole", "Arn") == f"arn:aws:iam::123456789012:role/{STACK}-ToySchedulerRole"
    assert local.outputs == {
        "WorkQueueUrl": local.stack.ref("WorkQueue"),
        "TableArn": f"arn:aws:dynamodb:us-east-1:123456789012:table/{STACK}-ToyTable",
    }


def test_table_has_its_gsi_billing_mode_and_ttl(local: LocalStackRuntime) -> None:
    # GIVEN the provisioned toy table
    ddb = local.client("dynamodb")
    name = local.stack.ref("ToyTable")

    # WHEN describing it
    table = ddb.describe_table(TableName=name)["Table"]
    ttl = ddb.describe_time_to_live(TableName=name)["TimeToLiveDescription"]

    # THEN keys, GSI, billing mode and TTL are those of the template
    assert table["KeySchema"] == [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ]
    (gsi,) = table["GlobalSecondaryIndexes"]
    assert gsi["IndexName"] == "gsi1"
    assert gsi["KeySchema"] == [
        {"AttributeName": "gsi1pk", "KeyType": "HASH"},
        {"AttributeName": "gsi1sk", "KeyType": "RANGE"},
    ]
    assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    assert ttl == {"TimeToLiveStatus": "ENABLED", "AttributeName": "expires_at"}


def test_queues_have_their_redrive_policy_and_attributes(local: LocalStackRuntime) -> None:
    # GIVEN the provisioned work queue and its DLQ
    sqs = local.client("sqs")

    # WHEN reading their attributes
    work = sqs.get_queue_attributes(QueueUrl=local.stack.queue_url("WorkQueue"), AttributeNames=["All"])
    dlq = sqs.get_queue_attributes(QueueUrl=local.stack.queue_url("WorkDLQ"), AttributeNames=["All"])

    # THEN the redrive policy points at the DLQ with the parameter's maxReceiveCount (a number)
    assert json.loads(work["Attributes"]["RedrivePolicy"]) == {
        "deadLetterTargetArn": local.stack.get_att("WorkDLQ", "Arn"),
        "maxReceiveCount": 3,
    }
    assert work["Attributes"]["VisibilityTimeout"] == "60"
    assert dlq["Attributes"]["MessageRetentionPeriod"] == "1209600"
    # (RedriveAllowPolicy is sent too, but moto's GetQueueAttributes does not return it.)


def test_parameter_override_flips_conditions(server: MotoServer, home: Path) -> None:
    # GIVEN a fresh account and the toy template with Stage=prod
    server.reset()

    # WHEN it is provisioned
    with LocalStackRuntime().start(TEMPLATE, {"Stage": "prod"}, server=server) as local:
        env = local.stack.function("InfoFunction").environment

        # THEN the IsProd resources, outputs and Fn::If branches appear
        assert "ProdOnlyQueue" in local.stack.resources
        assert local.outputs["ProdQueueUrl"] == local.stack.ref("ProdOnlyQueue")
        assert env["TOY_IF"] == "prod-value"
        assert env["TOY_IF_DROPPED"] == "only-in-prod"
        assert env["TOY_STAGE"] == "prod"


def test_a_resource_added_to_the_template_appears_with_no_code_change(
    server: MotoServer, home: Path, tmp_path: Path
) -> None:
    # GIVEN the toy template plus a FIFO topic subscribed by a new FIFO queue, and a second table
    server.reset()
    added = """Resources:
  AddedTopic:
    Type: AWS::SNS::Topic
    Properties:
      FifoTopic: true
  AddedQueue:
    Type: AWS::SQS::Queue
    Properties:
      QueueName: added.fifo
      FifoQueue: true
      ContentBasedDeduplication: true
  AddedSubscription:
    Type: AWS::SNS::Subscription
    Properties:
      TopicArn: !Ref AddedTopic
      Protocol: sqs
      Endpoint: !GetAtt AddedQueue.Arn
  AddedTable:
    Type: AWS::DynamoDB::Table
    Properties:
      AttributeDefinitions: [{ AttributeName: id, AttributeType: S }]
      KeySchema: [{ AttributeName: id, KeyType: HASH }]
"""
    text = TEMPLATE.read_text().replace("Resources:\n", added, 1)
    changed = tmp_path / "template.yaml"
    changed.write_text(text)

    # WHEN it is provisioned
    with LocalStackRuntime().start(changed, server=server) as local:
        # THEN the new resources exist, with their properties
        assert local.stack.ref("AddedTopic") == f"arn:aws:sns:us-east-1:123456789012:{STACK}-AddedTopic.fifo"
        fifo = local.client("sqs").get_queue_attributes(
            QueueUrl=local.stack.queue_url("AddedQueue"), AttributeNames=["FifoQueue"]
        )
        assert fifo["Attributes"]["FifoQueue"] == "true"
        subscriptions = local.client("sns").list_subscriptions_by_topic(TopicArn=local.stack.ref("AddedTopic"))
        assert [s["Endpoint"] for s in subscriptions["Subscriptions"]] == [local.stack.get_att("AddedQueue", "Arn")]
        assert f"{STACK}-AddedTable" in local.client("dynamodb").list_tables()["TableNames"]


def test_provisioning_twice_is_idempotent(local: LocalStackRuntime, server: MotoServer) -> None:
    # GIVEN a provisioned stack
    before = {lid: r.ref for lid, r in local.stack.resources.items()}

    # WHEN another runtime provisions the same template against the same server
    with LocalStackRuntime(write_state=False).start(TEMPLATE, server=server) as again:
        # THEN it finds the same resources and creates no duplicates
        assert {lid: r.ref for lid, r in again.stack.resources.items()} == before
        assert len(again.client("sqs").list_queues()["QueueUrls"]) == 4


# -- the Lambda runtime -----------------------------------------------------------------------


def test_function_environment_resolves_refs_getatts_subs_and_globals(
    local: LocalStackRuntime, calls: list[dict[str, Any]]
) -> None:
    # GIVEN a function whose environment uses Ref, GetAtt, Sub, Join/Select/Split, If and Globals
    before = dict(os.environ)

    # WHEN it is invoked
    response, error = local.invoke("InfoFunction", {"sleep": 0})

    # THEN the handler saw every variable resolved to the provisioned resources
    assert error is None
    env = response["env"]
    stack = local.stack
    assert env["TOY_TABLE"] == f"{STACK}-ToyTable"  # from Globals
    assert env["TOY_LEVEL"] == "own"  # the function's own value wins over Globals
    assert env["TOY_QUEUE_URL"] == stack.queue_url("WorkQueue")
    assert env["TOY_DLQ_ARN"] == f"arn:aws:sqs:us-east-1:123456789012:{STACK}-work-dlq"
    assert env["TOY_DLQ_NAME"] == f"{STACK}-work-dlq"
    assert env["TOY_GROUP"] == f"{STACK}-jobs"
    assert env["TOY_ROLE_ARN"] == stack.get_att("ToySchedulerRole", "Arn")
    assert env["TOY_SUB"] == (f"{STACK}|us-east-1|123456789012|aws|{STACK}-ToyTable|{env['TOY_DLQ_ARN']}|${{Literal}}")
    assert env["TOY_SUB_VARS"] == f"https://{STACK}-ToyTable"
    assert env["TOY_JOIN"] == "test,b"
    assert env["TOY_IF"] == "test-value"
    assert "TOY_IF_DROPPED" not in env  # AWS::NoValue removes the variable
    function_arn = f"arn:aws:lambda:us-east-1:123456789012:function:{STACK}-AsyncFunction"
    assert env["TOY_ASYNC_NAME"] == f"{STACK}-AsyncFunction"
    assert env["TOY_ASYNC_ARN"] == function_arn
    assert env["TOY_ASYNC_ALIAS"] == f"{function_arn}:live"
    assert (env["TOY_NUMBER"], env["TOY_FLAG"]) == ("42", "true")
    assert env["AWS_ENDPOINT_URL"] == local.endpoint_url
    assert env["AWS_ACCESS_KEY_ID"] == "testing"
    assert env["AWS_LAMBDA_FUNCTION_NAME"] == f"{STACK}-info"
    # AND os.environ is as it was once the invocation is over
    assert dict(os.environ) == before


def test_context_counts_down_from_the_template_timeout(local: LocalStackRuntime, calls: list) -> None:
    # GIVEN InfoFunction with Timeout 7 and MemorySize 512 in the template
    # WHEN it is invoked and sleeps 0.2 s between two readings of the remaining time
    invocation = local.invoke("InfoFunction", {"sleep": 0.2})

    # THEN the remaining time starts under 7000 ms and decreases by at least the sleep (the bounds
    # leave a loaded machine seconds to start the handler and to wake from the sleep)
    first, second = invocation.response["remaining"]
    assert 5000 < first <= 7000, first
    assert 150 <= first - second < 3000, (first, second)
    # AND the rest of the context is Lambda's
    assert invocation.response["function_name"] == f"{STACK}-info"
    assert invocation.response["function_version"] == "$LATEST"
    assert invocation.response["invoked_function_arn"] == local.stack.function("InfoFunction").arn
    assert invocation.response["memory_limit_in_mb"] == 512
    assert invocation.response["aws_request_id"] == invocation.request_id
    assert invocation.response["log_group_name"] == f"/aws/lambda/{STACK}-info"
    assert "[$LATEST]" in invocation.response["log_stream_name"]


def test_an_invocation_longer_than_timeout_is_a_timeout_error(local: LocalStackRuntime, calls: list) -> None:
    # GIVEN SlowFunction with Timeout 1 whose handler takes 1.1 s
    # WHEN it is invoked
    response, error = local.invoke("SlowFunction", {"sleep": 1.1})

    # THEN Lambda's timeout error is reported, not the late response
    assert response is None
    assert error is not None
    assert error["errorType"] == "Sandbox.Timedout"
    assert "Task timed out after 1.00 seconds" in error["errorMessage"]


def test_a_response_that_is_not_json_is_a_marshal_error(local: LocalStackRuntime) -> None:
    # GIVEN a handler returning an object json cannot encode
    # WHEN it is invoked
    _, error = local.invoke("UnserializableFunction", {})

    # THEN the error is Lambda's Runtime.MarshalError
    assert error is not None
    assert error["errorType"] == "Runtime.MarshalError"


def test_a_missing_module_is_an_import_error_and_hooks_run_around_the_invocation(tmp_path: Path) -> None:
    # GIVEN a function whose handler module does not exist, and an env-change hook that records
    seen: list[str | None] = []
    function = FunctionSpec(
        logical_id="Broken",
        name="broken",
        arn="arn:aws:lambda:us-east-1:123456789012:function:broken",
        handler="no_such_module.handler",
        code_uri=tmp_path,
        environment={"TOY_HOOK": "inside"},
    )

    # WHEN it is invoked
    invocation = lambda_invoke(function, {}, on_env_change=lambda: seen.append(os.environ.get("TOY_HOOK")))

    # THEN the error is Lambda's import error, and the hook saw the function env then the restored one
    assert invocation.error is not None
    assert invocation.error["errorType"] == "Runtime.ImportModuleError"
    assert seen == ["inside", None]


# -- the SQS poller ---------------------------------------------------------------------------


def test_the_event_is_lambdas_sqs_event(local: LocalStackRuntime, calls: list[dict[str, Any]]) -> None:
    # GIVEN a message with string, number and binary attributes on the work queue
    (message_id,) = send(
        local,
        "WorkQueue",
        '{"task_id": "t-1"}',
        MessageAttributes={
            "kind": {"DataType": "String", "StringValue": "result"},
            "attempt": {"DataType": "Number", "StringValue": "2"},
            "blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01"},
        },
    )

    # WHEN the poller delivers it
    local.poller("BatchFunction").poll_once()

    # THEN the handler got exactly Lambda's record shape
    (record,) = calls[0]["event"]["Records"]
    assert list(record) == [
        "messageId",
        "receiptHandle",
        "body",
        "attributes",
        "messageAttributes",
        "md5OfBody",
        "md5OfMessageAttributes",
        "eventSource",
        "eventSourceARN",
        "awsRegion",
    ]
    assert record["messageId"] == message_id
    assert record["body"] == '{"task_id": "t-1"}'
    assert record["md5OfBody"] == hashlib.md5(record["body"].encode()).hexdigest()  # noqa: S324
    assert set(record["attributes"]) == {
        "ApproximateReceiveCount",
        "SentTimestamp",
        "SenderId",
        "ApproximateFirstReceiveTimestamp",
    }
    assert record["attributes"]["ApproximateReceiveCount"] == "1"
    assert record["messageAttributes"] == {
        "kind": {"stringValue": "result", "stringListValues": [], "binaryListValues": [], "dataType": "String"},
        "attempt": {"stringValue": "2", "stringListValues": [], "binaryListValues": [], "dataType": "Number"},
        "blob": {"binaryValue": "AAE=", "stringListValues": [], "binaryListValues": [], "dataType": "Binary"},
    }
    assert record["eventSource"] == "aws:sqs"
    assert record["eventSourceARN"] == local.stack.get_att("WorkQueue", "Arn")
    assert record["awsRegion"] == "us-east-1"


def test_a_success_is_deleted(local: LocalStackRuntime, calls: list[dict[str, Any]]) -> None:
    # GIVEN one good message
    (message_id,) = send(local, "WorkQueue", "all good")

    # WHEN the poller runs once
    result = local.poller("BatchFunction").poll_once()

    # THEN it was delivered once and deleted: nothing is left, in flight or visible
    assert result.received == result.deleted == [message_id]
    assert result.failed == []
    assert len(deliveries(calls, message_id)) == 1
    assert local.poller("BatchFunction").queue_is_empty()


def test_a_handler_crash_returns_the_whole_batch(local: LocalStackRuntime, calls: list[dict[str, Any]]) -> None:
    # GIVEN a batch where one record makes the handler raise
    ids = send(local, "WorkQueue", "good one", "crash here")

    # WHEN the poller runs once
    result = local.poller("BatchFunction").poll_once()

    # THEN nothing is deleted: both records come back (visibility override 0)
    assert sorted(result.received) == sorted(ids)
    assert result.deleted == []
    assert sorted(result.failed) == sorted(ids)
    assert result.error is not None and result.error["errorType"] == "ToyCrash"
    assert visible_count(local, "WorkQueue") == 2


def test_a_mixed_batch_deletes_only_the_successes(local: LocalStackRuntime, calls: list[dict[str, Any]]) -> None:
    # GIVEN a batch of two good records and one the handler reports as a batch item failure
    good_1, bad, good_2 = send(local, "WorkQueue", "ok 1", "please fail", "ok 2")

    # WHEN the poller runs once
    result = local.poller("BatchFunction").poll_once()

    # THEN the three were delivered in one batch, the two successes deleted, the failure kept
    assert len(calls) == 1
    assert sorted(result.deleted) == sorted([good_1, good_2])
    assert result.failed == [bad]
    (left,) = receive_all(local, "WorkQueue")
    assert left["MessageId"] == bad


def test_a_failing_record_is_received_max_receive_count_times_then_sits_in_the_dlq(
    local: LocalStackRuntime, calls: list[dict[str, Any]]
) -> None:
    # GIVEN a record that always fails, on a queue with maxReceiveCount 3
    (message_id,) = send(local, "WorkQueue", "always fail")

    # WHEN the poller drains the queue
    results = local.poller("BatchFunction").drain(until_empty=True, max_rounds=10, timeout=10)

    # THEN the handler got it exactly 3 times, with receive counts 1, 2, 3
    seen = deliveries(calls, message_id)
    assert [r["attributes"]["ApproximateReceiveCount"] for r in seen] == ["1", "2", "3"]
    assert len(results) == 3
    # AND it now sits in the DLQ, unchanged, and the source queue is empty
    (dead,) = receive_all(local, "WorkDLQ")
    assert (dead["MessageId"], dead["Body"]) == (message_id, "always fail")
    assert local.poller("BatchFunction").queue_is_empty()


def test_without_report_batch_item_failures_a_success_deletes_the_whole_batch(
    local: LocalStackRuntime, calls: list[dict[str, Any]]
) -> None:
    # GIVEN PlainFunction (no ReportBatchItemFailures) and a record its handler lists as failed
    ids = send(local, "PlainQueue", "please fail", "fine")

    # WHEN the poller runs once
    result = local.poller("PlainFunction").poll_once()

    # THEN Lambda ignores the batch response: both records are deleted
    assert sorted(result.deleted) == sorted(ids)
    assert result.failed == []
    assert local.poller("PlainFunction").queue_is_empty()


def test_the_background_poller_consumes_the_queue(local: LocalStackRuntime, calls: list[dict[str, Any]]) -> None:
    # GIVEN the runtime in "up" mode
    local.start_background()

    # WHEN a good message arrives
    (message_id,) = send(local, "WorkQueue", "background ok")

    # THEN a poller thread delivers and deletes it
    deadline = time.monotonic() + 5
    while not (deliveries(calls, message_id) and local.poller("BatchFunction").queue_is_empty()):
        assert time.monotonic() < deadline, "the background poller did not consume the message"
        time.sleep(0.05)
    assert len(deliveries(calls, message_id)) == 1


# -- asynchronous invocation ------------------------------------------------------------------


def test_an_async_failure_ends_as_one_on_failure_record(local: LocalStackRuntime, calls: list[dict[str, Any]]) -> None:
    # GIVEN AsyncFunction (always raises) with MaximumRetryAttempts 2 and OnFailure -> FailureQueue
    event = {"job_id": "job-7", "scheduled_time": "2025-01-01T00:00:00Z"}

    # WHEN it is invoked asynchronously
    outcome = local.invoke_async("AsyncFunction", event).wait(5)

    # THEN it ran MaximumRetryAttempts + 1 times, with one request id, as Lambda retries
    async_calls = [c for c in calls if c["kind"] == "async"]
    assert len(async_calls) == 3
    assert {c["request_id"] for c in async_calls} == {outcome.request_id}
    assert outcome.condition == "RetriesExhausted"
    # AND exactly one record reached the destination queue, in Lambda's shape
    (message,) = receive_all(local, "FailureQueue")
    record = json.loads(message["Body"])
    function_arn = local.stack.function("AsyncFunction").arn
    assert set(record) == {
        "version",
        "timestamp",
        "requestContext",
        "requestPayload",
        "responseContext",
        "responsePayload",
    }
    assert record["version"] == "1.0"
    assert record["timestamp"].endswith("Z")
    assert record["requestContext"] == {
        "requestId": outcome.request_id,
        "functionArn": f"{function_arn}:$LATEST",
        "condition": "RetriesExhausted",
        "approximateInvokeCount": 3,
    }
    assert record["requestPayload"] == event
    assert record["responseContext"] == {
        "statusCode": 200,
        "executedVersion": "$LATEST",
        "functionError": "Unhandled",
    }
    payload = record["responsePayload"]
    assert set(payload) == {"errorMessage", "errorType", "requestId", "stackTrace"}
    assert (payload["errorType"], payload["errorMessage"]) == ("ToyAsyncError", "cannot process job job-7")
    assert payload["requestId"] == outcome.request_id
    assert "toy_handlers.py" in payload["stackTrace"][0]  # the trace starts at the handler


def test_async_invocations_queue_in_background_mode(local: LocalStackRuntime, calls: list[dict[str, Any]]) -> None:
    # GIVEN the runtime in "up" mode
    local.start_background()

    # WHEN an async invocation is submitted
    pending = local.invoke_async("AsyncFunction", {"job_id": "bg"})

    # THEN the background thread serves it and the failure record reaches the destination
    outcome = pending.wait(5)
    assert outcome.approximate_invoke_count == 3
    assert len(receive_all(local, "FailureQueue")) == 1


# -- state file, attach, env.json -------------------------------------------------------------


def test_the_running_stack_is_recorded_and_can_be_attached(
    local: LocalStackRuntime, home: Path, calls: list[dict[str, Any]]
) -> None:
    # GIVEN a started runtime with AGENTWAKE_HOME set
    # WHEN another client reads the state file and attaches
    state = read_state()
    attached = LocalStackRuntime.attach()

    # THEN the state names this process and endpoint, and the attached runtime works on the same stack
    assert state is not None
    assert state_path() == home / "local.json"
    assert (state["pid"], state["endpoint_url"]) == (os.getpid(), local.endpoint_url)
    assert state["resources"]["WorkQueue"] == local.stack.ref("WorkQueue")
    assert attached.stack.ref("WorkQueue") == local.stack.ref("WorkQueue")
    assert attached.invoke("InfoFunction", {"sleep": 0}).ok
    # AND env.json is in `sam local invoke --env-vars` shape
    env_json = json.loads((home / "env.json").read_text())
    assert set(env_json) == set(local.stack.functions)
    assert env_json["InfoFunction"]["AWS_ENDPOINT_URL"] == local.endpoint_url
    assert env_json["InfoFunction"]["TOY_QUEUE_URL"] == local.stack.ref("WorkQueue")

    # WHEN the runtime stops
    local.stop()

    # THEN the state file is gone
    assert not (home / "local.json").exists()
    assert read_state() is None
