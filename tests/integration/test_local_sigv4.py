"""The local stack's AWS_IAM authorizer (infra/agentwake_local/sigv4.py), on moto's IAM and STS: a
request is served only when its SigV4 signature, recomputed with botocore's signer from the secret
the embedded IAM holds, matches; the caller reaches the function as API Gateway passes it, a role's
credentials as the role's session. Plain HTTP on 127.0.0.1, as any producer would send it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import botocore.auth
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from agentwake.product.authority import caller
from tests.support.aws import REGION, Resources
from tests.support.product_api import served


@pytest.fixture
def api(resources: Resources) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    seen: list[dict[str, Any]] = []
    with served(resources, seen) as url:
        yield url, seen


def send(
    url: str,
    method: str,
    path: str,
    creds: Credentials | None,
    body: bytes | None = None,
    *,
    tamper: bytes | None = None,
) -> tuple[int, dict[str, Any]]:
    """One request signed with ``creds`` (None: unsigned); ``tamper``: the body sent instead of the signed one."""
    request = AWSRequest(method=method, url=url + path, data=body, headers={"Content-Type": "application/json"})
    if creds is not None:
        SigV4Auth(creds, "execute-api", REGION).add_auth(request)
    sent = urllib.request.Request(
        request.url, data=tamper if tamper is not None else body, headers=dict(request.headers.items()), method=method
    )
    try:
        with urllib.request.urlopen(sent, timeout=30) as resp:  # noqa: S310 - 127.0.0.1
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def user_credentials(name: str) -> Credentials:
    iam = boto3.client("iam", region_name=REGION)
    iam.create_user(UserName=name)
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return Credentials(key["AccessKeyId"], key["SecretAccessKey"])


def test_a_body_changed_after_signing_and_a_stale_signature_are_refused(
    api: tuple[str, list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, seen = api
    creds = user_credentials("producer")
    body = json.dumps({"providers": [{"type": "scripted"}]}).encode()
    # GIVEN a signed request that works
    assert send(url, "PUT", "/sessions/s-1", creds, body)[0] == 201
    # WHEN the body is changed after signing, or the signature is 20 minutes old
    changed = send(url, "PUT", "/sessions/s-1", creds, body, tamper=body.replace(b"scripted", b"bedrock_"))
    monkeypatch.setattr(
        botocore.auth, "get_current_datetime", lambda: datetime.now(UTC).replace(tzinfo=None) - timedelta(minutes=20)
    )
    stale = send(url, "GET", "/sessions/s-1", creds)
    # THEN both are 403 before the function runs, saying why
    assert changed[0] == 403 and "does not match" in changed[1]["error"]
    assert stale[0] == 403 and "15 minutes" in stale[1]["error"]
    assert len(seen) == 1  # only the genuine request reached the function


def test_a_role_s_credentials_call_as_the_role_and_the_caller_reaches_the_function(
    api: tuple[str, list[dict[str, Any]]],
) -> None:
    url, seen = api
    # GIVEN a role, and credentials from sts assume-role (a role session)
    iam = boto3.client("iam", region_name=REGION)
    role = iam.create_role(
        RoleName="chat-product", AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": []})
    )
    assumed = boto3.client("sts", region_name=REGION).assume_role(RoleArn=role["Role"]["Arn"], RoleSessionName="web-7")
    c = assumed["Credentials"]
    creds = Credentials(c["AccessKeyId"], c["SecretAccessKey"], c["SessionToken"])
    # WHEN it creates a session
    status, created = send(
        url, "PUT", "/sessions/s-role", creds, json.dumps({"providers": [{"type": "scripted"}]}).encode()
    )
    # THEN the function saw the role session, and the session belongs to the role
    assert status == 201, created
    iam_context = seen[-1]["requestContext"]["authorizer"]["iam"]
    assert iam_context["userArn"] == "arn:aws:sts::123456789012:assumed-role/chat-product/web-7"
    assert iam_context["accessKey"] == c["AccessKeyId"] and iam_context["accountId"] == "123456789012"
    assert caller(seen[-1]) == created["owners"][0] == "arn:aws:iam::123456789012:role/chat-product"
    # and the same key with another session token is refused
    wrong = Credentials(c["AccessKeyId"], c["SecretAccessKey"], "not-the-token")
    assert send(url, "GET", "/sessions/s-role", wrong)[0] == 403


@pytest.mark.parametrize("claim", ["of the signed body", "UNSIGNED-PAYLOAD"])
def test_a_signed_payload_hash_header_cannot_carry_another_body(
    api: tuple[str, list[dict[str, Any]]], claim: str
) -> None:
    import hashlib

    url, seen = api
    creds = user_credentials(f"producer-{len(claim)}")
    body = json.dumps({"providers": [{"type": "scripted"}]}).encode()
    other = json.dumps({"providers": [{"type": "scripted"}], "persona": "the attacker's"}).encode()
    # GIVEN a request that signs x-amz-content-sha256 (botocore then takes the header as the body's hash)
    value = hashlib.sha256(body).hexdigest() if claim != "UNSIGNED-PAYLOAD" else claim
    request = AWSRequest(
        method="PUT",
        url=url + "/sessions/s-h",
        data=body,
        headers={"Content-Type": "application/json", "X-Amz-Content-SHA256": value},
    )
    SigV4Auth(creds, "execute-api", REGION).add_auth(request)
    # WHEN it is replayed with another body
    sent = urllib.request.Request(request.url, data=other, headers=dict(request.headers.items()), method="PUT")
    try:
        with urllib.request.urlopen(sent, timeout=30) as resp:  # noqa: S310 - 127.0.0.1
            status, answer = resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        status, answer = exc.code, json.loads(exc.read() or b"{}")
    # THEN it is refused before the function runs
    assert status == 403 and "SHA-256" in answer["error"], answer
    assert seen == []
