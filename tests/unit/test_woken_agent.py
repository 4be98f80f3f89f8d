"""The woken agent's guards and books at the lowest layer (issue 15): usage from each provider's own
fields, the repeated-call guard, budgets, delivery caps, deliver_final on replay, the honest prompt."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentwake.agent.chain import ProviderChain, RetryPolicy
from agentwake.agent.guards import RepeatGuard, call_signature
from agentwake.agent.journal import InMemoryJournal
from agentwake.agent.ledger import Limits, RunLedger, usage_totals
from agentwake.agent.providers.bedrock import BedrockProvider
from agentwake.agent.providers.openai_compat import OpenAICompatProvider
from agentwake.agent.providers.scripted import ScriptedProvider
from agentwake.agent.runner import AgentState, Runner
from agentwake.agent.tools import ToolContext, ToolRegistry
from agentwake.agent.tools.send_message import SendMessageToUser
from agentwake.agent.types import ChatRequest, ModelReply, Usage
from agentwake.delivery import Delivery
from agentwake.domain.conversation import Message, ToolCall
from agentwake.domain.models import SessionConfig
from agentwake.domain.steps import FINAL_DELIVERY_KEY
from agentwake.errors import BudgetExceeded, ConfigError, DeliveryError, RunFailed, run_failed
from agentwake.settings import Settings
from agentwake.wake.agent_factory import run_prices
from agentwake.wake.prompt import build_wake_messages
from tests.support.clock import FakeClock

WAKE = [Message(role="system", content="sys"), Message(role="user", content="act")]


class ListChannel:
    def __init__(self, fail: bool = False) -> None:
        self.sent: list[Delivery] = []
        self.fail = fail

    def send(self, delivery: Delivery) -> None:
        if self.fail:
            raise DeliveryError("HTTP 503 from the receiver")
        self.sent.append(delivery)


def runner(script: list[dict[str, Any]], channel: ListChannel, **kw: Any) -> Runner:
    return Runner(
        model=ProviderChain([ScriptedProvider("p", script)], retry=RetryPolicy(base_delay=0), clock=FakeClock()),
        tools=ToolRegistry([SendMessageToUser(channel)]),
        messages=WAKE,
        context=ToolContext(run_id="bg:t1", session_id="s1"),
        **kw,
    )


# --- usage from the providers' own fields ----------------------------------------------------------


def test_openai_usage_fields_become_the_replys_usage(stackless_settings: None) -> None:
    # GIVEN an OpenAI-compatible answer with usage, and one without
    provider = OpenAICompatProvider(id="o", base_url="http://127.0.0.1:9/v1", model="gpt-x")
    answer = {"model": "gpt-x-0613", "choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}]}
    # WHEN they are parsed
    with_usage = provider.parse_reply({**answer, "usage": {"prompt_tokens": 11, "completion_tokens": 7}})
    without = provider.parse_reply(answer)
    # THEN the tokens and the answering model are taken from the body; no usage stays None
    assert with_usage.usage == Usage(input_tokens=11, output_tokens=7, model="gpt-x-0613")
    assert without.usage is None


def test_bedrock_usage_fields_become_the_replys_usage() -> None:
    provider = BedrockProvider(id="b", model_id="amazon.nova-lite-v1:0", client=object())
    reply = provider.parse_reply(
        {
            "output": {"message": {"role": "assistant", "content": [{"text": "hi"}]}},
            "stopReason": "end_turn",
            "usage": {"inputTokens": 21, "outputTokens": 4, "totalTokens": 25},
        }
    )
    assert reply.usage == Usage(input_tokens=21, output_tokens=4, model="amazon.nova-lite-v1:0")


class SlowFlaky:
    """Throttled once, then answers; each call takes 250 ms on the fake clock."""

    id = "slow"

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.calls = 0

    def complete(self, request: ChatRequest) -> ModelReply:
        from agentwake.errors import TransientProviderError

        self.calls += 1
        self.clock.advance(0.25)
        if self.calls == 1:
            raise TransientProviderError("slow down", code="ThrottlingException")
        return ModelReply(text="ok", usage=Usage(input_tokens=5, output_tokens=1, model="m"))


def test_the_chain_records_latency_and_the_attempt_that_answered() -> None:
    clock = FakeClock()
    chain = ProviderChain([SlowFlaky(clock)], retry=RetryPolicy(base_delay=0), clock=clock)
    reply = chain.complete(ChatRequest(messages=tuple(WAKE)))
    assert reply.usage is not None
    assert (reply.usage.attempt, reply.usage.latency_ms, reply.usage.input_tokens) == (2, 250, 5)
    assert reply.provider_id == "slow"


def test_usage_totals_sum_per_provider_and_price_by_provider_id_or_model() -> None:
    calls = [
        {"provider_id": "a", "model": "m1", "input_tokens": 1000, "output_tokens": 100, "latency_ms": 5},
        {"provider_id": "a", "model": "m1", "input_tokens": 500, "output_tokens": 50, "latency_ms": 5},
        {"provider_id": "b", "model": "m2", "input_tokens": 10, "output_tokens": 1, "latency_ms": 1},
        {"provider_id": "c", "model": "m3", "input_tokens": 7, "output_tokens": 7, "latency_ms": 1},
    ]
    prices = {
        "a": {"input_per_mtok": 3.0, "output_per_mtok": 15.0},
        "m2": {"input_per_mtok": 1.0, "output_per_mtok": 2.0},
    }
    totals = usage_totals(calls, prices)
    assert totals["by_provider"]["a"]["estimated_cost_usd"] == pytest.approx((1500 * 3 + 150 * 15) / 1e6)
    assert totals["by_provider"]["b"]["estimated_cost_usd"] == pytest.approx((10 * 1 + 1 * 2) / 1e6)
    assert totals["by_provider"]["c"]["estimated_cost_usd"] is None  # no price: no guess
    assert totals["estimated_cost_usd"] == pytest.approx((1500 * 3 + 150 * 15 + 12) / 1e6)
    assert (totals["model_calls"], totals["input_tokens"], totals["output_tokens"]) == (4, 1517, 158)


def test_session_prices_override_the_stacks() -> None:
    settings = Settings.from_env(
        {"AGENTWAKE_TABLE": "t", "AGENTWAKE_PRICES": json.dumps({"p": {"input_per_mtok": 1, "output_per_mtok": 1}})}
    )
    session = SessionConfig(session_id="s", prices={"p": {"input_per_mtok": 10, "output_per_mtok": 0}})
    run = runner([{"text": "x", "input_tokens": 100, "output_tokens": 100}], ListChannel())
    run.run()
    assert run.ledger.totals(run_prices(session, settings))["estimated_cost_usd"] == pytest.approx(100 * 10 / 1e6)
    assert run.ledger.totals(run_prices(SessionConfig(session_id="s"), settings))[
        "estimated_cost_usd"
    ] == pytest.approx(200 / 1e6)


@pytest.mark.parametrize(
    "raw", ["[1]", '{"p": {"input_per_mtok": 1}}', '{"p": {"input_per_mtok": -1, "output_per_mtok": 1}}', "{"]
)
def test_a_bad_stack_price_table_is_a_clear_config_error(raw: str) -> None:
    with pytest.raises(ConfigError, match="AGENTWAKE_PRICES must be a JSON object"):
        Settings.from_env({"AGENTWAKE_TABLE": "t", "AGENTWAKE_PRICES": raw})


# --- repeated calls ----------------------------------------------------------------------------


def test_a_call_signature_ignores_argument_order_and_spacing() -> None:
    a = ToolCall(id="1", name="lookup", arguments='{"q": "x", "n": 1}')
    b = ToolCall(id="2", name="lookup", arguments='{"n":1,"q":"x"}')
    c = ToolCall(id="3", name="lookup", arguments='{"n":2,"q":"x"}')
    assert call_signature(a) == call_signature(b) != call_signature(c)


def test_the_repeat_guard_warns_at_the_limit_and_stops_after_it_and_resets_on_another_call() -> None:
    guard = RepeatGuard(3)
    same = ToolCall(id="1", name="lookup", arguments="{}")
    other = ToolCall(id="2", name="lookup", arguments='{"q": 1}')
    assert [guard.observe(same) for _ in range(4)] == ["run", "run", "warn", "stop"]
    assert guard.observe(other) == "run" and guard.observe(same) == "run"


def test_a_final_step_forced_by_repetition_that_still_calls_tools_is_an_error() -> None:
    # GIVEN a model that repeats one call forever, even without tools
    lookup = {"tool_calls": [{"name": "lookup", "arguments": {}}]}
    run = runner([lookup], ListChannel(), max_repeated_tool_calls=2)
    # WHEN it runs
    state = run.run()
    # THEN it stops after the call, the warning, the stop and the forced final step, in ERROR saying why
    assert state is AgentState.ERROR and run.error_type == "RepeatedToolCalls"
    assert run.steps_done == 4


# --- budgets -----------------------------------------------------------------------------------


def test_a_budget_used_up_forbids_the_next_call_before_it_is_made() -> None:
    # GIVEN a ledger whose session already spent its day's tokens
    ledger = RunLedger(Limits(max_tokens_per_day=100), tokens_today=100)
    run = runner([{"text": "never asked"}], ListChannel(), ledger=ledger)
    # WHEN the run starts
    state = run.run()
    # THEN no model call is made and the run ends in BudgetExceeded
    assert state is AgentState.ERROR and run.error_type == "BudgetExceeded" and run.steps_done == 0
    assert "before step 0" in run.completion_text


def test_a_reply_that_ends_the_run_is_kept_even_over_budget() -> None:
    run = runner(
        [{"text": "the answer", "input_tokens": 500, "output_tokens": 10}],
        ListChannel(),
        ledger=RunLedger(Limits(max_tokens_per_run=100)),
    )
    assert run.run() is AgentState.DONE and run.completion_text == "the answer"


def test_budget_exceeded_is_a_permanent_run_failure() -> None:
    exc = run_failed("bg:t1", "over", "BudgetExceeded")
    assert isinstance(exc, BudgetExceeded) and isinstance(exc, RunFailed) and not exc.retryable
    assert exc.error_type == "BudgetExceeded"
    other = run_failed("bg:t1", "boom", "AllProvidersFailed")
    assert type(other) is RunFailed and other.retryable


# --- deliver_final -------------------------------------------------------------------------------


def test_a_journaled_final_delivery_is_replayed_not_sent_again() -> None:
    # GIVEN a run whose final answer was delivered by an earlier attempt (its reply and the final
    # delivery are journaled)
    journal = InMemoryJournal(
        {
            "000.reply": ModelReply(text="the answer", provider_id="p").to_dict(),
            FINAL_DELIVERY_KEY: {"tool": "send_message_to_user", "delivery_id": "bg:t1#final"},
        }
    )
    channel = ListChannel()
    run = runner([{"text": "not asked"}], channel, journal=journal, deliver_final="always")
    # WHEN the retry runs
    assert run.run() is AgentState.DONE
    # THEN nothing is sent and the run knows its final answer was delivered
    assert channel.sent == [] and run.final_delivery_id == "bg:t1#final"


def test_a_final_answer_the_receiver_refuses_fails_the_run_for_a_retry() -> None:
    run = runner([{"text": "the answer"}], ListChannel(fail=True), deliver_final="if_nothing_sent")
    assert run.run() is AgentState.ERROR
    assert run.error_type == "DeliveryFailed" and "HTTP 503" in run.completion_text
    assert FINAL_DELIVERY_KEY not in run.journal.entries  # type: ignore[attr-defined]


def test_a_final_answer_longer_than_a_message_is_cut_with_a_marker() -> None:
    channel = ListChannel()
    run = runner([{"text": "x" * 9000}], channel, deliver_final="always")
    run.run()
    [sent] = channel.sent
    assert len(sent.text) <= 8000 and sent.text.endswith("…[truncated]")


# --- the honest prompt ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "says"),
    [
        ("never", "your final answer is recorded in the conversation history but not shown to them"),
        ("if_nothing_sent", "If you send nothing, your final answer is sent to the user as your message"),
        ("always", "Your final answer is sent to the user at the end of this run"),
    ],
)
def test_the_prompt_and_the_tool_say_what_happens_to_the_final_answer(policy: str, says: str) -> None:
    [system, _] = build_wake_messages(persona="", kind="cron", wake={}, history=[], deliver_final=policy)
    assert says in system.content
    description = SendMessageToUser(ListChannel(), final_answer_delivered=policy).spec().description
    assert ("not shown to them" in description) == (policy == "never")


def test_the_prompt_says_when_no_delivery_is_left() -> None:
    [system, _] = build_wake_messages(
        persona="", kind="background", wake={}, history=[], deliveries_left=0, deliveries_made=3
    )
    assert "You may not send any more messages to the user in this run: its cap is reached." in system.content
    assert "3 were already sent in this run; they are shown below." in system.content


def test_the_transcript_shows_tokens_per_step_and_the_final_delivery() -> None:
    import io

    from agentwake.agent.transcript import TranscriptPrinter

    # GIVEN a run printed as a transcript
    out = io.StringIO()
    run = runner(
        [{"text": "the answer", "input_tokens": 42, "output_tokens": 7}],
        ListChannel(),
        deliver_final="if_nothing_sent",
    )
    run.on_event = TranscriptPrinter(out=out)
    # WHEN it runs
    run.run()
    # THEN each step shows its provider, tokens and latency, and the final answer's delivery
    text = out.getvalue()
    assert "step 0: model [p] 42 in / 7 out tokens, 0 ms" in text
    assert "final answer delivered to the user (bg:t1#final)" in text
