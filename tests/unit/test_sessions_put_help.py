"""``agentwake sessions put --help`` shows an example of each delivery channel and route, the same
ones the product API's schema and docs/channels.md show, each one a spec the wake parses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from agentwake.delivery.examples import CHANNEL_EXAMPLES
from agentwake.delivery.factory import SnsSpec, parse_spec
from agentwake_ops.cli import app


def test_put_help_shows_every_channel_with_its_example() -> None:
    result = CliRunner().invoke(app, ["sessions", "put", "--help"])
    assert result.exit_code == 0, result.output
    # rich wraps and frames the text: compare it without whitespace
    shown = "".join(result.output.split())
    for name, spec in CHANNEL_EXAMPLES.items():
        assert f"{name}:--delivery'{json.dumps(spec, separators=(',', ':'))}'" in shown, name
    assert "SlackBotTokenSecretArn" in shown and "NotifyTopicPrefix" in shown


def test_every_example_is_a_spec_the_wake_parses() -> None:
    assert set(CHANNEL_EXAMPLES) == {"log", "webhook", "websocket", "slack", "telegram", "sns", "first", "each"}
    for name, spec in CHANNEL_EXAMPLES.items():
        assert parse_spec(spec).type == name  # type: ignore[union-attr]
    assert isinstance(parse_spec(CHANNEL_EXAMPLES["sns"]), SnsSpec)


def test_the_cli_shows_the_examples_without_loading_the_specs() -> None:
    # the CLI starts without pydantic: its help reads the examples as plain data
    code = "import sys, agentwake_ops.cli; print('agentwake.delivery.factory' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_docs_show_the_same_examples() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "channels.md").read_text(encoding="utf-8")
    for name, spec in CHANNEL_EXAMPLES.items():
        assert f"| `{name}` | `{json.dumps(spec, separators=(',', ':'))}` |" in doc, name
