"""A deterministic provider with no network: the embedded default for the demo and the tests.

Its script is a list of steps; the reply for step N of a run is ``script[N]`` (the last entry
repeats). A step can give text, tool calls (including malformed ones) or an error of any class,
optionally only for its first ``error_times`` attempts.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentwake.agent.bounds import DEADLINE_CHECK_EVERY, check_deadline
from agentwake.agent.types import ChatRequest, ModelReply, Usage
from agentwake.domain.conversation import ToolCall
from agentwake.errors import PermanentProviderError, TransientProviderError

ErrorClass = Literal[
    "throttling", "server", "timeout", "empty", "malformed", "auth", "validation", "not_found", "crash"
]


class ScriptToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    #: an object is sent as JSON; a string is sent verbatim (so it may be malformed JSON)
    arguments: dict[str, Any] | str = {}
    id: str | None = None


class ScriptStep(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = ""
    tool_calls: list[ScriptToolCall] = []
    error: ErrorClass | None = None
    #: fail only the first N attempts of this step, then give the reply; None means always fail
    error_times: int | None = None
    truncated: bool = False
    #: tokens this step reports; None estimates them (about 4 characters a token) so budgets and
    #: cost reports behave on the scripted provider as they would on a real one
    input_tokens: int | None = Field(default=None, ge=0)
    output_tokens: int | None = Field(default=None, ge=0)


DEFAULT_SCRIPT = [ScriptStep(text="Nothing to add.")]


class ScriptedProvider:
    def __init__(self, id: str = "scripted", script: list[ScriptStep] | list[dict[str, Any]] | None = None) -> None:
        self.id = id
        steps = [s if isinstance(s, ScriptStep) else ScriptStep.model_validate(s) for s in (script or [])]
        self.script: list[ScriptStep] = steps or list(DEFAULT_SCRIPT)
        self.calls: list[int] = []  # step index of every call made to this instance
        self._attempts: Counter[int] = Counter()
        self._ids = itertools.count(1)

    def _entry(self, step: int) -> ScriptStep:
        return self.script[min(step, len(self.script) - 1)]

    def complete(self, request: ChatRequest) -> ModelReply:
        self.calls.append(request.step)
        entry = self._entry(request.step)
        self._attempts[request.step] += 1
        if entry.error and (entry.error_times is None or self._attempts[request.step] <= entry.error_times):
            if entry.error == "empty":
                return ModelReply(text="", provider_id=self.id)
            _raise(entry.error, self.id)
        calls = []
        for i, c in enumerate(entry.tool_calls):
            if i % DEADLINE_CHECK_EVERY == 0:  # the runner caps the calls; making them ends by the deadline
                check_deadline(f"making the {len(entry.tool_calls):,} tool calls of scripted step {request.step}")
            args = c.arguments if isinstance(c.arguments, str) else json.dumps(c.arguments)
            calls.append(ToolCall(id=c.id or f"call_{request.step}_{i}", name=c.name, arguments=args))
        usage = Usage(
            input_tokens=entry.input_tokens
            if entry.input_tokens is not None
            else _estimate(sum(len(m.content) for m in request.messages)),
            output_tokens=entry.output_tokens
            if entry.output_tokens is not None
            else _estimate(len(entry.text) + sum(len(c.arguments) for c in calls)),
            model="scripted",
        )
        return ModelReply(
            text=entry.text, tool_calls=tuple(calls), truncated=entry.truncated, provider_id=self.id, usage=usage
        )


def _estimate(chars: int) -> int:
    return (chars + 3) // 4


def _raise(error: ErrorClass, provider_id: str) -> None:
    if error == "throttling":
        raise TransientProviderError("rate limit exceeded (scripted)", code="ThrottlingException")
    if error == "server":
        raise TransientProviderError("internal server error (scripted)", code="ServerError")
    if error == "timeout":
        raise TransientProviderError("the model did not answer in time (scripted)", code="Timeout")
    if error == "malformed":
        raise TransientProviderError("malformed model output (scripted)", code="MalformedOutput")
    if error == "auth":
        raise PermanentProviderError("invalid credentials (scripted)", code="AccessDenied")
    if error == "validation":
        raise PermanentProviderError("invalid request (scripted)", code="ValidationError")
    if error == "not_found":
        raise PermanentProviderError("model not found (scripted)", code="NotFound")
    if error == "crash":
        raise RuntimeError(f"scripted provider {provider_id} crashed")
    raise AssertionError(f"unhandled scripted error {error!r}")
