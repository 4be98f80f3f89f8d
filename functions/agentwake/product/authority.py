"""Per-session authority on the product API: who is calling, and may they act on this session.

The caller is the IAM principal API Gateway verified (``AWS_IAM``, SigV4) and put in the request
context (``requestContext.authorizer.iam``; the local stack's HTTP API does the same after checking
the signature against its embedded IAM). A session belongs to the principal that created it over
the API and to the owners it names (``SessionConfig.owners``, normalised by
``agentwake.trust.principals``). Every session route, task registration, task status and task
completion calls :func:`require_owner`; a refusal names the session and why, nothing about any other
session (docs/security.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agentwake.errors import NotAnOwner, UnknownSession
from agentwake.trust.principals import normal_principal

if TYPE_CHECKING:
    from agentwake.domain.models import SessionConfig

NO_IDENTITY = (
    "the request carries no caller identity: the product API answers only SigV4-signed requests "
    "(service execute-api) verified by the AWS_IAM authorizer"
)


def caller(event: Mapping[str, Any]) -> str | None:
    """The calling principal in its normal form (a role's session as its role), None without one."""
    context = event.get("requestContext")
    authorizer = context.get("authorizer") if isinstance(context, Mapping) else None
    iam = authorizer.get("iam") if isinstance(authorizer, Mapping) else None
    arn = iam.get("userArn") if isinstance(iam, Mapping) else None
    if not isinstance(arn, str):
        return None
    try:
        return normal_principal(arn)
    except ValueError:
        return None


def require_owner(
    session_id: str, config: SessionConfig | None, principal: str | None, *, subject: str = ""
) -> SessionConfig:
    """``config`` when ``principal`` is among its owners; else NotAnOwner (no identity, no owners,
    another principal's session) or UnknownSession (no such session). ``subject``: what was asked
    about, in the message (default: the session)."""
    what = subject or f"session {session_id}"
    if principal is None:
        raise NotAnOwner(f"{what}: {NO_IDENTITY}")
    if config is None:
        raise UnknownSession(
            f"{what}: its session no longer exists"
            if subject
            else f"there is no session {session_id}; create it with PUT /sessions/{session_id}"
        )
    if not config.owners:
        raise NotAnOwner(
            f"{what}: the session names no owners, so the API acts on it for nobody; an operator adds one with "
            f"agentwake sessions put {session_id} --owner ARN"
        )
    if principal not in config.owners:
        raise NotAnOwner(
            f"{what}: {principal} is not among the session's owners (the principal that created it and those it names)"
        )
    return config


def owned_session(event: Mapping[str, Any], session_id: str, *, subject: str = "") -> SessionConfig:
    """The session's config when the request's caller owns it (else NotAnOwner / UnknownSession):
    every router of the product API checks a session route with this."""
    from agentwake import bootstrap

    config = bootstrap.store().records.get_session(session_id)
    return require_owner(session_id, config, caller(event), subject=subject)
