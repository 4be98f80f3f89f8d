"""send_message_to_user (DESIGN §2): delivery ids, session guard, failing channels, its spec."""

from __future__ import annotations

import json

import pytest

from agentwake.agent.chain import ProviderChain
from agentwake.agent.providers.scripted import ScriptedProvider
from agentwake.agent.runner import AgentState, Runner
from agentwake.agent.tools import ToolContext, ToolRegistry
from agentwake.agent.tools.send_message import MAX_MESSAGE_CHARS, SendMessageToUser
from agentwake.delivery import Delivery
from agentwake.domain.conversation import Message, ToolCall
from agentwake.errors import DeliveryError
from tests.support.clock import FakeClock

TOOL = "send_message_to_user"


class FakeChannel:
    def __init__(self) -> None:
        self.sent: list[Delivery] = []

    def send(self, delivery: Delivery) -> None:
        self.sent.append(delivery)


class FailingChannel:
    def __init__(self) -> None:
        self.attempts = 0

    def send(self, delivery: Delivery) -> None:
        self.attempts += 1
        raise DeliveryError("delivery d1 to https://hooks.example/x failed: HTTP 503 Service Unavailable")


def call(arguments: dict | str, name: str | None = TOOL) -> ToolCall:
    return ToolCall(id="c1", name=name, arguments=arguments if isinstance(arguments, str) else json.dumps(arguments))


def ctx(role: str = "user", step: int = 0, call_index: int = 0) -> ToolContext:
    return ToolContext(run_id="bg:t-9", session_id="sess-A", role=role, step=step, call_index=call_index)  # type: ignore[arg-type]


def test_delivers_through_the_channel_with_a_run_step_index_delivery_id():
    # GIVEN the tool on a fake channel
    channel = FakeChannel()
    registry = ToolRegistry([SendMessageToUser(channel)])

    # WHEN step 2's fourth call sends a message to this session
    result = registry.execute(call({"text": "Report ready."}), ctx(step=2, call_index=3))

    # THEN exactly one delivery went out, addressed to the run's session, with id run#step#index
    assert channel.sent == [
        Delivery(delivery_id="bg:t-9#2#3", run_id="bg:t-9", session_id="sess-A", text="Report ready.")
    ]
    assert result == "delivered (delivery_id=bg:t-9#2#3)"


def test_delivery_ids_inside_a_run_follow_step_and_call_index():
    # GIVEN a model that sends two messages in step 0 and one in step 1
    channel = FakeChannel()
    send = {"name": TOOL, "arguments": {"text": "m"}}
    provider = ScriptedProvider(script=[{"tool_calls": [send, send]}, {"tool_calls": [send]}, {"text": "done"}])
    runner = Runner(
        model=ProviderChain([provider], clock=FakeClock()),
        tools=ToolRegistry([SendMessageToUser(channel)]),
        messages=[Message(role="user", content="go")],
        context=ctx(),
    )

    # WHEN the run runs
    assert runner.run() is AgentState.DONE

    # THEN each delivery id is run#step#index, so a retry re-sends under the same id
    assert [d.delivery_id for d in channel.sent] == ["bg:t-9#0#0", "bg:t-9#0#1", "bg:t-9#1#0"]


def test_refuses_to_message_another_session_unless_admin():
    # GIVEN the tool on a fake channel
    channel = FakeChannel()
    registry = ToolRegistry([SendMessageToUser(channel)])

    # WHEN a normal run tries to message another session
    result = registry.execute(call({"text": "hi", "session_id": "sess-B"}), ctx(role="user"))

    # THEN it gets an error result and nothing is sent
    assert result.startswith("error: ")
    assert "PermissionError" in result and "sess-A" in result
    assert channel.sent == []

    # WHEN an admin run does the same
    result = registry.execute(call({"text": "hi", "session_id": "sess-B"}), ctx(role="admin"))

    # THEN the message goes to the other session
    assert result.startswith("delivered")
    assert [(d.session_id, d.text) for d in channel.sent] == [("sess-B", "hi")]


def test_naming_its_own_session_explicitly_is_allowed():
    channel = FakeChannel()
    registry = ToolRegistry([SendMessageToUser(channel)])

    result = registry.execute(call({"text": "hi", "session_id": "sess-A"}), ctx(role="user"))

    assert result.startswith("delivered")
    assert [d.session_id for d in channel.sent] == ["sess-A"]


def test_a_failing_channel_becomes_an_error_result():
    # GIVEN a channel that raises DeliveryError
    channel = FailingChannel()
    registry = ToolRegistry([SendMessageToUser(channel)])

    # WHEN the tool is called (no pytest.raises: a raise here fails the test)
    result = registry.execute(call({"text": "hi"}), ctx())

    # THEN the model gets an error result carrying the channel's reason
    assert channel.attempts == 1
    assert result.startswith("error: tool 'send_message_to_user' failed: DeliveryError:")
    assert "HTTP 503" in result


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param({"text": ""}, id="empty-text"),
        pytest.param({"text": "x" * (MAX_MESSAGE_CHARS + 1)}, id="too-long"),
        pytest.param({"message": "hi"}, id="wrong-field"),
    ],
)
def test_invalid_arguments_send_nothing(arguments):
    channel = FakeChannel()
    registry = ToolRegistry([SendMessageToUser(channel)])

    result = registry.execute(call(arguments), ctx())

    assert result.startswith("error: arguments for 'send_message_to_user' do not match its schema")
    assert channel.sent == []


def test_spec_exposes_text_in_its_json_schema():
    # GIVEN / WHEN the registry's tool specs
    (spec,) = ToolRegistry([SendMessageToUser(FakeChannel())]).specs()

    # THEN the model is told the tool's name and a JSON schema with a required string `text`
    assert spec.name == TOOL
    assert spec.description
    params = spec.parameters
    assert params["type"] == "object"
    assert params["properties"]["text"]["type"] == "string"
    assert params["properties"]["text"]["maxLength"] == MAX_MESSAGE_CHARS
    assert params["required"] == ["text"]
    assert "session_id" in params["properties"]
    assert params.get("additionalProperties") is False
    assert "title" not in params
    json.dumps(params)  # the schema must be plain JSON for every provider
