"""Build 1 (redaction at one place): a provider that echoes the Authorization header back, in four
different ways, never gets the API key into anything that leaves the function: the table, the
logs, the DLQ as `dlq list/show` print it, or `runs show` (DESIGN §6)."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Callable, Iterator

import pytest
from werkzeug import Request, Response

from agentwake.agent.providers import OpenAISpec, parse_spec
from agentwake.agent.providers.openai_compat import OpenAICompatProvider
from agentwake.errors import ConfigError
from agentwake.observability import logger
from tests.security.conftest import Cli, Stack, cli_json

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
    stack.store.put_session(stack.store.get_session("s-leak").model_copy(update={"retry_max_attempts": 1}))  # type: ignore[union-attr]
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
    table = stack.store.db.scan(TableName=stack.res.table)["Items"]
    outputs = {
        "table": json.dumps(table),
        "dlq list": json.dumps(row),
        "dlq show": json.dumps(shown),
        "runs show": json.dumps(run),
        "dlq list (table)": cli("dlq", "list").stdout,
        "dlq show (table)": cli("dlq", "show", row["message_id"][:8]).stdout,
        "runs show (table)": cli("runs", "show", f"bg:{task_id}").stdout,
        "tasks show": json.dumps(stack.store.get_task(task_id).model_dump()),  # type: ignore[union-attr]
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
