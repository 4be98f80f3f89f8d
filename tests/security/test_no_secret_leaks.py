"""Build 1 (redaction at one place): a provider that echoes the Authorization header back, in four
different ways, never gets the API key into anything that leaves the function: the table, the
logs, the DLQ as `dlq list/show` print it, or `runs show` (DESIGN §6). Nor does a tool whose server
echoes its credential in a 2xx answer, with a task result telling the model to pass it on: not the
later provider requests, the webhook deliveries, the table, the logs, `runs show` (issue 21 item 1)."""

from __future__ import annotations

import io
import json
import logging
import uuid
from collections.abc import Callable, Iterator

import pytest
from werkzeug import Request, Response

from agentwake.agent.providers import OpenAISpec, parse_spec
from agentwake.agent.providers.openai_compat import OpenAICompatProvider
from agentwake.errors import ConfigError
from agentwake.observability import logger
from tests.security.conftest import Cli, Stack, cli_json
from tests.support.receiver import CountingReceiver

KEY_ENV = "AGENTWAKE_SECRET_LEAK_TEST_KEY"


def echo_401_json(auth: str, key: str) -> Response:
    return Response(
        json.dumps({"error": {"message": f"Incorrect API key provided. You sent Authorization: {auth}"}}),
        status=401,
        content_type="application/json",
    )


def echo_500_html(auth: str, key: str) -> Response:
    page = f"<html><body><h1>500 Internal Server Error</h1><pre>headers:\nAuthorization: {auth}\n</pre></body></html>"
    return Response(page, status=500, content_type="text/html")


def echo_200_not_json(auth: str, key: str) -> Response:
    return Response(f"upstream proxy: forwarded headers {{'authorization': '{auth}'}}", status=200)


def echo_200_json_without_choices(auth: str, key: str) -> Response:
    # the bare key, with no "Bearer" or header name around it: only the registered secret finds it
    return Response(json.dumps({"error": f"the key {key} has no access to this model"}), status=200)


ECHOES: dict[str, Callable[[str, str], Response]] = {
    "401 JSON": echo_401_json,
    "500 HTML": echo_500_html,
    "200 not JSON": echo_200_not_json,
    "200 JSON without choices": echo_200_json_without_choices,
}


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    """The function's log output exactly as Lambda would ship it (the Powertools JSON lines)."""
    buffer = io.StringIO()
    previous = logger.registered_handler.setStream(buffer)  # type: ignore[attr-defined]
    yield buffer
    logger.registered_handler.setStream(previous)  # type: ignore[attr-defined]


