"""The surfaces of approvals over a run that really parked (the wake, the park and the resume as the
stack runs them: tests/integration/test_approvals.py's harness): the product API lists and decides it,
the operator CLI shows the parked run and decides it, and either decision resumes the run, which calls
the gated tool once on approval and never otherwise (counted at a server on 127.0.0.1)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from agentwake import bootstrap
from agentwake.store.dynamo import DynamoStore
from agentwake_ops.cli import app
from agentwake_ops.cli_common import CliState
from tests.integration.test_approvals import (
    APPROVAL,
    RUN,
    Stack,
    ToolServer,
    parked,
    resume_all,
)
from tests.support.aws import Resources
from tests.support.product_api import call
from tests.support.receiver import CountingReceiver


@pytest.fixture
def tool() -> Iterator[ToolServer]:
    server = ToolServer()
    yield server
    server.close()


@pytest.fixture
def receiver() -> Iterator[CountingReceiver]:
    with CountingReceiver() as r:
        yield r


@pytest.fixture
def stack(store: DynamoStore, resources: Resources, monkeypatch: pytest.MonkeyPatch) -> Stack:
    """The harness's functions over moto (tests/integration/test_approvals.py), as the handlers' deps."""
    made = Stack(store, resources)
    monkeypatch.setattr(bootstrap.root(), "wake_deps", made.deps)
    return made


def agentwake(*args: str, expect: int = 0) -> Any:
    result = CliRunner().invoke(app, list(args), obj=CliState(), env={"COLUMNS": "250"})
    assert result.exit_code == expect, f"{args}: {result.stdout}{result.stderr}{result.exception!r}"
    return result


def test_an_operator_sees_the_parked_run_and_approves_it_and_the_tool_runs_once(
    stack: Stack, tool: ToolServer, receiver: CountingReceiver
) -> None:
    # GIVEN a run parked on its gated call
    parked(stack, tool, receiver)
    # WHEN an operator looks at its session's runs and at the run
    listed = json.loads(agentwake("runs", "list", "--session", "s1", "--status", "parked", "--json").stdout)
    shown = " ".join(agentwake("runs", "show", RUN).stdout.split())
    # THEN it is listed as parked, and says what it waits for and how to decide
    assert [r["run_id"] for r in listed["runs"]] == [RUN]
    parked_transcript = " ".join(agentwake("runs", "show", RUN, "--transcript").stdout.split())
    assert f"attempt 1 parked: waiting for approval {APPROVAL}" in parked_transcript
    assert f"waiting for approval {APPROVAL} create_ticket(" in shown and "(then rejected)" in shown
    assert "parked since" in shown and f"agentwake approvals approve {APPROVAL} --yes" in shown
    pending = json.loads(agentwake("approvals", "list", "--state", "pending", "--json").stdout)
    assert [a["approval_id"] for a in pending] == [APPROVAL]
    # WHEN the operator approves it, and what the decision sets going runs (its nudge, the handed copy)
    said = " ".join(agentwake("approvals", "approve", APPROVAL, "--as", "ops-alice", "--yes").stdout.split())
    assert "approved by operator (as ops-alice) via cli" in said
    resume_all(stack)
    # THEN the tool ran exactly once and the run succeeded, no longer waiting; the request says when it resumed
    assert tool.calls == Counter({f"{RUN}#0#0": 1})
    run = stack.store.records.get_run(RUN)
    assert run is not None and run.status == "succeeded"
    decided = json.loads(agentwake("approvals", "show", APPROVAL, "--json").stdout)
    assert decided["state"] == "approved" and decided["resumed_at"]
    assert "resumed" in " ".join(agentwake("approvals", "show", APPROVAL).stdout.replace("│", " ").split())
    assert "waiting for approval" not in agentwake("runs", "show", RUN).stdout
    # AND its transcript reads through the request as asked, its delivery, the decision and the call
    transcript = " ".join(agentwake("runs", "show", RUN, "--transcript").stdout.split())
    assert f"step 0: create_ticket needs approval (always): asked as {APPROVAL}" in transcript
    assert f"request {APPROVAL} delivered as {RUN}#0#0#approval" in transcript
    assert f"step 0: {APPROVAL} approved by operator (as ops-alice) via cli" in transcript
    assert "tool ? returned" not in transcript and "attempt 2 succeeded" in transcript


def test_the_product_api_rejects_it_and_the_tool_is_never_called(
    stack: Stack, tool: ToolServer, receiver: CountingReceiver
) -> None:
    # GIVEN a run parked on its gated call, its request delivered with a decision token
    parked(stack, tool, receiver)
    (asked,) = receiver.received
    token = asked["approval"]["token"]
    # WHEN the product lists the session's pending approvals
    status, page = call("GET", "/sessions/s1/approvals", query={"state": "pending"})
    assert status == 200 and [a["approval_id"] for a in page["approvals"]] == [APPROVAL]
    # AND the person holding the token rejects it, saying why
    body = {"decision": "reject", "token": token, "decided_by": "bob", "reason": "wrong customer"}
    status, decided = call("POST", f"/approvals/{APPROVAL}/decision", body, caller="arn:aws:iam::123456789012:role/x")
    assert status == 200 and (decided["state"], decided["decided_by"]) == ("rejected", "bob")
    resume_all(stack)
    # THEN the tool was never called, and the run went on and succeeded
    assert tool.calls == Counter()
    run = stack.store.records.get_run(RUN)
    assert run is not None and run.status == "succeeded"
    # AND a later approval is refused, saying what stands
    status, conflict = call("POST", f"/approvals/{APPROVAL}/decision", {"decision": "approve"})
    assert status == 409 and "rejected" in conflict["error"] and "wrong customer" in conflict["error"]


def test_the_tree_shows_the_request_under_the_run_that_asked(
    stack: Stack, tool: ToolServer, receiver: CountingReceiver
) -> None:
    # GIVEN a run parked on its gated call
    parked(stack, tool, receiver)
    # WHEN an operator reads the session's runs as a tree, and the run's links
    tree = agentwake("runs", "list", "--session", "s1", "--tree").stdout
    links = json.loads(agentwake("runs", "show", RUN, "--json").stdout)["links"]
    # THEN the request hangs under its run, with its tool and state, and the run names it
    assert f"approval {APPROVAL}  create_ticket  pending" in tree
    assert links["approvals"] == [
        {
            "approval_id": APPROVAL,
            "tool": "create_ticket",
            "state": "pending",
            "requested_at": links["approvals"][0]["requested_at"],
        }
    ]
    data = json.loads(agentwake("runs", "list", "--session", "s1", "--tree", "--json").stdout)
    (root,) = data["tree"]
    assert [c["approval"]["approval_id"] for c in root["children"] if c["kind"] == "approval"] == [APPROVAL]
    shown = " ".join(agentwake("runs", "show", RUN).stdout.replace("│", " ").split())
    assert f"approval {APPROVAL}: create_ticket, pending" in shown
