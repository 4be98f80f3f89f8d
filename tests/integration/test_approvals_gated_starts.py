"""Gated starts (issue 35): a background tool's start and a subagent's hand-off (``ask_{name}``) ask
before acting like any tool. The run parks; approved, its resume starts the task or runs the subagent
exactly once; rejected, the model reads the rejection and nothing starts.

Real moto, the real wake and handlers (tests/integration/test_approvals.py's stack); the background
tool and the subagent's own tool are HTTP servers on 127.0.0.1 counting their calls."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from agentwake.domain.steps import approval_delivery_id, tool_key
from agentwake.wake.start_task import task_id_for_call
from tests.integration import test_approvals as approvals
from tests.integration.test_approvals import APPROVAL, RUN, Stack, ToolServer, resume_all, ticket_tool
from tests.support.builders import seed_session, seed_task
from tests.support.receiver import CountingReceiver

# the stack over moto, the gated tool's server, the user's webhook: test_approvals.py's fixtures
stack, tool, receiver = approvals.stack, approvals.tool, approvals.receiver

#: the task the approved call starts: the same on every retry and redrive of the run
STARTED = task_id_for_call(f"{RUN}#0#0")
REJECTED_BY = 'not run: operator (as bob) rejected this call: "not now"'


@pytest.fixture
def lookup() -> Iterator[ToolServer]:
    """The subagent's own (ungated) tool."""
    server = ToolServer()
    yield server
    server.close()


def _park(stack: Stack, receiver: CountingReceiver, script: list[dict[str, Any]], **config: Any) -> None:
    """A session with ``config``'s tools/subagents whose agent's step 0 makes the gated call: parked."""
    seed_session(
        stack.store,
        "s1",
        providers=[{"type": "scripted", "id": "p", "script": script}],
        delivery={"type": "webhook", "url": receiver.url},
        **config,
    )
    seed_task(stack.store, "t1", "s1")
    assert stack.wake() == {"batchItemFailures": []}
    run = stack.store.records.get_run(RUN)
    assert run is not None and run.status == "parked", run
    assert stack.notes() == [] and stack.dlqs_empty()
    assert receiver.by_delivery_id() == Counter({approval_delivery_id(RUN, 0, 0): 1})


def _decide_and_resume(stack: Stack, decision: str) -> dict[str, Any]:
    """The operator's decision, what it sets going delivered; the gated call's journaled result."""
    stack.approvals.decide(APPROVAL, decision, by="bob", via="cli", reason="not now" if decision == "reject" else None)
    resume_all(stack)
    run = stack.store.records.get_run(RUN)
    assert run is not None and run.status == "succeeded", run
    assert len(stack.notes()) == 1 and stack.dlqs_empty()
    return stack.store.journals.journal_entries(RUN)[tool_key(0, 0)]


def _started(stack: Stack, kind: str) -> list[Any]:
    """The work messages of ``kind`` sent for the started task."""
    return [m for m in stack.work_sent() if m.kind == kind and m.task_id == STARTED]


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_a_gated_background_tool_starts_its_task_once_on_approval_and_never_on_rejection(
    stack: Stack, tool: ToolServer, receiver: CountingReceiver, decision: str
) -> None:
    # GIVEN a session whose ticket tool runs in the background and asks before it starts
    background_ticket = {**ticket_tool(tool.url), "background": True}
    script = [
        {"tool_calls": [{"name": "create_ticket", "arguments": {"amount": 500, "customer": "acme"}}]},
        {"text": "I filed it; I will report back."},
    ]
    # WHEN the agent calls it: the run parks, nothing started
    _park(stack, receiver, script, tools=[background_ticket])
    assert stack.approval().tool == "create_ticket"
    assert stack.store.records.get_task(STARTED) is None and _started(stack, "tool") == []
    # AND the operator decides, the run resumes
    step = _decide_and_resume(stack, decision)
    # THEN approved: the task started once (registered as this call's, one work message); rejected:
    # the model read who rejected it and why, and no task exists
    task = stack.store.records.get_task(STARTED)
    if decision == "reject":
        assert step["content"] == REJECTED_BY
        assert task is None and _started(stack, "tool") == []
    else:
        assert step["content"].startswith(f"started task {STARTED}")
        assert task is not None and (task.kind, task.tool_name, task.started_by) == ("tool", "create_ticket", RUN)
        assert len(_started(stack, "tool")) == 1
    # WHEN the producer's message comes again (an SQS duplicate), and the work queue is run
    assert stack.wake() == {"batchItemFailures": []}
    assert all(a == {"batchItemFailures": []} for a in stack.work())
    # THEN the tool was called once on approval (by BackgroundWorkFunction), never on rejection;
    # nothing started twice, nothing is in a DLQ
    assert sum(tool.calls.values()) == (1 if decision == "approve" else 0), tool.calls
    assert len(_started(stack, "tool")) == (1 if decision == "approve" else 0)
    assert stack.dlqs_empty()


