"""HTTP tools declared in a session's config, against a real server on 127.0.0.1: arguments validated
against the declared JSON Schema, the result reaches the model (cut with a marker when long), every
failure is an ``error:`` result, and credentials come from scoped secret references."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from agentwake.agent.journal import InMemoryJournal
from agentwake.agent.providers.scripted import ScriptedProvider
from agentwake.agent.runner import AgentState, Runner
from agentwake.agent.tools import DRY_RUN_RESULT, ToolContext, ToolRegistry
from agentwake.agent.tools.config import build_tools
from agentwake.agent.types import ChatRequest, ModelReply
from agentwake.domain.conversation import Message, ToolCall
from agentwake.errors import ConfigError, OutboundRefused, SecretRefRefused

#: adapters built here, with no stack, read the outbound policy from Settings as in a function
pytestmark = pytest.mark.usefixtures("stackless_settings")

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "minLength": 1}, "days": {"type": "integer", "minimum": 1}},
    "required": ["city"],
    "additionalProperties": False,
}


class Capturing:
    """A chat model that records every request it is asked (what the model saw)."""

    def __init__(self, script: list[dict[str, Any]]) -> None:
        self.provider = ScriptedProvider(id="m", script=script)
        self.requests: list[ChatRequest] = []

    def complete(self, request: ChatRequest) -> ModelReply:
        self.requests.append(request)
        return self.provider.complete(request)


def http_tool(url: str, **overrides: Any) -> dict[str, Any]:
    return {
        "type": "http",
        "name": "forecast",
        "description": "Weather forecast for a city.",
        "parameters": SCHEMA,
        "url": url,
        "method": "POST",
        **overrides,
    }


def run_with(
    tool_specs: list[dict[str, Any]], script: list[dict[str, Any]], *, dry_run: bool = False
) -> tuple[Runner, Capturing]:
    model = Capturing(script)
    runner = Runner(
        model=model,
        tools=ToolRegistry(build_tools(tool_specs, session_id="s1")),
        messages=[Message(role="user", content="go")],
        context=ToolContext(run_id="bg:t1", session_id="s1", dry_run=dry_run),
        journal=InMemoryJournal(),
    )
    runner.run()
    return runner, model


def calls(name: str, arguments: dict[str, Any] | str) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def tool_results(model: Capturing) -> list[str]:
    return [m.content for m in model.requests[-1].messages if m.role == "tool"]


def test_a_valid_call_reaches_the_server_and_its_answer_reaches_the_model(httpserver: HTTPServer) -> None:
    # GIVEN an HTTP tool on 127.0.0.1 that answers with a forecast
    httpserver.expect_request("/forecast", method="POST").respond_with_json({"city": "Oslo", "forecast": "snow"})
    # WHEN the model calls it with arguments matching the schema
    runner, model = run_with(
        [http_tool(httpserver.url_for("/forecast"), side_effect=False)],
        [calls("forecast", {"city": "Oslo", "days": 2}), {"text": "ok"}],
    )
    # THEN the server got exactly those arguments as JSON, with the run id
    assert runner.state is AgentState.DONE
    [(request, _)] = httpserver.log
    assert json.loads(request.data) == {"city": "Oslo", "days": 2}
    assert request.headers["X-Agentwake-Run-Id"] == "bg:t1"
    assert "Idempotency-Key" not in request.headers  # a tool declared read-only has no key
    # AND the model's next request carries the server's answer as the tool result
    assert json.loads(tool_results(model)[0]) == {"city": "Oslo", "forecast": "snow"}
    # AND the model was told the declared schema
    [spec] = model.requests[0].tools[1:] if len(model.requests[0].tools) > 1 else model.requests[0].tools
    assert spec.name == "forecast" and spec.parameters == SCHEMA


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({"days": 2}, "must contain ['city']"),
        ({"city": "Oslo", "days": 0}, "must be bigger than or equal to 1"),
        ({"city": "Oslo", "unit": "C"}, "must not contain"),
        ("{not json", "not valid JSON"),
    ],
)
def test_arguments_that_do_not_match_the_schema_are_an_error_result_and_nothing_is_sent(
    httpserver: HTTPServer, arguments: Any, says: str
) -> None:
    runner, model = run_with(
        [http_tool(httpserver.url_for("/forecast"))], [calls("forecast", arguments), {"text": "ok"}]
    )
    [result] = tool_results(model)
    assert result.startswith("error: ") and says in result, result
    assert httpserver.log == []
    assert runner.state is AgentState.DONE


def test_a_long_answer_is_cut_with_a_marker(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/big").respond_with_data("x" * 5000, content_type="text/plain")
    _, model = run_with(
        [http_tool(httpserver.url_for("/big"), max_result_chars=1000)],
        [calls("forecast", {"city": "a"}), {"text": "ok"}],
    )
    [result] = tool_results(model)
    assert result.startswith("x" * 1000) and result.endswith("…[truncated 4000 characters]")
    assert len(result) < 1100


@pytest.mark.parametrize("status", [400, 404, 500, 503])
def test_a_non_2xx_answer_is_an_error_result(httpserver: HTTPServer, status: int) -> None:
    httpserver.expect_request("/f").respond_with_data("city unknown", status=status)
    runner, model = run_with([http_tool(httpserver.url_for("/f"))], [calls("forecast", {"city": "a"}), {"text": "ok"}])
    [result] = tool_results(model)
    assert result.startswith(f"error: tool 'forecast' failed: ToolHttpError: HTTP {status}")
    assert "city unknown" in result
    assert runner.state is AgentState.DONE  # information for the model, not an ERROR


def test_a_refused_connection_is_an_error_result() -> None:
    runner, model = run_with(
        [http_tool("http://127.0.0.1:9/nothing-listens")], [calls("forecast", {"city": "a"}), {"text": "ok"}]
    )
    [result] = tool_results(model)
    assert result.startswith("error: tool 'forecast' failed:")
    assert runner.state is AgentState.DONE


def test_get_sends_the_arguments_as_the_query(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/f", method="GET", query_string={"city": "Oslo", "days": "3"}).respond_with_data("sunny")
    _, model = run_with(
        [http_tool(httpserver.url_for("/f"), method="GET")],
        [calls("forecast", {"city": "Oslo", "days": 3}), {"text": "ok"}],
    )
    assert tool_results(model) == ["sunny"]


def test_the_credential_comes_from_a_scoped_secret_and_never_reaches_the_model(
    httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a tool whose credential is an env: secret under the allowed prefix
    monkeypatch.setenv("AGENTWAKE_SECRET_WEATHER", "s3cret-weather-key")

    def handler(request: Request) -> Response:
        ok = request.headers.get("X-Api-Key") == "Token s3cret-weather-key"
        return Response("authorised" if ok else "who are you", status=200 if ok else 401)

    httpserver.expect_request("/f").respond_with_handler(handler)
    spec = http_tool(
        httpserver.url_for("/f"),
        secret_ref="env:AGENTWAKE_SECRET_WEATHER",
        auth_header="X-Api-Key",
        auth_scheme="Token",
    )
    _, model = run_with([spec], [calls("forecast", {"city": "a"}), {"text": "ok"}])
    # THEN the server was authorised, and the secret appears nowhere the model can see
    assert tool_results(model) == ["authorised"]
    assert "s3cret" not in json.dumps([m.to_dict() for m in model.requests[-1].messages])


def test_a_secret_reference_outside_its_scope_is_refused_before_any_call(httpserver: HTTPServer) -> None:
    spec = http_tool(httpserver.url_for("/f"), secret_ref="env:AWS_SECRET_ACCESS_KEY")
    with pytest.raises(SecretRefRefused):
        run_with([spec], [calls("forecast", {"city": "a"}), {"text": "ok"}])
    assert httpserver.log == []


def test_the_outbound_policy_applies_to_tools(httpserver: HTTPServer, deployed_outbound_policy: None) -> None:
    # GIVEN the deployed policy (https only, no loopback, no link-local)
    # WHEN a session declares a tool on the metadata address THEN it cannot even be built
    with pytest.raises(OutboundRefused):
        build_tools([http_tool("https://169.254.169.254/latest/meta-data/")], session_id="s1")
    # AND a name that resolves to loopback passes the config check but is refused when called,
    # aborting the run (a configuration error, not an error: result the model would retry)
    spec = http_tool(httpserver.url_for("/f").replace("http://", "https://").replace("127.0.0.1", "localhost"))
    with pytest.raises(OutboundRefused, match="loopback"):
        run_with([spec], [calls("forecast", {"city": "a"}), {"text": "ok"}])
    assert httpserver.log == []


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ({"parameters": {"type": "object", "properties": {"a": {"type": "no-such-type"}}}}, "not a valid JSON Schema"),
        ({"parameters": {"type": "string"}}, "must be an object schema"),
        ({"name": "send_message_to_user"}, "over a built-in tool"),
        ({"method": "TRACE"}, "method"),
        ({"timeout": 0}, "timeout"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_a_bad_tool_spec_is_a_config_error(spec: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        build_tools([http_tool("https://tools.example.com/f", **spec)], session_id="s1")


def test_two_tools_with_one_name_are_a_config_error() -> None:
    spec = http_tool("https://tools.example.com/f")
    with pytest.raises(ConfigError, match="twice"):
        build_tools([spec, spec], session_id="s1")


def test_a_side_effecting_tool_sends_a_stable_idempotency_key(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/t").respond_with_data("created")
    tool = build_tools([http_tool(httpserver.url_for("/t"), side_effect=True)], session_id="s1")[0]
    ctx = ToolContext(run_id="bg:t9", session_id="s1").for_call(1, 0)
    tool.invoke({"city": "a"}, ctx)
    tool.invoke({"city": "a"}, ToolContext(run_id="bg:t9", session_id="s1").for_call(1, 0))
    keys = [r.headers["Idempotency-Key"] for r, _ in httpserver.log]
    assert keys == ["bg:t9#1#0", "bg:t9#1#0"]  # the same call on a retry carries the same key


def test_in_a_dry_run_a_side_effecting_tool_is_not_called(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/t").respond_with_data("created")
    _, model = run_with(
        [http_tool(httpserver.url_for("/t"), side_effect=True)],
        [calls("forecast", {"city": "a"}), {"text": "ok"}],
        dry_run=True,
    )
    assert tool_results(model) == [DRY_RUN_RESULT]
    assert httpserver.log == []


def test_unknown_tool_names_list_the_declared_tools() -> None:
    registry = ToolRegistry(build_tools([http_tool("https://tools.example.com/f")], session_id="s1"))
    result = registry.execute(ToolCall(id="c", name="nope"), ToolContext(run_id="r", session_id="s1"))
    assert result == "error: unknown tool 'nope'; available tools: forecast"
