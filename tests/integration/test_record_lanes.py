"""Records side by side through the deployed BackgroundResultFunction handler on moto: each record's
log lines carry its own keys and no other's (issue 37; docs/durability.md, "Records side by side").

Five sessions' records in one batch, with AGENTWAKE_RECORD_CONCURRENCY 5; each wake's first model
call waits at a barrier that opens only when all five are in it (a generous bound breaks it), so the
five runs are in flight at once while they log. The handler's log lines go to a buffer in place of
stdout.
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from agentwake.handlers import background_result
from agentwake.store.dynamo import DynamoStore
from tests.integration.test_wake_handlers import result_body, sqs_record
from tests.support.aws import FakeLambdaContext
from tests.support.builders import OK_SCRIPT, seed_session, seed_task
from tests.support.receiver import CountingReceiver

SESSIONS = [f"s{i}" for i in range(5)]
BOUND_S = 120.0


@pytest.fixture
def receiver() -> Iterator[CountingReceiver]:
    with CountingReceiver() as r:
        yield r


@pytest.fixture
def first_calls_at_once(monkeypatch: pytest.MonkeyPatch) -> threading.Barrier:
    """Each wake's first model call waits until every session's first call is in flight."""
    from agentwake.agent.providers.scripted import ScriptedProvider

    barrier = threading.Barrier(len(SESSIONS), timeout=BOUND_S)
    complete = ScriptedProvider.complete

    def held(self: ScriptedProvider, request: Any) -> Any:
        if request.step == 0:
            barrier.wait()
        return complete(self, request)

    monkeypatch.setattr(ScriptedProvider, "complete", held)
    return barrier


def test_each_records_lines_carry_its_own_keys_while_five_run_at_once(
    side_by_side: None,
    store: DynamoStore,
    receiver: CountingReceiver,
    first_calls_at_once: threading.Barrier,
    log_lines: io.StringIO,
) -> None:
    # GIVEN five sessions, each with a finished task, their results in one batch
    for session in SESSIONS:
        seed_session(
            store,
            session,
            providers=[{"type": "scripted", "id": "p", "script": OK_SCRIPT}],
            delivery={"type": "webhook", "url": receiver.url},
        )
        seed_task(store, f"t-{session}", session)
    records = [sqs_record(result_body(f"t-{s}", s), message_id=f"m-{s}") for s in SESSIONS]
    # WHEN the handler takes the batch (the five first model calls in flight at once)
    answer = background_result.handler({"Records": records}, FakeLambdaContext())
    # THEN every record succeeded, each delivery arrived once
    assert answer == {"batchItemFailures": []}
    assert len(receiver.by_delivery_id()) == len(SESSIONS) and set(receiver.by_delivery_id().values()) == {1}
    # AND every line of a record names that record only: its message, task, session and run
    lines = [json.loads(line) for line in log_lines.getvalue().splitlines() if line.startswith('{"level"')]
    keyed = [line for line in lines if "message_id" in line]
    assert {line["message_id"] for line in keyed} == {f"m-{s}" for s in SESSIONS}, lines
    for line in keyed:
        session = line["message_id"].removeprefix("m-")
        expected = {"session_id": session, "task_id": f"t-{session}", "run_id": f"bg:t-{session}"}
        assert {k: line[k] for k in expected if k in line} == {k: v for k, v in expected.items() if k in line}, line
    # AND each record logged its success under all of its keys
    succeeded = [line for line in keyed if line["message"] == "run succeeded"]
    assert sorted((line["session_id"], line["run_id"], line["attempt"]) for line in succeeded) == [
        (s, f"bg:t-{s}", 1) for s in SESSIONS
    ]
