"""The WebSocket API's side of push (PushConnectionFunction, ``handlers/push_connection.py``) and the
tickets the product API issues (docs/channels.md).

A browser never holds AWS credentials: the product's backend asks ``POST
/sessions/{id}/push-tickets`` (SigV4, owner-checked) for a ticket, and the page opens
``{url}?ticket={ticket}``. ``$connect`` redeems the ticket (single use, 60 s) and records the
connection under its session; anything else is refused before the upgrade (401: no or a bad ticket;
403: the session has as many open pages as the stack allows). ``$disconnect`` forgets the
connection (best effort: API Gateway may not send it; a stale connection dies by GoneException or TTL).
"""

from __future__ import annotations

from typing import Any

from agentwake.observability import logger


def _answer(status: int, message: str) -> dict[str, Any]:
    return {"statusCode": status, "body": message}


def issue_ticket(store: Any, settings: Any, session_id: str, principal: str) -> dict[str, Any]:
    """``{ticket, url, expires_in}`` for a session the caller owns (the route checked it)."""
    if not settings.push_url:
        from agentwake.errors import ConfigError

        raise ConfigError("this stack has no push API (AGENTWAKE_PUSH_URL is unset): deploy the template's PushApi")
    ticket, expires_in = store.connections.issue_ticket(session_id, principal)
    return {"ticket": ticket, "url": settings.push_url, "expires_in": expires_in}


def on_connect(store: Any, settings: Any, connection_id: str, query: dict[str, str] | None) -> dict[str, Any]:
    from agentwake.store.push import TooManyConnections

    ticket = (query or {}).get("ticket") or ""
    if not ticket:
        return _answer(
            401, "a push ticket is required: connect to {url}?ticket={ticket} (POST /sessions/{id}/push-tickets)"
        )
    redeemed = store.connections.redeem_ticket(ticket)
    if redeemed is None:
        # never the ticket itself in a log line
        logger.info("push connect refused: unknown, used or expired ticket", extra={"connection_id": connection_id})
        return _answer(401, "the push ticket is unknown, used or expired: ask for a new one")
    session_id = redeemed["session_id"]
    try:
        store.connections.connect(session_id, connection_id, max_connections=settings.push_max_connections)
    except TooManyConnections as exc:
        logger.info("push connect refused", extra={"session_id": session_id, "reason": str(exc)})
        return _answer(403, str(exc))
    logger.info("push connected", extra={"session_id": session_id, "connection_id": connection_id})
    return _answer(200, "connected")


def on_disconnect(store: Any, connection_id: str) -> dict[str, Any]:
    session_id = store.connections.disconnect(connection_id)
    logger.info("push disconnected", extra={"session_id": session_id, "connection_id": connection_id})
    return _answer(200, "disconnected")


def handle(event: dict[str, Any], store: Any, settings: Any) -> dict[str, Any]:
    """One ``$connect`` / ``$disconnect`` event of the WebSocket API."""
    from aws_lambda_powertools.utilities.data_classes import APIGatewayWebSocketEvent

    ws = APIGatewayWebSocketEvent(event)
    context = ws.request_context
    route = context.route_key
    if route == "$connect":
        return on_connect(store, settings, context.connection_id, ws.query_string_parameters)
    if route == "$disconnect":
        return on_disconnect(store, context.connection_id)
    return _answer(400, f"route {route!r} is not served: a page only receives")
