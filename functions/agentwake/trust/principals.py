"""Who may act on a session over the product API: IAM principals, compared in one normal form.

API Gateway (HTTP API, ``AWS_IAM`` authorizer) puts the signer's identity in the request context
(``requestContext.authorizer.iam.userArn``). A role's temporary credentials sign as the role's
session, ``arn:aws:sts::ACCT:assumed-role/ROLE/SESSION``; a session belongs to the role, so that
form becomes ``arn:aws:iam::ACCT:role/ROLE``. Role and user names are unique in an account
whatever their path, so ``role/path/ROLE`` and ``user/path/NAME`` lose the path too: an owner named
with a path and the same principal signing without one compare equal (docs/security.md).
"""

from __future__ import annotations

import re

#: the most owners one session names (each an ARN of at most 2048 characters, IAM's bound)
MAX_OWNERS = 20
MAX_ARN_CHARS = 2048

_ARN = re.compile(r"^arn:(aws[a-z-]*):(iam|sts)::(\d{12}):([A-Za-z-]+)(?:/(.+))?$")


def normal_principal(arn: str) -> str:
    """``arn`` in the form a session's owners are stored and compared in; ValueError (saying what a
    principal looks like) for anything that is not an IAM or STS principal ARN."""
    found = _ARN.match(arn) if isinstance(arn, str) and len(arn) <= MAX_ARN_CHARS else None
    if found is None:
        raise ValueError(
            "an owner is an IAM principal ARN, e.g. arn:aws:iam::123456789012:role/ProductRole "
            "or arn:aws:iam::123456789012:user/name"
        )
    partition, service, account, kind, rest = found.groups()
    if service == "sts" and kind == "assumed-role" and rest and "/" in rest:
        return f"arn:{partition}:iam::{account}:role/{rest.split('/', 1)[0]}"
    if service == "iam" and kind in ("role", "user") and rest:
        return f"arn:{partition}:iam::{account}:{kind}/{rest.rsplit('/', 1)[-1]}"
    return arn


def normal_owners(arns: list[str]) -> list[str]:
    """Each owner in its normal form, once, in the order given."""
    out: list[str] = []
    for arn in arns:
        normal = normal_principal(arn)
        if normal not in out:
            out.append(normal)
    if len(out) > MAX_OWNERS:
        raise ValueError(f"a session names at most {MAX_OWNERS} owners")
    return out
