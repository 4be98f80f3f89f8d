"""The runner (DESIGN §2): states, max steps, malformed calls, all providers failing, journal replay."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from agentwake.agent.chain import ProviderChain, RetryPolicy
from agentwake.agent.journal import InMemoryJournal
from agentwake.agent.providers.scripted import ScriptedProvider
from agentwake.agent.runner import MAX_STEPS_MESSAGE, AgentState, Runner
from agentwake.agent.tools import Tool, ToolContext, ToolRegistry
from agentwake.agent.types import ChatRequest, ModelReply
from agentwake.domain.conversation import Message, ToolCall
from agentwake.domain.steps import reply_key, tool_key
from tests.support.clock import FakeClock

RUN_ID = "bg:task-1"


# --- small test doubles -------------------------------------------------------------------


class EchoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str


class Echo(Tool):
    name = "echo"
    description = "Echo the text back."
    Args = EchoArgs

    def __init__(self) -> None:
        self.invocations: list[tuple[str, ToolContext]] = []

    def invoke(self, args: EchoArgs, ctx: ToolContext) -> str:
        self.invocations.append((args.text, ctx))
        return f"echo: {args.text}"


class Boom(Tool):
    name = "boom"
    description = "Always fails."
    Args = EchoArgs

    def __init__(self) -> None:
        self.invocations = 0

    def invoke(self, args: EchoArgs, ctx: ToolContext) -> str:
        self.invocations += 1
        raise ValueError("the disk is on fire")


class Recording:
    """A provider that records every request it is sent, then answers like the wrapped one."""

    def __init__(self, inner: ScriptedProvider) -> None:
        self.inner = inner
        self.id = inner.id
        self.requests: list[ChatRequest] = []

    def complete(self, request: ChatRequest) -> ModelReply:
        self.requests.append(request)
        return self.inner.complete(request)


def scripted(script: list[dict[str, Any]], id: str = "scripted") -> Recording:
    return Recording(ScriptedProvider(id=id, script=script))


def chain(*providers: Any) -> ProviderChain:
    return ProviderChain(list(providers), retry=RetryPolicy(max_attempts=2), clock=FakeClock(), rand=lambda: 0.0)


def make_runner(
    model: Any,
    *,
    tools: list[Tool] | None = None,
    journal: InMemoryJournal | None = None,
    max_steps: int = 4,
) -> Runner:
    return Runner(
        model=model,
        tools=ToolRegistry(tools if tools is not None else [Echo()]),
        messages=[Message(role="system", content="You were woken."), Message(role="user", content="Act.")],
        context=ToolContext(run_id=RUN_ID, session_id="s-1"),
        journal=journal,
        max_steps=max_steps,
    )


def echo_call(text: str = "hi") -> dict[str, Any]:
    return {"name": "echo", "arguments": {"text": text}}


# --- states ---------------------------------------------------------------------------------


def test_states_go_idle_running_done_with_final_response():
    # GIVEN a model that calls a tool on step 0 and answers on step 1
    provider = scripted([{"tool_calls": [echo_call("ping")]}, {"text": "All done."}])
    echo = Echo()
    runner = make_runner(chain(provider), tools=[echo])
    assert runner.state is AgentState.IDLE
    assert runner.final_response is None

    # WHEN one step runs
    state = runner.step()

    # THEN the run is RUNNING, the tool ran, and nothing is final yet
    assert state is AgentState.RUNNING
    assert runner.steps_done == 1
    assert [text for text, _ in echo.invocations] == ["ping"]
    assert runner.final_response is None

    # WHEN the run continues
    state = runner.run()

    # THEN it is DONE with the last reply as final response and completion text
    assert state is AgentState.DONE
    assert runner.finished
    assert runner.final_response is not None
    assert runner.final_response.text == "All done."
    assert runner.final_response.provider_id == "scripted"
    assert runner.completion_text == "All done."
    assert runner.error_type is None
    assert runner.steps_done == 2


def test_a_finished_run_cannot_step_again():
    # GIVEN a run that is DONE
    runner = make_runner(chain(scripted([{"text": "done"}])))
    assert runner.run() is AgentState.DONE

    # WHEN / THEN stepping again is a programming error, not a silent extra model call
    with pytest.raises(RuntimeError, match="already ended in DONE"):
        runner.step()


def test_error_is_a_state_not_an_exception_when_every_provider_fails():
    # GIVEN two providers that both fail (one permanently, one transiently on every attempt)
    a = scripted([{"error": "auth"}], id="primary")
    b = scripted([{"error": "server"}], id="fallback")
    runner = make_runner(chain(a, b))

    # WHEN the run runs (no pytest.raises: an exception here fails the test)
    state = runner.run()

    # THEN it ends in ERROR naming each provider with its last error
    assert state is AgentState.ERROR
    assert runner.error_type == "AllProvidersFailed"
    assert runner.completion_text.startswith("All chat models failed:")
    assert "primary: AccessDenied: invalid credentials (scripted)" in runner.completion_text
    assert "fallback: ServerError: internal server error (scripted)" in runner.completion_text
    assert set(runner.provider_errors) == {"primary", "fallback"}
    assert runner.final_response is None
    assert runner.steps_done == 0


def test_a_model_that_raises_anything_still_ends_in_error():
    # GIVEN a model (not a provider chain) that raises a plain exception
    class Broken:
        def complete(self, request: ChatRequest) -> ModelReply:
            raise KeyError("no such model")

    runner = make_runner(Broken())

    # WHEN the run runs
    state = runner.run()

    # THEN the runner reports ERROR with the cause instead of raising
    assert state is AgentState.ERROR
    assert runner.error_type == "KeyError"
    assert "no such model" in runner.completion_text


# --- max steps ------------------------------------------------------------------------------


def test_max_steps_removes_tools_adds_the_message_and_runs_exactly_one_more_step_then_errors():
    # GIVEN a model that calls a tool on every step, and max_steps=2
    provider = scripted([{"tool_calls": [echo_call()]}])
    echo = Echo()
    runner = make_runner(chain(provider), tools=[echo], max_steps=2)

    # WHEN the run runs
    state = runner.run()

    # THEN exactly one extra step (step 2) was made, with no tools and the max-steps user message
    assert [r.step for r in provider.requests] == [0, 1, 2]
    assert [s.name for s in provider.requests[0].tools] == ["echo"]
    assert [s.name for s in provider.requests[1].tools] == ["echo"]
    assert provider.requests[2].tools == ()
    last = provider.requests[2].messages[-1]
    assert (last.role, last.content) == ("user", MAX_STEPS_MESSAGE)
    assert sum(1 for m in provider.requests[2].messages if m.content == MAX_STEPS_MESSAGE) == 1
    # AND the tool calls of the extra step were not executed
    assert len(echo.invocations) == 2
    # AND the run ends in ERROR, never stuck in RUNNING
    assert state is AgentState.ERROR
    assert runner.error_type == "MaxStepsExceeded"
    assert "did not finish within 2 steps" in runner.completion_text
    assert "echo" in runner.completion_text
    assert runner.final_response is None


def test_a_final_step_that_still_calls_tools_is_not_journaled_so_a_redrive_asks_again():
    # GIVEN a run that ended in MaxStepsExceeded, with its journal
    journal = InMemoryJournal()
    stubborn = scripted([{"tool_calls": [echo_call()]}])
    assert make_runner(chain(stubborn), journal=journal, max_steps=2).run() is AgentState.ERROR
    # THEN the failed final step left no reply in the journal (the steps before it did)
    assert reply_key(2) not in journal.entries
    assert reply_key(0) in journal.entries and reply_key(1) in journal.entries
    # WHEN the run is redriven with a model that now answers
    fixed = scripted([{"tool_calls": [echo_call()]}, {"tool_calls": [echo_call()]}, {"text": "done"}])
    runner = make_runner(chain(fixed), journal=journal, max_steps=2)
    # THEN the final step is asked again (steps 0 and 1 replayed) and the run is DONE
    assert runner.run() is AgentState.DONE
    assert [r.step for r in fixed.requests] == [2]
    assert runner.completion_text == "done"


def test_max_steps_extra_step_that_answers_is_done():
    # GIVEN a model that calls tools on steps 0 and 1, then answers when tools are taken away
    provider = scripted([{"tool_calls": [echo_call()]}, {"tool_calls": [echo_call()]}, {"text": "Summary."}])
    runner = make_runner(chain(provider), max_steps=2)

    # WHEN the run runs
    state = runner.run()

    # THEN the answer of the extra, tool-less step is the final response
    assert state is AgentState.DONE
    assert provider.requests[-1].tools == ()
    assert provider.requests[-1].messages[-1].content == MAX_STEPS_MESSAGE
    assert runner.completion_text == "Summary."
    assert runner.steps_done == 3


def test_answer_before_max_steps_never_adds_the_max_steps_message():
    # GIVEN a model that answers on step 1 of at most 2
    provider = scripted([{"tool_calls": [echo_call()]}, {"text": "ok"}])
    runner = make_runner(chain(provider), max_steps=2)

    # WHEN the run runs
    assert runner.run() is AgentState.DONE

    # THEN no request ever carried the max-steps message and every request offered the tool
    assert all(m.content != MAX_STEPS_MESSAGE for r in provider.requests for m in r.messages)
    assert all(r.tools for r in provider.requests)


# --- malformed tool calls become error results the model sees --------------------------------


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        pytest.param(
            {"name": "boom", "arguments": {"text": "x"}},
            "error: tool 'boom' failed: ValueError: the disk is on fire",
            id="tool-raises",
        ),
        pytest.param({"name": "nope", "arguments": {}}, "error: unknown tool 'nope'", id="unknown-name"),
        pytest.param(
            {"name": None, "arguments": {"text": "x"}}, "error: the tool call has no tool name", id="missing-name"
        ),
        pytest.param(
            {"name": "", "arguments": {"text": "x"}}, "error: the tool call has no tool name", id="empty-name"
        ),
        pytest.param(
            {"name": "echo", "arguments": '{"text": "unterminated'},
            "error: arguments for 'echo' are not valid JSON",
            id="invalid-json",
        ),
        pytest.param(
            {"name": "echo", "arguments": '["text"]'},
            "error: arguments for 'echo' must be a JSON object, got list",
            id="json-not-object",
        ),
        pytest.param(
            {"name": "echo", "arguments": {}},
            "error: arguments for 'echo' do not match its schema: text: Field required",
            id="schema-missing-field",
        ),
        pytest.param(
            {"name": "echo", "arguments": {"text": 5}},
            "error: arguments for 'echo' do not match its schema: text: Input should be a valid string",
            id="schema-wrong-type",
        ),
        pytest.param(
            {"name": "echo", "arguments": {"text": "x", "loud": True}},
            "error: arguments for 'echo' do not match its schema: loud: Extra inputs are not permitted",
            id="schema-extra-field",
        ),
    ],
)
def test_malformed_call_becomes_an_error_result_the_model_sees_next_step(call, expected):
    # GIVEN a model whose step-0 tool call is malformed, and which answers on step 1
    provider = scripted([{"tool_calls": [{**call, "id": "c1"}]}, {"text": "Noted the error."}])
    echo, boom = Echo(), Boom()
    runner = make_runner(chain(provider), tools=[echo, boom])

    # WHEN the run runs
    state = runner.run()

    # THEN the run is not ERROR: the model saw an error tool result for that call on step 1
    assert state is AgentState.DONE
    assert runner.completion_text == "Noted the error."
    tool_messages = [m for m in provider.requests[1].messages if m.role == "tool"]
    assert len(tool_messages) == 1
    assert tool_messages[0].tool_call_id == "c1"
    assert tool_messages[0].content.startswith(expected)
    # AND no well-formed tool was run on malformed input
    assert echo.invocations == []
    assert boom.invocations == (1 if call["name"] == "boom" else 0)


def test_a_bad_call_does_not_stop_the_good_calls_of_the_same_reply():
    # GIVEN one reply with a bad call between two good ones
    calls = [echo_call("one"), {"name": "nope"}, echo_call("three")]
    provider = scripted([{"tool_calls": calls}, {"text": "done"}])
    echo = Echo()
    runner = make_runner(chain(provider), tools=[echo])

    # WHEN the run runs
    assert runner.run() is AgentState.DONE

    # THEN both good calls ran, in order, with their call index, and the model saw three results
    assert [(t, c.step, c.call_index) for t, c in echo.invocations] == [("one", 0, 0), ("three", 0, 2)]
    results = [m.content for m in provider.requests[1].messages if m.role == "tool"]
    assert results[0] == "echo: one"
    assert results[1].startswith("error: unknown tool 'nope'")
    assert results[2] == "echo: three"


# --- journal replay -------------------------------------------------------------------------


SCRIPT = [{"tool_calls": [echo_call("first")]}, {"tool_calls": [echo_call("second")]}, {"text": "Finished."}]


def test_replay_of_a_completed_run_calls_neither_model_nor_tools():
    # GIVEN a completed run and its journal
    first_provider, first_echo = scripted(SCRIPT), Echo()
    first = make_runner(chain(first_provider), tools=[first_echo], journal=InMemoryJournal())
    assert first.run() is AgentState.DONE
    assert len(first_provider.requests) == 3 and len(first_echo.invocations) == 2
    journaled = dict(first.journal.entries)  # type: ignore[attr-defined]

    # WHEN the same run is retried with a fresh model and tools, on a journal pre-filled from the first
    provider, echo = scripted(SCRIPT), Echo()
    retry = make_runner(chain(provider), tools=[echo], journal=InMemoryJournal(journaled))
    state = retry.run()

    # THEN it replays to the same outcome without a model call or a tool execution
    assert state is AgentState.DONE
    assert retry.completion_text == "Finished."
    assert provider.requests == []
    assert provider.inner.calls == []
    assert echo.invocations == []
    assert retry.replayed_steps == 3
    assert retry.messages == first.messages


def test_failed_step_is_not_journaled_and_the_retry_resumes_there():
    # GIVEN a run whose model fails on step 1 after step 0 called a tool
    failing, echo = scripted([SCRIPT[0], {"error": "auth"}]), Echo()
    journal = InMemoryJournal()
    first = make_runner(chain(failing), tools=[echo], journal=journal)
    assert first.run() is AgentState.ERROR

    # THEN step 0's reply and tool result are journaled, and the failed step 1 left no reply entry
    assert set(journal.entries) == {reply_key(0), tool_key(0, 0)}
    assert reply_key(1) not in journal.entries
    assert len(echo.invocations) == 1

    # WHEN the run is retried on the same journal with a working model
    provider, retry_echo = scripted(SCRIPT), Echo()
    retry = make_runner(chain(provider), tools=[retry_echo], journal=journal)
    state = retry.run()

    # THEN step 0 is replayed (no model call, no tool call) and the model is called from step 1 on
    assert state is AgentState.DONE
    assert [r.step for r in provider.requests] == [1, 2]
    assert [t for t, _ in retry_echo.invocations] == ["second"]
    assert retry.replayed_steps == 1
    # AND the model on step 1 saw the replayed tool result of step 0
    assert [m.content for m in provider.requests[0].messages if m.role == "tool"] == ["echo: first"]


def test_journaled_tool_result_is_replayed_even_if_the_reply_step_must_run_on():
    # GIVEN a journal holding step 0's reply and the result of its first tool call only
    # (the Lambda died after the first of two tool calls)
    reply = ModelReply(
        tool_calls=(
            ToolCall(id="c0", name="echo", arguments='{"text": "a"}'),
            ToolCall(id="c1", name="echo", arguments='{"text": "b"}'),
        ),
        provider_id="scripted",
    )
    journal = InMemoryJournal({reply_key(0): reply.to_dict(), tool_key(0, 0): {"content": "echo: a", "tool": "echo"}})
    provider, echo = scripted([{"text": "unused"}, {"text": "done"}]), Echo()
    runner = make_runner(chain(provider), tools=[echo], journal=journal)

    # WHEN the run resumes
    assert runner.run() is AgentState.DONE

    # THEN only the unfinished tool call runs, and the model is called only for step 1
    assert [t for t, _ in echo.invocations] == ["b"]
    assert [r.step for r in provider.requests] == [1]
    assert journal.entries[tool_key(0, 1)] == {"content": "echo: b", "tool": "echo"}