@pytest.mark.parametrize("mode", ["foreground", "background"])
@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_a_gated_subagent_runs_once_on_approval_and_never_on_rejection(
    stack: Stack, lookup: ToolServer, receiver: CountingReceiver, decision: str, mode: str
) -> None:
    # GIVEN a session whose researcher (its own tool: an ungated lookup) asks before it is handed work
    researcher = {
        "name": "researcher",
        "persona": "You research tickets.",
        "providers": [
            {
                "type": "scripted",
                "id": "sub",
                "script": [
                    {"tool_calls": [{"name": "lookup", "arguments": {"customer": "acme"}}]},
                    {"text": "Acme has one open ticket."},
                ],
            }
        ],
        "tools": ["lookup"],
        "mode": mode,
        "approval": "always",
    }
    lookup_tool = {**ticket_tool(lookup.url), "name": "lookup", "description": "Look a customer up."}
    del lookup_tool["approval"]
    background = mode == "background"
    script = [
        {
            "tool_calls": [
                {"name": "ask_researcher", "arguments": {"task": "Acme's tickets?", "background": background}}
            ]
        },
        {"text": "Done."},
    ]
    # WHEN the agent hands it work: the run parks, the subagent has not run
    _park(stack, receiver, script, tools=[lookup_tool], subagents=[researcher])
    assert stack.approval().tool == "ask_researcher"
    assert lookup.calls == Counter() and stack.store.records.get_task(STARTED) is None
    # AND the operator decides, the run resumes, and the work queue is run (a background subagent's task)
    step = _decide_and_resume(stack, decision)
    assert all(a == {"batchItemFailures": []} for a in stack.work())
    # THEN approved: the subagent ran once (its tool called once; in the foreground its answer is the
    # call's result, in the background its task started once); rejected: the model read the
    # rejection, the subagent never ran, no task exists
    if decision == "reject":
        assert step["content"] == REJECTED_BY
        assert lookup.calls == Counter() and stack.store.records.get_task(STARTED) is None
        assert _started(stack, "subagent") == []
    else:
        assert sum(lookup.calls.values()) == 1, lookup.calls
        if background:
            assert step["content"].startswith(f"started task {STARTED}")
            task = stack.store.records.get_task(STARTED)
            assert task is not None and (task.kind, task.subagent) == ("subagent", "researcher")
            assert len(_started(stack, "subagent")) == 1
        else:
            assert "Acme has one open ticket." in step["content"]
            assert stack.store.records.get_task(STARTED) is None
    # AND a duplicate of the producer's message starts nothing again; nothing is in a DLQ
    assert stack.wake() == {"batchItemFailures": []}
    assert all(a == {"batchItemFailures": []} for a in stack.work())
    assert sum(lookup.calls.values()) == (1 if decision == "approve" else 0)
    assert len(_started(stack, "subagent")) == (1 if decision == "approve" and background else 0)
    assert stack.dlqs_empty()
