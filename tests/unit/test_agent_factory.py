"""Building the agent from a session: stack defaults for provider specs, bad configs as ConfigError."""

from __future__ import annotations

import pytest

from agentwake.agent.journal import InMemoryJournal
from agentwake.agent.providers import build_provider
from agentwake.agent.runner import AgentState
from agentwake.agent.woken import WokenAgent
from agentwake.domain.conversation import Message
from agentwake.domain.models import SessionConfig
from agentwake.errors import ConfigError
from agentwake.settings import Settings
from agentwake.wake.agent_factory import session_agent, with_stack_defaults
from tests.support.clock import FakeClock

STACK = Settings(
    table_name="t",
    bedrock_model_id="anthropic.claude-3-haiku",
    openai_base_url="http://127.0.0.1:9/v1",
    openai_api_key_secret_arn="arn:aws:secretsmanager:us-east-1:123456789012:secret:key",
)


def test_bare_provider_types_take_the_stack_parameters() -> None:
    # GIVEN specs that name only a type WHEN stack defaults are applied THEN the parameters fill them
    assert with_stack_defaults({"type": "bedrock"}, STACK)["model_id"] == "anthropic.claude-3-haiku"
    openai = with_stack_defaults({"type": "openai", "model": "m"}, STACK)
    assert openai["base_url"] == "http://127.0.0.1:9/v1"
    assert openai["api_key_ref"] == "secretsmanager:arn:aws:secretsmanager:us-east-1:123456789012:secret:key"


def test_a_session_value_wins_over_the_stack_default() -> None:
    spec = with_stack_defaults({"type": "bedrock", "model_id": "amazon.nova-lite"}, STACK)
    assert spec["model_id"] == "amazon.nova-lite"


def test_no_default_and_no_value_is_a_config_error() -> None:
    spec = with_stack_defaults({"type": "bedrock"}, Settings(table_name="t"))
    with pytest.raises(ConfigError, match="model_id"):
        build_provider(spec)


# --- the session's agent: built and run in one call, a plain value back (agent/woken.py) ----------


class CountingPrompt:
    """The prompt port: records what the agent told it the run may still send."""

    def __init__(self) -> None:
        self.asked: list[tuple[int | None, int]] = []

    def messages(self, *, deliveries_left: int | None, deliveries_made: int) -> list[Message]:
        self.asked.append((deliveries_left, deliveries_made))
        return [Message(role="system", content="sys"), Message(role="user", content="act")]


class Channel:
    def __init__(self) -> None:
        self.sent: list[object] = []

    def send(self, delivery: object) -> None:
        self.sent.append(delivery)


def _agent(session: SessionConfig, prompt: CountingPrompt, **kw: object) -> WokenAgent:
    return session_agent(
        session=session,
        run_id="bg:t1",
        prompt=prompt,
        journal=InMemoryJournal(),
        channel=Channel(),
        clock=FakeClock(),
        deadline=None,
        settings=STACK,
        **kw,  # type: ignore[arg-type]
    )


def test_the_session_agent_runs_once_and_returns_its_result_priced_and_told_its_caps() -> None:
    # GIVEN a session with a delivery cap and a price, one delivery made by an earlier attempt
    script = [{"text": "done", "input_tokens": 1000, "output_tokens": 0}]
    session = SessionConfig(
        session_id="s1",
        providers=[{"type": "scripted", "id": "p", "script": script}],
        max_deliveries_per_run=3,
        prices={"p": {"input_per_mtok": 2.0, "output_per_mtok": 0.0}},
    )
    prompt = CountingPrompt()
    agent = _agent(session, prompt, delivered=["bg:t1#0#0"])
    assert agent.result() is None  # not built: the run never started
    # WHEN it runs
    result = agent.run()
    # THEN the prompt was asked with what the run may still send, and the result is a plain value
    assert prompt.asked == [(2, 1)]
    assert (result.state, result.steps_done, result.completion_text) == (AgentState.DONE, 1, "done")
    assert result.usage["estimated_cost_usd"] == pytest.approx(1000 * 2.0 / 1e6)
    assert [c.provider_id for c in result.calls] == ["p"] and result.failovers == 0
    assert agent.result() == result


def test_a_provider_that_cannot_be_built_leaves_no_result() -> None:
    # GIVEN a session whose provider spec cannot be built WHEN its agent runs THEN a ConfigError,
    # and no result: the failure record carries no steps and no usage
    session = SessionConfig(session_id="s1", providers=[{"type": "scripted", "id": "p", "script": []}])

    def refuse(spec: dict) -> object:
        raise ConfigError("no such provider")

    agent = _agent(session, CountingPrompt(), provider_factory=refuse)
    with pytest.raises(ConfigError, match="no such provider"):
        agent.run()
    assert agent.result() is None
