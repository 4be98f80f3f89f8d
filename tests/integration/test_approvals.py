"""Asking before acting (issue 35): a gated tool call parks its run, the decision is written once and
resumes the run, which calls the tool exactly once on approval and never otherwise.

Real moto, the real wake; tools are HTTP servers on 127.0.0.1 counting their calls."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from agentwake.domain.approvals import Approval, approval_id, new_token, token_sha256
from agentwake.domain.models import RunRecord, utcnow_iso
from agentwake.domain.steps import decision_key
from agentwake.errors import ApprovalAlreadyDecided, ForgedDecision, UnknownApproval
from agentwake.product.approvals import ApprovalsService
from agentwake.store.dynamo import DynamoStore
from agentwake.store.keys import run_key
from agentwake.store.queues import WorkQueue
from tests.support.aws import REGION, Resources
from tests.support.builders import PRODUCT_CALLER, seed_session


def _pending(store: DynamoStore, run_id: str = "bg:t1", session_id: str = "s1") -> tuple[Approval, str]:
    """A pending request of tool call 0 of step 0 of ``run_id``, as the park writes it, and its token."""
    store.table.db.put_item(
        TableName=store.table.name,
        Item=store.table.item(RunRecord(run_id=run_id, kind="background", session_id=session_id), *run_key(run_id)),
    )
    token = new_token()
    approval = Approval(
        approval_id=approval_id(run_id, 0, 0),
        run_id=run_id,
        session_id=session_id,
        step=0,
        call_index=0,
        tool="create_ticket",
        arguments={"amount": 500},
        requested_at=utcnow_iso(),
        expiry_at="2099-01-01T00:00:00Z",
        expiry_epoch=4070908800.0,
        token_sha256=token_sha256(token),
    )
    assert store.approvals.request(approval, {"approval_id": approval.approval_id}).token_current
    return approval, token


def _work_messages(resources: Resources) -> list[dict[str, Any]]:
    sqs = boto3.client("sqs", region_name=REGION)
    got = sqs.receive_message(QueueUrl=resources.work_queue_url, MaxNumberOfMessages=10).get("Messages", [])
    return [json.loads(m["Body"]) for m in got]


@pytest.fixture
def service(store: DynamoStore, resources: Resources) -> ApprovalsService:
    seed_session(store, "s1")
    return ApprovalsService(store, WorkQueue(resources.work_queue_url))


def test_a_second_different_decision_is_refused_saying_what_was_decided(
    store: DynamoStore, service: ApprovalsService, resources: Resources
) -> None:
    # GIVEN a pending request
    approval, _ = _pending(store)
    # WHEN its session's owner rejects it, then someone approves it
    decided = service.decide(
        approval.approval_id, "reject", by=None, via="api", reason="wrong customer", principal=PRODUCT_CALLER
    )
    with pytest.raises(ApprovalAlreadyDecided) as refused:
        service.decide(approval.approval_id, "approve", by="ops", via="cli")
    # THEN the second is refused naming what, who, when and why; the same decision again answers as stored
    assert decided.state == "rejected"
    said = str(refused.value)
    assert "rejected" in said and PRODUCT_CALLER in said and decided.decided_at in said and "wrong customer" in said
    again = service.decide(approval.approval_id, "reject", by="ops", via="cli")
    assert again.decided_by == PRODUCT_CALLER and again.reason == "wrong customer"
    # and the journal holds the one decision, the run names it, one nudge went to the work queue
    step = store.journals.journal_entries("bg:t1")[decision_key(0, 0)]
    assert (step["decision"], step["by"], step["reason"]) == ("rejected", PRODUCT_CALLER, "wrong customer")
    run = store.table.read_item(*run_key("bg:t1"))
    assert run is not None and run["decided"]["S"] == approval.approval_id
    nudges = [m for m in _work_messages(resources) if m.get("nudge")]
    assert [(m["kind"], m["approval_id"]) for m in nudges] == [("approval", approval.approval_id)]


def test_the_token_decides_and_a_forged_token_does_not(store: DynamoStore, service: ApprovalsService) -> None:
    approval, token = _pending(store)
    with pytest.raises(ForgedDecision):
        service.decide(approval.approval_id, "approve", by="mallory", via="api", token=new_token())
    assert store.approvals.get(approval.approval_id).state == "pending"  # type: ignore[union-attr]
    decided = service.decide(approval.approval_id, "approve", by="bob", via="api", token=token)
    assert (decided.state, decided.decided_by, decided.decided_via) == ("approved", "bob", "api-token")


def test_another_principal_is_told_the_request_does_not_exist(store: DynamoStore, service: ApprovalsService) -> None:
    approval, _ = _pending(store)
    with pytest.raises(UnknownApproval):
        service.decide(
            approval.approval_id, "approve", by=None, via="api", principal="arn:aws:iam::123456789012:role/other"
        )
    with pytest.raises(UnknownApproval):
        service.decide("apr-000000000000000000000000", "approve", by=None, via="cli")
