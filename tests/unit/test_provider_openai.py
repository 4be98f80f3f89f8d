"""The OpenAI-compatible provider against a real HTTP server on 127.0.0.1 (pytest-httpserver)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from agentwake.agent.chain import ProviderChain, RetryPolicy
from agentwake.agent.providers import OpenAISpec, build_provider
from agentwake.agent.providers.openai_compat import OpenAICompatProvider
from agentwake.agent.types import ChatRequest, ToolSpec
from agentwake.domain.conversation import Message, ToolCall
from agentwake.errors import ConfigError, PermanentProviderError, TransientProviderError
from tests.support.clock import FakeClock

#: adapters built here, with no stack, read the outbound policy from Settings as in a function
pytestmark = pytest.mark.usefixtures("stackless_settings")

PATH = "/v1/chat/completions"
KEY_ENV = "AGENTWAKE_SECRET_TEST_OPENAI_KEY"

SEND_TOOL = ToolSpec(
    name="send_message_to_user",
    description="Send a message to the user.",
    parameters={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
)


def completion(message: dict, finish_reason: str = "stop") -> dict:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "test-model",
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish_reason}],
    }


def wake_request(**kwargs) -> ChatRequest:
    messages = (
        Message(role="system", content="You are a helpful agent."),
        Message(role="user", content="The background task above has finished. Act on its result now."),
    )
    return ChatRequest(messages=kwargs.pop("messages", messages), timeout=kwargs.pop("timeout", 5.0), **kwargs)


@pytest.fixture
def server(httpserver: HTTPServer) -> Iterator[HTTPServer]:
    yield httpserver
    httpserver.clear()


@pytest.fixture
def provider(server: HTTPServer, monkeypatch: pytest.MonkeyPatch) -> OpenAICompatProvider:
    monkeypatch.setenv(KEY_ENV, "sk-test-123")
    spec = OpenAISpec(base_url=server.url_for("/v1"), model="test-model", api_key_ref=f"env:{KEY_ENV}")
    return OpenAICompatProvider.from_spec(spec)


def received_body(server: HTTPServer, index: int = -1) -> dict:
    request, _ = server.log[index]
    return json.loads(request.get_data())


def test_plain_reply_is_returned_with_the_provider_id(server, provider):
    # GIVEN a server that answers with plain text
    server.expect_request(PATH, method="POST").respond_with_json(completion({"content": "Your report is ready."}))

    # WHEN the provider is asked
    reply = provider.complete(wake_request())

    # THEN the reply carries the text, no tool calls, not truncated, tagged with the provider id
    assert reply.text == "Your report is ready."
    assert reply.tool_calls == ()
    assert reply.truncated is False
    assert reply.provider_id == "openai:test-model"
    # AND the request named the model and sent the conversation, with no tools offered
    body = received_body(server)
    assert body["model"] == "test-model"
    assert body["messages"] == [
        {"role": "system", "content": "You are a helpful agent."},
        {"role": "user", "content": "The background task above has finished. Act on its result now."},
    ]
    assert "tools" not in body


def test_tool_calling_round_trip(server, provider):
    # GIVEN a server that first asks for a tool, then answers
    server.expect_ordered_request(PATH, method="POST").respond_with_json(
        completion(
            {
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_abc",
                        "type": "function",
                        "function": {"name": "send_message_to_user", "arguments": '{"text": "Done!"}'},
                    }
                ],
            },
            finish_reason="tool_calls",
        )
    )
    server.expect_ordered_request(PATH, method="POST").respond_with_json(completion({"content": "Told the user."}))
    first = wake_request(tools=(SEND_TOOL,))

    # WHEN the provider is asked with a tool on offer
    reply = provider.complete(first)

    # THEN the tool call comes back with its id, name and raw argument text
    assert reply.tool_calls == (ToolCall(id="call_abc", name="send_message_to_user", arguments='{"text": "Done!"}'),)
    assert reply.text == ""
    # AND the server saw the tool offered in OpenAI's format and the bearer key
    request, _ = server.log[0]
    assert request.headers["Authorization"] == "Bearer sk-test-123"
    assert received_body(server, 0)["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "send_message_to_user",
                "description": "Send a message to the user.",
                "parameters": SEND_TOOL.parameters,
            },
        }
    ]

    # WHEN the tool result is fed back
    second = wake_request(
        tools=(SEND_TOOL,),
        messages=(
            *first.messages,
            reply.to_message(),
            Message(role="tool", content="delivered", tool_call_id="call_abc", name="send_message_to_user"),
        ),
    )
    final = provider.complete(second)

    # THEN the final answer is returned
    assert final.text == "Told the user."
    # AND the server saw the assistant's tool call and the tool message answering it
    messages = received_body(server, 1)["messages"]
    assert messages[2] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_abc",
                "type": "function",
                "function": {"name": "send_message_to_user", "arguments": '{"text": "Done!"}'},
            }
        ],
    }
    assert messages[3] == {"role": "tool", "tool_call_id": "call_abc", "content": "delivered"}
    server.check_assertions()


def test_tool_call_without_a_name_is_kept_as_nameless(server, provider):
    # GIVEN a server whose model produced a tool call with no function name
    server.expect_request(PATH).respond_with_json(
        completion({"tool_calls": [{"id": "call_x", "type": "function", "function": {"arguments": "{oops"}}]})
    )

    # WHEN the provider is asked
    reply = provider.complete(wake_request(tools=(SEND_TOOL,)))

    # THEN the call is returned nameless with its malformed arguments untouched (the runner turns it
    # into an error result the model sees)
    assert reply.tool_calls == (ToolCall(id="call_x", name=None, arguments="{oops"),)


def test_nameless_tool_call_in_history_is_sent_with_a_placeholder_name(server, provider):
    # GIVEN a history holding a nameless tool call and its error result
    server.expect_request(PATH).respond_with_json(completion({"content": "ok"}))
    messages = (
        *wake_request().messages,
        Message(role="assistant", tool_calls=(ToolCall(id="call_x", name=None, arguments="{oops"),)),
        Message(role="tool", content="error: the tool call has no tool name", tool_call_id="call_x"),
    )

    # WHEN the next step is sent
    provider.complete(wake_request(messages=messages, tools=(SEND_TOOL,)))

    # THEN the server gets a string name (servers reject a null one) and the raw arguments
    function = received_body(server)["messages"][2]["tool_calls"][0]["function"]
    assert function == {"name": "missing_tool_name", "arguments": "{oops"}


def test_finish_reason_length_marks_the_reply_truncated(server, provider):
    # GIVEN a server whose answer was cut by the token limit
    server.expect_request(PATH).respond_with_json(completion({"content": "The report says"}, finish_reason="length"))

    # WHEN the provider is asked
    reply = provider.complete(wake_request())

    # THEN it is still a reply, marked truncated
    assert reply.text == "The report says"
    assert reply.truncated is True


@pytest.mark.parametrize("status", [429, 500, 502, 503])
def test_throttling_and_server_errors_are_transient(server, provider, status):
    # GIVEN a server that is throttling or failing
    server.expect_request(PATH).respond_with_json({"error": {"message": "slow down"}}, status=status)

    # WHEN the provider is asked
    with pytest.raises(TransientProviderError) as info:
        provider.complete(wake_request())

    # THEN the error is transient, coded by status, with the server's message
    assert info.value.code == f"HTTP{status}"
    assert "slow down" in str(info.value)


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (400, "Invalid value for 'messages'"),
        (401, "Incorrect API key provided"),
        (403, "Your region is not supported"),
        (404, "The model 'test-model' does not exist"),
        (422, "Unprocessable"),
    ],
)
def test_client_errors_are_permanent_and_carry_the_server_message(server, provider, status, message):
    # GIVEN a server that rejects the request
    server.expect_request(PATH).respond_with_json(
        {"error": {"message": message, "type": "invalid_request_error"}}, status=status
    )

    # WHEN the provider is asked
    with pytest.raises(PermanentProviderError) as info:
        provider.complete(wake_request())

    # THEN the error is permanent and says why, in the server's words
    assert info.value.code == f"HTTP{status}"
    assert message in str(info.value)
    assert not isinstance(info.value, TransientProviderError)


def test_a_long_server_error_message_is_truncated(server, provider):
    # GIVEN a server that answers a 400 with a huge error text
    server.expect_request(PATH).respond_with_data("x" * 20_000, status=400, content_type="text/plain")

    # WHEN the provider is asked
    with pytest.raises(PermanentProviderError) as info:
        provider.complete(wake_request())

    # THEN the error keeps the start of the text but stays short enough for a failure record
    assert "xxxx" in str(info.value)
    assert len(str(info.value)) < 400


def test_a_slow_server_is_a_transient_timeout(server, provider):
    # GIVEN a server that takes longer to answer than the request's timeout
    release = threading.Event()

    def slow(request: Request) -> Response:
        release.wait(5)
        return Response(json.dumps(completion({"content": "too late"})), content_type="application/json")

    server.expect_request(PATH).respond_with_handler(slow)

    # WHEN the provider is asked with a short timeout
    try:
        with pytest.raises(TransientProviderError) as info:
            provider.complete(wake_request(timeout=0.3))
    finally:
        release.set()  # let the server thread finish before the next test

    # THEN it is a transient timeout
    assert info.value.code == "Timeout"


def test_an_unreachable_server_is_transient(provider):
    # GIVEN an endpoint where nothing listens
    unreachable = OpenAICompatProvider(id="down", base_url="http://127.0.0.1:9/v1", model="m")

    # WHEN the provider is asked
    with pytest.raises(TransientProviderError) as info:
        unreachable.complete(wake_request(timeout=2))

    # THEN it is a transient connection error
    assert info.value.code == "ConnectionError"


@pytest.mark.parametrize(
    "body",
    ["<html>Bad gateway</html>", '{"choices": []}', '{"object": "chat.completion"}', '"just a string"'],
)
def test_an_unusable_response_body_is_transient_malformed_output(server, provider, body):
    # GIVEN a server that answers 200 with something that is not a chat completion
    server.expect_request(PATH).respond_with_data(body, content_type="application/json")

    # WHEN the provider is asked
    with pytest.raises(TransientProviderError) as info:
        provider.complete(wake_request())

    # THEN it is transient malformed output
    assert info.value.code == "MalformedOutput"


def test_the_api_key_comes_from_the_env_reference(server, monkeypatch):
    # GIVEN a spec whose key lives in an environment variable
    monkeypatch.setenv("AGENTWAKE_SECRET_MY_LLM_KEY", "sk-from-env")
    server.expect_request(PATH, headers={"Authorization": "Bearer sk-from-env"}).respond_with_json(
        completion({"content": "hi"})
    )
    provider = build_provider(
        {
            "type": "openai",
            "base_url": server.url_for("/v1"),
            "model": "m",
            "api_key_ref": "env:AGENTWAKE_SECRET_MY_LLM_KEY",
        }
    )

    # WHEN the provider is asked
    reply = provider.complete(wake_request())

    # THEN the server got that key as a bearer token (the handler only matches with it)
    assert reply.text == "hi"


def test_a_spec_without_key_sends_no_authorization(server):
    # GIVEN a self-hosted endpoint that needs no key
    server.expect_request(PATH).respond_with_json(completion({"content": "hi"}))
    provider = build_provider({"type": "openai", "base_url": server.url_for("/v1"), "model": "m"})

    # WHEN the provider is asked
    provider.complete(wake_request())

    # THEN no Authorization header is sent
    request, _ = server.log[-1]
    assert "Authorization" not in request.headers


def test_a_missing_key_is_a_config_error(server, monkeypatch):
    # GIVEN a spec pointing at an environment variable that is not set
    monkeypatch.delenv("AGENTWAKE_SECRET_MISSING_LLM_KEY", raising=False)
    server.expect_request(PATH).respond_with_json(completion({"content": "hi"}))
    provider = OpenAICompatProvider.from_spec(
        OpenAISpec(base_url=server.url_for("/v1"), model="m", api_key_ref="env:AGENTWAKE_SECRET_MISSING_LLM_KEY")
    )

    # WHEN the provider is asked
    with pytest.raises(ConfigError) as info:
        provider.complete(wake_request())

    # THEN the error names the variable, and nothing was sent without a key
    assert "AGENTWAKE_SECRET_MISSING_LLM_KEY" in str(info.value)
    assert server.log == []


def test_max_tokens_and_temperature_from_the_spec_are_sent(server):
    # GIVEN a spec with generation limits
    server.expect_request(PATH).respond_with_json(completion({"content": "hi"}))
    provider = build_provider(
        {"type": "openai", "base_url": server.url_for("/v1"), "model": "m", "max_tokens": 256, "temperature": 0.2}
    )

    # WHEN the provider is asked
    provider.complete(wake_request())

    # THEN the request carries them
    body = received_body(server)
    assert body["max_tokens"] == 256
    assert body["temperature"] == 0.2


def test_the_chain_retries_a_503_and_then_succeeds(server, provider):
    # GIVEN a server that fails once with 503, then answers
    server.expect_ordered_request(PATH).respond_with_json({"error": {"message": "overloaded"}}, status=503)
    server.expect_ordered_request(PATH).respond_with_json(completion({"content": "Recovered."}))
    clock = FakeClock()
    chain = ProviderChain(
        [provider], retry=RetryPolicy(max_attempts=3, base_delay=1.0), clock=clock, deadline=clock.now() + 60
    )

    # WHEN the chain is asked
    reply = chain.complete(wake_request())

    # THEN the second attempt's answer comes back, after one backoff sleep and no failover
    assert reply.text == "Recovered."
    assert reply.provider_id == provider.id
    assert chain.attempts == [(provider.id, 1), (provider.id, 2)]
    assert len(clock.sleeps) == 1
    assert chain.failovers == 0
    server.check_assertions()
