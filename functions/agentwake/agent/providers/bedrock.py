"""Amazon Bedrock through the Converse API (botocore ``bedrock-runtime``).

The client is built at the first call, from the runtime's one botocore session
(``agentwake.store.aws.new_client``: no boto3 import, the session's loaded endpoint data reused): a
session whose primary model is not on Bedrock never pays for it. The client makes exactly one attempt per call, because the
ProviderChain does the retrying against the Lambda's deadline; this module only classifies, by
exception type and error code, never by message text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agentwake.agent.bounds import (
    DEADLINE_CHECK_EVERY,
    UNENCODABLE_ARGUMENTS,
    ArgumentsRefused,
    check_deadline,
    parse_arguments,
)
from agentwake.agent.types import ChatRequest, ModelReply, ToolSpec, Usage
from agentwake.domain.conversation import Message, ToolCall
from agentwake.errors import PermanentProviderError, ProviderError, TransientProviderError

if TYPE_CHECKING:
    from agentwake.agent.providers.spec import BedrockSpec

#: Converse error codes worth another attempt on the same model
TRANSIENT_CODES = frozenset(
    {
        "ThrottlingException",
        "ServiceUnavailableException",
        "ModelTimeoutException",
        "InternalServerException",
        "ModelNotReadyException",
        "ModelErrorException",
    }
)
#: stop reasons that mean "this answer is unusable, ask again"
_TRANSIENT_STOPS = {"malformed_tool_use": "MalformedToolUse", "malformed_model_output": "MalformedModelOutput"}
#: stop reasons that mean "this model will not answer this": go to the next provider
_PERMANENT_STOPS = {"guardrail_intervened": "GuardrailIntervened", "content_filtered": "ContentFiltered"}
#: stop reasons of a reply cut short that is still a reply
_TRUNCATED_STOPS = frozenset({"max_tokens", "model_context_window_exceeded"})

#: name sent for a journaled tool call that had none (Converse requires one)
MISSING_TOOL_NAME = "missing_tool_name"
#: text of the user turn put first when the history window starts with the assistant
LEADING_USER_TEXT = "(earlier conversation omitted)"
#: model families that accept ``status`` on a toolResult block; others reject the field
_STATUS_MODELS = ("anthropic.claude", "amazon.nova")
_MAX_ERROR_TEXT = 300
_ID_CHARS = re.compile(r"[^a-zA-Z0-9_-]")
_CONNECT_TIMEOUT = 10.0


class BedrockProvider:
    def __init__(
        self,
        id: str,
        model_id: str,
        client: Any = None,
        max_tokens: int = 1024,
        temperature: float | None = None,
        *,
        region: str | None = None,
        tool_result_status: bool | None = None,
    ) -> None:
        """``client`` is used as given (tests pass a stubbed one); without it one is built lazily.

        ``tool_result_status`` None means: send ``status`` on tool results only to model families
        known to accept it (Claude, Nova).
        """
        self.id = id
        self.model_id = model_id
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.region = region
        self._given_client = client
        self._client: Any = None
        self._client_timeout: float | None = None
        if tool_result_status is None:
            tool_result_status = any(family in model_id for family in _STATUS_MODELS)
        self.tool_result_status = tool_result_status

    @classmethod
    def from_spec(cls, spec: BedrockSpec) -> BedrockProvider:
        return cls(
            id=spec.id,
            model_id=spec.model_id,
            max_tokens=spec.max_tokens,
            temperature=spec.temperature,
            region=spec.region,
        )

    def client(self, timeout: float) -> Any:
        """The bedrock-runtime client for a call that may take ``timeout`` seconds.

        botocore fixes timeouts per client, so a call with another timeout (the chain shortens it
        near the deadline) gets a new client; the usual constant timeout reuses one.
        """
        if self._given_client is not None:
            return self._given_client
        timeout = max(0.1, round(timeout, 1))
        if self._client is None or self._client_timeout != timeout:
            from botocore.config import Config

            from agentwake.store import aws

            config = Config(
                retries={"total_max_attempts": 1, "mode": "standard"},
                read_timeout=timeout,
                connect_timeout=min(_CONNECT_TIMEOUT, timeout),
            )
            self._client = aws.new_client("bedrock-runtime", region=self.region, config=config)
            self._client_timeout = timeout
        return self._client

    def build_request(self, request: ChatRequest) -> dict[str, Any]:
        """The keyword arguments of ``converse`` for this request."""
        with_tools = bool(request.tools)
        kwargs: dict[str, Any] = {
            "modelId": self.model_id,
            "messages": _messages(request.messages, with_tools=with_tools, status=self.tool_result_status),
        }
        system = [{"text": m.content} for m in request.messages if m.role == "system" and m.content.strip()]
        if system:
            kwargs["system"] = system
        inference: dict[str, Any] = {"maxTokens": self.max_tokens}
        if self.temperature is not None:
            inference["temperature"] = self.temperature
        kwargs["inferenceConfig"] = inference
        if with_tools:
            kwargs["toolConfig"] = {"tools": [_tool(t) for t in request.tools]}
        return kwargs

    def complete(self, request: ChatRequest) -> ModelReply:
        kwargs = self.build_request(request)
        try:
            response = self.client(request.timeout).converse(**kwargs)
        except Exception as exc:
            classified = _classify(exc)
            if classified is None:
                raise
            raise classified from exc
        return self.parse_reply(response)

    def parse_reply(self, response: dict[str, Any]) -> ModelReply:
        stop = response.get("stopReason")
        if stop in _TRANSIENT_STOPS:
            raise TransientProviderError(f"the model stopped with {stop}", code=_TRANSIENT_STOPS[stop])
        if stop in _PERMANENT_STOPS:
            raise PermanentProviderError(f"the model stopped with {stop}", code=_PERMANENT_STOPS[stop])
        try:
            blocks = response["output"]["message"]["content"]
            if not isinstance(blocks, list):
                raise TypeError("content is not a list")
        except (KeyError, TypeError) as exc:
            raise TransientProviderError("response has no output.message.content", code="MalformedOutput") from exc
        texts: list[str] = []
        calls: list[ToolCall] = []
        for i, block in enumerate(blocks):
            if i % DEADLINE_CHECK_EVERY == 0:  # the runner caps the calls; reading them ends by the deadline
                check_deadline(f"reading the {len(blocks):,} content blocks of provider {self.id}'s reply")
            if not isinstance(block, dict):
                continue
            if block.get("text"):
                texts.append(block["text"])
            elif "toolUse" in block:
                use = block["toolUse"]
                calls.append(
                    ToolCall(
                        id=str(use.get("toolUseId") or f"tooluse_{len(calls)}"),
                        name=use.get("name") or None,
                        arguments=_arguments_text(use.get("input", {})),
                    )
                )
        return ModelReply(
            text="\n".join(texts),
            tool_calls=tuple(calls),
            truncated=stop in _TRUNCATED_STOPS,
            provider_id=self.id,
            usage=_usage(response, self.model_id),
        )


def _arguments_text(value: Any) -> str:
    """A toolUse ``input`` as JSON text; one too deep for the encoder is not JSON (an ``error:``
    result for the model, never a RecursionError out of the run)."""
    try:
        return json.dumps(value)
    except (ValueError, TypeError, RecursionError):
        return UNENCODABLE_ARGUMENTS


def _usage(response: dict[str, Any], model_id: str) -> Usage | None:
    """Converse ``usage.inputTokens``/``outputTokens``; None when the response has no usage."""
    usage = response.get("usage")
    if not isinstance(usage, dict):
        return None

    def count(value: Any) -> int:
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0

    return Usage(
        input_tokens=count(usage.get("inputTokens")),
        output_tokens=count(usage.get("outputTokens")),
        model=model_id,
    )


# --- request mapping -------------------------------------------------------------------------


def _messages(messages: Sequence[Message], *, with_tools: bool, status: bool) -> list[dict[str, Any]]:
    """Our messages → Converse turns: user/assistant alternating, starting with the user.

    Tool results become ``toolResult`` blocks of a user turn. Without a toolConfig Converse
    rejects tool blocks in history, so then tool calls and results are written out as text.
    """
    turns: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "system":
            continue
        role = "assistant" if m.role == "assistant" else "user"
        blocks: list[dict[str, Any]] = []
        if m.role == "tool":
            blocks.append(_tool_result(m, status) if with_tools else _text(_tool_result_as_text(m)))
        else:
            if m.content.strip():
                blocks.append(_text(m.content))
            for call in m.tool_calls:
                blocks.append(_tool_use(call) if with_tools else _text(_tool_use_as_text(call)))
        if not blocks:
            continue  # Converse rejects blank messages
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)  # Converse requires alternating roles
        else:
            turns.append({"role": role, "content": blocks})
    if turns and turns[0]["role"] == "assistant":
        turns.insert(0, {"role": "user", "content": [_text(LEADING_USER_TEXT)]})
    return turns


def _text(text: str) -> dict[str, Any]:
    return {"text": text}


def _safe_id(value: str) -> str:
    """Converse ids and tool names must match ``[a-zA-Z0-9_-]{1,64}``."""
    return _ID_CHARS.sub("_", value)[:64] or "_"


def _tool_use(call: ToolCall) -> dict[str, Any]:
    try:
        args = parse_arguments(call.arguments)  # bounded: a model's over-deep arguments are sent as {}
    except ArgumentsRefused:
        args = {}
    return {
        "toolUse": {
            "toolUseId": _safe_id(call.id),
            "name": _safe_id(call.name or MISSING_TOOL_NAME),
            "input": args if isinstance(args, dict) else {},
        }
    }


def _tool_result(m: Message, status: bool) -> dict[str, Any]:
    result: dict[str, Any] = {"toolUseId": _safe_id(m.tool_call_id or ""), "content": [_text(m.content or "(empty)")]}
    if status:
        result["status"] = "error" if m.content.startswith("error:") else "success"
    return {"toolResult": result}


def _tool_use_as_text(call: ToolCall) -> str:
    return f"[called tool {call.name or MISSING_TOOL_NAME} (id {call.id}) with arguments {call.arguments}]"


def _tool_result_as_text(m: Message) -> str:
    return f"[result of tool {m.name or '?'} (id {m.tool_call_id}): {m.content}]"


def _tool(t: ToolSpec) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": t.name, "inputSchema": {"json": t.parameters}}
    if t.description:
        spec["description"] = t.description
    return {"toolSpec": spec}


# --- errors ----------------------------------------------------------------------------------


def _classify(exc: Exception) -> ProviderError | None:
    """A ProviderError for a failure we understand; None to let anything else propagate."""
    from botocore import exceptions as bx

    if isinstance(exc, bx.ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code") or "ClientError")
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        message = _snippet(f"{code}: {error.get('Message') or ''}".rstrip(": "))
        if code in TRANSIENT_CODES or (code not in _KNOWN_PERMANENT and _transient_status(status)):
            return TransientProviderError(message, code=code)
        return PermanentProviderError(message, code=code)
    if isinstance(exc, bx.ReadTimeoutError | bx.ConnectTimeoutError):
        return TransientProviderError(f"{type(exc).__name__}: {exc}", code="Timeout")
    if isinstance(exc, bx.ConnectionError | bx.HTTPClientError):
        return TransientProviderError(f"{type(exc).__name__}: {exc}", code="ConnectionError")
    if isinstance(exc, bx.NoCredentialsError | bx.PartialCredentialsError | bx.NoRegionError):
        return PermanentProviderError(f"{type(exc).__name__}: {exc}", code=type(exc).__name__)
    return None


#: codes that stay permanent whatever HTTP status they came with
_KNOWN_PERMANENT = frozenset({"AccessDeniedException", "ValidationException", "ResourceNotFoundException"})


def _transient_status(status: Any) -> bool:
    """An unknown code with a 5xx or 429 status is still the server's trouble, not ours."""
    return isinstance(status, int) and (status >= 500 or status == 429)


def _snippet(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_ERROR_TEXT else text[: _MAX_ERROR_TEXT - 3] + "..."
