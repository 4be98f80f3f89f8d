"""`agentwake local up` serves the product API on 127.0.0.1: the REAL template.yaml on the embedded
local AWS, ProductApiFunction invoked through the local Lambda runtime with HTTP API events, the
URL in the state file (`local status`). A live turn, a task registered and completed through the
API, and the wake it triggers read back in the conversation, in order."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentwake.store.dynamo import DynamoStore
from agentwake_client import ProductApiClient
from agentwake_local.stack import LocalStackRuntime, read_state
from tests.e2e.test_busy_sessions import wait_until
from tests.support.builders import local_stack_rules, seed_session

TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStackRuntime]:
    home = tmp_path_factory.mktemp("agentwake-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AGENTWAKE_HOME", str(home))
        runtime = LocalStackRuntime(async_retry_delays=0, home=home)
        runtime.start(TEMPLATE, {}, background=True)
        try:
            yield runtime
        finally:
            runtime.stop()


def test_the_local_stack_serves_the_product_api(local: LocalStackRuntime) -> None:
    # GIVEN the local stack in its "up" mode: the API's URL is recorded for `local status`
    state = read_state(local.home)
    assert state is not None and state["api_url"] == local.api_url and local.api_url.startswith("http://127.0.0.1:")
    assert state["outputs"]["ProductApiUrl"] == local.api_url
    store = DynamoStore(local.outputs["AgentTableName"], client=local.client("dynamodb"))
    seed_session(store, "web-1", rules=local_stack_rules())
    api = ProductApiClient(local.api_url, region=local.region)
    # WHEN a live turn appends, then a task is registered and completed through the API
    with api.live_turn("web-1") as turn:
        api.append(turn, [("user", "find me a flight"), ("assistant", "on it")], idempotency_key="m1")
    task = api.register_task("web-1", "flight_search", {"to": "Lisbon"})
    api.complete_task(task.task_id, task.task_token, "succeeded", "3 flights found", summary_name="Flights")
    # THEN the poller wakes the agent, and the conversation reads back in the order it was written
    wait_until(lambda: api.task_status(task.task_id)["status"] == "woken", 60, "the task's wake")
    entries = list(reversed(api.read_conversation("web-1")["entries"]))
    assert [(e["kind"], e["content"]) for e in entries[:2]] == [("live", "find me a flight"), ("live", "on it")]
    later = [e for e in entries[2:] if e["run_id"] == f"bg:{task.task_id}"]
    assert later and "3 flights found" in json.dumps(later)
