"""Subagents (issue 33, item 3): the spec's checks where a session config is checked, and the
foreground hand-off (the answer is the tool result, a failure an ``error:`` result, the deadline
respected). docs/subagents.md."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentwake.agent.journal import InMemoryJournal
from agentwake.agent.providers import build_provider
from agentwake.agent.runner import AgentState
from agentwake.agent.types import ChatRequest, ModelReply
from agentwake.domain.models import SessionConfig
from agentwake.errors import ConfigError
from agentwake.settings import Settings
from agentwake.trust.session_checks import ConfigRules, check_session
from agentwake.wake.agent_factory import session_agent, subagent_agent
from agentwake.wake.prompt import WakePrompt
from tests.support.clock import FakeClock

SEARCH = {
    "type": "http",
    "name": "web_search",
    "description": "search",
    "url": "https://search.example.com/q",
    "method": "GET",
}
RESEARCHER = {"name": "researcher", "persona": "You research.", "tools": ["web_search"], "max_steps": 3}


def _session(subagents: list[dict[str, Any]], **kw: Any) -> SessionConfig:
    kw.setdefault("providers", [{"type": "scripted", "id": "main"}])
    return SessionConfig(session_id="s1", tools=[SEARCH], subagents=subagents, retry_base_delay_ms=0, **kw)


# --- the spec, checked where the session config is checked --------------------------------------


@pytest.mark.parametrize(
    ("subagent", "says"),
    [
        ({**RESEARCHER, "tools": ["send_message_to_user"]}, "may not have send_message_to_user"),
        ({**RESEARCHER, "tools": ["ask_researcher"]}, "may not have hand-off tool 'ask_researcher'"),
        ({**RESEARCHER, "tools": ["delete_everything"]}, "names tool 'delete_everything', which the session does not"),
        ({**RESEARCHER, "name": "web search"}, "invalid subagent spec 'web search'"),
        ({**RESEARCHER, "persona": ""}, "persona"),
        ({**RESEARCHER, "time_budget_s": 5000}, "time_budget_s"),
        ({**RESEARCHER, "surprise": 1}, "surprise"),
        (
            {
                **RESEARCHER,
                "providers": [
                    {
                        "type": "openai",
                        "model": "m",
                        "base_url": "https://llm.example.com/v1",
                        "api_key_ref": "env:AWS_SECRET_ACCESS_KEY",
                    }
                ],
            },
            "AGENTWAKE_SECRET_",
        ),
    ],
)
def test_a_subagent_the_wake_would_refuse_is_refused_when_the_config_is_written(
    subagent: dict[str, Any], says: str
) -> None:
    # GIVEN a session config naming a subagent that breaks a rule WHEN it is checked THEN a
    # ConfigError says which rule (the same check sessions put and put_session run)
    with pytest.raises(ConfigError, match=says):
        check_session(_session([subagent]), ConfigRules())


def test_two_subagents_of_one_name_or_one_shadowing_a_tool_are_refused() -> None:
    with pytest.raises(ConfigError, match="declares subagent 'researcher' twice"):
        check_session(_session([RESEARCHER, RESEARCHER]), ConfigRules())
    shadow = {**SEARCH, "name": "ask_researcher"}
    with pytest.raises(ConfigError, match="already declares"):
        check_session(
            SessionConfig(
                session_id="s1", providers=[{"type": "scripted"}], tools=[SEARCH, shadow], subagents=[RESEARCHER]
            ),
            ConfigRules(),
        )


def test_a_valid_subagent_passes_and_its_secret_refs_are_the_sessions() -> None:
    from agentwake.trust.session_checks import secret_refs

    ref = "env:AGENTWAKE_SECRET_LLM"
    provider = {"type": "openai", "model": "m", "base_url": "https://llm.example.com/v1", "api_key_ref": ref}
    session = _session([{**RESEARCHER, "providers": [provider]}])
    check_session(session, ConfigRules())
    assert ref in secret_refs(session)


# --- the foreground hand-off ------------------------------------------------------------------------


class Recorder:
    """A provider factory: scripted providers, recording what each was asked (and when, on the clock);
    each call takes ``seconds`` of the clock."""

    def __init__(self, clock: FakeClock, seconds: float = 0.0) -> None:
        self.clock = clock
        self.seconds = seconds
        self.requests: dict[str, list[ChatRequest]] = {}
        #: when each call started, per provider id
        self.at: dict[str, list[float]] = {}

    def __call__(self, spec: dict[str, Any]) -> Any:
        inner = build_provider(spec)
        recorder = self

        class Recorded:
            id = inner.id

            def complete(self, request: ChatRequest) -> ModelReply:
                recorder.requests.setdefault(inner.id, []).append(request)
                recorder.at.setdefault(inner.id, []).append(recorder.clock.now())
                recorder.clock.advance(recorder.seconds)
                return inner.complete(request)

        return Recorded()


def _main_script(task: str = "Find the capital of France.") -> list[dict[str, Any]]:
    return [
        {"tool_calls": [{"name": "ask_researcher", "arguments": {"task": task}}]},
        {"text": "The researcher answered."},
    ]


def _run_main(session: SessionConfig, factory: Recorder, clock: FakeClock, deadline: float | None = None) -> Any:
    journal = InMemoryJournal()
    agent = session_agent(
        session=session,
        run_id="cron:j1:t",
        prompt=WakePrompt(persona="p", kind="cron", wake={}, history=()),
        journal=journal,
        channel=None,
        clock=clock,
        deadline=deadline,
        settings=Settings(table_name="t"),
        provider_factory=factory,
    )
    result = agent.run()
    return result, journal


def test_the_foreground_answer_is_the_tool_result_and_is_journaled_by_the_main_step() -> None:
    # GIVEN a main agent that hands research to its subagent in the foreground
    clock = FakeClock()
    sub = {**RESEARCHER, "providers": [{"type": "scripted", "id": "sub", "script": [{"text": "Paris."}]}]}
    session = _session([sub], providers=[{"type": "scripted", "id": "main", "script": _main_script()}])
    factory = Recorder(clock)
    # WHEN the main run runs
    result, journal = _run_main(session, factory, clock)
    # THEN the subagent's final answer is the tool result the main agent read, journaled with its step
    assert result.state is AgentState.DONE
    assert journal.get("000.tool.00")["content"] == "Paris."
    assert factory.requests["main"][1].messages[-1].content == "Paris."
    # and the subagent saw its persona and the task, and was offered only its own tools
    asked = factory.requests["sub"][0]
    assert "You research." in asked.messages[0].content and asked.messages[-1].content == "Find the capital of France."
    assert [t.name for t in asked.tools] == ["web_search"]
    # and the main agent was offered the hand-off tool beside send_message_to_user and its tools
    assert {t.name for t in factory.requests["main"][0].tools} >= {"ask_researcher", "web_search"}


def test_a_subagent_is_never_offered_the_user_or_a_hand_off() -> None:
    # GIVEN two subagents, each allowed every tool the session declares
    clock = FakeClock()
    specs = [{**RESEARCHER}, {**RESEARCHER, "name": "writer"}]
    session = _session(specs)
    from agentwake.agent.subagents import parse_subagents

    for spec in parse_subagents(session.subagents, session.tools):
        agent = subagent_agent(
            session=session, spec=spec, run_id="sub:t", task="x", journal=InMemoryJournal(), clock=clock, deadline=None
        )
        # THEN its registry holds its declared tools only: no send_message_to_user, no ask_*
        assert agent.build().tools.names == ["web_search"]


def test_a_failing_subagent_is_an_error_result_naming_the_reason() -> None:
    # GIVEN a subagent whose every provider fails
    clock = FakeClock()
    failing = [{"type": "scripted", "id": "sub", "script": [{"error": "auth"}]}]
    session = _session(
        [{**RESEARCHER, "providers": failing}], providers=[{"type": "scripted", "id": "main", "script": _main_script()}]
    )
    # WHEN the main agent hands it work
    result, journal = _run_main(session, Recorder(clock), clock)
    # THEN the main agent reads an error: result naming the subagent and why; its own run goes on
    content = journal.get("000.tool.00")["content"]
    assert content.startswith("error: the subagent researcher failed (AllProvidersFailed)")
    assert "invalid credentials" in content
    assert result.state is AgentState.DONE


def test_a_subagent_that_repeats_to_its_step_limit_is_an_error_result() -> None:
    # GIVEN a subagent that keeps calling a tool and, told to answer, calls it again
    clock = FakeClock()
    looping = [{"type": "scripted", "id": "sub", "script": [{"tool_calls": [{"name": "nope", "arguments": {}}]}]}]
    session = _session(
        [{**RESEARCHER, "providers": looping, "max_steps": 2}],
        providers=[{"type": "scripted", "id": "main", "script": _main_script()}],
    )
    _, journal = _run_main(session, Recorder(clock), clock)
    content = journal.get("000.tool.00")["content"]
    assert content.startswith("error: the subagent researcher failed (MaxStepsExceeded)")


@pytest.mark.parametrize(("budget", "main_deadline", "limit"), [(30, None, 30.0), (300, 25.0, 25.0)])
def test_the_foreground_subagent_stops_at_its_budget_or_the_runs_deadline(
    budget: int, main_deadline: float | None, limit: float
) -> None:
    # GIVEN a subagent whose every model call takes 10 s and that never finishes on its own
    clock = FakeClock()
    start = clock.now()
    looping = [{"type": "scripted", "id": "sub", "script": [{"tool_calls": [{"name": "nope", "arguments": {}}]}]}]
    spec = {**RESEARCHER, "providers": looping, "max_steps": 50, "time_budget_s": budget}
    session = _session(
        [spec], providers=[{"type": "scripted", "id": "main", "script": _main_script()}], max_repeated_tool_calls=50
    )
    factory = Recorder(clock, seconds=10.0)
    # WHEN the main agent hands it work (the main run's deadline: ``main_deadline`` s from now)
    deadline = None if main_deadline is None else start + main_deadline
    _run_main(session, factory, clock, deadline=deadline)
    # THEN its calls (10 s each) started until min(its budget from the hand-off, the run's deadline)
    # and none after: the next would have started past it
    handed = factory.at["main"][0] + 10
    until = min(handed + budget, start + main_deadline) if main_deadline is not None else handed + budget
    sub_at = factory.at["sub"]
    assert sub_at[0] == handed and all(t < until for t in sub_at)
    assert sub_at[-1] + 10 >= until


def test_the_budget_message_names_the_budget() -> None:
    clock = FakeClock()
    looping = [{"type": "scripted", "id": "sub", "script": [{"tool_calls": [{"name": "nope", "arguments": {}}]}]}]
    spec = {**RESEARCHER, "providers": looping, "max_steps": 50, "time_budget_s": 30}
    session = _session(
        [spec], providers=[{"type": "scripted", "id": "main", "script": _main_script()}], max_repeated_tool_calls=50
    )
    _, journal = _run_main(session, Recorder(clock, seconds=10.0), clock)
    assert journal.get("000.tool.00")["content"].startswith(
        "error: the subagent researcher did not finish within its time budget of 30 s"
    )


def test_a_mode_the_subagent_does_not_allow_is_an_error_result_and_starts_nothing() -> None:
    clock = FakeClock()
    script = [
        {"tool_calls": [{"name": "ask_researcher", "arguments": {"task": "t", "background": True}}]},
        {"text": "ok"},
    ]
    session = _session(
        [{**RESEARCHER, "mode": "foreground"}], providers=[{"type": "scripted", "id": "main", "script": script}]
    )
    _, journal = _run_main(session, Recorder(clock), clock)
    assert journal.get("000.tool.00")["content"] == (
        "error: the subagent researcher runs only foreground: call ask_researcher with background false"
    )


def test_a_replay_starts_no_background_subagent() -> None:
    # GIVEN a what-if replay of a run whose agent starts a background subagent
    from agentwake.agent.tools import DRY_RUN_RESULT

    clock = FakeClock()
    script = [
        {"tool_calls": [{"name": "ask_researcher", "arguments": {"task": "t", "background": True}}]},
        {"text": "ok"},
    ]
    session = _session([RESEARCHER], providers=[{"type": "scripted", "id": "main", "script": script}])
    started: list[str] = []
    agent = session_agent(
        session=session,
        run_id="cron:j1:t",
        prompt=WakePrompt(persona="p", kind="cron", wake={}, history=()),
        journal=(journal := InMemoryJournal()),
        channel=None,
        clock=clock,
        deadline=None,
        provider_factory=Recorder(clock),
        dry_run=True,
        start_task=lambda *a, **kw: started.append(json.dumps(kw, default=str)),  # type: ignore[arg-type,func-returns-value]
    )
    agent.run()
    # THEN nothing was started and the model read that it was not
    assert started == [] and journal.get("000.tool.00")["content"] == DRY_RUN_RESULT


def test_a_background_tool_is_called_inside_the_subagents_run() -> None:
    # GIVEN a session whose web_search runs in the background for the main agent
    from agentwake.agent.subagents import parse_subagents
    from agentwake.agent.tools.http import HttpTool

    session = SessionConfig(
        session_id="s1",
        providers=[{"type": "scripted"}],
        tools=[{**SEARCH, "background": True}],
        subagents=[RESEARCHER],
    )
    check_session(session, ConfigRules())
    (spec,) = parse_subagents(session.subagents, session.tools)
    agent = subagent_agent(
        session=session,
        spec=spec,
        run_id="sub:t",
        task="x",
        journal=InMemoryJournal(),
        clock=FakeClock(),
        deadline=None,
    )
    # THEN the subagent calls it itself (it is the detached work already), starting no task of its own
    assert isinstance(agent.build().tools.get("web_search"), HttpTool)


def test_a_subagents_failure_is_bounded_in_the_tool_result() -> None:
    # GIVEN a subagent whose provider fails with a 100,000-character error
    from agentwake.errors import PermanentProviderError

    clock = FakeClock()
    session = _session(
        [{**RESEARCHER, "providers": [{"type": "scripted", "id": "sub"}]}],
        providers=[{"type": "scripted", "id": "main", "script": _main_script()}],
    )
    recorder = Recorder(clock)

    def factory(spec: dict[str, Any]) -> Any:
        if spec.get("id") != "sub":
            return recorder(spec)

        class Loud:
            id = "sub"

            def complete(self, request: ChatRequest) -> ModelReply:
                raise PermanentProviderError("x" * 100_000, code="Loud")

        return Loud()

    journal = InMemoryJournal()
    session_agent(
        session=session,
        run_id="cron:j1:t",
        prompt=WakePrompt(persona="p", kind="cron", wake={}, history=()),
        journal=journal,
        channel=None,
        clock=clock,
        deadline=None,
        provider_factory=factory,
    ).run()
    # THEN the main agent reads the reason, cut to a bounded size
    content = journal.get("000.tool.00")["content"]
    assert content.startswith("error: the subagent researcher failed (AllProvidersFailed)")
    assert 4000 < len(content) < 5000 and "truncated" in content
