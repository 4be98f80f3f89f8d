"""The Bedrock provider against a real bedrock-runtime client with botocore's Stubber (no endpoint)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ReadTimeoutError
from botocore.stub import Stubber
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from agentwake.agent.providers import BedrockSpec, build_provider
from agentwake.agent.providers.bedrock import BedrockProvider
from agentwake.agent.runner import MAX_STEPS_MESSAGE
from agentwake.agent.types import ChatRequest, ToolSpec
from agentwake.domain.conversation import Message, ToolCall
from agentwake.errors import PermanentProviderError, TransientProviderError
from agentwake.store import aws

CLAUDE = "anthropic.claude-3-5-sonnet-20240620-v1:0"
SYSTEM = "You are a helpful agent."
WAKE = "The background task above has finished. Act on its result now."

SEND_TOOL = ToolSpec(
    name="send_message_to_user",
    description="Send a message to the user.",
    parameters={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
)


@pytest.fixture(autouse=True)
def fake_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake credentials and no endpoint override: nothing here may reach a real AWS endpoint."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_BEDROCK_RUNTIME"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def client() -> Any:
    return boto3.client("bedrock-runtime", region_name="us-east-1", config=Config(retries={"total_max_attempts": 1}))


@pytest.fixture
def stubber(client: Any) -> Iterator[Stubber]:
    with Stubber(client) as stub:
        yield stub
        stub.assert_no_pending_responses()


@pytest.fixture
def provider(client: Any) -> BedrockProvider:
    return BedrockProvider(id="bedrock:claude", model_id=CLAUDE, client=client, max_tokens=512)


def converse_response(content: list[dict[str, Any]], stop_reason: str = "end_turn") -> dict[str, Any]:
    return {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": stop_reason,
        "usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15},
        "metrics": {"latencyMs": 42},
    }


def wake_request(*extra: Message, tools: tuple[ToolSpec, ...] = (), **kwargs: Any) -> ChatRequest:
    messages = (Message(role="system", content=SYSTEM), Message(role="user", content=WAKE), *extra)
    return ChatRequest(messages=messages, tools=tools, **kwargs)


def tool_round(*results: str) -> tuple[Message, ...]:
    """An assistant turn calling the tool once per result, then the tool messages answering it."""
    calls = tuple(
        ToolCall(id=f"tooluse_{i}", name="send_message_to_user", arguments=json.dumps({"text": f"m{i}"}))
        for i in range(len(results))
    )
    answers = tuple(
        Message(role="tool", content=r, tool_call_id=f"tooluse_{i}", name="send_message_to_user")
        for i, r in enumerate(results)
    )
    return (Message(role="assistant", content="Telling the user.", tool_calls=calls), *answers)


TOOL_CONFIG = {
    "tools": [
        {
            "toolSpec": {
                "name": "send_message_to_user",
                "description": "Send a message to the user.",
                "inputSchema": {"json": SEND_TOOL.parameters},
            }
        }
    ]
}


def test_plain_reply_maps_system_and_user_turns(stubber, provider):
    # GIVEN Bedrock answers with text
    stubber.add_response(
        "converse",
        converse_response([{"text": "Your report is ready."}]),
        expected_params={
            "modelId": CLAUDE,
            "system": [{"text": SYSTEM}],
            "messages": [{"role": "user", "content": [{"text": WAKE}]}],
            "inferenceConfig": {"maxTokens": 512},
        },
    )

    # WHEN the provider is asked (no tools on offer)
    reply = provider.complete(wake_request())

    # THEN the text comes back tagged with the provider, and no toolConfig was sent (the stub
    # rejects any parameter it did not expect)
    assert reply.text == "Your report is ready."
    assert reply.tool_calls == ()
    assert reply.truncated is False
    assert reply.provider_id == "bedrock:claude"


def test_tool_use_in_the_reply_becomes_tool_calls(stubber, provider):
    # GIVEN Bedrock answers with some text and a toolUse block
    stubber.add_response(
        "converse",
        converse_response(
            [
                {"text": "Let me tell them."},
                {"toolUse": {"toolUseId": "tooluse_abc", "name": "send_message_to_user", "input": {"text": "Done!"}}},
            ],
            stop_reason="tool_use",
        ),
        expected_params={
            "modelId": CLAUDE,
            "system": [{"text": SYSTEM}],
            "messages": [{"role": "user", "content": [{"text": WAKE}]}],
            "inferenceConfig": {"maxTokens": 512},
            "toolConfig": TOOL_CONFIG,
        },
    )

    # WHEN the provider is asked with the tool on offer
    reply = provider.complete(wake_request(tools=(SEND_TOOL,)))

    # THEN the reply has the text and the call, its input as JSON text
    assert reply.text == "Let me tell them."
    assert len(reply.tool_calls) == 1
    call = reply.tool_calls[0]
    assert (call.id, call.name) == ("tooluse_abc", "send_message_to_user")
    assert json.loads(call.arguments) == {"text": "Done!"}


def test_tool_history_maps_to_tool_use_and_one_user_turn_of_results(stubber, provider):
    # GIVEN a history where the assistant called the tool twice and got a success and an error,
    # and Bedrock answers the next step
    history = tool_round("delivered", "error: the webhook returned 500")
    stubber.add_response(
        "converse",
        converse_response([{"text": "One message failed."}]),
        expected_params={
            "modelId": CLAUDE,
            "system": [{"text": SYSTEM}],
            "messages": [
                {"role": "user", "content": [{"text": WAKE}]},
                {
                    "role": "assistant",
                    "content": [
                        {"text": "Telling the user."},
                        {
                            "toolUse": {
                                "toolUseId": "tooluse_0",
                                "name": "send_message_to_user",
                                "input": {"text": "m0"},
                            }
                        },
                        {
                            "toolUse": {
                                "toolUseId": "tooluse_1",
                                "name": "send_message_to_user",
                                "input": {"text": "m1"},
                            }
                        },
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "toolResult": {
                                "toolUseId": "tooluse_0",
                                "content": [{"text": "delivered"}],
                                "status": "success",
                            }
                        },
                        {
                            "toolResult": {
                                "toolUseId": "tooluse_1",
                                "content": [{"text": "error: the webhook returned 500"}],
                                "status": "error",
                            }
                        },
                    ],
                },
            ],
            "inferenceConfig": {"maxTokens": 512},
            "toolConfig": TOOL_CONFIG,
        },
    )

    # WHEN the next step is sent with the tool still on offer
    reply = provider.complete(wake_request(*history, tools=(SEND_TOOL,)))

    # THEN Converse got toolUse blocks, then ONE user turn with both results (the stub checked it)
    assert reply.text == "One message failed."


def test_malformed_stored_arguments_are_sent_as_an_empty_input(stubber, provider):
    # GIVEN a history with a tool call whose arguments were not valid JSON, and a nameless one
    history = (
        Message(
            role="assistant",
            tool_calls=(
                ToolCall(id="tooluse_0", name="send_message_to_user", arguments="{not json"),
                ToolCall(id="tooluse_1", name=None, arguments="{}"),
            ),
        ),
        Message(role="tool", content="error: arguments are not valid JSON", tool_call_id="tooluse_0"),
        Message(role="tool", content="error: the tool call has no tool name", tool_call_id="tooluse_1"),
    )
    stubber.add_response(
        "converse",
        converse_response([{"text": "ok"}]),
        expected_params={
            "modelId": CLAUDE,
            "system": [{"text": SYSTEM}],
            "messages": [
                {"role": "user", "content": [{"text": WAKE}]},
                {
                    "role": "assistant",
                    "content": [
                        {"toolUse": {"toolUseId": "tooluse_0", "name": "send_message_to_user", "input": {}}},
                        {"toolUse": {"toolUseId": "tooluse_1", "name": "missing_tool_name", "input": {}}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "toolResult": {
                                "toolUseId": "tooluse_0",
                                "content": [{"text": "error: arguments are not valid JSON"}],
                                "status": "error",
                            }
                        },
                        {
                            "toolResult": {
                                "toolUseId": "tooluse_1",
                                "content": [{"text": "error: the tool call has no tool name"}],
                                "status": "error",
                            }
                        },
                    ],
                },
            ],
            "inferenceConfig": {"maxTokens": 512},
            "toolConfig": TOOL_CONFIG,
        },
    )

    # WHEN the next step is sent
    reply = provider.complete(wake_request(*history, tools=(SEND_TOOL,)))

    # THEN Converse accepted the request shape (the stub validated it against the API model)
    assert reply.text == "ok"


def test_tool_less_final_step_flattens_tool_blocks_into_text(client, stubber, provider):
    # GIVEN the run hit max steps: tools are removed and the stop-calling-tools turn is appended
    # after a tool round, and Bedrock answers
    history = (*tool_round("delivered"), Message(role="user", content=MAX_STEPS_MESSAGE))
    captured: dict[str, Any] = {}
    stubber.add_response("converse", converse_response([{"text": "Final answer."}]))
    client.meta.events.register(
        "provide-client-params.bedrock-runtime.Converse", lambda params, **_: captured.update(params)
    )

    # WHEN the final step is sent without tools
    reply = provider.complete(wake_request(*history))

    # THEN the answer comes back
    assert reply.text == "Final answer."
    # AND no toolConfig was sent, and no toolUse/toolResult block remains in the history
    assert "toolConfig" not in captured
    blocks = [block for turn in captured["messages"] for block in turn["content"]]
    assert all(set(block) == {"text"} for block in blocks)
    # AND the roles still alternate, with the tool call and result readable as text
    assert [turn["role"] for turn in captured["messages"]] == ["user", "assistant", "user"]
    assistant_text = " ".join(b["text"] for b in captured["messages"][1]["content"])
    assert "send_message_to_user" in assistant_text
    assert '{"text": "m0"}' in assistant_text
    last_turn = [b["text"] for b in captured["messages"][2]["content"]]
    assert any("delivered" in t for t in last_turn)
    assert last_turn[-1] == MAX_STEPS_MESSAGE


def test_consecutive_same_role_messages_are_merged_and_the_first_turn_is_the_user(stubber, provider):
    # GIVEN a history window that starts with an assistant note and has two user turns in a row
    history = (
        Message(role="system", content=SYSTEM),
        Message(role="assistant", content="Earlier note."),
        Message(role="user", content="Output your last task result below."),
        Message(role="user", content=WAKE),
    )
    stubber.add_response(
        "converse",
        converse_response([{"text": "ok"}]),
        expected_params={
            "modelId": CLAUDE,
            "system": [{"text": SYSTEM}],
            "messages": [
                {"role": "user", "content": [{"text": "(earlier conversation omitted)"}]},
                {"role": "assistant", "content": [{"text": "Earlier note."}]},
                {
                    "role": "user",
                    "content": [{"text": "Output your last task result below."}, {"text": WAKE}],
                },
            ],
            "inferenceConfig": {"maxTokens": 512},
        },
    )

    # WHEN the provider is asked
    reply = provider.complete(ChatRequest(messages=history))

    # THEN Converse got alternating turns starting with the user (the stub checked it)
    assert reply.text == "ok"


def test_tool_result_status_is_left_out_for_models_that_reject_it(stubber, client):
    # GIVEN a Llama model on Bedrock (only Claude and Nova accept toolResult.status)
    provider = BedrockProvider(id="llama", model_id="meta.llama3-1-70b-instruct-v1:0", client=client)
    stubber.add_response(
        "converse",
        converse_response([{"text": "ok"}]),
        expected_params={
            "modelId": "meta.llama3-1-70b-instruct-v1:0",
            "system": [{"text": SYSTEM}],
            "messages": [
                {"role": "user", "content": [{"text": WAKE}]},
                {
                    "role": "assistant",
                    "content": [
                        {"text": "Telling the user."},
                        {
                            "toolUse": {
                                "toolUseId": "tooluse_0",
                                "name": "send_message_to_user",
                                "input": {"text": "m0"},
                            }
                        },
                    ],
                },
                {
                    "role": "user",
                    "content": [{"toolResult": {"toolUseId": "tooluse_0", "content": [{"text": "delivered"}]}}],
                },
            ],
            "inferenceConfig": {"maxTokens": 1024},
            "toolConfig": TOOL_CONFIG,
        },
    )

    # WHEN a tool result is sent
    reply = provider.complete(wake_request(*tool_round("delivered"), tools=(SEND_TOOL,)))

    # THEN the request has no status field (the stub checked it)
    assert reply.text == "ok"


@pytest.mark.parametrize("stop_reason", ["end_turn", "tool_use", "stop_sequence"])
def test_normal_stop_reasons_give_a_normal_reply(stubber, provider, stop_reason):
    # GIVEN Bedrock stops for an ordinary reason
    stubber.add_response("converse", converse_response([{"text": "fine"}], stop_reason=stop_reason))

    # WHEN the provider is asked
    reply = provider.complete(wake_request())

    # THEN it is an ordinary, untruncated reply
    assert reply.text == "fine"
    assert reply.truncated is False


@pytest.mark.parametrize("stop_reason", ["max_tokens", "model_context_window_exceeded"])
def test_a_token_limit_stop_is_a_truncated_reply(stubber, provider, stop_reason):
    # GIVEN Bedrock stops at the token limit
    stubber.add_response("converse", converse_response([{"text": "The report says"}], stop_reason=stop_reason))

    # WHEN the provider is asked
    reply = provider.complete(wake_request())

    # THEN the partial text comes back, marked truncated
    assert reply.text == "The report says"
    assert reply.truncated is True


@pytest.mark.parametrize("stop_reason", ["malformed_tool_use", "malformed_model_output"])
def test_malformed_output_stops_are_transient(stubber, provider, stop_reason):
    # GIVEN Bedrock reports that the model produced unusable output
    stubber.add_response("converse", converse_response([], stop_reason=stop_reason))

    # WHEN the provider is asked
    with pytest.raises(TransientProviderError) as info:
        provider.complete(wake_request())

    # THEN it is worth asking again
    assert stop_reason in str(info.value)


@pytest.mark.parametrize("stop_reason", ["guardrail_intervened", "content_filtered"])
def test_blocked_output_stops_are_permanent(stubber, provider, stop_reason):
    # GIVEN Bedrock blocked the answer
    stubber.add_response("converse", converse_response([{"text": "Sorry."}], stop_reason=stop_reason))

    # WHEN the provider is asked
    with pytest.raises(PermanentProviderError) as info:
        provider.complete(wake_request())

    # THEN the chain should go to the next provider at once
    assert not isinstance(info.value, TransientProviderError)
    assert stop_reason in str(info.value)


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("ThrottlingException", 429),
        ("ServiceUnavailableException", 503),
        ("ModelTimeoutException", 408),
        ("InternalServerException", 500),
        ("ModelNotReadyException", 429),
        ("ModelErrorException", 424),
        ("SomethingNewException", 502),
    ],
)
def test_transient_error_codes(stubber, provider, code, status):
    # GIVEN Bedrock fails with a code that a retry can cure
    stubber.add_client_error("converse", service_error_code=code, service_message="try later", http_status_code=status)

    # WHEN the provider is asked
    with pytest.raises(TransientProviderError) as info:
        provider.complete(wake_request())

    # THEN the error is transient and keeps the code
    assert info.value.code == code


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("AccessDeniedException", 403),
        ("ValidationException", 400),
        ("ResourceNotFoundException", 404),
        ("ServiceQuotaExceededException", 400),
        ("SomethingNewException", 400),
    ],
)
def test_permanent_error_codes(stubber, provider, code, status):
    # GIVEN Bedrock rejects the request
    stubber.add_client_error(
        "converse", service_error_code=code, service_message="You don't have access", http_status_code=status
    )

    # WHEN the provider is asked
    with pytest.raises(PermanentProviderError) as info:
        provider.complete(wake_request())

    # THEN the error is permanent, keeps the code and the service's message
    assert not isinstance(info.value, TransientProviderError)
    assert info.value.code == code
    assert "You don't have access" in str(info.value)


def test_classification_ignores_the_message_text(stubber, provider):
    # GIVEN a validation error whose message talks about throttling
    stubber.add_client_error(
        "converse", service_error_code="ValidationException", service_message="Too many requests, throttled"
    )

    # WHEN the provider is asked
    # THEN the code decides: permanent
    with pytest.raises(PermanentProviderError):
        provider.complete(wake_request())


def test_a_read_timeout_is_transient(client, provider):
    # GIVEN the HTTP layer times out reading the answer
    def time_out(request, **_):
        raise ReadTimeoutError(endpoint_url=request.url)

    client.meta.events.register("before-send.bedrock-runtime.Converse", time_out)

    # WHEN the provider is asked
    with pytest.raises(TransientProviderError) as info:
        provider.complete(wake_request())

    # THEN it is a transient timeout
    assert info.value.code == "Timeout"


def test_an_unreachable_endpoint_is_transient():
    # GIVEN a client whose endpoint refuses connections (nothing listens on 127.0.0.1:9)
    client = boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url="http://127.0.0.1:9",
        config=Config(retries={"total_max_attempts": 1}, connect_timeout=2),
    )
    provider = BedrockProvider(id="b", model_id=CLAUDE, client=client)

    # WHEN the provider is asked
    with pytest.raises(TransientProviderError) as info:
        provider.complete(wake_request())

    # THEN it is a transient connection error
    assert info.value.code == "ConnectionError"


def test_the_lazy_client_makes_one_attempt_and_honours_the_request_timeout(monkeypatch):
    # GIVEN the runtime's client factory is watched as the provider builds its own client
    created: list[tuple[dict[str, Any], Any]] = []
    real_client = aws.new_client

    def spy(*args: Any, **kwargs: Any) -> Any:
        client = real_client(*args, **kwargs)
        stub = Stubber(client)
        stub.add_response("converse", converse_response([{"text": "hi"}]))
        stub.add_response("converse", converse_response([{"text": "again"}]))
        stub.activate()
        created.append((kwargs, client))
        return client

    monkeypatch.setattr(aws, "new_client", spy)
    provider = build_provider({"type": "bedrock", "model_id": CLAUDE, "region": "eu-west-1"})

    # THEN building the provider creates no client
    assert created == []

    # WHEN it is asked twice with the same timeout
    first = provider.complete(wake_request(timeout=7.0))
    second = provider.complete(wake_request(timeout=7.0))

    # THEN one client serves both, in the spec's region, without retries, with that read timeout
    assert (first.text, second.text) == ("hi", "again")
    assert len(created) == 1
    client = created[0][1]
    assert client.meta.region_name == "eu-west-1"
    assert client.meta.config.retries["total_max_attempts"] == 1
    assert client.meta.config.read_timeout == 7.0
    assert client.meta.config.connect_timeout <= 7.0


#: when the slow endpoint answers, if the request has not given up by then
SLOW_ANSWER_S = 30.0


def test_a_real_slow_endpoint_times_out_within_the_request_timeout(httpserver: HTTPServer, monkeypatch):
    # GIVEN a local endpoint that answers later than the request allows, and a provider whose
    # lazily built client is pointed at it
    release = threading.Event()

    def slow(request: Request) -> Response:
        release.wait(SLOW_ANSWER_S)
        return Response(json.dumps(converse_response([{"text": "too late"}])), content_type="application/json")

    httpserver.expect_request("/model/b/converse").respond_with_handler(slow)
    monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", httpserver.url_for(""))
    provider = build_provider(BedrockSpec(model_id="b", region="us-east-1"))

    # WHEN the provider is asked with a short timeout
    started = time.monotonic()
    try:
        with pytest.raises(TransientProviderError) as info:
            provider.complete(wake_request(timeout=0.5))
    finally:
        elapsed = time.monotonic() - started
        release.set()
        httpserver.clear()

    # THEN it gives up as a transient timeout, long before the server would have answered (the
    # bound leaves a loaded machine the time to build the client and connect)
    assert info.value.code == "Timeout"
    assert elapsed < SLOW_ANSWER_S / 2, elapsed


def test_the_lazy_client_comes_from_the_runtime_session_without_boto3() -> None:
    # GIVEN a fresh interpreter with a Bedrock provider
    import subprocess
    import sys

    code = (
        "import sys, json\n"
        "from agentwake.agent.providers import build_provider\n"
        "p = build_provider({'type': 'bedrock', 'model_id': 'm', 'region': 'eu-west-1'})\n"
        "c = p.client(7.0)\n"
        "print(json.dumps({'boto3': 'boto3' in sys.modules, 'region': c.meta.region_name}))\n"
    )
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "PATH": ""}
    # WHEN it builds the client of its first call (no call is made)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    result = json.loads(out.stdout)
    # THEN the client is for the spec's region and boto3 was never imported (its import is a cold-start cost)
    assert result == {"boto3": False, "region": "eu-west-1"}
