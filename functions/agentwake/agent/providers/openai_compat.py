"""Any OpenAI-compatible chat-completions endpoint, over agentwake.trust.outbound (stdlib http.client).

No requests/httpx: the Lambda bundle and cold start stay light. No retries here either: the
ProviderChain retries transient errors with a deadline, so this module only classifies them.
Every request passes the outbound policy (https, no loopback/private targets, the address that
was checked) and ends by ``request.timeout`` and the run's deadline, whichever comes first.
Every error text is redacted (the API key, bearer tokens, auth headers) before it is cut short.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agentwake.agent.bounds import DEADLINE_CHECK_EVERY, UNENCODABLE_ARGUMENTS, check_deadline
from agentwake.agent.types import ChatRequest, ModelReply, ToolSpec, Usage
from agentwake.domain.conversation import Message, ToolCall
from agentwake.errors import PermanentProviderError, TransientProviderError
from agentwake.trust.redact import redact, register_secret
from agentwake.trust.secrets import resolve_secret

if TYPE_CHECKING:
    from agentwake.agent.providers.spec import OpenAISpec
    from agentwake.trust.outbound import HttpResponse, OutboundPolicy

#: the most of an answer read (a bigger one is malformed output)
MAX_RESPONSE_BYTES = 8 * 1024 * 1024

#: how much of a server's error text goes into an error message (and so into failure records)
MAX_ERROR_TEXT = 300

#: name sent for a journaled tool call that had none: servers reject a tool call without a name,
#: and the model should still see its own malformed call next to the ``error:`` result it got
MISSING_TOOL_NAME = "missing_tool_name"

#: 4xx statuses that say "try again later" (rate limited, request timeout), not "this request is wrong"
_TRANSIENT_4XX = frozenset({408, 429})


class OpenAICompatProvider:
    """POST ``{base_url}/chat/completions``; classify every failure as transient or permanent."""

    def __init__(
        self,
        *,
        id: str,
        base_url: str,
        model: str,
        api_key: str | None = None,
        api_key_ref: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        environ: Mapping[str, str] | None = None,
        policy: OutboundPolicy | None = None,
    ) -> None:
        self.id = id
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.max_tokens = max_tokens
        self.temperature = temperature
        self._api_key = api_key
        register_secret(api_key)
        self._api_key_ref = api_key_ref
        self._environ = environ
        self._policy = policy
        from agentwake.trust.outbound import check_url

        check_url(self.url, policy, what=f"provider {id} base_url", resolve=False)  # OutboundRefused

    def __repr__(self) -> str:  # never the key
        return f"OpenAICompatProvider(id={self.id!r}, url={self.url!r}, model={self.model!r})"

    @classmethod
    def from_spec(cls, spec: OpenAISpec) -> OpenAICompatProvider:
        """Build from an ``OpenAISpec``. The key is resolved at call time (Powertools caches it)."""
        return cls(
            id=spec.id,
            base_url=spec.base_url,
            model=spec.model,
            api_key_ref=spec.api_key_ref,
            max_tokens=spec.max_tokens,
            temperature=spec.temperature,
        )

    def _key(self) -> str | None:
        """The API key, or None for endpoints without auth. A reference that does not resolve is a
        ConfigError; resolving per call lets a rotated secret take effect without a cold start."""
        if self._api_key is not None:
            return self._api_key
        if self._api_key_ref:
            return resolve_secret(self._api_key_ref, self._environ)
        return None

    def build_body(self, request: ChatRequest) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": [_message(m) for m in request.messages]}
        if request.tools:
            body["tools"] = [_tool(t) for t in request.tools]
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        if self.temperature is not None:
            body["temperature"] = self.temperature
        return body

    def complete(self, request: ChatRequest) -> ModelReply:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        key = self._key()
        if key:
            headers["Authorization"] = f"Bearer {key}"
        data = json.dumps(self.build_body(request)).encode("utf-8")
        response = self._send(data, headers, request.timeout)
        raw = response.body
        if response.status >= 300:
            raise _http_error(response)
        if response.truncated:
            raise TransientProviderError(
                f"the answer is larger than {MAX_RESPONSE_BYTES} bytes", code="MalformedOutput"
            )
        try:
            payload = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise TransientProviderError(f"response body is not JSON: {_snippet(raw)}", code="MalformedOutput") from exc
        return self.parse_reply(payload, request.step)

    def _send(self, data: bytes, headers: dict[str, str], timeout: float) -> HttpResponse:
        from agentwake.trust import outbound

        try:
            return outbound.http_exchange(
                "POST",
                self.url,
                headers=headers,
                body=data,
                deadline=time.monotonic() + max(0.0, timeout),
                policy=self._policy,
                max_response_bytes=MAX_RESPONSE_BYTES,
                what=f"provider {self.id} base_url",
            )
        except outbound.ExchangeTimeout as exc:  # its own timeout (the run's deadline: DeadlineExceeded)
            raise TransientProviderError(f"no answer within {timeout:.1f}s", code="Timeout") from exc
        except outbound.ExchangeError as exc:
            raise TransientProviderError(f"{exc}", code="ConnectionError") from exc

    def parse_reply(self, payload: Any, step: int = 0) -> ModelReply:
        """``choices[0].message`` → ModelReply. A body without it is malformed output (transient)."""
        try:
            choice = payload["choices"][0]
            message = choice["message"]
            if not isinstance(message, dict):
                raise TypeError("message is not an object")
        except (KeyError, IndexError, TypeError) as exc:
            detail = _error_text(payload) if isinstance(payload, dict) else ""
            raise TransientProviderError(
                "response has no choices[0].message" + (f": {detail}" if detail else ""),
                code="MalformedOutput",
            ) from exc
        finish_reason = choice.get("finish_reason")
        if finish_reason == "content_filter":
            raise PermanentProviderError("the reply was blocked by a content filter", code="ContentFiltered")
        raw_calls = message.get("tool_calls") or []
        if not isinstance(raw_calls, list):
            raise TransientProviderError(
                f"message.tool_calls is not a list but {type(raw_calls).__name__}", code="MalformedOutput"
            )
        calls: list[ToolCall] = []
        for i, raw_call in enumerate(raw_calls):
            if i % DEADLINE_CHECK_EVERY == 0:  # the runner caps the calls; reading them ends by the deadline
                check_deadline(f"reading the {len(raw_calls):,} tool calls of provider {self.id}'s reply")
            calls.append(_tool_call(raw_call, step, i))
        return ModelReply(
            text=_text(message.get("content")),
            tool_calls=tuple(calls),
            truncated=finish_reason == "length",
            provider_id=self.id,
            usage=_usage(payload, self.model),
        )


# --- request mapping -------------------------------------------------------------------------


def _message(m: Message) -> dict[str, Any]:
    if m.role == "tool":
        return {"role": "tool", "tool_call_id": m.tool_call_id or "", "content": m.content}
    if m.role == "assistant" and m.tool_calls:
        return {
            "role": "assistant",
            "content": m.content or None,
            "tool_calls": [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name or MISSING_TOOL_NAME, "arguments": c.arguments},
                }
                for c in m.tool_calls
            ],
        }
    return {"role": m.role, "content": m.content}


def _tool(t: ToolSpec) -> dict[str, Any]:
    return {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}


# --- response mapping ------------------------------------------------------------------------


def _text(content: Any) -> str:
    """``content`` is a string, null (tool calls only), or on some servers a list of text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text") or "" for p in content if isinstance(p, dict))
    return str(content)


