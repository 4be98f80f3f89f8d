"""`agentwake local seed`: what the sample events in events/ name, on a fresh stack, idempotently."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentwake.store.dynamo import DynamoStore
from agentwake_local.cli import app
from agentwake_local.stack import LocalStackRuntime

ROOT = Path(__file__).resolve().parents[2]
EVENTS = ROOT / "events"


def test_seed_creates_what_events_name_and_leaves_what_exists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTWAKE_HOME", str(tmp_path))
    with LocalStackRuntime(home=tmp_path).start(ROOT / "template.yaml") as local:
        store = DynamoStore(local.outputs["AgentTableName"], client=local.client("dynamodb"))
        # GIVEN a fresh stack  WHEN `agentwake local seed` runs
        first = CliRunner().invoke(app, ["seed"])

        # THEN every session, task and job the event files name exists
        assert first.exit_code == 0, first.output
        named = json.dumps([json.loads(p.read_text()) for p in EVENTS.glob("*.json")])
        for session in ("session-demo", "session-failing"):
            assert session in named and store.records.get_session(session) is not None
        for task_id, session in (
            ("task-ok-1", "session-demo"),
            ("task-ok-2", "session-demo"),
            ("task-fail-1", "session-failing"),
        ):
            task = store.records.get_task(task_id)
            assert task_id in named and task is not None and task.session_id == session
        job = store.records.get_job("job-nightly")
        assert job is not None and job.session_id == "session-demo"

        # WHEN an example already ran and seeding runs again
        local.invoke("CronWakeFunction", json.loads((EVENTS / "cron-wake.json").read_text()))
        again = CliRunner().invoke(app, ["seed"])
        # THEN nothing is recreated: the job keeps what its run wrote
        assert again.exit_code == 0 and "nothing to create" in again.output
        assert store.records.get_job("job-nightly").status == "completed"  # type: ignore[union-attr]
