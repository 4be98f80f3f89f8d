"""``agentwake local ...`` / ``agentwake invoke`` (infra.local.cli) on the toy template."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from infra.local.cli import app
from infra.local.server import MotoServer
from infra.local.stack import LocalStackRuntime

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


def test_invoke_without_a_running_stack_uses_a_throwaway_one(home: Path, event_file: Path) -> None:
    # GIVEN no local stack is running
    # WHEN a function is invoked from the command line with an event file
    result = CliRunner().invoke(app, ["invoke", "InfoFunction", "-t", str(TEMPLATE), "-e", str(event_file)])

    # THEN it ran on a throwaway stack provisioned from the template, and printed the response
    assert result.exit_code == 0, result.output
    response = json.loads(result.stdout)
    assert response["function_name"] == "agentwake-local-info"
    assert response["env"]["TOY_QUEUE_URL"].endswith("/123456789012/agentwake-local-WorkQueue")
    assert not (home / "local.json").exists()


def test_invoke_async_reports_the_destination_record_and_exits_1(home: Path, event_file: Path) -> None:
    # GIVEN the always-failing async function
    # WHEN it is invoked with --async
    result = CliRunner().invoke(app, ["invoke", "AsyncFunction", "--async", "-t", str(TEMPLATE), "-e", str(event_file)])

    # THEN the retries end in the on-failure record, and the exit status says it failed
    assert result.exit_code == 1
    outcome = json.loads(result.stdout)
    assert (outcome["condition"], outcome["approximateInvokeCount"]) == ("RetriesExhausted", 3)
    assert outcome["record"]["requestPayload"] == {"job_id": "cli-job", "sleep": 0}


def test_status_env_and_invoke_use_the_running_stack(home: Path, event_file: Path) -> None:
    # GIVEN a running local stack (as `agentwake local up` leaves it)
    with MotoServer() as server:
        server.reset()
        with LocalStackRuntime().start(TEMPLATE, server=server) as running:
            runner = CliRunner()

            # WHEN asking for its status, its env.json for Docker, and invoking a function
            status = runner.invoke(app, ["status"])
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
