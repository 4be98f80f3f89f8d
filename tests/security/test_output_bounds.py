"""Issue 21 item 5: CPU work on model output is bounded like I/O. A reply with more tool calls than
one reply may make ends the run as a recorded, journaled ``MalformedOutput`` (the verdict is
journaled, not the megabytes: no retry or redrive calls the model again for it); arguments too long
or too deep are an ``error:`` result the model sees; every loop over tool calls ends by the run's
deadline. The providers are an OpenAI-compatible server on 127.0.0.1 and the scripted provider."""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict
from werkzeug import Request, Response

from agentwake.agent.bounds import MAX_ARGUMENT_DEPTH, MAX_TOOL_CALLS, ArgumentsRefused, json_depth, parse_arguments
from agentwake.agent.chain import ProviderChain
from agentwake.agent.journal import InMemoryJournal
from agentwake.agent.providers.scripted import ScriptedProvider
from agentwake.agent.runner import AgentState, Runner
from agentwake.agent.tools import Tool, ToolContext, ToolRegistry
from agentwake.deadline import run_deadline
from agentwake.domain.conversation import Message, ToolCall
from agentwake.errors import DeadlineExceeded, MalformedOutput
from agentwake.settings import Settings
from agentwake.store.itemsize import MAX_ITEM_BYTES, item_size
from agentwake.store.queues import ATTR_ERROR_TYPE, ATTR_REASON
from agentwake.wake.background import wake_for_background_result
from agentwake.wake.messages import BackgroundResultMessage
from agentwake.wake.spec import WakeDeps
from agentwake_ops.runs import run_summary
from tests.security.conftest import Cli, Stack
from tests.security.wake import completion_body, handle
from tests.support.aws import drain

#: the Lambda time left when the wake starts, as in the report (the run's deadline is 5 s before it)
REMAINING_MS = 30_000
#: "well before the deadline": what the whole wake may take, model and table included
WELL_BEFORE_S = 10.0

N_CALLS = 100_000
DEEP = 200_000
#: within the length cap, beyond the depth cap: refused by the pre-scan, not by its length
DEEP_WITHIN_LENGTH = 30_000


def deep_text(depth: int) -> str:
    return '{"text":' + "[" * depth + "]" * depth + "}"


def many_calls(n: int) -> list[dict[str, Any]]:
    return [{"id": f"c{i}", "function": {"name": "lookup", "arguments": "{}"}} for i in range(n)]


