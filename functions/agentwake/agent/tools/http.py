"""HTTP tools declared in a session's config: validated arguments in, a bounded text result out.

A call goes through the outbound policy (``agentwake.trust.outbound``: https only, no loopback or
private targets, checked after DNS; redirects are not followed) and ends by the run's deadline. Its
credential comes from a scoped secret reference and is sent only in the configured header.

- Arguments are validated against the declared JSON Schema (fastjsonschema, compiled once); a
  call that does not match is an ``error:`` result and nothing is sent.
- A 2xx answer is the result, redacted (the tool's own credential, echoed back, never reaches the
  model), then cut at ``max_result_chars`` with a visible marker. Any other answer,
  a refused connection or a timeout of a read-only tool is an ``error:`` result the model sees.
- Side effects are declared: a ``GET`` or ``HEAD`` tool reads, any other method is side-effecting
  unless the spec says ``side_effect: false`` (``side_effect: true`` makes a GET one too). A what-if
  replay (``runs replay``, ``dlq redrive --verify``) never calls a side-effecting tool.
- A side-effecting tool's request carries ``Idempotency-Key: {run id}#{step}#{call}``, the same
  on every retry and redrive. The runner journals the result, so a retry never calls it again; if
  the outcome is uncertain (a timeout, a connection dropped after sending), the step is aborted
  unjournaled (``ToolCallUncertain``) and the retry sends the same key, which the server drops.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agentwake.agent.tools import Tool, ToolArgumentsInvalid, ToolContext
from agentwake.agent.types import ToolSpec
from agentwake.domain.approvals import check_approval
from agentwake.errors import ConfigError, StepInterrupted
from agentwake.trust.redact import redact

IDEMPOTENCY_HEADER = "Idempotency-Key"
RUN_ID_HEADER = "X-Agentwake-Run-Id"
USER_AGENT = "agentwake-tool/1"
_ERROR_BODY_CHARS = 300
TOOL_NAME = r"^[A-Za-z][A-Za-z0-9_-]{0,63}$"


class HttpToolSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["http"] = "http"
    name: str = Field(pattern=TOOL_NAME)
    description: str = Field(min_length=1, max_length=4000)
    #: JSON Schema of the arguments (an object schema); calls are validated against it
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    url: str = Field(min_length=1, max_length=2048)
    #: GET, HEAD and DELETE send the arguments as the query string, the others as a JSON body
    method: Literal["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"] = "POST"
    #: where the credential comes from (scoped like every secret reference); omit for none
    secret_ref: str | None = None
    auth_header: str = Field(default="Authorization", min_length=1, max_length=128)
    #: the header value is ``{auth_scheme} {secret}``; an empty scheme sends the secret alone
    auth_scheme: str = Field(default="Bearer", max_length=32)
    timeout: float = Field(default=10.0, gt=0, le=300)
    #: does a call change something outside? Unset: yes, unless the method is GET or HEAD
    side_effect: bool | None = None
    #: results longer than this are cut, with a marker saying how much was cut
    max_result_chars: int = Field(default=8000, ge=100, le=100_000)
    #: run as a background task: the call returns "started task T" at once, the background-work
    #: function calls the tool, and its completion wakes the agent (docs/background-work.md)
    background: bool = False
    #: a background call's task ends ``failed`` (timed out) if it has no outcome after this many
    #: seconds (None: the session's ``task_deadline_s``)
    deadline_s: int | None = Field(default=None, ge=60, le=7 * 86_400)
    #: ask a person before a call runs (``"always"`` or a rule: agentwake.domain.approvals, docs/tools.md)
    approval: str | dict[str, Any] | None = None

    _approval = field_validator("approval")(check_approval)


#: methods that only read: a tool using one has no side effect unless it says so
READ_METHODS = frozenset({"GET", "HEAD"})


def has_side_effect(spec: HttpToolSpec) -> bool:
    """The spec's ``side_effect``, or, where it is unset, whether its method can change anything."""
    return spec.side_effect if spec.side_effect is not None else spec.method not in READ_METHODS


class ToolCallUncertain(StepInterrupted):
    """A side-effecting call may have reached the server: retry the step with the same key."""


