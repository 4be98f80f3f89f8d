"""The runner's approval gate (issue 35): a gated call with no decision parks the run; a journaled
decision runs it once (approved) or becomes the refusal the model reads (rejected, expired)."""

from __future__ import annotations

from typing import Any

from agentwake.agent.journal import InMemoryJournal
from agentwake.agent.runner import AgentState
from agentwake.agent.tools import DRY_RUN_RESULT, ToolContext
from agentwake.domain.approvals import parse_rule
from agentwake.domain.steps import approval_key, decision_key, reply_key, tool_key
from tests.unit.test_runner import Echo, chain, make_runner, scripted

SCRIPT = [{"tool_calls": [{"name": "echo", "arguments": {"text": "pay 500"}}]}, {"text": "done"}]


def gated_echo(rule: Any = "always") -> Echo:
    echo = Echo()
    echo.side_effect = True
    echo.approval = parse_rule(rule)
    return echo


def test_a_gated_call_with_no_decision_parks_the_run_and_calls_nothing() -> None:
    # GIVEN a tool that always asks
    echo = gated_echo()
    journal = InMemoryJournal()
    runner = make_runner(chain(scripted(SCRIPT)), tools=[echo], journal=journal)
    # WHEN the model calls it
    state = runner.run()
    # THEN the run parks on that call: nothing called, no tool step, the reply journaled
    assert state is AgentState.PARKED and runner.finished
    assert runner.park is not None and (runner.park.step, runner.park.index) == (0, 0)
    assert runner.park.gate.words == "always" and runner.park.gate.arguments == {"text": "pay 500"}
    assert echo.invocations == []
    assert reply_key(0) in journal.entries and tool_key(0, 0) not in journal.entries


def test_a_call_the_rule_does_not_match_runs_at_once() -> None:
    echo = gated_echo({"when": [{"arg": "text", "glob": "refund*"}]})
    runner = make_runner(chain(scripted(SCRIPT)), tools=[echo])
    assert runner.run() is AgentState.DONE
    assert [t for t, _ in echo.invocations] == ["pay 500"]


def _decided(decision: str, **extra: Any) -> InMemoryJournal:
    journal = InMemoryJournal()
    make_runner(chain(scripted(SCRIPT)), tools=[gated_echo()], journal=journal).run()
    journal.put(approval_key(0, 0), {"approval_id": "apr-1", "tool": "echo", "expires_in_s": 86400, "rule": "always"})
    journal.put(
        decision_key(0, 0),
        {"approval_id": "apr-1", "decision": decision, "by": "alice", "reason": "wrong customer", **extra},
    )
    return journal


def test_approved_the_resumed_run_calls_the_tool_once_and_records_who() -> None:
    journal = _decided("approved")
    echo = gated_echo()
    runner = make_runner(chain(scripted(SCRIPT)), tools=[echo], journal=journal)
    assert runner.run() is AgentState.DONE
    assert [t for t, _ in echo.invocations] == ["pay 500"]
    step = journal.entries[tool_key(0, 0)]
    assert (step["content"], step["approval_id"], step["decided_by"]) == ("echo: pay 500", "apr-1", "alice")
    # a replay after that reads the tool step: never a second call
    again = make_runner(chain(scripted(SCRIPT)), tools=[echo], journal=journal)
    assert again.run() is AgentState.DONE and len(echo.invocations) == 1


def test_rejected_the_model_reads_who_rejected_and_why() -> None:
    journal = _decided("rejected")
    echo = gated_echo()
    provider = scripted(SCRIPT)
    runner = make_runner(chain(provider), tools=[echo], journal=journal)
    assert runner.run() is AgentState.DONE
    assert echo.invocations == []
    said = provider.requests[-1].messages[-1]
    assert (said.role, said.content) == ("tool", 'not run: alice rejected this call: "wrong customer"')


def test_expired_the_model_reads_that_nobody_decided() -> None:
    journal = _decided("rejected", expired=True)
    provider = scripted(SCRIPT)
    runner = make_runner(chain(provider), tools=[gated_echo()], journal=journal)
    assert runner.run() is AgentState.DONE
    assert provider.requests[-1].messages[-1].content == (
        "not run: nobody decided within 86400 s, so it was rejected by default"
    )


def test_what_was_asked_stays_asked_when_the_rule_is_removed() -> None:
    # GIVEN a call asked about, the tool's rule since removed
    journal = InMemoryJournal()
    make_runner(chain(scripted(SCRIPT)), tools=[gated_echo()], journal=journal).run()
    journal.put(approval_key(0, 0), {"approval_id": "apr-1", "tool": "echo", "rule": "always"})
    echo = Echo()
    # WHEN the run is retried before a decision
    runner = make_runner(chain(scripted(SCRIPT)), tools=[echo], journal=journal)
    # THEN it parks again, calling nothing
    assert runner.run() is AgentState.PARKED and echo.invocations == []


def test_a_dry_run_parks_the_same_way_and_follows_a_decision_without_calling() -> None:
    echo = gated_echo()
    runner = make_runner(chain(scripted(SCRIPT)), tools=[echo])
    runner.context = ToolContext(run_id="bg:task-1", session_id="s-1", dry_run=True)
    assert runner.run() is AgentState.PARKED
    journal = _decided("approved")
    replay = make_runner(chain(scripted(SCRIPT)), tools=[echo], journal=journal)
    replay.context = ToolContext(run_id="bg:task-1", session_id="s-1", dry_run=True)
    assert replay.run() is AgentState.DONE
    assert echo.invocations == [] and journal.entries[tool_key(0, 0)]["content"] == DRY_RUN_RESULT


def test_a_background_tool_and_a_subagent_are_gated_like_any_tool() -> None:
    from agentwake.agent.subagents import parse_subagents
    from agentwake.agent.tools import ToolRegistry
    from agentwake.agent.tools.background import BackgroundTool
    from agentwake.agent.tools.config import build_tools
    from agentwake.domain.conversation import ToolCall
    from agentwake.wake.subagent_tools import SubagentTool
    from tests.support.clock import FakeClock

    # GIVEN a background HTTP tool that asks above 100, and a subagent that always asks
    spec = {
        "type": "http",
        "name": "refund",
        "description": "Refund a customer.",
        "parameters": {"type": "object", "properties": {"amount": {"type": "number"}}},
        "url": "https://refunds.example.com/r",
        "background": True,
        "approval": {"when": [{"arg": "amount", "gt": 100}]},
    }
    (refund,) = build_tools([spec])
    assert isinstance(refund, BackgroundTool)
    (researcher,) = parse_subagents([{"name": "researcher", "persona": "p", "approval": "always"}])
    ask = SubagentTool(researcher, build=lambda *a, **k: None, clock=FakeClock(), deadline=None, start=None)
    registry = ToolRegistry([refund, ask])
    # THEN the start of the task is gated on its arguments, and the hand-off always
    big = registry.gate(ToolCall(id="c1", name="refund", arguments='{"amount": 500}'))
    assert big is not None and big.words == "amount > 100"
    assert registry.gate(ToolCall(id="c2", name="refund", arguments='{"amount": 5}')) is None
    handoff = registry.gate(ToolCall(id="c3", name="ask_researcher", arguments='{"task": "look it up"}'))
    assert handoff is not None and handoff.words == "always"
    # AND a call whose arguments do not parse is not gated: nobody is asked about a call that cannot run
    assert registry.gate(ToolCall(id="c4", name="refund", arguments='{"amount": "lots"}')) is None
    # AND the background-work function's own build runs the approved call: no gate there
    (work,) = build_tools([spec], run_background=True)
    assert work.approval is None
