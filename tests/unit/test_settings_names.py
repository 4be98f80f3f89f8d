"""One source for configuration names: the settings model declares every AGENTWAKE_* variable, its
default and its meaning; the template, the CLI's discovery and the docs are checked against it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from agentwake.settings import Settings
from agentwake_ops.context import ENV_OUTPUTS

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def template_env() -> dict[str, Any]:
    from cfnlint.decode.cfn_yaml import loads  # CloudFormation's tags, as test_template.py reads them

    body = loads((ROOT / "template.yaml").read_text(encoding="utf-8"))
    return dict(body["Globals"]["Function"]["Environment"]["Variables"])


def test_template_sets_exactly_the_variables_the_settings_declare(template_env: dict[str, Any]) -> None:
    # GIVEN the AGENTWAKE_* variables of template.yaml's Globals and of the settings model
    in_template = {name for name in template_env if name.startswith("AGENTWAKE_")}
    declared = {name for name in Settings.env_names() if name.startswith("AGENTWAKE_")} - Settings.local_only()
    declared -= Settings.per_function()
    # THEN they are the same set: a variable added on one side only fails here
    assert in_template == declared, {"template only": in_template - declared, "settings only": declared - in_template}


def test_per_function_variables_are_set_on_a_function() -> None:
    from cfnlint.decode.cfn_yaml import loads

    body = loads((ROOT / "template.yaml").read_text(encoding="utf-8"))
    on_functions = {
        name
        for resource in body["Resources"].values()
        if resource.get("Type") == "AWS::Serverless::Function"
        for name in ((resource["Properties"].get("Environment") or {}).get("Variables") or {})
    }
    # THEN each variable the settings mark per-function is set on some function's own Environment
    assert Settings.per_function() and Settings.per_function() <= on_functions


def test_template_literal_defaults_match_the_settings_defaults(template_env: dict[str, Any]) -> None:
    # GIVEN a variable the template sets to a literal (not a !Ref)
    names = Settings.env_names()
    literals = {k: v for k, v in template_env.items() if k in names and isinstance(v, str)}
    assert literals, "expected literal defaults such as AGENTWAKE_RUN_TIMEOUT_MARGIN_MS"
    for env, value in literals.items():
        default = Settings.model_fields[names[env]].default
        # THEN it equals the model's default, so a deployed function and a local run agree
        assert str(default).lower() == value.lower(), f"{env}: template {value!r} vs settings {default!r}"


def test_cli_discovery_uses_the_runtime_names() -> None:
    # GIVEN the CLI's environment -> stack output map
    runtime = {name for name in ENV_OUTPUTS if name in Settings.env_names()}
    # THEN the runtime's own variables are all there under the settings' names
    assert {"AGENTWAKE_TABLE", "AGENTWAKE_RESULT_QUEUE_URL", "AGENTWAKE_RESULT_DLQ_URL"} <= runtime


def test_docs_list_every_variable_the_settings_declare() -> None:
    # GIVEN docs/architecture.md's environment section
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"`(AGENTWAKE_[A-Z_]+)`", text))
    declared = {name for name in Settings.env_names() if name.startswith("AGENTWAKE_")}
    # THEN each runtime variable is documented (CLI-only ones may be documented too)
    assert declared <= documented, declared - documented


def test_from_env_names_the_variable_that_is_wrong() -> None:
    from agentwake.errors import ConfigError

    # WHEN a numeric variable holds text  THEN the error names the variable, not a field
    with pytest.raises(ConfigError, match="AGENTWAKE_JOURNAL_TTL_DAYS"):
        Settings.from_env({"AGENTWAKE_TABLE": "t", "AGENTWAKE_JOURNAL_TTL_DAYS": "soon"})
    # AND a missing table says where it comes from
    with pytest.raises(ConfigError, match="AGENTWAKE_TABLE is not set"):
        Settings.from_env({})
