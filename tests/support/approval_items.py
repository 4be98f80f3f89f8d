"""Approval requests written as the park writes them (``store.approvals.request``: the request and its
journal step, beside the run's record), for the tests of what reads and decides them: the product
API's routes, the CLI and the console. ``TOKEN``: the decision token the request's delivery carries."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from agentwake.domain.approvals import Approval, approval_id, token_sha256
from agentwake.domain.run_models import RunRecord
from agentwake.store.dynamo import DynamoStore
from agentwake.store.keys import run_key

TOKEN = "t" * 43


def put_approval(
    store: DynamoStore,
    *,
    session_id: str = "alice",
    run_id: str = "bg:task-1",
    tool: str = "create_ticket",
    arguments: dict[str, Any] | None = None,
    requested_at: str = "2026-12-01T10:00:00Z",
    expiry_at: str = "2099-12-02T10:00:00Z",
    token: str = TOKEN,
    **more: Any,
) -> Approval:
    """A pending request of call 0 of step 1 of ``run_id`` (its run recorded too: a decision needs it)."""
    store.table.db.put_item(
        TableName=store.table.name,
        Item=store.table.item(RunRecord(run_id=run_id, kind="background", session_id=session_id), *run_key(run_id)),
    )
    approval = Approval(
        approval_id=approval_id(run_id, 1, 0),
        run_id=run_id,
        session_id=session_id,
        step=1,
        call_index=0,
        call_id="call-1",
        tool=tool,
        arguments={"amount": 250, "customer": "acme"} if arguments is None else arguments,
        rule="amount > 100",
        requested_at=requested_at,
        expiry_at=expiry_at,
        expiry_epoch=datetime.fromisoformat(expiry_at.replace("Z", "+00:00")).astimezone(UTC).timestamp(),
        token_sha256=token_sha256(token),
        **more,
    )
    assert store.approvals.request(approval, {"approval_id": approval.approval_id, "tool": tool}).token_current
    return approval


def park_run(store: DynamoStore, approval: Approval, *, started_at: str = "2026-12-01T09:59:00Z") -> None:
    """``approval``'s run as the park leaves it: ``parked`` since the request, waiting for it, listed on
    its session's and its day's index partitions (what ``runs list`` reads)."""
    from agentwake.store.keys import runs_by_day_pk, runs_gsi_pk, runs_gsi_sk

    run = RunRecord(
        run_id=approval.run_id,
        kind="background",
        session_id=approval.session_id,
        status="parked",
        attempts=1,
        started_at=started_at,
        parked_at=approval.requested_at,
        waiting_for=approval.approval_id,
    )
    sort_key = runs_gsi_sk(started_at, approval.run_id)
    store.table.db.put_item(
        TableName=store.table.name,
        Item=store.table.item(
            run,
            *run_key(approval.run_id),
            gsi3pk=runs_gsi_pk(approval.session_id),
            gsi3sk=sort_key,
            gsi4pk=runs_by_day_pk(started_at[:10]),
            gsi4sk=sort_key,
        ),
    )
