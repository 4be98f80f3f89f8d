"""Issue 21, items 9 and 10: no provider, no run; a session config is checked when it is written.

A config its wake could never run (no providers, a secret outside the stack's scope, a URL the
outbound policy refuses) is refused by ``agentwake sessions put`` (exit 1, one ``error:`` line) and
by the store's ``put_session`` (ConfigError), with the message the wake itself would give; nothing
is stored. A config without providers that an older version stored fails its wake with a
ConfigError naming the fix, and never runs the scripted provider.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from agentwake.domain.models import SessionConfig
from agentwake.errors import ConfigError
from agentwake.store.keys import config_key
from tests.security.conftest import Cli, Stack
from tests.security.wake import completion_body, handle
from tests.support.builders import SCRIPTED, SCRIPTED_ARGS, session_config

HTTPS_LLM = "https://llm.example.com/v1"


def _resolve(ref: str) -> None:
    from agentwake.trust.secrets import resolve_secret

    resolve_secret(ref, {})


def _provider(spec: dict[str, Any]) -> None:
    from agentwake.agent.providers import build_provider

    build_provider(spec)


def _webhook(spec: dict[str, Any]) -> None:
    from agentwake.delivery.factory import build_channel

    build_channel(spec)


def _tools(specs: list[dict[str, Any]]) -> None:
    from agentwake.agent.tools.config import build_tools

    build_tools(specs)


@dataclass
class Bad:
    """A config that can never run: how it is given to the CLI and the store, and the wake's own
    refusal of it (the check the wake makes, called as the wake calls it)."""

    fields: dict[str, Any]
    wake: Callable[[], None]
    #: checked against the deployed template's outbound policy (https only, no loopback)
    deployed: bool = False
    shown: list[str] = field(default_factory=list)

    def cli_args(self) -> list[str]:
        args: list[str] = []
        for spec in self.fields.get("providers", SCRIPTED):
            args += ["--provider", json.dumps(spec)]
        if "delivery" in self.fields:
            args += ["--delivery", json.dumps(self.fields["delivery"])]
        if "tools" in self.fields:
            args += ["--tools", json.dumps(self.fields["tools"])]
        return args


def _openai(**kw: Any) -> dict[str, Any]:
    return {"type": "openai", "base_url": HTTPS_LLM, "model": "m", **kw}


def _tool(**kw: Any) -> dict[str, Any]:
    return {"type": "http", "name": "lookup", "description": "look up", "url": "https://tools.example.com/x", **kw}


def _ref_case(ref: str, where: str) -> Bad:
    if where == "provider":
        fields: dict[str, Any] = {"providers": [_openai(api_key_ref=ref)]}
    elif where == "webhook":
        fields = {"delivery": {"type": "webhook", "url": "https://hooks.example.com/a", "secret_ref": ref}}
    else:
        fields = {"tools": [_tool(secret_ref=ref)]}
    return Bad(fields, lambda: _resolve(ref), shown=["is refused", ref])


BAD: dict[str, Bad] = {
    # secret references outside the stack's scope (the same on every stack)
    "env ref outside AGENTWAKE_SECRET_": _ref_case("env:AWS_SECRET_ACCESS_KEY", "provider"),
    "secretsmanager outside SecretsPrefix": _ref_case("secretsmanager:other/llm-key", "provider"),
    "secretsmanager with ..": _ref_case("secretsmanager:agentwake/../other/llm-key", "provider"),
    "ssm outside SsmPathPrefix": _ref_case("ssm:/other/llm-key", "provider"),
    "ssm with ..": _ref_case("ssm:/agentwake/../other/llm-key", "provider"),
    "webhook secret outside the scope": _ref_case("env:AWS_SECRET_ACCESS_KEY", "webhook"),
    "tool secret outside the scope": _ref_case("ssm:/other/tool-key", "tool"),
    # URLs the outbound policy refuses without DNS: link-local on every stack ...
    "webhook to instance metadata": Bad(
        {"delivery": {"type": "webhook", "url": "http://169.254.169.254/latest/meta-data/"}},
        lambda: _webhook({"type": "webhook", "url": "http://169.254.169.254/latest/meta-data/"}),
        shown=["webhook url", "link-local"],
    ),
    "tool to instance metadata": Bad(
        {"tools": [_tool(url="https://169.254.169.254/x")]},
        lambda: _tools([_tool(url="https://169.254.169.254/x")]),
        shown=["url of tool 'lookup'", "link-local"],
    ),
    # ... and numeric loopback hosts where the deployed template's policy applies
    "webhook to numeric loopback": Bad(
        {"delivery": {"type": "webhook", "url": "https://2130706433:8443/hook"}},
        lambda: _webhook({"type": "webhook", "url": "https://2130706433:8443/hook"}),
        deployed=True,
        shown=["webhook url", "loopback"],
    ),
    "webhook to 127.1": Bad(
        {"delivery": {"type": "webhook", "url": "https://127.1/hook"}},
        lambda: _webhook({"type": "webhook", "url": "https://127.1/hook"}),
        deployed=True,
        shown=["webhook url", "loopback"],
    ),
    "provider at a numeric host": Bad(
        {"providers": [_openai(base_url="http://2130706433:11434/v1")]},
        lambda: _provider(_openai(base_url="http://2130706433:11434/v1")),
        deployed=True,
        shown=["base_url", "is refused"],
    ),
    "provider at 0x7f000001 over https": Bad(
        {"providers": [_openai(base_url="https://0x7f000001/v1")]},
        lambda: _provider(_openai(base_url="https://0x7f000001/v1")),
        deployed=True,
        shown=["base_url", "loopback"],
    ),
}


def wake_message(bad: Bad) -> str:
    with pytest.raises(ConfigError) as refused:
        bad.wake()
    return str(refused.value)


@pytest.mark.parametrize("name", list(BAD))
def test_a_config_that_can_never_run_is_refused_by_sessions_put(
    name: str, stack: Stack, cli: Cli, request: pytest.FixtureRequest
) -> None:
    # GIVEN a config its wake would refuse (on the deployed policy where the case says so)
    bad = BAD[name]
    if bad.deployed:
        request.getfixturevalue("deployed_outbound_policy")
    # WHEN an operator puts it
    result = cli("sessions", "put", "s-bad", *bad.cli_args(), expect=1)
    # THEN it is refused with one line: the wake's own message
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr == f"error: {wake_message(bad)}\n"
    for part in bad.shown:
        assert part in result.stderr
    # AND nothing was stored
    assert stack.store.records.get_session("s-bad") is None


@pytest.mark.parametrize("name", list(BAD))
def test_a_config_that_can_never_run_is_refused_by_put_session(
    name: str, stack: Stack, request: pytest.FixtureRequest
) -> None:
    bad = BAD[name]
    if bad.deployed:
        request.getfixturevalue("deployed_outbound_policy")
    config = session_config("s-bad", **{"providers": SCRIPTED, **bad.fields})
    with pytest.raises(ConfigError) as refused:
        stack.store.records.put_session(config)
    assert str(refused.value) == wake_message(bad)
    assert stack.store.records.get_session("s-bad") is None


def test_the_local_policy_still_takes_a_loopback_webhook(stack: Stack, cli: Cli) -> None:
    # GIVEN the local stack's policy (loopback and plain http allowed): the same URL is accepted
    spec = {"type": "webhook", "url": "http://2130706433:8080/hook"}
    shown = json.loads(cli("sessions", "put", "s-ok", *SCRIPTED_ARGS, "--delivery", json.dumps(spec), "--json").stdout)
    assert shown["delivery"] == spec


def test_sessions_put_checks_by_the_stacks_own_prefixes(
    stack: Stack, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a stack whose SsmPathPrefix is /team-a/ (the functions' AGENTWAKE_SSM_PATH_PREFIX)
    monkeypatch.setenv("AGENTWAKE_SSM_PATH_PREFIX", "/team-a/")
    ok = _openai(api_key_ref="ssm:/team-a/llm-key")
    # THEN a reference under it is accepted and one under the default prefix is refused
    cli("sessions", "put", "s-team", "--provider", json.dumps(ok))
    result = cli(
        "sessions", "put", "s-team2", "--provider", json.dumps(_openai(api_key_ref="ssm:/agentwake/k")), expect=1
    )
    assert "'/team-a/'" in result.stderr and stack.store.records.get_session("s-team2") is None


# --- item 9: no provider, no run ---------------------------------------------------------------


def test_a_new_session_without_providers_is_refused_with_the_command_that_shows_an_example(
    stack: Stack, cli: Cli
) -> None:
    result = cli("sessions", "put", "s-none", "--persona", "terse", expect=1)
    assert result.stderr.count("\n") == 1, result.stderr
    assert "s-none names no providers" in result.stderr
    assert "agentwake sessions put --help" in result.stderr
    assert stack.store.records.get_session("s-none") is None
    # AND the command it names shows an example that names providers
    shown = " ".join(cli("sessions", "put", "--help").stdout.split())  # as one line, however rich wraps it
    assert '--provider \'{"type":"bedrock"' in shown
    assert "api_key_ref" in shown


def test_an_existing_session_keeps_its_providers_when_other_fields_change(stack: Stack, cli: Cli) -> None:
    cli("sessions", "put", "s-upd", *SCRIPTED_ARGS)
    cli("sessions", "put", "s-upd", "--persona", "terse")
    config = stack.store.records.get_session("s-upd")
    assert config is not None and config.persona == "terse" and config.providers == SCRIPTED


def test_put_session_refuses_a_config_without_providers(stack: Stack) -> None:
    with pytest.raises(ConfigError, match="names no providers.*agentwake sessions put --help"):
        stack.store.records.put_session(SessionConfig(session_id="s-none"))
    assert stack.store.records.get_session("s-none") is None


def test_a_stored_config_without_providers_fails_its_wake_and_never_runs_scripted(
    stack: Stack, model_calls: Counter[str]
) -> None:
    # GIVEN a config an older version stored without providers (it then ran the scripted provider)
    item = stack.store.table.item(SessionConfig(session_id="s-old"), *config_key("s-old"))
    item.pop("providers", None)
    stack.store.table.db.put_item(TableName=stack.res.table, Item=item)
    assert stack.store.records.get_session("s-old").providers == []  # type: ignore[union-attr]
    # WHEN a background task of that session finishes
    body = completion_body(stack, "s-old")
    response = handle([body])
    # THEN the wake fails (retried, then the DLQ) with a ConfigError naming the fix
    assert response["batchItemFailures"], response
    run = stack.store.records.get_run(f"bg:{json.loads(body)['task_id']}")
    assert run is not None and run.status == "failed" and run.last_error_type == "ConfigError"
    assert "names no providers" in (run.last_error or "") and "agentwake sessions put" in (run.last_error or "")
    # AND no model answered, and the conversation has no note
    assert sum(model_calls.values()) == 0
    assert [e for e in stack.store.history.history("s-old") if e.kind == "note"] == []