def serve_replies(httpserver: Any, replies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An OpenAI-compatible server answering ``replies`` in turn; returns the requests it received."""
    requests: list[dict[str, Any]] = []

    def handler(request: Request) -> Response:
        reply = replies[min(len(requests), len(replies) - 1)]
        requests.append(json.loads(request.data))
        body = {"choices": [{"message": reply, "finish_reason": "tool_calls" if reply.get("tool_calls") else "stop"}]}
        return Response(json.dumps(body, separators=(",", ":")), content_type="application/json")

    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(handler)
    return requests


def session_on(cli: Cli, session_id: str, httpserver: Any) -> None:
    provider = {"type": "openai", "id": "srv", "base_url": httpserver.url_for("/v1"), "model": "m"}
    cli("sessions", "put", session_id, "--provider", json.dumps(provider))


def timed_handle(body: str) -> tuple[dict[str, Any], float]:
    started = time.monotonic()
    response = handle([body], remaining_ms=REMAINING_MS)
    return response, time.monotonic() - started


# --- the OpenAI-compatible provider against a real HTTP server --------------------------------


def test_100000_tool_calls_end_in_time_as_a_journaled_malformed_output_that_no_redrive_bills_again(
    stack: Stack, cli: Cli, httpserver: Any
) -> None:
    # GIVEN a model whose reply makes 100,000 tool calls (about 5.5 MB of JSON)
    requests = serve_replies(httpserver, [{"content": None, "tool_calls": many_calls(N_CALLS)}])
    session_on(cli, "s-many", httpserver)
    body = completion_body(stack, "s-many")
    run_id = f"bg:{json.loads(body)['task_id']}"
    # WHEN its wake runs with 30 s of Lambda time left
    response, elapsed = timed_handle(body)
    print(f"100,000 tool calls over HTTP: the wake took {elapsed:.2f} s of {REMAINING_MS / 1000:.0f} s")
    # THEN it ended well before the deadline, and no retry is burned: it is dead-lettered at once
    assert elapsed < WELL_BEFORE_S
    assert response["batchItemFailures"] == []
    [dead] = drain(stack.res.dlq_url)
    assert dead["MessageAttributes"][ATTR_ERROR_TYPE]["StringValue"] == "MalformedOutput"
    assert "100,000 tool calls" in dead["MessageAttributes"][ATTR_REASON]["StringValue"]
    # AND the operator reads why: the failure record says what the reply did and what the cap is
    [failure] = stack.store.ends.failures(run_id)
    assert failure.error_type == "MalformedOutput"
    assert f"made 100,000 tool calls; at most {MAX_TOOL_CALLS} are accepted" in failure.detail
    assert stack.store.records.get_run(run_id).status == "failed"  # type: ignore[union-attr]
    # AND what is journaled is the verdict, a few hundred bytes, not the reply
    [step] = run_summary(stack.store, run_id).steps
    assert step["key"] == "000.reply" and "100,000 tool calls" in step["malformed"]
    assert step["tool_calls"] == [] and len(json.dumps(step)) < 2_000
    assert len(requests) == 1
    shown = " ".join(cli("runs", "show", run_id, "--transcript").stdout.split())
    assert "refused, not journaled: the model's reply made 100,000 tool calls" in shown
    # WHEN the operator redrives it (the same message arrives again)
    response, elapsed = timed_handle(body)
    # THEN it stops again at once, from the journal, without a second model call
    assert len(requests) == 1
    assert elapsed < WELL_BEFORE_S
    assert [f.error_type for f in stack.store.ends.failures(run_id)] == ["MalformedOutput", "MalformedOutput"]
    assert response["batchItemFailures"] == []


def test_arguments_200000_deep_are_an_error_the_model_sees_and_the_run_ends_done(
    stack: Stack, cli: Cli, httpserver: Any
) -> None:
    # GIVEN a model that calls a tool with arguments nested 200,000 deep (400 KB), and again with
    # arguments 30,000 deep that fit the length cap, then answers
    calls = [
        {"id": "c1", "function": {"name": "send_message_to_user", "arguments": deep_text(DEEP)}},
        {"id": "c2", "function": {"name": "send_message_to_user", "arguments": deep_text(DEEP_WITHIN_LENGTH)}},
    ]
    requests = serve_replies(httpserver, [{"content": None, "tool_calls": calls}, {"content": "I could not."}])
    session_on(cli, "s-deep", httpserver)
    body = completion_body(stack, "s-deep")
    run_id = f"bg:{json.loads(body)['task_id']}"
    # WHEN its wake runs with 30 s of Lambda time left
    response, elapsed = timed_handle(body)
    print(f"arguments 200,000 deep over HTTP: the wake took {elapsed:.2f} s of {REMAINING_MS / 1000:.0f} s")
    # THEN it ended DONE on its first attempt, well before the deadline, two model calls
    assert elapsed < WELL_BEFORE_S
    assert response["batchItemFailures"] == []
    run = stack.store.records.get_run(run_id)
    assert run is not None and (run.status, run.attempts) == ("succeeded", 1)
    assert len(requests) == 2
    # AND the model saw each refusal as an error: result saying why
    results = [m["content"] for m in requests[1]["messages"] if m["role"] == "tool"]
    assert results[0].startswith("error: arguments for 'send_message_to_user' are 400,009 characters long")
    assert f"nest deeper than {MAX_ARGUMENT_DEPTH} levels" in results[0]
    assert results[1] == (
        f"error: arguments for 'send_message_to_user' nest deeper than {MAX_ARGUMENT_DEPTH} levels; "
        "send flatter arguments"
    )
    # AND nothing reached the user, the journal says the same, and the transcript reads it
    tool_steps = [s for s in run_summary(stack.store, run_id).steps if ".tool." in s["key"]]
    assert [s["content"] for s in tool_steps] == results
    shown = cli("runs", "show", run_id, "--transcript").stdout
    assert "nest deeper than" in shown
    # WHEN the same message arrives again
    handle([body], remaining_ms=REMAINING_MS)
    # THEN nothing runs and the model is not called again
    assert len(requests) == 2


def test_64_calls_with_long_ids_names_and_arguments_are_journaled_and_the_run_ends_done(
    stack: Stack, cli: Cli, httpserver: Any
) -> None:
    # GIVEN a reply within the call cap whose 64 calls each carry a 30,000-character id, name and
    # arguments (5.8 MB: more long strings than cutting the longest one at a time can fit in an item)
    long = "x" * 30_000
    calls = [
        {"id": f"c{i}-{long}", "function": {"name": f"n{long}", "arguments": json.dumps({"a": long})}}
        for i in range(MAX_TOOL_CALLS)
    ]
    requests = serve_replies(httpserver, [{"content": None, "tool_calls": calls}, {"content": "done"}])
    session_on(cli, "s-long", httpserver)
    body = completion_body(stack, "s-long")
    run_id = f"bg:{json.loads(body)['task_id']}"
    # WHEN its wake runs with 30 s of Lambda time left
    response, elapsed = timed_handle(body)
    print(f"64 calls of 90,000 characters: the wake took {elapsed:.2f} s of {REMAINING_MS / 1000:.0f} s")
    # THEN the reply was journaled (cut), each call answered with an error:, and the run is DONE at once
    assert elapsed < WELL_BEFORE_S
    assert response["batchItemFailures"] == []
    run = stack.store.records.get_run(run_id)
    assert run is not None and (run.status, run.attempts) == ("succeeded", 1)
    steps = {s["key"]: s for s in run_summary(stack.store, run_id).steps}
    assert len(steps["000.reply"]["tool_calls"]) == MAX_TOOL_CALLS
    contents = [steps[f"000.tool.{i:02d}"]["content"] for i in range(MAX_TOOL_CALLS)]
    assert all(c.startswith("error: ") for c in contents), {c[:80] for c in contents}
    assert len(requests) == 2
    assert max(item_size(i) for i in stack.store.table.db.scan(TableName=stack.res.table)["Items"]) < MAX_ITEM_BYTES


# --- the scripted provider, through the wake use case -----------------------------------------


def scripted_wake(cli: Cli, stack: Stack, session_id: str, script: list[dict[str, Any]]) -> tuple[WakeDeps, str]:
    """A session on the scripted provider ``big``. Its script is too large for a session item, so
    the wake's provider factory builds the provider with ``script``."""
    placeholder = {"type": "scripted", "id": "big", "script": [{"text": "placeholder"}]}
    cli("sessions", "put", session_id, "--provider", json.dumps(placeholder))
    provider = ScriptedProvider(id="big", script=script)
    deps = WakeDeps(store=stack.store, settings=Settings.from_env(), provider_factory=lambda spec: provider)
    return deps, completion_body(stack, session_id)


def test_scripted_100000_tool_calls_fail_malformed_in_time_and_a_retry_calls_no_model(
    stack: Stack, cli: Cli, model_calls: Counter[str]
) -> None:
    # GIVEN a scripted model whose first reply makes 100,000 tool calls
    script = [{"tool_calls": [{"name": "lookup", "arguments": {}} for _ in range(N_CALLS)]}, {"text": "done"}]
    deps, body = scripted_wake(cli, stack, "s-smany", script)
    msg = BackgroundResultMessage.parse_body(body)
    # WHEN it is woken with 30 s left
    started = time.monotonic()
    with pytest.raises(MalformedOutput) as failed:
        wake_for_background_result(msg, deps, remaining_ms=REMAINING_MS)
    elapsed = time.monotonic() - started
    print(f"100,000 scripted tool calls: the wake took {elapsed:.2f} s of {REMAINING_MS / 1000:.0f} s")
    # THEN it failed for good (no retry can help), in time, with a readable reason, after one call
    assert elapsed < WELL_BEFORE_S
    assert not failed.value.retryable and failed.value.failure_type == "MalformedOutput"
    assert "100,000 tool calls" in failed.value.completion_text
    assert model_calls["big"] == 1
    # WHEN it is tried again
    with pytest.raises(MalformedOutput):
        wake_for_background_result(msg, deps, remaining_ms=REMAINING_MS)
    # THEN the journaled verdict stops it without calling the model
    assert model_calls["big"] == 1
    assert [f.error_type for f in stack.store.ends.failures(msg.run_id)] == ["MalformedOutput", "MalformedOutput"]


def test_scripted_arguments_200000_deep_are_an_error_result_and_a_retry_calls_no_model(
    stack: Stack, cli: Cli, model_calls: Counter[str]
) -> None:
    # GIVEN a scripted model that calls a tool with arguments nested 200,000 deep, then answers
    script = [
        {"tool_calls": [{"name": "send_message_to_user", "arguments": deep_text(DEEP)}]},
        {"tool_calls": [{"name": "send_message_to_user", "arguments": deep_text(DEEP_WITHIN_LENGTH)}]},
        {"text": "I could not send it."},
    ]
    deps, body = scripted_wake(cli, stack, "s-sdeep", script)
    msg = BackgroundResultMessage.parse_body(body)
    # WHEN it is woken with 30 s left
    started = time.monotonic()
    outcome = wake_for_background_result(msg, deps, remaining_ms=REMAINING_MS)
    elapsed = time.monotonic() - started
    print(f"arguments 200,000 deep, scripted: the wake took {elapsed:.2f} s of {REMAINING_MS / 1000:.0f} s")
    # THEN the run is DONE (no RecursionError), in time, each refusal an error: result
    assert elapsed < WELL_BEFORE_S
    assert outcome.status == "succeeded"
    assert model_calls["big"] == 3
    steps = {s["key"]: s for s in run_summary(stack.store, msg.run_id).steps}
    assert steps["000.tool.00"]["content"].startswith("error: arguments for 'send_message_to_user' are 400,009")
    assert "nest deeper than 32 levels" in steps["001.tool.00"]["content"]
    # WHEN the same message arrives again
    again = wake_for_background_result(msg, deps, remaining_ms=REMAINING_MS)
    # THEN nothing runs and the model is not called again
    assert again.status == "already_succeeded"
    assert model_calls["big"] == 3


# --- the bounds themselves --------------------------------------------------------------------


def test_the_depth_scan_counts_containers_and_skips_strings() -> None:
    assert json_depth('{"a": [1, {"b": []}]}') == 4
    assert json_depth('{"a": "[[[[{{{{"}') == 1  # brackets inside a string are text
    assert json_depth(r'{"a": "\"[[[", "b": [[]]}') == 3  # an escaped quote does not end the string
    assert json_depth("[" * 10_000 + "]" * 10_000, limit=32) == 33  # stops beyond the limit
    assert json_depth("42") == 0


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("[" * 5_000 + "]" * 5_000, "nest deeper than 32 levels"),
        ('{"a": ' + "[" * 1_000_000, "characters long; at most 65,536 are accepted (and they nest deeper"),
        ('{"a": "' + "x" * 70_000 + '"}', "70,009 characters long; at most 65,536 are accepted"),
        ("{not json", "are not valid JSON"),
        ('{"n": ' + "9" * 5_000 + "}", "are not valid JSON"),  # beyond int_max_str_digits
    ],
)
def test_arguments_beyond_the_bounds_are_refused_saying_why(text: str, why: str) -> None:
    with pytest.raises(ArgumentsRefused) as refused:
        parse_arguments(text)
    assert why in str(refused.value)


