"""Locally, the deployed outbound policy can be tried (issue 21, item 11; docs/local.md).

The local stack lets its functions reach loopback over plain http (``LOCAL_OUTBOUND_ENV``). A
function environment given with ``agentwake invoke --env-vars`` wins over those allowances, as
``sam local invoke --env-vars`` wins over the template, and ``--deployed-outbound`` (on
``agentwake local up`` and ``agentwake invoke``) drops them: the functions then run with the
template's own ``AGENTWAKE_OUTBOUND_ALLOW_*=false``, and a webhook on 127.0.0.1 is refused.
"""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentwake.store.dynamo import DynamoStore
from agentwake_local.stack import LOCAL_OUTBOUND_ENV, LocalStackRuntime, read_state
from agentwake_ops.cli import app
from tests.security.servers import RawServer
from tests.support.builders import local_stack_rules, seed_job, seed_session
from tests.support.outbound import DEPLOYED_OUTBOUND_ENV

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"
SCHEDULED_TIME = "2026-11-30T06:00:00Z"
LOOPBACK = "AGENTWAKE_OUTBOUND_ALLOW_LOOPBACK"
HTTP = "AGENTWAKE_OUTBOUND_ALLOW_HTTP"


class Receiver(RawServer):
    """A webhook receiver on 127.0.0.1 that answers 200 and records every request."""

    def behave(self, conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("agentwake-home")


@pytest.fixture(scope="module")
def local(home: Path) -> Iterator[LocalStackRuntime]:
    """template.yaml on a fresh moto server, as `agentwake local up` runs it (local allowances on)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AGENTWAKE_HOME", str(home))
        runtime = LocalStackRuntime(async_retry_delays=0, home=home)
        runtime.start(TEMPLATE, visibility_timeout_override=0)
        try:
            yield runtime
        finally:
            runtime.stop()


@pytest.fixture(autouse=True)
def agentwake_home(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTWAKE_HOME", str(home))  # `agentwake invoke` finds the module's stack


@pytest.fixture(scope="module")
def store(local: LocalStackRuntime) -> DynamoStore:
    return DynamoStore(local.outputs["AgentTableName"], client=local.client("dynamodb"))


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as server:
        yield server


def webhook_job(store: DynamoStore, receiver: Receiver) -> str:
    """A job whose session tells the user through a webhook on 127.0.0.1 over plain http; its id."""
    session = f"s-{uuid.uuid4().hex[:8]}"
    script = [
        {"tool_calls": [{"name": "send_message_to_user", "arguments": {"text": "The report is ready."}}]},
        {"text": "I told the user."},
    ]
    seed_session(
        store,
        session,
        [{"type": "scripted", "id": "scripted", "script": script}],
        delivery={"type": "webhook", "url": f"http://127.0.0.1:{receiver.port}/hook"},
        # written as the default local stack accepts it: the deployed policy refuses it at the wake
        rules=local_stack_rules(),
    )
    job_id = f"job-{session}"
    seed_job(store, job_id, session)
    return job_id


def invoke_cron(tmp_path: Path, job_id: str, *options: str) -> tuple[int, Any]:
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"job_id": job_id, "scheduled_time": SCHEDULED_TIME}))
    result = CliRunner().invoke(app, ["invoke", "CronWakeFunction", "-e", str(event), *options])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.exit_code, json.loads(result.stdout)


def env_file(tmp_path: Path, variables: dict[str, str]) -> Path:
    path = tmp_path / "env.json"
    path.write_text(json.dumps({"CronWakeFunction": variables}))
    return path


def test_by_default_the_local_stack_lets_a_webhook_on_loopback_over_http_through(
    local: LocalStackRuntime, store: DynamoStore, receiver: Receiver, tmp_path: Path
) -> None:
    # GIVEN a job whose session's webhook is http://127.0.0.1:PORT (the local allowances are on)
    job_id = webhook_job(store, receiver)
    # WHEN it is invoked without an env file
    code, response = invoke_cron(tmp_path, job_id)
    # THEN the run succeeded and the receiver got the delivery
    assert code == 0, response
    assert response["status"] == "succeeded"
    assert len(receiver.requests) == 1


@pytest.mark.parametrize(
    ("variables", "reason"),
    [
        (DEPLOYED_OUTBOUND_ENV, "plain http is not allowed"),
        ({HTTP: "true", LOOPBACK: "false"}, "loopback"),
        ({HTTP: "false"}, "plain http is not allowed"),
    ],
    ids=["both-false", "loopback-false", "http-false"],
)
def test_an_env_file_with_the_deployed_policy_refuses_the_webhook_before_anything_is_sent(
    local: LocalStackRuntime,
    store: DynamoStore,
    receiver: Receiver,
    tmp_path: Path,
    variables: dict[str, str],
    reason: str,
) -> None:
    # GIVEN the same kind of job, and an env file (sam's --env-vars shape) turning allowances off
    job_id = webhook_job(store, receiver)
    # WHEN it is invoked with --env-vars
    code, response = invoke_cron(tmp_path, job_id, "--env-vars", str(env_file(tmp_path, variables)))
    # THEN the run failed with the outbound refusal, and the receiver saw no connection at all
    assert code == 1, response
    assert "refused" in response["errorMessage"] and reason in response["errorMessage"], response
    assert receiver.connections == 0
    job = store.records.get_job(job_id)
    assert job is not None and job.status == "failed" and "refused" in (job.last_error or "")


def test_invoke_with_deployed_outbound_refuses_the_webhook(
    local: LocalStackRuntime, store: DynamoStore, receiver: Receiver, tmp_path: Path
) -> None:
    # GIVEN the job  WHEN it is invoked with --deployed-outbound (no env file)
    job_id = webhook_job(store, receiver)
    code, response = invoke_cron(tmp_path, job_id, "--deployed-outbound")
    # THEN the template's own policy applied: refused, nothing sent
    assert code == 1, response
    assert "refused" in response["errorMessage"]
    assert receiver.connections == 0


def test_a_stack_up_with_deployed_outbound_gives_every_function_the_templates_policy(
    local: LocalStackRuntime, home: Path
) -> None:
    # GIVEN the default stack: its functions get the local allowances over the template's values
    assert {k: local.function_env("CronWakeFunction")[k] for k in LOCAL_OUTBOUND_ENV} == LOCAL_OUTBOUND_ENV
    # WHEN a process attaches to a stack recorded as `agentwake local up --deployed-outbound`
    state = read_state(home)
    assert state is not None and state["deployed_outbound"] is False
    strict = LocalStackRuntime.attach(home, state={**state, "deployed_outbound": True})
    # THEN every function keeps the template's AGENTWAKE_OUTBOUND_ALLOW_*=false, env.json included
    env_json = strict.env_json()
    assert set(env_json) == set(strict.functions) >= {"BackgroundResultFunction", "CronWakeFunction"}
    for logical_id in strict.functions:
        env = strict.function_env(logical_id)
        assert {k: env[k] for k in DEPLOYED_OUTBOUND_ENV} == DEPLOYED_OUTBOUND_ENV
        assert {k: env_json[logical_id][k] for k in DEPLOYED_OUTBOUND_ENV} == DEPLOYED_OUTBOUND_ENV


def test_local_up_offers_the_deployed_outbound_flag() -> None:
    from agentwake_local.cli import app as local_app

    result = CliRunner().invoke(local_app, ["up", "--help"])
    assert result.exit_code == 0 and "--deployed-outbound" in result.output
