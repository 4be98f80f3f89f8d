"""Approval requests written as the park writes them (docs/table-design.md: ``APPROVAL#{id}`` /
``APPROVAL`` on ``gsi1`` ``APPROVALS#{session}``), for the tests of what reads and decides them: the
API's routes, the CLI and the console. ``token``: the decision token, kept only as its SHA-256."""

from __future__ import annotations

import json
from typing import Any

from agentwake.domain.models import task_token_hash
from agentwake.store.approval_reads import APPROVALS_PREFIX, approval_key
from agentwake.store.codec import to_attr
from agentwake.store.dynamo import DynamoStore

#: a decision token as the request's delivery carries it
TOKEN = "awa_" + "t" * 43


def put_approval(
    store: DynamoStore,
    approval_id: str = "apr-0123456789abcdef01234567",
    *,
    session_id: str = "alice",
    run_id: str = "bg:task-1",
    tool: str = "create_ticket",
    arguments: dict[str, Any] | None = None,
    state: str = "pending",
    requested_at: str = "2026-12-01T10:00:00Z",
    expiry_at: str = "2026-12-02T10:00:00Z",
    token: str | None = TOKEN,
    **more: Any,
) -> str:
    """Write one approval item (pending unless ``state`` and the decision's fields say otherwise)."""
    pk, sk = approval_key(approval_id)
    item: dict[str, Any] = {
        "pk": pk,
        "sk": sk,
        "gsi1pk": APPROVALS_PREFIX + session_id,
        "gsi1sk": f"{requested_at}#{approval_id}",
        "approval_id": approval_id,
        "run_id": run_id,
        "session_id": session_id,
        "kind": "background",
        "step": 1,
        "call_index": 0,
        "call_id": "call-1",
        "tool": tool,
        "arguments": json.dumps({"amount": 250, "customer": "acme"} if arguments is None else arguments),
        "rule": "amount > 100",
        "deciders": ["owners", "token"],
        "requested_at": requested_at,
        "expiry_at": expiry_at,
        "on_expiry": "reject",
        "state": state,
        "token_gen": 1,
        "resume": json.dumps({"kind": "background", "body": "{}", "attributes": {}, "target": None}),
        **more,
    }
    if token is not None:
        item["token_sha256"] = task_token_hash(token)
    store.table.db.put_item(TableName=store.table.name, Item={k: to_attr(v) for k, v in item.items()})
    return approval_id
