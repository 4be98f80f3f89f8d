"""The product API's routes over approval requests (a gated tool call waiting for a person; docs/tools.md
"Asking before acting"), included by ``product/api.py`` (docs/product-api.md):

- ``GET /sessions/{session_id}/approvals?state=&cursor=&limit=`` its approvals, newest request first
  (only its owners; ``state``: pending, approved, rejected)
- ``GET /approvals/{approval_id}`` one approval: to its session's owners, or to the holder of its decision
  token (header ``X-Agentwake-Approval-Token``). Anyone else is told there is no such approval (404)
- ``POST /approvals/{approval_id}/decision`` ``{decision: approve|reject, reason?, decided_by?, token?}``
  → 200 the approval as decided. The same decision again answers the same; a different one is 409
  ``ApprovalAlreadyDecided`` saying what was decided; a token that is not the request's is 403
  ``ForgedDecision``; 404 ``UnknownApproval``

Every decision goes through ``ApprovalsService.decide`` (the one decision path: it checks the caller's
authority, writes the decision once and nudges the parked run). What leaves is ``ApprovalOut``: never the
token, nor the copy a resume re-sends.
"""

from __future__ import annotations

from typing import Annotated, Literal

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Header, Path, Query

from agentwake import bootstrap
from agentwake.product.api_models import ApprovalList, ApprovalOut, DecisionBody
from agentwake.product.authority import caller, owned_session
from agentwake.wake.messages import ID_PATTERN

router = Router()

SessionId = Annotated[str, Path(pattern=ID_PATTERN)]
ApprovalId = Annotated[str, Path(pattern=ID_PATTERN)]
APPROVAL_TOKEN_HEADER = "X-Agentwake-Approval-Token"
#: a page of a session's approvals
DEFAULT_APPROVAL_PAGE = 20
MAX_APPROVAL_PAGE = 100


@router.get("/sessions/<session_id>/approvals")
def list_approvals(
    session_id: SessionId,
    state: Annotated[Literal["pending", "approved", "rejected"] | None, Query()] = None,
    cursor: Annotated[str | None, Query(max_length=300)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_APPROVAL_PAGE)] = DEFAULT_APPROVAL_PAGE,
) -> ApprovalList:
    owned_session(router.current_event.raw_event, session_id)  # NotAnOwner, UnknownSession
    found, more = bootstrap.approvals().session_approvals(session_id, state=state, limit=limit, cursor=cursor)
    return ApprovalList(approvals=[ApprovalOut.of(a) for a in found], cursor=more)


@router.get("/approvals/<approval_id>", responses={404: {"description": "no such approval of yours"}})
def get_approval(
    approval_id: ApprovalId,
    token: Annotated[str | None, Header(alias=APPROVAL_TOKEN_HEADER.lower(), max_length=256)] = None,
) -> ApprovalOut:
    return ApprovalOut.of(bootstrap.approvals().owned(approval_id, _caller(), token=token))


@router.post(
    "/approvals/<approval_id>/decision",
    responses={
        403: {"description": "a token that is not the request's (ForgedDecision), or not an owner"},
        404: {"description": "no such approval of yours"},
        409: {"description": "decided otherwise already (ApprovalAlreadyDecided): the answer says how"},
    },
)
def decide(approval_id: ApprovalId, body: DecisionBody) -> ApprovalOut:
    decided = bootstrap.approvals().decide(
        approval_id,
        body.decision,
        by=body.decided_by,
        via="api",
        reason=body.reason,
        token=body.token,
        principal=_caller(),
    )
    return ApprovalOut.of(decided)


def _caller() -> str | None:
    return caller(router.current_event.raw_event)
