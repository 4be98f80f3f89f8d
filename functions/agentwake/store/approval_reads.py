"""Reading approval requests back (the product API's and the operators' reads; the writes — request,
decide, claim the chain's place — are ``store/approvals.py``'s). An approval is the item
``APPROVAL#{approval}`` / ``APPROVAL`` (docs/table-design.md); a session's approvals are its ``gsi1``
partition ``APPROVALS#{session}``, sorted ``{requested_at}#{approval}``.

Every read returns plain values (the item decoded, ``arguments`` parsed from its JSON text); what a
reader may see of them is ``product/approval_views.py``'s ``ApprovalOut``.
"""

from __future__ import annotations

import json
from typing import Any

from agentwake.store.codec import from_attr
from agentwake.store.table import Table, pages

APPROVAL_PREFIX = "APPROVAL#"
APPROVAL_SK = "APPROVAL"
APPROVALS_PREFIX = "APPROVALS#"
#: the states a request goes through (pending, then one decision)
APPROVAL_STATES = ("pending", "approved", "rejected")


def approval_key(approval_id: str) -> tuple[str, str]:
    return APPROVAL_PREFIX + approval_id, APPROVAL_SK


def plain_approval(item: dict[str, Any]) -> dict[str, Any]:
    """An approval item as plain values, its ``arguments`` parsed (kept as text when not JSON)."""
    plain = {k: from_attr(v) for k, v in item.items()}
    arguments = plain.get("arguments")
    if isinstance(arguments, str):
        try:
            plain["arguments"] = json.loads(arguments)
        except ValueError:
            pass
    return plain


def get_approval(table: Table, approval_id: str) -> dict[str, Any] | None:
    """One approval (a consistent GetItem), or None."""
    item = table.read_item(*approval_key(approval_id))
    return None if item is None else plain_approval(item)


def session_approvals(
    table: Table, session_id: str, *, state: str | None = None, limit: int = 20, before: str | None = None
) -> tuple[list[dict[str, Any]], str | None]:
    """A session's approvals, newest request first: at most ``limit`` read before the cursor
    ``before`` (a Query of ``gsi1``), only those in ``state`` when given. Returns the page and the
    next page's cursor (None: no more). A page filtered by state may hold fewer than ``limit``."""
    cond = "gsi1pk = :p"
    values: dict[str, Any] = {":p": {"S": APPROVALS_PREFIX + session_id}}
    request: dict[str, Any] = {"TableName": table.name, "IndexName": "gsi1", "ScanIndexForward": False, "Limit": limit}
    if before is not None:
        cond += " AND gsi1sk < :before"
        values[":before"] = {"S": before}
    if state is not None:
        request["FilterExpression"] = "#st = :st"
        request["ExpressionAttributeNames"] = {"#st": "state"}
        values[":st"] = {"S": state}
    resp = table.db.query(**request, KeyConditionExpression=cond, ExpressionAttributeValues=values)
    last = resp.get("LastEvaluatedKey")
    return [plain_approval(i) for i in resp.get("Items", [])], (last["gsi1sk"]["S"] if last else None)


def all_approvals(table: Table, *, session_id: str | None = None, state: str | None = None) -> list[dict[str, Any]]:
    """Every approval (a Scan, as ``tasks list``: approvals are keyed by their id), or one session's
    (its ``gsi1`` partition), of one state when given; pending first, then newest request first."""
    values: dict[str, Any] = {}
    names: dict[str, str] = {}
    filters: list[str] = []
    if state is not None:
        filters.append("#st = :st")
        values[":st"] = {"S": state}
        names["#st"] = "state"
    if session_id is not None:
        request: dict[str, Any] = {
            "TableName": table.name,
            "IndexName": "gsi1",
            "KeyConditionExpression": "gsi1pk = :p",
        }
        values[":p"] = {"S": APPROVALS_PREFIX + session_id}
        call = table.db.query
    else:
        filters[:0] = ["begins_with(pk, :a)", "sk = :sk"]
        values.update({":a": {"S": APPROVAL_PREFIX}, ":sk": {"S": APPROVAL_SK}})
        request = {"TableName": table.name}
        call = table.db.scan
    request["ExpressionAttributeValues"] = values
    if filters:
        request["FilterExpression"] = " AND ".join(filters)
    if names:
        request["ExpressionAttributeNames"] = names
    found = [plain_approval(i) for i in pages(call, request)]
    found.sort(key=lambda a: (str(a.get("requested_at", "")), str(a.get("approval_id", ""))), reverse=True)
    found.sort(key=lambda a: a.get("state") != "pending")  # stable: pending first, each newest first
    return found