def test_arguments_within_the_bounds_parse_as_json() -> None:
    assert parse_arguments('{"a": ' + "[" * 31 + "]" * 31 + "}") == json.loads('{"a": ' + "[" * 31 + "]" * 31 + "}")
    assert parse_arguments("[" * 32 + "]" * 32) == json.loads("[" * 32 + "]" * 32)
    with pytest.raises(ArgumentsRefused):
        parse_arguments("[" * 33 + "]" * 33)
    assert parse_arguments("  ") == {}
    assert parse_arguments('{"text": "[[[[ is not nesting"}') == {"text": "[[[[ is not nesting"}


# --- every loop over tool calls ends by the deadline; no parser recursion escapes -------------


class _Slow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    n: int = 0


class RunClock:
    """The monotonic clock the run's deadline is read on, moved only by the tools that take time:
    how far a run gets before its deadline does not depend on how fast the machine is."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def run_clock(monkeypatch: pytest.MonkeyPatch) -> RunClock:
    """The deadline's clock (``agentwake.deadline``) is a ``RunClock`` for the test."""
    from agentwake import deadline

    clock = RunClock()
    monkeypatch.setattr(deadline, "time", clock)
    return clock


class SlowTool(Tool):
    """A tool that takes 0.4 s of the run's clock, recording each call."""

    name = "slow"
    description = "takes a while"
    Args = _Slow

    def __init__(self, clock: RunClock) -> None:
        self.clock = clock
        self.calls: list[tuple[int, int]] = []

    def invoke(self, args: Any, ctx: ToolContext) -> str:
        self.calls.append((ctx.step, ctx.call_index))
        self.clock.now += 0.4
        return "ok"


