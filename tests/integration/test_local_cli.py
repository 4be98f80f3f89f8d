"""``agentwake local ...`` / ``agentwake invoke`` (agentwake_local.cli) on the toy template."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentwake_local.cli import app
from agentwake_local.server import MotoServer
from agentwake_local.stack import LocalStackRuntime

TOY_DIR = (Path(__file__).parent / "toy").resolve()
TEMPLATE = TOY_DIR / "template.yaml"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AGENTWAKE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def event_file(tmp_path: Path) -> Path:
    path = tmp_path / "event.json"
    path.write_text(json.dumps({"job_id": "cli-job", "sleep": 0}))
    return path


def test_invoke_without_a_running_stack_says_how_to_start_one(
    home: Path, event_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN no local stack is running and no endpoint is configured
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    # WHEN a function is invoked
    result = CliRunner().invoke(app, ["invoke", "InfoFunction", "-t", str(TEMPLATE), "-e", str(event_file)])
    # THEN it refuses, saying how to start a local stack or run on a throwaway one
    assert result.exit_code == 2
    assert "agentwake local up" in result.output and "--throwaway" in result.output


def test_invoke_unknown_function_names_the_ones_there_are(home: Path, event_file: Path) -> None:
    result = CliRunner().invoke(app, ["invoke", "Nope", "--throwaway", "-t", str(TEMPLATE), "-e", str(event_file)])
    assert result.exit_code == 2
    assert "no function 'Nope'" in result.output and "InfoFunction" in result.output


def test_invoke_throwaway_runs_on_an_empty_stack(home: Path, event_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN no local stack is running
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    env_vars = event_file.parent / "env.json"
    env_vars.write_text(json.dumps({"InfoFunction": {"TOY_QUEUE_URL": "overridden", "NOT_DECLARED": "x"}}))
    # WHEN a function is invoked with --throwaway and an env-vars file
    result = CliRunner().invoke(
        app,
        ["invoke", "InfoFunction", "--throwaway", "-t", str(TEMPLATE), "-e", str(event_file), "-n", str(env_vars)],
    )

    # THEN it ran on a throwaway stack provisioned from the template, and printed the response
    assert result.exit_code == 0, result.output
    response = json.loads(result.stdout)
    assert response["function_name"] == "agentwake-local-info"
    assert response["env"]["TOY_QUEUE_URL"] == "overridden"  # declared: overridden, as sam does
    assert "NOT_DECLARED" not in response["env"]  # undeclared: ignored, as sam does
    assert not (home / "local.json").exists()


def test_invoke_async_reports_the_destination_record_and_exits_1(home: Path, event_file: Path) -> None:
    # GIVEN the always-failing async function
    # WHEN it is invoked with --async
    result = CliRunner().invoke(
        app, ["invoke", "AsyncFunction", "--async", "--throwaway", "-t", str(TEMPLATE), "-e", str(event_file)]
    )

    # THEN the retries end in the on-failure record, and the exit status says it failed
    assert result.exit_code == 1
    outcome = json.loads(result.stdout)
    assert (outcome["condition"], outcome["approximateInvokeCount"]) == ("RetriesExhausted", 3)
    assert outcome["record"]["requestPayload"] == {"job_id": "cli-job", "sleep": 0}
    # AND stderr says, in local up's words, that each attempt failed and where the event went
    assert len([line for line in result.stderr.splitlines() if " AsyncFunction - failed: " in line]) == 3
    assert (
        " AsyncFunction - dead-lettered to " in result.stderr and "RetriesExhausted after 3 attempt(s)" in result.stderr
    )


def test_status_env_and_invoke_use_the_running_stack(home: Path, event_file: Path) -> None:
    # GIVEN a running local stack (as `agentwake local up` leaves it)
    with MotoServer() as server:
        server.reset()
        with LocalStackRuntime().start(TEMPLATE, server=server) as running:
            runner = CliRunner()

            # WHEN asking for its status, its env.json for Docker, and invoking a function
            status = runner.invoke(app, ["status", "--json"])
            env = runner.invoke(app, ["env", "--docker-host", "host.docker.internal"])
            invoked = runner.invoke(app, ["invoke", "InfoFunction", "-e", str(event_file)])

            # THEN all three talk to that stack
            assert status.exit_code == 0, status.output
            assert json.loads(status.stdout)["endpoint_url"] == running.endpoint_url
            port = running.endpoint_url.rsplit(":", 1)[-1]
            env_json = json.loads(env.stdout)
            assert env_json["InfoFunction"]["AWS_ENDPOINT_URL"] == f"http://host.docker.internal:{port}"
            assert invoked.exit_code == 0, invoked.output
            assert json.loads(invoked.stdout)["env"]["AWS_ENDPOINT_URL"] == running.endpoint_url

    # AND once it stopped, status says nothing is running
    assert CliRunner().invoke(app, ["status"]).exit_code == 1


def test_status_is_a_short_summary_a_person_reads_in_80_columns(home: Path) -> None:
    # GIVEN a running local stack whose DLQ holds a message
    with MotoServer() as server:
        server.reset()
        with LocalStackRuntime().start(TEMPLATE, server=server) as running:
            sqs = running.client("sqs")
            sqs.send_message(QueueUrl=running.stack.ref("WorkDLQ"), MessageBody="{}")
            # WHEN asking for its status
            status = CliRunner().invoke(app, ["status"], env={"COLUMNS": "80"})
    # THEN it is a short summary, not the state document
    assert status.exit_code == 0, status.output
    lines = status.stdout.splitlines()
    assert not status.stdout.lstrip().startswith("{") and len(lines) <= 25, status.stdout
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    # AND it names where the stack is, its functions, its queues and DLQs with their depths
    assert f"endpoint   {running.endpoint_url}" in status.stdout
    assert "InfoFunction" in status.stdout
    queues, dlqs = lines.index("  queues"), lines.index("  DLQs")
    assert any(line.split()[0] == "WorkQueue" and "0 visible" in line for line in lines[queues:dlqs])
    assert any(line.split()[0] == "WorkDLQ" and "1 visible" in line for line in lines[dlqs:])
    # AND what to do next: the dead-lettered message first, the whole document with --json
    assert any("agentwake dlq list" in line and "1 dead-lettered" in line for line in lines)
    assert any("agentwake local status --json" in line for line in lines)


def test_local_up_outside_the_repository_finds_a_template_or_says_how_to_point_at_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentwake_local import cli as local_cli

    elsewhere = tmp_path / "some" / "dir"
    elsewhere.mkdir(parents=True)
    # GIVEN a directory with no template.yaml in it or above it
    # WHEN the template is looked for  THEN the agentwake checkout's own is used
    assert local_cli.find_template(None, elsewhere) == Path(local_cli.__file__).resolve().parents[2] / "template.yaml"
    # AND a template.yaml in a parent directory wins over it
    (tmp_path / "template.yaml").write_text(TEMPLATE.read_text())
    assert local_cli.find_template(None, elsewhere) == tmp_path / "template.yaml"

    # GIVEN no template anywhere (an installed package, not a checkout)
    (tmp_path / "template.yaml").unlink()
    monkeypatch.setattr(local_cli, "__file__", str(tmp_path / "site-packages" / "infra" / "local" / "cli.py"))
    monkeypatch.chdir(elsewhere)
    # WHEN `agentwake local up` runs there  THEN it says how to point at one, no traceback
    result = CliRunner().invoke(app, ["up"])
    assert result.exit_code == 2
    assert "no template.yaml in" in result.output and "--template PATH" in result.output
    assert "Traceback" not in result.output
    # AND a --template that does not exist is named
    missing = CliRunner().invoke(app, ["up", "--template", str(tmp_path / "nope.yaml")])
    assert missing.exit_code == 2 and "no template at" in missing.output
