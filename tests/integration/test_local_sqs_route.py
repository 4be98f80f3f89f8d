"""The embedded server answers SQS's JSON requests through moto's SQS dispatch without Flask
(``agentwake_local.sqs_route``), exactly as moto's own route answers them."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from agentwake_local import sqs_route
from agentwake_local.server import DEFAULT_REGION, MotoServer, boto3_session

#: enough of a SigV4 header for moto to read the account and the region from (it verifies no signature)
AUTH = (
    f"AWS4-HMAC-SHA256 Credential=testing/20261204/{DEFAULT_REGION}/sqs/aws4_request, SignedHeaders=host, Signature=0"
)


@pytest.fixture(scope="module")
def server() -> Iterator[MotoServer]:
    with MotoServer() as moto_server:
        yield moto_server


def call(endpoint: str, action: str, body: dict[str, Any]) -> tuple[int, dict[str, str], str]:
    request = urllib.request.Request(
        f"{endpoint}/",
        data=json.dumps(body).encode(),
        method="POST",
        headers={
            "X-Amz-Target": f"AmazonSQS.{action}",
            "Content-Type": "application/x-amz-json-1.0",
            "Authorization": AUTH,
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, headers, text = response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as error:
        status, headers, text = error.code, dict(error.headers), error.read().decode()
    return status, {k.lower(): v for k, v in headers.items() if k.lower() != "date"}, text


def conversation(endpoint: str) -> list[tuple[int, dict[str, str], str]]:
    """A queue's life in the requests a DLQ scan and its producers make, answers recorded."""
    from moto.moto_api._internal import mock_random

    mock_random.seed(37)
    answers = [call(endpoint, "CreateQueue", {"QueueName": "route-queue"})]
    url = json.loads(answers[0][2])["QueueUrl"]
    attributes = {"t": {"DataType": "String", "StringValue": "é </x>"}, "n": {"DataType": "Number", "StringValue": "1"}}
    answers.append(
        call(endpoint, "SendMessage", {"QueueUrl": url, "MessageBody": "one", "MessageAttributes": attributes})
    )
    entries = [{"Id": str(i), "MessageBody": f"m{i}"} for i in range(3)]
    answers.append(call(endpoint, "SendMessageBatch", {"QueueUrl": url, "Entries": entries}))
    receive = {"QueueUrl": url, "MaxNumberOfMessages": 10, "VisibilityTimeout": 30, "WaitTimeSeconds": 0}
    answers.append(
        call(endpoint, "ReceiveMessage", {**receive, "AttributeNames": ["All"], "MessageAttributeNames": ["All"]})
    )
    handles = [m["ReceiptHandle"] for m in json.loads(answers[-1][2])["Messages"]]
    changes = [{"Id": "ok", "ReceiptHandle": handles[0], "VisibilityTimeout": 0}]
    changes.append({"Id": "bad", "ReceiptHandle": "not-a-handle", "VisibilityTimeout": 0})
    answers.append(call(endpoint, "ChangeMessageVisibilityBatch", {"QueueUrl": url, "Entries": changes}))
    answers.append(call(endpoint, "GetQueueAttributes", {"QueueUrl": url, "AttributeNames": ["All"]}))
    deletes = [{"Id": str(i), "ReceiptHandle": h} for i, h in enumerate(handles[1:])]
    answers.append(call(endpoint, "DeleteMessageBatch", {"QueueUrl": url, "Entries": deletes}))
    answers.append(call(endpoint, "ReceiveMessage", {**receive, "QueueUrl": url + "-gone"}))
    answers.append(call(endpoint, "ReceiveMessage", {**receive, "MaxNumberOfMessages": 11}))
    return answers


def test_an_sqs_json_request_is_answered_as_motos_own_route_answers_it(
    server: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the same requests from the same seed of moto's random, once through moto's route
    with monkeypatch.context() as patched:
        patched.setattr(sqs_route, "is_sqs_json", lambda environ: False)
        server.reset()
        theirs = conversation(server.endpoint_url)
    # WHEN they are sent again through the direct route
    server.reset()
    ours = conversation(server.endpoint_url)

    # THEN each answer is the same: status, headers and body (but the clock's timestamps, and so
    # the length of a body that holds one)
    def timeless(answers: list[tuple[int, dict[str, str], str]]) -> list[Any]:
        return [
            (s, {k: v for k, v in h.items() if k != "content-length"}, re.sub(r"\b1\d{9}(\.\d+|\d{3})?\b", "T", b))
            for s, h, b in answers
        ]

    assert timeless(ours) == timeless(theirs)
    statuses = [status for status, _, _ in ours]
    assert statuses == [200] * 7 + [400, 400]
    assert '"Failed": [{"Id": "bad"' in ours[4][2]


def test_the_servers_sqs_requests_do_not_go_through_flask(server: MotoServer, monkeypatch: pytest.MonkeyPatch) -> None:
    from flask import Flask

    server.reset()
    sqs = boto3_session().client("sqs", endpoint_url=server.endpoint_url, region_name=DEFAULT_REGION)
    url = sqs.create_queue(QueueName="flaskless")["QueueUrl"]
    dispatched = [0]
    full_dispatch_request = Flask.full_dispatch_request

    def counting(self: Any) -> Any:
        dispatched[0] += 1
        return full_dispatch_request(self)

    monkeypatch.setattr(Flask, "full_dispatch_request", counting)
    # WHEN a scan's requests are answered
    sqs.send_message(QueueUrl=url, MessageBody="x")
    held = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=30)["Messages"]
    sqs.change_message_visibility_batch(
        QueueUrl=url, Entries=[{"Id": "0", "ReceiptHandle": held[0]["ReceiptHandle"], "VisibilityTimeout": 0}]
    )
    sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
    # THEN none went through Flask
    assert dispatched[0] == 0
    # AND another service's request still does
    boto3_session().client("dynamodb", endpoint_url=server.endpoint_url, region_name=DEFAULT_REGION).list_tables()
    assert dispatched[0] == 1