class ToolHttpError(Exception):
    """The tool's server answered, but not with 2xx (the model sees it as an ``error:`` result)."""


def cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n…[truncated {len(text) - limit} characters]"


class HttpTool(Tool):
    def __init__(self, spec: HttpToolSpec) -> None:
        import fastjsonschema

        from agentwake.trust.outbound import check_url

        self.config = spec
        self.name = spec.name
        self.description = spec.description
        self.side_effect = has_side_effect(spec)
        if spec.parameters.get("type", "object") != "object":
            raise ConfigError(f"tool {spec.name!r}: parameters must be an object schema")
        try:
            self._validate = fastjsonschema.compile(spec.parameters)
        except fastjsonschema.JsonSchemaDefinitionException as exc:
            raise ConfigError(f"tool {spec.name!r}: parameters is not a valid JSON Schema: {exc}") from exc
        check_url(spec.url, what=f"url of tool {spec.name!r}", resolve=False)  # OutboundRefused (ConfigError)

    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, parameters=self.config.parameters)

    def parse_args(self, raw: dict[str, Any]) -> Any:
        import fastjsonschema

        try:
            return self._validate(raw)
        except fastjsonschema.JsonSchemaValueException as exc:
            raise ToolArgumentsInvalid(exc.message) from exc

    def _request(self, args: dict[str, Any], ctx: ToolContext) -> tuple[str, dict[str, str], bytes | None]:
        from agentwake.trust.secrets import resolve_secret

        spec = self.config
        headers = {"User-Agent": USER_AGENT, "Accept": "application/json, text/plain", RUN_ID_HEADER: ctx.run_id}
        if self.side_effect:
            headers[IDEMPOTENCY_HEADER] = ctx.idempotency_key
        if spec.secret_ref:
            secret = resolve_secret(spec.secret_ref)
            headers[spec.auth_header] = f"{spec.auth_scheme} {secret}" if spec.auth_scheme else secret
        url, body = spec.url, None
        if spec.method in ("GET", "HEAD", "DELETE"):
            if args:
                query = urllib.parse.urlencode({k: v if isinstance(v, str) else json.dumps(v) for k, v in args.items()})
                url += ("&" if urllib.parse.urlsplit(url).query else "?") + query
        else:
            headers["Content-Type"] = "application/json"
            body = json.dumps(args, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        return url, headers, body

    def invoke(self, args: dict[str, Any], ctx: ToolContext) -> str:
        from agentwake.trust.outbound import ExchangeError, ExchangeTimeout, http_exchange, redact_url

        spec = self.config
        url, headers, body = self._request(args, ctx)
        what = f"tool {spec.name!r} ({spec.method} {redact_url(spec.url)})"
        try:
            response = http_exchange(
                spec.method,
                url,
                headers=headers,
                body=body,
                deadline=time.monotonic() + spec.timeout,
                max_response_bytes=spec.max_result_chars * 4 + 1024,
                what=f"url of tool {spec.name!r}",
            )
        except ExchangeTimeout as exc:  # the tool's timeout (the run's deadline is DeadlineExceeded)
            if self.side_effect and exc.request_sent:
                raise ToolCallUncertain(f"{what} timed out after {spec.timeout:g}s; it may have acted") from exc
            raise TimeoutError(f"{what} timed out after {spec.timeout:g}s") from exc
        except ExchangeError as exc:
            if self.side_effect and exc.request_sent:
                raise ToolCallUncertain(f"{what}: {exc}; it may have acted") from exc
            raise
        # redacted before it is cut: a secret cut in half no longer matches. (The exchange reads
        # more bytes than a result shows characters, so its own cut is never in what is shown.)
        text = redact(response.body.decode("utf-8", errors="replace"))
        if not 200 <= response.status < 300:
            raise ToolHttpError(f"HTTP {response.status} {response.reason}: {cut(text.strip(), _ERROR_BODY_CHARS)}")
        if not text:
            return f"(HTTP {response.status}, empty body)"
        text = cut(text, spec.max_result_chars)
        if response.truncated and "…[truncated" not in text:
            text += "\n…[truncated: the answer was longer]"
        return text