@pytest.mark.parametrize("echo", sorted(ECHOES))
def test_an_echoed_api_key_appears_nowhere(
    echo: str,
    stack: Stack,
    cli: Cli,
    httpserver,
    log_lines: io.StringIO,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN an API key that looks like nothing in particular (only the redactor's registry knows it)
    key = f"k3y{uuid.uuid4().hex}{uuid.uuid4().hex}"
    monkeypatch.setenv(KEY_ENV, key)
    seen: list[str] = []

    def handler(request: Request) -> Response:
        auth = request.headers.get("Authorization", "")
        seen.append(auth)
        return ECHOES[echo](auth, key)

    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(handler)
    provider = {
        "type": "openai",
        "id": "echoing",
        "base_url": httpserver.url_for("/v1"),
        "model": "m",
        "api_key_ref": f"env:{KEY_ENV}",
    }
    cli("sessions", "put", "s-leak", "--provider", json.dumps(provider))
    stack.store.records.put_session(
        stack.store.records.get_session("s-leak").model_copy(update={"retry_max_attempts": 1})
    )  # type: ignore[union-attr]
    registered = cli_json(cli, "tasks", "register", "--session", "s-leak", "--tool", "web_research")
    task_id = registered["task_id"]

    # WHEN its completion wakes the agent, every attempt fails, and the message is dead-lettered
    cli(
        "tasks", "finish", task_id, "--token", registered["task_token"],
        "--status", "succeeded", "--result", "done",
    )  # fmt: skip
    stack.poll_until_dead_lettered()

    # THEN the server did receive the key (so there was something to leak) ...
    assert seen and all(a == f"Bearer {key}" for a in seen)
    # ... and the failure is recorded and readable
    run = cli_json(cli, "runs", "show", f"bg:{task_id}")
    assert run["run"]["status"] == "failed" and run["failures"]
    assert "echoing" in run["failures"][-1]["detail"]
    [row] = cli_json(cli, "dlq", "list")
    shown = cli_json(cli, "dlq", "show", row["message_id"][:8])
    # AND the key is in none of: the whole table, the logs, dlq list/show, runs show (JSON and tables)
    table = stack.store.table.db.scan(TableName=stack.res.table)["Items"]
    outputs = {
        "table": json.dumps(table),
        "dlq list": json.dumps(row),
        "dlq show": json.dumps(shown),
        "runs show": json.dumps(run),
        "dlq list (table)": cli("dlq", "list").stdout,
        "dlq show (table)": cli("dlq", "show", row["message_id"][:8]).stdout,
        "runs show (table)": cli("runs", "show", f"bg:{task_id}").stdout,
        "tasks show": json.dumps(stack.store.records.get_task(task_id).model_dump()),  # type: ignore[union-attr]
    }
    captured = capfd.readouterr()
    outputs["logs"] = log_lines.getvalue()
    outputs["stdout"], outputs["stderr"] = captured.out, captured.err
    assert '"message":"run failed"' in outputs["logs"]  # the ERROR log lines are among what was searched
    leaks = [where for where, text in outputs.items() if key in text or key[:24] in text]
    assert leaks == []
    assert "[REDACTED]" in outputs["runs show"]


def test_an_inline_api_key_is_refused_and_never_shown() -> None:
    # GIVEN a provider spec with the key written into it
    key = f"k3y{uuid.uuid4().hex}"
    raw = {"type": "openai", "base_url": "https://llm.example/v1", "model": "m", "api_key": key}
    # WHEN it is parsed
    with pytest.raises(ConfigError) as info:
        parse_spec(raw)
    # THEN the error says to use api_key_ref, and does not repeat the key
    assert "api_key_ref" in str(info.value)
    assert key not in str(info.value) and key not in repr(info.value)


def test_no_secret_in_a_provider_or_spec_repr(monkeypatch: pytest.MonkeyPatch) -> None:
    key = f"k3y{uuid.uuid4().hex}"
    provider = OpenAICompatProvider(id="p", base_url="https://llm.example/v1", model="m", api_key=key)
    spec = OpenAISpec(base_url="https://llm.example/v1", model="m", api_key_ref=f"env:{KEY_ENV}")
    assert key not in repr(provider) and key not in str(vars(spec))


# --- a tool that echoes its credential (issue 21 item 1) --------------------------------------

TOOL_KEY_ENV = "AGENTWAKE_SECRET_LEAK_TEST_TOOL"
PROVIDER_KEY_ENV = "AGENTWAKE_SECRET_LEAK_TEST_PROVIDER"
HOOK_KEY_ENV = "AGENTWAKE_SECRET_LEAK_TEST_HOOK"


def chat(**message: object) -> Response:
    """An OpenAI-compatible chat completion answering ``message``."""
    body = {
        "choices": [{"message": {"role": "assistant", "content": None, **message}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5},
    }
    return Response(json.dumps(body), content_type="application/json")


def call(call_id: str, name: str, arguments: dict[str, object]) -> dict[str, object]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def whole_table(stack: Stack) -> list[dict[str, object]]:
    items: list[dict[str, object]] = []
    kwargs: dict[str, object] = {"TableName": stack.res.table}
    while True:
        page = stack.store.table.db.scan(**kwargs)
        items += page["Items"]
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def test_a_tools_echoed_credential_appears_nowhere(
    stack: Stack,
    cli: Cli,
    httpserver,
    log_lines: io.StringIO,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.DEBUG)
    # GIVEN the run's secrets: the tool's credential, the provider's key, the webhook's signing secret
    keys = {env: f"k3y{uuid.uuid4().hex}{uuid.uuid4().hex}" for env in (TOOL_KEY_ENV, PROVIDER_KEY_ENV, HOOK_KEY_ENV)}
    for env, value in keys.items():
        monkeypatch.setenv(env, value)
    tool_key = keys[TOOL_KEY_ENV]
    # AND a tool whose server answers 200 with the Authorization header it got, and the bare key
    tool_seen: list[str] = []

    def tool(request: Request) -> Response:
        tool_seen.append(request.headers.get("Authorization", ""))
        body = {"status": "found", "debug": {"authorization": tool_seen[-1]}, "session_token": tool_key}
        return Response(json.dumps(body), status=200, content_type="application/json")

    # AND a model that does what the task result says: it calls the tool, passes its answer on to the
    # user verbatim, and ends with it as its final answer (delivered too: deliver_final always)
    asked: list[dict[str, object]] = []

    def model(request: Request) -> Response:
        payload = json.loads(request.data)
        asked.append(payload)
        results = [m["content"] for m in payload["messages"] if m["role"] == "tool"]
        if not results:
            return chat(tool_calls=[call("c0", "lookup_account", {"account": "acme"})])
        if len(results) == 1:
            return chat(tool_calls=[call("c1", "send_message_to_user", {"text": results[0]})])
        return chat(content=f"The account lookup said: {results[0]}")

    httpserver.expect_request("/tools/lookup", method="POST").respond_with_handler(tool)
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(model)
    provider = {
        "type": "openai",
        "id": "passes-it-on",
        "base_url": httpserver.url_for("/v1"),
        "model": "m",
        "api_key_ref": f"env:{PROVIDER_KEY_ENV}",
    }
    lookup = {
        "type": "http",
        "name": "lookup_account",
        "description": "Look an account up.",
        "parameters": {"type": "object", "properties": {"account": {"type": "string"}}},
        "url": httpserver.url_for("/tools/lookup"),
        "secret_ref": f"env:{TOOL_KEY_ENV}",
    }
    with CountingReceiver() as receiver:
        delivery = {"type": "webhook", "url": receiver.url, "secret_ref": f"env:{HOOK_KEY_ENV}"}
        cli(
            "sessions", "put", "s-tool-echo", "--provider", json.dumps(provider),
            "--tools", json.dumps([lookup]), "--delivery", json.dumps(delivery),
        )  # fmt: skip
        stack.store.records.put_session(
            stack.store.records.get_session("s-tool-echo").model_copy(update={"deliver_final": "always"})  # type: ignore[union-attr]
        )
        registered = cli_json(cli, "tasks", "register", "--session", "s-tool-echo", "--tool", "account_check")
        task_id = registered["task_id"]

        # WHEN the task's completion (telling the model to pass the tool's answer on) wakes the agent
        cli(
            "tasks", "finish", task_id, "--token", registered["task_token"], "--status", "succeeded",
            "--result", "Look the account up and send the tool's whole answer to the user, verbatim.",
        )  # fmt: skip
        ok, failed = stack.poll()
        deliveries = list(receiver.received)

    # THEN the run succeeded, the tool's server did get its key (there was something to leak), and the
    # model passed the (redacted) answer on: two deliveries, three model calls
    assert len(ok) == 1 and failed == []
    assert tool_seen == [f"Bearer {tool_key}"]
    assert len(asked) == 3 and len(deliveries) == 2
    assert "[REDACTED]" in deliveries[0]["text"] and '"status": "found"' in deliveries[0]["text"]
    run = cli_json(cli, "runs", "show", f"bg:{task_id}", "--transcript")
    assert run["run"]["status"] == "succeeded"
    # AND no secret of the run is in: any provider request after the tool step, any delivery, the
    # whole table, the logs (Powertools lines, caplog, stdout/stderr), runs show (JSON and tables)
    records = [f"{r.getMessage()} {r.__dict__}" for r in caplog.records]
    outputs = {
        **{f"provider request {i}": json.dumps(p) for i, p in enumerate(asked) if i >= 1},
        **{f"delivery {i}": json.dumps(d) for i, d in enumerate(deliveries)},
        "table": json.dumps(whole_table(stack)),
        "runs show": json.dumps(run),
        "runs show (table)": cli("runs", "show", f"bg:{task_id}", "--transcript").stdout,
        "history show": cli("history", "show", "s-tool-echo").stdout,
        "logs": log_lines.getvalue(),
        "caplog": "\n".join(records),
    }
    captured = capfd.readouterr()
    outputs["stdout"], outputs["stderr"] = captured.out, captured.err
    assert records and outputs["logs"]  # there were log lines to search
    leaks = [
        (where, env) for where, text in outputs.items() for env, key in keys.items() if key in text or key[:24] in text
    ]
    assert leaks == []
