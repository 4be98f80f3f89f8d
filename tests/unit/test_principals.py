"""Who owns a session is compared in one form (agentwake.trust.principals): a role's sessions belong
to the role, paths do not matter, anything that is not an IAM or STS principal ARN is refused."""

from __future__ import annotations

import pytest

from agentwake.product.authority import caller
from agentwake.trust.principals import MAX_OWNERS, normal_owners, normal_principal


@pytest.mark.parametrize(
    ("arn", "normal"),
    [
        ("arn:aws:sts::111122223333:assumed-role/chat/i-0abc", "arn:aws:iam::111122223333:role/chat"),
        ("arn:aws:iam::111122223333:role/service-role/chat", "arn:aws:iam::111122223333:role/chat"),
        ("arn:aws:iam::111122223333:user/ops/bot", "arn:aws:iam::111122223333:user/bot"),
        ("arn:aws:iam::111122223333:user/bot", "arn:aws:iam::111122223333:user/bot"),
        ("arn:aws-cn:sts::111122223333:assumed-role/chat/s", "arn:aws-cn:iam::111122223333:role/chat"),
        ("arn:aws:iam::111122223333:root", "arn:aws:iam::111122223333:root"),
        ("arn:aws:sts::111122223333:federated-user/alice", "arn:aws:sts::111122223333:federated-user/alice"),
    ],
)
def test_a_principal_has_one_normal_form(arn: str, normal: str) -> None:
    assert normal_principal(arn) == normal


@pytest.mark.parametrize(
    "arn",
    ["bob", "", "arn:aws:s3:::bucket", "arn:aws:iam::12345:role/x", "arn:aws:iam::111122223333:role/" + "x" * 3000],
)
def test_anything_else_is_refused_saying_what_a_principal_looks_like(arn: str) -> None:
    with pytest.raises(ValueError, match="IAM principal ARN"):
        normal_principal(arn)


def test_owners_are_kept_once_and_bounded() -> None:
    role = "arn:aws:iam::111122223333:role/chat"
    assert normal_owners([role, "arn:aws:sts::111122223333:assumed-role/chat/x"]) == [role]
    with pytest.raises(ValueError, match=f"at most {MAX_OWNERS}"):
        normal_owners([f"arn:aws:iam::111122223333:user/u{i}" for i in range(MAX_OWNERS + 1)])


def test_the_caller_comes_only_from_the_verified_request_context() -> None:
    iam = {"userArn": "arn:aws:sts::111122223333:assumed-role/chat/i-1"}
    assert caller({"requestContext": {"authorizer": {"iam": iam}}}) == "arn:aws:iam::111122223333:role/chat"
    # no authorizer, a JWT authorizer, a header claiming an identity, a malformed ARN: no caller
    assert caller({"requestContext": {}}) is None
    assert caller({"requestContext": {"authorizer": {"jwt": {"claims": {}}}}}) is None
    assert caller({"headers": {"x-amz-user-arn": iam["userArn"]}, "requestContext": {}}) is None
    assert caller({"requestContext": {"authorizer": {"iam": {"userArn": "bob"}}}}) is None
