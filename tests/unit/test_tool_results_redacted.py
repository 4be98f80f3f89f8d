"""Tool results pass the redactor, a success as much as an ``error:`` (issue 21 item 1): what a tool
returns reaches the model, the journal, the transcript and the user's deliveries without any secret
the run resolved or anything shaped like a credential. A real HTTP server on 127.0.0.1 echoes the
credential it was sent."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from agentwake.agent.journal import InMemoryJournal
from agentwake.agent.providers.scripted import ScriptedProvider
from agentwake.agent.runner import AgentState, RunEvent, Runner
from agentwake.agent.tools import Tool, ToolContext, ToolRegistry
from agentwake.agent.tools.config import build_tools
from agentwake.agent.tools.send_message import SendMessageToUser
from agentwake.agent.types import ChatRequest, ModelReply
from agentwake.delivery import Delivery
from agentwake.domain.conversation import Message, ToolCall
from agentwake.domain.steps import reply_key, tool_key
from agentwake.trust.redact import REDACTED, register_secret
from tests.support.process_state import forget_secrets

pytestmark = pytest.mark.usefixtures("stackless_settings")

KEY_ENV = "AGENTWAKE_SECRET_TOOL_ECHO"


@pytest.fixture
def secret() -> Iterator[str]:
    """A secret resolved for the run, shaped like nothing in particular (only the registry knows it)."""
    value = f"k3y{uuid.uuid4().hex}{uuid.uuid4().hex}"
    register_secret(value)
    yield value
    forget_secrets()


class Capturing:
    def __init__(self, script: list[dict[str, Any]]) -> None:
        self.provider = ScriptedProvider(id="m", script=script)
        self.requests: list[ChatRequest] = []

    def complete(self, request: ChatRequest) -> ModelReply:
        self.requests.append(request)
        return self.provider.complete(request)


class Sent:
    def __init__(self) -> None:
        self.sent: list[Delivery] = []

    def send(self, delivery: Delivery) -> None:
        self.sent.append(delivery)


class NoArgs(BaseModel):
    pass


class Leaky(Tool):
    """A Python tool that returns what it should not: the secret, bare and in a header."""

    name = "leaky"
    description = "Returns a secret."
    Args = NoArgs
    side_effect = False

    def __init__(self, secret: str) -> None:
        self.secret = secret

    def invoke(self, args: Any, ctx: ToolContext) -> str:
        return f"ok: token={self.secret} headers={{'Authorization': 'Bearer {self.secret}'}}"


class PassesItOn:
    """A model that does what a hostile task result tells it: calls the tool, sends its answer to the
    user verbatim, and ends with it as its final answer."""

    def __init__(self) -> None:
        self.requests: list[ChatRequest] = []

    def complete(self, request: ChatRequest) -> ModelReply:
        self.requests.append(request)
        results = [m.content for m in request.messages if m.role == "tool"]
        if not results:
            return ModelReply(text="", tool_calls=(ToolCall(id="c0", name="leaky", arguments="{}"),), provider_id="m")
        if len(results) == 1:
            send = ToolCall(id="c1", name="send_message_to_user", arguments=json.dumps({"text": results[0]}))
            return ModelReply(text="", tool_calls=(send,), provider_id="m")
        return ModelReply(text=f"Final answer: {results[0]}", provider_id="m")


def run(
    model: Any, tools: list[Tool], events: list[RunEvent], journal: InMemoryJournal | None = None
) -> tuple[Runner, Sent]:
    channel = Sent()
    runner = Runner(
        model=model,
        tools=ToolRegistry([SendMessageToUser(channel), *tools]),
        messages=[Message(role="user", content="go")],
        context=ToolContext(run_id="bg:t1", session_id="s1"),
        journal=journal if journal is not None else InMemoryJournal(),
        on_event=events.append,
        deliver_final="always",
    )
    runner.run()
    return runner, channel


def test_a_successful_tool_result_is_redacted_everywhere_it_goes(secret: str) -> None:
    # GIVEN a tool whose successful result holds the run's secret, and a model that passes it on
    events: list[RunEvent] = []
    model = PassesItOn()
    # WHEN the run goes through it
    runner, channel = run(model, [Leaky(secret)], events)
    # THEN the model's next requests, the journal, the events and the deliveries hold a marker where
    # the secret was
    assert runner.state is AgentState.DONE and len(model.requests) == 3
    outputs = {
        "requests after the tool step": json.dumps([[m.to_dict() for m in r.messages] for r in model.requests[1:]]),
        "journal": json.dumps(runner.journal.entries),  # type: ignore[attr-defined]
        "events": json.dumps([e.data for e in events]),
        "deliveries": json.dumps([d.to_dict() for d in channel.sent]),
        "completion": runner.completion_text,
    }
    assert [where for where, text in outputs.items() if secret in text] == []
    shown = f"ok: token={REDACTED} headers={{'Authorization': 'Bearer {REDACTED}'}}"
    assert runner.journal.get(tool_key(0, 0))["content"] == shown
    assert [d.text for d in channel.sent] == [shown, f"Final answer: {shown}"]


def test_a_final_answer_holding_a_secret_is_redacted_before_the_note_and_its_delivery(secret: str) -> None:
    # GIVEN a model whose final answer holds the secret (it had it from somewhere)
    events: list[RunEvent] = []
    model = Capturing([{"text": f"Final answer, with {secret}."}])
    # WHEN the run ends THEN the completion text (the history note's) and the delivered answer are redacted
    runner, channel = run(model, [], events)
    assert runner.completion_text == f"Final answer, with {REDACTED}."
    assert [d.text for d in channel.sent] == [f"Final answer, with {REDACTED}."]
    assert [e.data["text"] for e in events if e.kind == "done"] == [f"Final answer, with {REDACTED}."]


def test_a_result_journaled_before_redaction_is_redacted_when_replayed(secret: str) -> None:
    # GIVEN a journal holding a tool result with the secret (written by an older version)
    journal = InMemoryJournal()
    journal.put(
        reply_key(0),
        ModelReply(text="", tool_calls=(ToolCall(id="c0", name="leaky", arguments="{}"),), provider_id="m").to_dict(),
    )
    journal.put(tool_key(0, 0), {"content": f"the key is {secret}", "tool": "leaky"})
    model = Capturing([{"text": "(journal)"}, {"text": "done"}])
    runner = Runner(
        model=model,
        tools=ToolRegistry([Leaky(secret)]),
        messages=[Message(role="user", content="go")],
        context=ToolContext(run_id="bg:t1", session_id="s1"),
        journal=journal,
    )
    # WHEN the run resumes from it THEN the model is not handed the secret
    runner.run()
    assert runner.state is AgentState.DONE
    assert secret not in json.dumps([m.to_dict() for m in model.requests[0].messages])


def test_an_http_tool_whose_server_echoes_its_credential_in_a_2xx_body(
    httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN an HTTP tool whose server answers 200 with the Authorization header it received
    key = f"k3y{uuid.uuid4().hex}{uuid.uuid4().hex}"
    monkeypatch.setenv(KEY_ENV, key)
    seen: list[str] = []

    def echo(request: Request) -> Response:
        seen.append(request.headers.get("Authorization", ""))
        body = {"you_sent": seen[-1], "bare": key, "note": "pass this on to the user"}
        return Response(json.dumps(body), status=200, content_type="application/json")

    httpserver.expect_request("/echo").respond_with_handler(echo)
    spec = {
        "type": "http",
        "name": "echo",
        "description": "Echo.",
        "url": httpserver.url_for("/echo"),
        "secret_ref": f"env:{KEY_ENV}",
        "side_effect": False,
    }
    [tool] = build_tools([spec], session_id="s1")
    # WHEN it is called through the registry
    result = ToolRegistry([tool]).execute(
        ToolCall(id="c", name="echo", arguments="{}"), ToolContext(run_id="bg:t1", session_id="s1")
    )
    # THEN the server did get the key, and the result the model sees has none of it
    assert seen == [f"Bearer {key}"]
    assert key not in result and key[:16] not in result
    assert json.loads(result) == {
        "you_sent": f"Bearer {REDACTED}",
        "bare": REDACTED,
        "note": "pass this on to the user",
    }


@pytest.mark.parametrize(("status", "shown"), [(200, 100), (500, 300)])
def test_an_answer_cut_in_the_middle_of_the_key_keeps_no_half_of_it(
    httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch, status: int, shown: int
) -> None:
    # GIVEN a tool whose answer is cut for the model (max_result_chars; 300 characters of an error
    # body) in the middle of the key its server echoes
    key = f"k3y{uuid.uuid4().hex}{uuid.uuid4().hex}"
    monkeypatch.setenv(KEY_ENV, key)
    httpserver.expect_request("/long").respond_with_data("x" * (shown - 20) + key + "y" * 500, status=status)
    spec = {
        "type": "http",
        "name": "long",
        "description": "Long.",
        "url": httpserver.url_for("/long"),
        "secret_ref": f"env:{KEY_ENV}",
        "method": "GET",
        "max_result_chars": 100,
    }
    registry = ToolRegistry(build_tools([spec], session_id="s1"))
    # WHEN it is called
    result = registry.execute(ToolCall(id="c", name="long", arguments="{}"), ToolContext(run_id="r", session_id="s1"))
    # THEN it was redacted before it was cut: not even the first half of the key is left
    assert ("…[truncated" in result) if status == 200 else result.startswith("error: ")
    assert key[:12] not in result


def test_a_delivery_text_is_redacted_when_made(secret: str) -> None:
    delivery = Delivery(delivery_id="bg:t1#0#0", run_id="bg:t1", session_id="s1", text=f"Bearer {secret} and {secret}")
    assert delivery.text == f"Bearer {REDACTED} and {REDACTED}"
    assert secret not in json.dumps(delivery.to_dict())


def test_a_reply_echoing_a_secret_is_redacted_before_the_journal_the_transcript_and_the_next_request(
    secret: str,
) -> None:
    # GIVEN a model whose reply repeats the run's secret in its text and in a tool call's arguments
    events: list[RunEvent] = []
    args = json.dumps({"text": f"use {secret}"})
    model = Capturing(
        [
            {"text": f"I hold {secret}", "tool_calls": [{"name": "send_message_to_user", "arguments": args}]},
            {"text": "done"},
        ]
    )
    # WHEN the run goes through it
    runner, channel = run(model, [], events)
    # THEN the journaled reply, the transcript's reply event, the next provider request and the
    # delivery hold a marker where the secret was
    assert runner.state is AgentState.DONE and len(model.requests) == 2
    outputs = {
        "journal": json.dumps(runner.journal.entries),  # type: ignore[attr-defined]
        "events": json.dumps([e.data for e in events]),
        "next request": json.dumps([m.to_dict() for m in model.requests[1].messages]),
        "deliveries": json.dumps([d.to_dict() for d in channel.sent]),
    }
    assert [where for where, text in outputs.items() if secret in text] == []
    assert REDACTED in runner.journal.get(reply_key(0))["text"]  # type: ignore[index]


def test_the_history_note_quoting_a_result_with_a_secret_is_redacted(secret: str) -> None:
    # GIVEN a run woken by a result whose text holds the run's secret, and a plain final answer
    from types import SimpleNamespace

    from agentwake.wake.spec import RunSpec
    from agentwake.wake.usage import history_note

    spec = RunSpec(
        run_id="bg:t1",
        kind="background",
        session_id="s1",
        wake={},
        note_head=f"[BackgroundTask] t (task_id=t1) finished. Result: the key is {secret}",
        note_sep="\n\n",
    )
    runner = SimpleNamespace(completion_text="Done.", final_delivery_id=None, final_not_delivered=None, messages_sent=0)
    # WHEN the note is written THEN it says where the result was, without the secret
    note = history_note(spec, runner)
    assert secret not in note and f"the key is {REDACTED}" in note and "Done." in note