def slow_runner(tool: SlowTool, journal: InMemoryJournal) -> Runner:
    script = [{"tool_calls": [{"name": "slow", "arguments": {"n": i}} for i in range(5)]}, {"text": "done"}]
    provider = ScriptedProvider(id="p", script=script)
    return Runner(
        model=ProviderChain([provider]),
        tools=ToolRegistry([tool]),
        messages=[Message(role="user", content="go")],
        context=ToolContext(run_id="bg:slow", session_id="s"),
        journal=journal,
    )


def test_the_loop_over_a_replys_tool_calls_stops_at_the_runs_deadline(
    model_calls: Counter[str], run_clock: RunClock
) -> None:
    # GIVEN a reply calling a 0.4 s tool five times (each call different), in a run 1 s from its
    # deadline (on the run's clock, which only the tool moves: the same on a loaded machine)
    tool, journal = SlowTool(run_clock), InMemoryJournal()
    runner = slow_runner(tool, journal)
    # WHEN it runs
    with run_deadline(run_clock.now + 1.0), pytest.raises(DeadlineExceeded, match="running tool call 4 of 5"):
        runner.run()
    # THEN it stopped at the deadline, before the fourth call, with the calls made journaled
    assert tool.calls == [(0, 0), (0, 1), (0, 2)]
    assert sorted(k for k in journal.entries if ".tool." in k) == ["000.tool.00", "000.tool.01", "000.tool.02"]
    # WHEN it is retried with time left
    with run_deadline(run_clock.now + 20.0):
        state = slow_runner(tool, journal).run()
    # THEN it continues at the fourth call, without asking the model again for the first reply
    assert state is AgentState.DONE
    assert tool.calls[3:] == [(0, 3), (0, 4)]
    assert model_calls["p"] == 2


