"""The WebSocket API's items (docs/channels.md, docs/table-design.md): push tickets, the open pages
(connections) of a session, and a session's unread mark.

| item | pk / sk | attributes |
|---|---|---|
| push ticket | ``TICKET#{sha256(ticket)}`` / ``TICKET`` | ``session_id, principal, expires_at`` (60 s) |
| connection | ``SESSION#{s}`` / ``CONN#{cid}`` and ``CONN#{cid}`` / ``CONN`` | ``session_id, connection_id, connected_at, expires_at`` |
| unread | ``SESSION#{s}`` / ``UNREAD`` | ``delivery_id, at`` |

A ticket is stored as its SHA-256 only (the ticket itself is shown once, to the product that asked),
redeemed once: a conditional DeleteItem whose condition checks its expiry (TTL only cleans up).
A connection lives as long as API Gateway keeps one open (2 hours) plus 5 minutes; a stale one dies
by the management API's GoneException (``forget``) or by TTL.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import UTC, datetime
from typing import Any

from agentwake.store.keys import CONN_PREFIX, CONN_SK, TICKET_PREFIX, TICKET_SK, UNREAD_SK, session_pk
from agentwake.store.table import Table

#: a ticket is good for this long after it is issued
TICKET_TTL_S = 60
#: API Gateway closes a WebSocket connection after 2 hours; its items outlive it by 5 minutes
CONNECTION_TTL_S = 2 * 3600 + 5 * 60


class TooManyConnections(Exception):
    """The session has as many open pages as the stack allows (``AGENTWAKE_PUSH_MAX_CONNECTIONS``)."""


def ticket_key(ticket: str) -> tuple[str, str]:
    return TICKET_PREFIX + hashlib.sha256(ticket.encode()).hexdigest(), TICKET_SK


def connection_keys(session_id: str, connection_id: str) -> list[tuple[str, str]]:
    """The session's row of the connection and the connection's own (what ``$disconnect`` finds)."""
    return [(session_pk(session_id), CONN_PREFIX + connection_id), (CONN_PREFIX + connection_id, CONN_SK)]


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat()


class PushStore:
    """Tickets, connections and the unread mark on the one table. It is the store's ``connections``
    port (``agentwake.delivery.kit.Connections``: ``of_session``, ``forget``) plus ``mark_unread``."""

    def __init__(self, table: Table) -> None:
        self.table = table

    # --- tickets ---------------------------------------------------------------------------------

    def issue_ticket(self, session_id: str, principal: str) -> tuple[str, int]:
        """A new single-use ticket for ``session_id`` (32 random bytes, URL-safe) and its lifetime."""
        ticket = secrets.token_urlsafe(32)
        pk, sk = ticket_key(ticket)
        self.table.db.put_item(
            TableName=self.table.name,
            Item={
                **self.table.key(pk, sk),
                "session_id": {"S": session_id},
                "principal": {"S": principal},
                "expires_at": {"N": str(int(self.table.now()) + TICKET_TTL_S)},
            },
            ConditionExpression="attribute_not_exists(pk)",
        )
        return ticket, TICKET_TTL_S

    def redeem_ticket(self, ticket: str) -> dict[str, str] | None:
        """``{session_id, principal}`` of an unexpired ticket, which is gone after this call; None for
        a ticket that is unknown, used or expired."""
        if not ticket or len(ticket) > 200:
            return None
        pk, sk = ticket_key(ticket)
        db = self.table.db
        try:
            resp = db.delete_item(
                TableName=self.table.name,
                Key=self.table.key(pk, sk),
                ConditionExpression="attribute_exists(pk) AND expires_at > :now",
                ExpressionAttributeValues={":now": {"N": str(int(self.table.now()))}},
                ReturnValues="ALL_OLD",
            )
        except db.exceptions.ConditionalCheckFailedException:
            return None
        old = resp.get("Attributes") or {}
        return {"session_id": old["session_id"]["S"], "principal": old.get("principal", {}).get("S", "")}

    # --- connections -----------------------------------------------------------------------------

    def connect(self, session_id: str, connection_id: str, *, max_connections: int) -> None:
        """Record an open page of ``session_id`` (one transaction: both items); TooManyConnections
        when the session has ``max_connections`` open already."""
        if len(self.of_session(session_id)) >= max_connections:
            raise TooManyConnections(f"session {session_id} has {max_connections} open pages already")
        now = self.table.now()
        attributes = {
            "session_id": {"S": session_id},
            "connection_id": {"S": connection_id},
            "connected_at": {"S": _iso(now)},
            "expires_at": {"N": str(int(now) + CONNECTION_TTL_S)},
        }
        self.table.db.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": self.table.name, "Item": {**self.table.key(pk, sk), **attributes}}}
                for pk, sk in connection_keys(session_id, connection_id)
            ]
        )

    def session_of(self, connection_id: str) -> str | None:
        item = self.table.read_item(CONN_PREFIX + connection_id, CONN_SK)
        return item["session_id"]["S"] if item else None

    def disconnect(self, connection_id: str) -> str | None:
        """Forget a closed connection (``$disconnect``); the session it was of, or None."""
        session_id = self.session_of(connection_id)
        if session_id is not None:
            self.forget(session_id, connection_id)
        return session_id

    def of_session(self, session_id: str) -> list[str]:
        """The connection ids of the session's open pages (one Query; expired ones left out)."""
        now = self.table.now()
        return [
            item["connection_id"]["S"]
            for item in self.table.query(session_pk(session_id), CONN_PREFIX)
            if float(item.get("expires_at", {}).get("N", "0")) > now
        ]

    def forget(self, session_id: str, connection_id: str) -> None:
        """Delete both items of a connection (gone, or closed); a missing one is no error."""
        self.table.db.transact_write_items(
            TransactItems=[
                {"Delete": {"TableName": self.table.name, "Key": self.table.key(pk, sk)}}
                for pk, sk in connection_keys(session_id, connection_id)
            ]
        )

    # --- unread ----------------------------------------------------------------------------------

    def mark_unread(self, session_id: str, delivery_id: str) -> None:
        """The session has a delivery no open page received (the latest one is kept)."""
        self.table.db.put_item(
            TableName=self.table.name,
            Item={
                **self.table.key(session_pk(session_id), UNREAD_SK),
                "delivery_id": {"S": delivery_id},
                "at": {"S": _iso(self.table.now())},
            },
        )

    def unread(self, session_id: str) -> dict[str, str] | None:
        """``{delivery_id, at}`` of the latest delivery no page received, or None."""
        item = self.table.read_item(session_pk(session_id), UNREAD_SK)
        if item is None:
            return None
        return {"delivery_id": item["delivery_id"]["S"], "at": item.get("at", {}).get("S", "")}

    def clear_unread(self, session_id: str, delivery_id: str | None = None) -> bool:
        """Clear the mark (only while it names ``delivery_id``, when given: a newer unread delivery
        stays marked); False when there was nothing to clear."""
        db = self.table.db
        request: dict[str, Any] = {
            "TableName": self.table.name,
            "Key": self.table.key(session_pk(session_id), UNREAD_SK),
            "ReturnValues": "ALL_OLD",
        }
        if delivery_id is not None:
            request["ConditionExpression"] = "delivery_id = :d"
            request["ExpressionAttributeValues"] = {":d": {"S": delivery_id}}
        try:
            resp = db.delete_item(**request)
        except db.exceptions.ConditionalCheckFailedException:
            return False
        return bool(resp.get("Attributes"))
