"""Tools a session declares, through the real wake on moto: a side-effecting HTTP tool is called once
per run whatever crashes and retries follow (journaled like deliveries, with a stable idempotency
key); entry-point Python tools load when a session names them; a missing one is a ConfigError."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import boto3
import pytest
from pytest_httpserver import HTTPServer

from agentwake.errors import RunFailed
from agentwake.store.dynamo import DynamoStore
from agentwake.wake.background import wake_for_background_result
from tests.integration.test_durable_runs import make_deps
from tests.support.aws import REGION, Resources
from tests.support.builders import message, seed_session, seed_task
from tests.support.faults import around
from tests.support.process_state import forget_python_tools

TEST_TOOLS = Path(__file__).resolve().parents[1] / "support" / "entry_point_tools"

TICKET_SCHEMA = {
    "type": "object",
    "properties": {"title": {"type": "string", "minLength": 1}},
    "required": ["title"],
    "additionalProperties": False,
}


def ticket_tool(url: str) -> dict[str, Any]:
    return {
        "type": "http",
        "name": "create_ticket",
        "description": "Open a support ticket.",
        "parameters": TICKET_SCHEMA,
        "url": url,
        "side_effect": True,
    }


#: step 0 creates a ticket (side effect), step 1 messages the user, step 2 ends the run
SCRIPT = [
    {"tool_calls": [{"name": "create_ticket", "arguments": {"title": "Printer on fire"}}]},
    {"tool_calls": [{"name": "send_message_to_user", "arguments": {"text": "I opened a ticket."}}]},
    {"text": "Ticket opened and user told."},
]


class CrashAt(DynamoStore):
    """Crashes (as a dying Lambda would) right after journaling the given step key, once."""

    def __init__(self, *args: Any, crash_after: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.crash_after: str | None = crash_after
        around(self.journals, "journal_put", self._journal_put)

    def _journal_put(self, put: Any, run_id: str, key: str, value: dict[str, Any], **kw: Any) -> None:
        put(run_id, key, value, **kw)
        if key == self.crash_after:
            self.crash_after = None
            raise RuntimeError(f"crash after journaling {key}")


def keys_seen(httpserver: HTTPServer) -> Counter[str]:
    return Counter(r.headers.get("Idempotency-Key", "-") for r, _ in httpserver.log)


def test_side_effecting_tool_at_step_1_crash_at_step_2_retry_calls_it_once(
    resources: Resources, httpserver: HTTPServer
) -> None:
    # GIVEN a session with a side-effecting HTTP tool on 127.0.0.1
    httpserver.expect_request("/tickets", method="POST").respond_with_json({"ticket": "T-1"})
    store = CrashAt(resources.table, client=boto3.client("dynamodb", region_name=REGION), crash_after="001.reply")
    seed_session(
        store,
        "s1",
        providers=[{"type": "scripted", "id": "p", "script": SCRIPT}],
        tools=[ticket_tool(httpserver.url_for("/tickets"))],
    )
    seed_task(store, "t1", "s1")
    deps = make_deps(store, resources)
    # WHEN the tool is called at step 1 and the run crashes at step 2
    with pytest.raises(RuntimeError, match="crash after journaling 001.reply"):
        wake_for_background_result(message("t1", "s1"), deps)
    assert keys_seen(httpserver) == Counter({"bg:t1#0#0": 1})
    # AND the run is retried (as SQS would), and then redriven as a duplicate after success
    outcome = wake_for_background_result(message("t1", "s1"), deps)
    again = wake_for_background_result(message("t1", "s1"), deps)
    # THEN it succeeds, and the tool's server saw one call, with the run's stable idempotency key
    assert outcome.status == "succeeded" and again.status == "already_succeeded"
    assert keys_seen(httpserver) == Counter({"bg:t1#0#0": 1})
    # AND the tool's answer was journaled (a retry reads it instead of calling)
    steps = store.journals.journal_entries("bg:t1")
    assert steps["000.tool.00"]["tool"] == "create_ticket"
    assert json.loads(steps["000.tool.00"]["content"]) == {"ticket": "T-1"}


def test_crash_between_the_call_and_its_journal_repeats_the_same_key(
    resources: Resources, httpserver: HTTPServer
) -> None:
    # GIVEN the tool's result cannot be journaled once (the Lambda dies right after the call)
    httpserver.expect_request("/tickets", method="POST").respond_with_json({"ticket": "T-1"})

    store = DynamoStore(resources.table, client=boto3.client("dynamodb", region_name=REGION))
    armed = [True]

    def dies_after_call(put: Any, run_id: str, key: str, value: dict[str, Any], **kw: Any) -> None:
        if key == "000.tool.00" and armed[0]:
            armed[0] = False
            raise RuntimeError("died after the call, before its journal")
        put(run_id, key, value, **kw)

    around(store.journals, "journal_put", dies_after_call)
    seed_session(
        store,
        "s2",
        providers=[{"type": "scripted", "id": "p", "script": SCRIPT}],
        tools=[ticket_tool(httpserver.url_for("/tickets"))],
    )
    seed_task(store, "t2", "s2")
    deps = make_deps(store, resources)
    with pytest.raises(RuntimeError):
        wake_for_background_result(message("t2", "s2"), deps)
    outcome = wake_for_background_result(message("t2", "s2"), deps)
    # THEN the documented at-least-once edge: the call is repeated with the SAME key, so the
    # server drops it; never a second key for the same call
    assert outcome.status == "succeeded"
    assert keys_seen(httpserver) == Counter({"bg:t2#0#0": 2})


# ------------------------------------------------------------------ entry-point Python tools


@pytest.fixture
def tools_package_installed(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The test tool package on sys.path, as pip installs a package into the Lambda bundle."""
    monkeypatch.syspath_prepend(str(TEST_TOOLS))
    forget_python_tools()
    yield
    forget_python_tools()


