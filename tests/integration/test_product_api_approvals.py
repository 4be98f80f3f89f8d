"""Approval requests on the product API (product/api_approvals.py): a session's owners list and read
them, the holder of a request's decision token reads and decides that one, and every decision goes
through ApprovalsService.decide: written once, a different one refused saying what stands (409), a
forged token refused (403), another owner's request answered as none (404). Requests are written as
the park writes them (tests/support/approval_items.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from agentwake.store.dynamo import DynamoStore
from tests.support.approval_items import TOKEN, put_approval
from tests.support.aws import REGION, Resources
from tests.support.builders import seed_session
from tests.support.product_api import call, fresh_services

STRANGER = "arn:aws:iam::123456789012:role/stranger"
TOKEN_HEADER = "X-Agentwake-Approval-Token"


@pytest.fixture(autouse=True)
def fresh(resources: Resources) -> Iterator[None]:
    fresh_services()
    yield
    fresh_services()


def nudges(resources: Resources) -> list[dict[str, Any]]:
    sqs = boto3.client("sqs", region_name=REGION)
    got = sqs.receive_message(QueueUrl=resources.work_queue_url, MaxNumberOfMessages=10).get("Messages", [])
    return [json.loads(m["Body"]) for m in got if json.loads(m["Body"]).get("kind") == "approval"]


def test_owners_list_a_sessions_approvals_newest_first_by_state_and_in_pages(store: DynamoStore) -> None:
    # GIVEN three requests of alice's session (one decided) and one of bob's
    seed_session(store, "alice")
    seed_session(store, "bob")
    ids = [put_approval(store, run_id=f"bg:t{i}", requested_at=f"2026-12-01T1{i}:00:00Z").approval_id for i in range(3)]
    put_approval(store, session_id="bob", run_id="bg:tb")
    assert call("POST", f"/approvals/{ids[0]}/decision", {"decision": "reject", "reason": "no"})[0] == 200
    # WHEN alice's owner lists them two at a time
    status, first = call("GET", "/sessions/alice/approvals", query={"limit": "2"})
    assert status == 200 and first["cursor"]
    _, second = call("GET", "/sessions/alice/approvals", query={"limit": "2", "cursor": first["cursor"]})
    # THEN they come newest request first, each once, only alice's, never a token's hash
    listed = [a["approval_id"] for a in first["approvals"] + second["approvals"]]
    assert listed == list(reversed(ids)) and second["cursor"] is None
    assert all("token_sha256" not in a and "resume" not in a for a in first["approvals"])
    # AND the state filter keeps the pending ones
    _, pending = call("GET", "/sessions/alice/approvals", query={"state": "pending"})
    assert [a["approval_id"] for a in pending["approvals"]] == [ids[2], ids[1]]
    # AND a page whose every request is filtered out still leads to the older ones
    _, filtered = call("GET", "/sessions/alice/approvals", query={"state": "rejected", "limit": "1"})
    assert filtered["approvals"] == [] and filtered["cursor"]
    found = []
    cursor = filtered["cursor"]
    while cursor:
        _, page = call("GET", "/sessions/alice/approvals", query={"state": "rejected", "limit": "1", "cursor": cursor})
        found += [a["approval_id"] for a in page["approvals"]]
        cursor = page["cursor"]
    assert found == [ids[0]]
    # AND another principal is refused, naming the session; a state it does not know is a 422
    status, refused = call("GET", "/sessions/alice/approvals", caller=STRANGER)
    assert status == 403 and "alice" in refused["error"]
    assert call("GET", "/sessions/alice/approvals", query={"state": "maybe"})[0] == 422


def test_one_approval_is_read_by_owners_or_its_token_and_is_none_to_anyone_else(store: DynamoStore) -> None:
    seed_session(store, "alice")
    approval = put_approval(store, arguments={"amount": 250, "customer": "acme"})
    path = f"/approvals/{approval.approval_id}"
    # WHEN an owner reads it THEN the call as asked, why, its expiry and then what
    status, shown = call("GET", path)
    assert status == 200
    assert (shown["tool"], shown["arguments"], shown["rule"], shown["on_expiry"]) == (
        "create_ticket",
        {"amount": 250, "customer": "acme"},
        "amount > 100",
        "reject",
    )
    assert "token_sha256" not in shown and TOKEN not in json.dumps(shown)
    # AND the holder of its decision token (not an owner) reads it too
    assert call("GET", path, headers={TOKEN_HEADER: TOKEN}, caller=STRANGER) == (200, shown)
    # AND a stranger without it, or with another token, is told there is no such approval
    for headers in ({}, {TOKEN_HEADER: "not-the-token"}):
        status, refused = call("GET", path, headers=headers, caller=STRANGER)
        assert (status, refused["type"]) == (404, "UnknownApproval")
    assert call("GET", "/approvals/apr-nope")[0] == 404


def test_a_decision_is_written_once_and_a_different_one_says_what_stands(
    store: DynamoStore, resources: Resources
) -> None:
    # GIVEN a pending request of alice's session
    seed_session(store, "alice")
    approval = put_approval(store)
    path = f"/approvals/{approval.approval_id}/decision"
    # WHEN a stranger decides it THEN it answers as no approval of theirs, and nothing changed
    status, refused = call("POST", path, {"decision": "approve"}, caller=STRANGER)
    assert (status, refused["type"]) == (404, "UnknownApproval")
    # WHEN its owner approves it, on behalf of a named person
    status, decided = call("POST", path, {"decision": "approve", "decided_by": "Alice", "reason": "fine"})
    # THEN it is approved, naming who, and the parked run is nudged once
    assert status == 200 and decided["state"] == "approved" and decided["decided_via"] == "api-owner"
    assert "on behalf of Alice" in decided["decided_by"] and decided["reason"] == "fine"
    assert [m["approval_id"] for m in nudges(resources)] == [approval.approval_id]
    # AND the same decision again answers the same, and nudges nothing more
    again = call("POST", path, {"decision": "approve"})
    assert again == (200, decided) and nudges(resources) == []
    # AND a rejection now is refused, saying what was decided, and carries the decision that stands
    status, conflict = call("POST", path, {"decision": "reject", "reason": "no"})
    assert (status, conflict["type"]) == (409, "ApprovalAlreadyDecided")
    assert "approved" in conflict["error"] and conflict["approval"]["state"] == "approved"
    assert call("GET", f"/approvals/{approval.approval_id}")[1]["state"] == "approved"


def test_the_token_holder_decides_and_a_forged_token_is_refused(store: DynamoStore) -> None:
    seed_session(store, "alice")
    approval = put_approval(store)
    path = f"/approvals/{approval.approval_id}/decision"
    # WHEN a caller who is not an owner sends another token THEN 403, nothing written
    status, refused = call("POST", path, {"decision": "reject", "token": "x" * 43}, caller=STRANGER)
    assert (status, refused["type"]) == (403, "ForgedDecision") and "x" * 43 not in refused["error"]
    assert call("GET", f"/approvals/{approval.approval_id}")[1]["state"] == "pending"
    # WHEN the token's holder rejects it, naming themselves
    body = {"decision": "reject", "token": TOKEN, "decided_by": "bob from support", "reason": "wrong customer"}
    status, decided = call("POST", path, body, caller=STRANGER)
    # THEN it is rejected by them, via the token, and the answer never holds the token
    assert status == 200 and (decided["state"], decided["decided_by"], decided["decided_via"]) == (
        "rejected",
        "bob from support",
        "api-token",
    )
    assert TOKEN not in json.dumps(decided)
    # AND a body it does not know is a 422 naming the field
    status, invalid = call("POST", path, {"decision": "maybe"})
    assert status == 422 and "decision" in invalid["error"]