def test_a_replayed_verdict_and_a_journaled_oversized_reply_stop_without_a_model_call(
    model_calls: Counter[str],
) -> None:
    # GIVEN the journal of a run whose first reply was refused, and one journaled before the caps
    # existed with more calls than the cap
    verdict = {"text": "", "tool_calls": [], "provider_id": "p", "malformed": "the model's reply made 99 tool calls"}
    old = {"text": "", "tool_calls": [{"id": f"c{i}", "name": "slow"} for i in range(MAX_TOOL_CALLS + 1)]}
    for entry, why in ((verdict, "made 99 tool calls"), (old, f"made {MAX_TOOL_CALLS + 1} tool calls")):
        runner = slow_runner(SlowTool(RunClock()), InMemoryJournal({"000.reply": entry}))
        # WHEN the run is retried
        state = runner.run()
        # THEN it ends MalformedOutput from the journal: no model call, no tool call
        assert (state, runner.error_type) == (AgentState.ERROR, "MalformedOutput")
        assert why in runner.completion_text
    assert model_calls["p"] == 0


def test_no_recursion_error_escapes_from_deep_arguments_anywhere_they_are_read(stackless_settings: None) -> None:
    from agentwake.agent.bounds import UNENCODABLE_ARGUMENTS
    from agentwake.agent.guards import RepeatGuard
    from agentwake.agent.providers.bedrock import BedrockProvider, _arguments_text
    from agentwake.agent.providers.openai_compat import OpenAICompatProvider
    from agentwake.agent.types import ChatRequest, ToolSpec
    from agentwake.errors import TransientProviderError

    deep = ToolCall(id="c1", name="t", arguments=deep_text(DEEP_WITHIN_LENGTH))
    # the repeated-call guard compares it by its text
    assert RepeatGuard(3).observe(deep) == "run"
    # Bedrock sends it back as an empty input; an input too deep to encode is not JSON
    history = (Message(role="user", content="go"), Message(role="assistant", tool_calls=(deep,)))
    provider = BedrockProvider(id="b", model_id="anthropic.claude-x", client=object())
    tools = (ToolSpec(name="t", description="d", parameters={"type": "object"}),)
    request = provider.build_request(ChatRequest(messages=history, tools=tools))
    [use] = [b["toolUse"] for turn in request["messages"] for b in turn["content"] if "toolUse" in b]
    assert use["input"] == {}
    nested: list[Any] = []
    for _ in range(DEEP):
        nested = [nested]
    assert _arguments_text(nested) == UNENCODABLE_ARGUMENTS
    # an OpenAI-compatible reply whose tool_calls is not a list is malformed output
    openai = OpenAICompatProvider(id="o", base_url="http://127.0.0.1:9/v1", model="m")
    with pytest.raises(TransientProviderError) as info:
        openai.parse_reply({"choices": [{"message": {"content": None, "tool_calls": "x" * 1_000_000}}]})
    assert info.value.code == "MalformedOutput"


def test_malformed_output_is_a_permanent_run_failure() -> None:
    from agentwake.errors import run_failed

    failure = run_failed("bg:t", "malformed model output at step 0: ...", "MalformedOutput")
    assert isinstance(failure, MalformedOutput) and not failure.retryable
    assert failure.error_type == "MalformedOutput"
