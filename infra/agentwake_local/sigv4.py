"""The local stack's ``AWS_IAM`` authorizer: each product API request's SigV4 signature (service
``execute-api``) is recomputed with botocore's own signer from the secret the embedded IAM holds for
its access key, and the verified caller goes into the request context as API Gateway puts it
(``requestContext.authorizer.iam``). Unsigned, wrongly signed, stale (more than 15 minutes, API
Gateway's bound) or unknown-key requests are refused (403) before any function runs.

The embedded IAM is moto's IAM and STS in this process: an IAM user's access keys and the
credentials of an assumed role (``sts assume-role``), each with the principal ARN
``sts get-caller-identity`` returns for it; besides those, the stack's own credentials
(``server.FAKE_CREDENTIALS``, the local caller of the CLI, the seed, the demo and the chat app).

Given the API's ARN (``api_arn``), the caller's IAM policies are evaluated too, as API Gateway does:
an IAM user or role session of the embedded IAM needs ``execute-api:Invoke`` on
``{api_arn}/$default/METHOD/path`` (``ProducerPolicy`` grants the routes), evaluated by moto's own
policy engine; an explicit Deny wins. The stack's own credentials are the account's administrator
here, as moto treats them.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from agentwake_local.server import ACCOUNT_ID, DEFAULT_REGION, FAKE_CREDENTIALS

SERVICE = "execute-api"
#: API Gateway refuses a signature dated further than this from its clock
MAX_SKEW_S = 15 * 60
_AUTH = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=(?P<key>[^/,\s]+)/(?P<date>\d{8})/(?P<region>[^/,\s]+)/(?P<service>[^/,\s]+)"
    r"/aws4_request,\s*SignedHeaders=(?P<signed>[a-z0-9;-]+),\s*Signature=(?P<signature>[0-9a-f]{64})$"
)


def iam_identity(arn: str, *, access_key: str = "", user_id: str = "") -> dict[str, Any]:
    """``requestContext.authorizer.iam`` as API Gateway fills it for a SigV4-verified caller."""
    account = arn.split(":")[4] if arn.count(":") >= 5 else ""
    return {
        "accessKey": access_key,
        "accountId": account,
        "callerId": user_id,
        "cognitoIdentity": None,
        "principalOrgId": None,
        "userArn": arn,
        "userId": user_id,
    }


class Refused(Exception):
    """403: why the request's signature was not accepted (never the secret, never the signature)."""


@dataclass(frozen=True)
class HeldKey:
    secret: str
    token: str | None
    arn: str
    #: the principal's IAM policy documents; None: the stack's own credentials (not evaluated)
    policies: list[Any] | None = None


@dataclass
class SigV4Verifier:
    """Verifies requests signed for ``region``; ``own``: the stack's own credentials (access key ->
    secret, session token), whose principal is what moto's STS answers for them."""

    region: str = DEFAULT_REGION
    own: Mapping[str, tuple[str, str | None]] = field(
        default_factory=lambda: {
            FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"]: (
                FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                FAKE_CREDENTIALS["AWS_SESSION_TOKEN"],
            )
        }
    )
    #: ``arn:aws:execute-api:REGION:ACCOUNT:API_ID``: evaluate the caller's policies on each route
    api_arn: str | None = None
    now: Any = time.time

    def verify(self, method: str, url: str, headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
        """The caller's ``requestContext.authorizer.iam``; Refused saying why."""
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials

        lowered = {k.lower(): v for k, v in headers.items()}
        found = _AUTH.match(lowered.get("authorization", "").strip())
        if found is None:
            raise Refused("the request is not signed with SigV4 (AWS_IAM): sign it for service execute-api")
        if found["service"] != SERVICE or found["region"] != self.region:
            raise Refused(f"the signature's scope must be {self.region}/{SERVICE}")
        signed = found["signed"].split(";")
        stamp = lowered.get("x-amz-date", "")
        if "host" not in signed or "x-amz-date" not in signed or not stamp.startswith(found["date"]):
            raise Refused("the signature must cover the host and x-amz-date headers")
        try:
            when = datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC).timestamp()
        except ValueError:
            raise Refused("x-amz-date is not a SigV4 timestamp") from None
        if abs(self.now() - when) > MAX_SKEW_S:
            raise Refused("the signature is expired or dated in the future (more than 15 minutes)")
        claimed = lowered.get("x-amz-content-sha256")
        if claimed is not None and claimed != hashlib.sha256(body or b"").hexdigest():
            # botocore takes this header as the payload's hash: a claim that is not the body's own
            # (or UNSIGNED-PAYLOAD) would let a captured signature carry another body
            raise Refused("x-amz-content-sha256 is not the SHA-256 of the body: the body is not the one signed")
        held = self._held(found["key"], lowered.get("x-amz-security-token"))
        request = AWSRequest(method=method, url=url, data=body or None, headers={h: lowered.get(h, "") for h in signed})
        request.context["timestamp"] = stamp
        signer = SigV4Auth(Credentials(found["key"], held.secret, held.token), SERVICE, self.region)
        expected = signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request)
        if not hmac.compare_digest(expected, found["signature"]):
            raise Refused("the request signature does not match (wrong secret, or the request changed after signing)")
        if self.api_arn is not None and held.policies is not None:
            self._authorize(held, f"{self.api_arn}/$default/{method.upper()}{urlsplit(url).path}")
        return iam_identity(held.arn, access_key=found["key"], user_id=held.arn.rsplit("/", 1)[-1])

    @staticmethod
    def _authorize(held: HeldKey, resource: str) -> None:
        """``execute-api:Invoke`` on ``resource`` by the principal's policies, as moto evaluates them."""
        from moto.iam.access_control import IAMPolicy, PermissionResult

        allowed = False
        for policy in held.policies or ():
            result = IAMPolicy(policy).is_action_permitted("execute-api:Invoke", resource)
            if result == PermissionResult.DENIED:
                allowed = False
                break
            allowed = allowed or result == PermissionResult.PERMITTED
        if not allowed:
            raise Refused(f"{held.arn} is not authorized to perform execute-api:Invoke on {resource}")

    def _held(self, access_key: str, token: str | None) -> HeldKey:
        """The secret and principal the embedded IAM holds for ``access_key``."""
        from moto.iam.access_control import CreateAccessKeyFailure, create_access_key
        from moto.sts.models import sts_backends

        if access_key in self.own:
            secret, own_token = self.own[access_key]
            if token is not None and token != own_token:  # the fake credentials' token may be left out
                raise Refused("the security token included in the request is invalid")
            _, arn, _ = sts_backends[ACCOUNT_ID]["aws"].get_caller_identity(access_key, self.region)
            return HeldKey(secret, own_token, arn)
        headers = {"X-Amz-Security-Token": token} if token is not None else {}
        try:
            key = create_access_key(ACCOUNT_ID, "aws", access_key, headers)
        except CreateAccessKeyFailure:
            raise Refused("the security token included in the request is invalid") from None
        creds = key.create_credentials()
        return HeldKey(creds.secret_key, creds.token, key.arn, list(key.collect_policies()))