def test_an_entry_point_tool_is_loaded_and_used(
    resources: Resources, store: DynamoStore, tools_package_installed: None
) -> None:
    # GIVEN a session naming the entry-point tool word_count
    script = [
        {"tool_calls": [{"name": "word_count", "arguments": {"text": "three little words"}}]},
        {"text": "It has three words."},
    ]
    seed_session(
        store,
        "s3",
        providers=[{"type": "scripted", "id": "p", "script": script}],
        tools=[{"type": "python", "name": "word_count"}],
    )
    seed_task(store, "t3", "s3")
    # WHEN the agent is woken and calls it
    outcome = wake_for_background_result(message("t3", "s3"), make_deps(store, resources))
    # THEN the tool ran (loaded from the package's entry point) and its result was journaled
    assert outcome.status == "succeeded"
    assert store.journals.journal_entries("bg:t3")["000.tool.00"] == {
        "content": "3 words",
        "tool": "word_count",
        "attempt": 1,
    }
    import agentwake_test_tools  # type: ignore[import-not-found]

    assert len(agentwake_test_tools.LOADS) == 1


def test_a_session_naming_a_missing_tool_fails_with_a_clear_config_error(
    resources: Resources, store: DynamoStore, tools_package_installed: None
) -> None:
    seed_session(store, "s4", tools=[{"type": "python", "name": "no_such_tool"}])
    seed_task(store, "t4", "s4")
    with pytest.raises(RunFailed) as failed:
        wake_for_background_result(message("t4", "s4"), make_deps(store, resources))
    assert failed.value.failure_type == "ConfigError"
    [failure] = store.ends.failures("bg:t4")
    assert failure.error_type == "ConfigError"
    assert "no package installs an entry point 'no_such_tool' in group 'agentwake.tools'" in failure.detail
    assert "installed: broken_lookup, broken_tool, word_count" in failure.detail
    assert [e.kind for e in store.history.history("s4")] == []  # nothing written to the conversation


def test_an_entry_point_that_is_not_a_tool_is_a_config_error(tools_package_installed: None) -> None:
    from agentwake.agent.tools.config import build_tools
    from agentwake.errors import ConfigError

    with pytest.raises(ConfigError, match="is not an agentwake Tool"):
        build_tools([{"type": "python", "name": "broken_tool"}], session_id="s5")


# ------------------------------------------------------------------ the worked example, bundled as sam build does

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "agentwake-example-tools"

BUNDLE_CHECK = """
import json
from agentwake.agent.tools import ToolContext
from agentwake.agent.tools.config import build_tools
from agentwake.agent.tools.entry_points import installed
[tool] = build_tools([{"type": "python", "name": "business_days_between"}], session_id="s")
args = tool.parse_args({"start": "2026-11-27", "end": "2026-12-01"})
print(json.dumps({"found": sorted(installed()), "result": tool.invoke(args, ToolContext(run_id="r", session_id="s"))}))
"""


@pytest.mark.slow
def test_the_worked_example_installs_into_a_bundle_and_its_tool_loads(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    # GIVEN the example package installed into a bundle folder the way sam build's pip step does
    bundle = tmp_path / "bundle"
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(bundle), str(EXAMPLE)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert pip.returncode == 0, pip.stderr[-2000:]
    assert (bundle / "agentwake_example_tools-0.1.0.dist-info" / "entry_points.txt").exists()
    # WHEN a fresh interpreter with the bundle (and the runtime, as CodeUri copies it) on its path
    # builds a session's tools
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(bundle), str(ROOT / "functions")])}
    out = subprocess.run(
        [sys.executable, "-c", BUNDLE_CHECK], capture_output=True, text=True, env=env, timeout=120, check=True
    )
    # THEN the entry point is found and the tool runs
    data = json.loads(out.stdout)
    assert "business_days_between" in data["found"]
    assert data["result"] == "3 business days from 2026-11-27 to 2026-12-01"
