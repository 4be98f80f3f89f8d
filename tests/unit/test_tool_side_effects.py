"""Side effects are declared, and a what-if replay honours them (issue 21 item 2): an HTTP tool whose
method is not GET/HEAD is side-effecting unless it says ``side_effect: false``; a Python tool must say
which it is, or it is refused when the session's tools are built; a dry run calls no side-effecting
(or undeclared) tool. Real HTTP servers on 127.0.0.1 count what they receive."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel
from pytest_httpserver import HTTPServer

from agentwake.agent.tools import DRY_RUN_RESULT, Tool, ToolContext, ToolRegistry, entry_points
from agentwake.agent.tools.config import build_tools
from agentwake.domain.conversation import ToolCall
from agentwake.errors import ConfigError
from tests.support.process_state import forget_python_tools

pytestmark = pytest.mark.usefixtures("stackless_settings")


def http_tool(url: str, **overrides: Any) -> dict[str, Any]:
    """An HTTP tool declared with the defaults (method POST, side_effect unset)."""
    return {"type": "http", "name": "create_ticket", "description": "Open a ticket.", "url": url, **overrides}


@pytest.mark.parametrize(
    ("overrides", "side_effect"),
    [
        ({}, True),  # the defaults: POST, side_effect unset
        ({"method": "PUT"}, True),
        ({"method": "PATCH"}, True),
        ({"method": "DELETE"}, True),
        ({"method": "GET"}, False),
        ({"method": "HEAD"}, False),
        ({"method": "POST", "side_effect": False}, False),  # said so explicitly
        ({"method": "GET", "side_effect": True}, True),
    ],
)
def test_an_http_tool_is_side_effecting_unless_it_only_reads_or_says_so(
    overrides: dict[str, Any], side_effect: bool
) -> None:
    [tool] = build_tools([http_tool("https://tools.example.com/t", **overrides)], session_id="s1")
    assert tool.side_effect is side_effect


def test_a_default_post_tool_sends_an_idempotency_key(httpserver: HTTPServer) -> None:
    # GIVEN a tool declared with the defaults WHEN it is called THEN it carries the run's stable key
    httpserver.expect_request("/t", method="POST").respond_with_data("created")
    [tool] = build_tools([http_tool(httpserver.url_for("/t"))], session_id="s1")
    tool.invoke({}, ToolContext(run_id="bg:t1", session_id="s1").for_call(2, 1))
    [(request, _)] = httpserver.log
    assert request.headers["Idempotency-Key"] == "bg:t1#2#1"


def test_a_dry_run_never_calls_a_default_post_tool(httpserver: HTTPServer) -> None:
    # GIVEN a POST tool with side_effect unset on a server that counts requests
    httpserver.expect_request("/t").respond_with_data("created")
    registry = ToolRegistry(build_tools([http_tool(httpserver.url_for("/t"))], session_id="s1"))
    # WHEN a replay (dry run) calls it THEN the model is told it was not called, and nothing was sent
    call = ToolCall(id="c", name="create_ticket", arguments="{}")
    assert registry.execute(call, ToolContext(run_id="bg:t1", session_id="s1", dry_run=True)) == DRY_RUN_RESULT
    assert len(httpserver.log) == 0
    # AND the same call outside a replay does reach the server (the count above could have moved)
    assert registry.execute(call, ToolContext(run_id="bg:t1", session_id="s1")) == "created"
    assert len(httpserver.log) == 1


def test_a_dry_run_calls_a_get_tool_and_a_post_tool_that_says_it_has_no_effect(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/r").respond_with_data("read")
    specs = [
        http_tool(httpserver.url_for("/r"), name="lookup", method="GET"),
        http_tool(httpserver.url_for("/r"), name="search", side_effect=False),
    ]
    registry = ToolRegistry(build_tools(specs, session_id="s1"))
    dry = ToolContext(run_id="bg:t1", session_id="s1", dry_run=True)
    assert registry.execute(ToolCall(id="a", name="lookup", arguments="{}"), dry) == "read"
    assert registry.execute(ToolCall(id="b", name="search", arguments="{}"), dry) == "read"
    assert len(httpserver.log) == 2


class NoArgs(BaseModel):
    pass


class Undeclared(Tool):
    name = "undeclared"
    description = "A tool that does not say whether it has effects."
    Args = NoArgs

    def __init__(self) -> None:
        self.calls = 0

    def invoke(self, args: Any, ctx: ToolContext) -> str:
        self.calls += 1
        return "did something"


class ReadOnly(Undeclared):
    name = "read_only"
    side_effect = False


class Effectful(Undeclared):
    name = "effectful"
    side_effect = True


class FakeEntryPoint:
    def __init__(self, name: str, target: Any) -> None:
        self.name, self.value, self._target = name, f"fake_tools:{target.__name__}", target

    def load(self) -> Any:
        return self._target


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Entry points of group agentwake.tools as the test installs them."""
    forget_python_tools()
    eps: dict[str, FakeEntryPoint] = {}
    monkeypatch.setattr(entry_points, "installed", lambda: eps)
    yield eps
    forget_python_tools()


def test_a_python_tool_that_does_not_declare_side_effect_is_refused_when_built(installed: Any) -> None:
    # GIVEN an installed Python tool that leaves side_effect unset
    installed["undeclared"] = FakeEntryPoint("undeclared", Undeclared)
    # WHEN a session's tools are built THEN it is refused, saying what to declare
    with pytest.raises(ConfigError) as info:
        build_tools([{"type": "python", "name": "undeclared"}], session_id="s1")
    message = str(info.value)
    assert "'undeclared'" in message and "does not declare side_effect" in message
    assert "side_effect = True" in message and "side_effect = False" in message
    # AND it was not kept as loaded: once the package declares it, the next build loads it

    class Declared(Undeclared):
        side_effect = False

    installed["undeclared"] = FakeEntryPoint("undeclared", Declared)
    [tool] = build_tools([{"type": "python", "name": "undeclared"}], session_id="s1")
    assert isinstance(tool, Declared)


def test_declared_python_tools_are_built_and_a_dry_run_calls_only_the_read_only_one(installed: Any) -> None:
    installed["read_only"] = FakeEntryPoint("read_only", ReadOnly)
    installed["effectful"] = FakeEntryPoint("effectful", Effectful)
    tools = build_tools([{"type": "python", "name": "read_only"}, {"type": "python", "name": "effectful"}])
    registry = ToolRegistry(tools)
    dry = ToolContext(run_id="bg:t1", session_id="s1", dry_run=True)
    assert registry.execute(ToolCall(id="a", name="read_only", arguments="{}"), dry) == "did something"
    assert registry.execute(ToolCall(id="b", name="effectful", arguments="{}"), dry) == DRY_RUN_RESULT
    read_only, effectful = tools
    assert (read_only.calls, effectful.calls) == (1, 0)  # type: ignore[attr-defined]


def test_a_registry_never_calls_an_undeclared_tool_in_a_dry_run() -> None:
    # GIVEN a tool built directly (not through an entry point), without a declaration
    tool = Undeclared()
    registry = ToolRegistry([tool])
    # WHEN a dry run calls it THEN it is treated as side-effecting
    call = ToolCall(id="a", name="undeclared", arguments="{}")
    assert registry.execute(call, ToolContext(run_id="r", session_id="s", dry_run=True)) == DRY_RUN_RESULT
    assert tool.calls == 0