def _tool_call(raw: Any, step: int, index: int) -> ToolCall:
    """Keep what the model produced, malformed or not: the tool registry turns it into ``error:``."""
    raw = raw if isinstance(raw, dict) else {}
    function = raw.get("function") if isinstance(raw.get("function"), dict) else {}
    name = function.get("name") or None
    arguments = function.get("arguments")
    if arguments is None:
        arguments = "{}"
    elif not isinstance(arguments, str):  # some servers send an object instead of JSON text
        try:
            arguments = json.dumps(arguments)
        except (ValueError, TypeError, RecursionError):
            arguments = UNENCODABLE_ARGUMENTS  # not JSON: the registry answers with an error: result
    return ToolCall(id=str(raw.get("id") or f"call_{step}_{index}"), name=name, arguments=arguments)


def _usage(payload: dict[str, Any], model: str) -> Usage | None:
    """``usage.prompt_tokens``/``completion_tokens``; None when the server sent no usage."""
    usage = payload.get("usage")
    if not isinstance(usage, dict):
        return None
    answered_by = payload.get("model")
    return Usage(
        input_tokens=_count(usage.get("prompt_tokens")),
        output_tokens=_count(usage.get("completion_tokens")),
        model=answered_by if isinstance(answered_by, str) and answered_by else model,
    )


def _count(value: Any) -> int:
    """A token count as the server gave it; anything that is not a non-negative integer is 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


# --- errors ----------------------------------------------------------------------------------


def _http_error(response: HttpResponse) -> TransientProviderError | PermanentProviderError:
    status = response.status
    if 300 <= status < 400:
        return PermanentProviderError(
            f"HTTP {status}: redirects are not followed (Location: {_snippet(response.headers.get('location', ''))})",
            code=f"HTTP{status}",
        )
    body = response.body
    try:
        detail = _error_text(json.loads(body))
    except (ValueError, RecursionError):
        detail = ""
    detail = _snippet(detail or body or response.reason or "")
    message = f"HTTP {status}" + (f": {detail}" if detail else "")
    if status >= 500 or status in _TRANSIENT_4XX:
        return TransientProviderError(message, code=f"HTTP{status}")
    return PermanentProviderError(message, code=f"HTTP{status}")


def _error_text(payload: Any) -> str:
    """The server's error message from ``{"error": {"message": ...}}``, ``{"error": "..."}`` or similar."""
    if not isinstance(payload, dict):
        return ""
    error = payload.get("error", payload.get("detail", payload.get("message")))
    if isinstance(error, dict):
        error = error.get("message") or error.get("code") or json.dumps(error)
    return "" if error is None else str(error)


def _snippet(text: str | bytes) -> str:
    """Short, one-line, redacted (before it is cut, so no half secret survives)."""
    if isinstance(text, bytes):
        text = text[: MAX_ERROR_TEXT * 64].decode("utf-8", errors="replace")
    text = redact(" ".join(str(text)[: MAX_ERROR_TEXT * 64].split()))
    return text if len(text) <= MAX_ERROR_TEXT else text[: MAX_ERROR_TEXT - 3] + "..."
