"""The product API's routes for WebSocket push (docs/channels.md), under the session's authority
(``product/authority.py``'s ``owned_session``: the caller must own the session):

- ``POST /sessions/{session_id}/push-tickets`` → 201 ``{ticket, url, expires_in: 60}``: the page
  opens ``{url}?ticket={ticket}`` (single use, 60 s; the browser never holds AWS credentials)
- ``GET /sessions/{session_id}/unread`` → ``{unread, delivery_id, at}``: a delivery no open page
  received (the session's delivery was ``websocket`` and no page was connected)
- ``POST /sessions/{session_id}/read`` (body ``{"delivery_id": ...}`` optional) clears that mark → 200
  ``{cleared}``; with a ``delivery_id``, only while the mark names it (a newer delivery stays unread)
"""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Path
from pydantic import BaseModel, ConfigDict, Field

from agentwake.product.authority import caller, owned_session
from agentwake.wake.messages import ID_PATTERN

router = Router()

SessionId = Annotated[str, Path(pattern=ID_PATTERN)]


class PushTicket(BaseModel):
    #: single use; good for ``expires_in`` seconds
    ticket: str
    #: the WebSocket API's URL: open ``{url}?ticket={ticket}``
    url: str
    expires_in: int


class Unread(BaseModel):
    unread: bool
    #: the latest delivery no open page received
    delivery_id: str | None = None
    at: str | None = None


class ReadBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    #: clear the mark only while it names this delivery
    delivery_id: str | None = Field(default=None, min_length=1, max_length=200)


class Cleared(BaseModel):
    #: False: nothing was unread (or a newer delivery is)
    cleared: bool


def _root() -> Any:
    from agentwake import bootstrap

    return bootstrap.root()


@router.post(
    "/sessions/<session_id>/push-tickets",
    responses={
        201: {"description": "a ticket, shown once", "content": {"application/json": {"model": PushTicket}}},
        400: {"description": "the stack has no push API"},
    },
)
def push_ticket(session_id: SessionId) -> Response[Any]:
    from agentwake.product.push import issue_ticket

    event = router.current_event.raw_event
    owned_session(event, session_id)
    root = _root()
    out = issue_ticket(root.store, root.settings, session_id, caller(event) or "")
    return Response(
        status_code=201,
        content_type=content_types.APPLICATION_JSON,
        body=PushTicket(**out).model_dump(),
        headers={"Cache-Control": "no-store"},
    )


@router.get("/sessions/<session_id>/unread")
def unread(session_id: SessionId) -> Unread:
    owned_session(router.current_event.raw_event, session_id)
    mark = _root().store.connections.unread(session_id)
    return Unread(unread=False) if mark is None else Unread(unread=True, **mark)


@router.post("/sessions/<session_id>/read")
def mark_read(session_id: SessionId, body: ReadBody | None = None) -> Cleared:
    owned_session(router.current_event.raw_event, session_id)
    delivery_id = body.delivery_id if body is not None else None
    return Cleared(cleared=_root().store.connections.clear_unread(session_id, delivery_id))
