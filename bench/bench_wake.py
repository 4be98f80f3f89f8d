"""Benchmark: a wake's cost against the conversation's length, and the runtime's own overhead.

    make bench        (or: .venv/bin/python bench/bench_wake.py [--runs N])

Everything runs in-process on moto (no network). Two comparisons, each against a floor measured
in the same run, reported as ratios so a noisy machine does not mislead:

1. wake time with a 5,000-entry history / wake time with a 10-entry history, both sessions in
   the same table (the window read is bounded, so the ratio should stay near 1.0), plus the items
   each window read touched and the DynamoDB calls per wake (both should be equal);
2. the bare runner with the same scripted model, as the floor a wake cannot go below.

Absolute wake times here are moto's, not DynamoDB's: moto deep-copies the whole table on every
TransactWriteItems, so they grow with the table, not with the session.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

os.environ.update(
    {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "POWERTOOLS_LOG_LEVEL": "WARNING",
    }
)
os.environ.pop("AWS_ENDPOINT_URL", None)

import boto3  # noqa: E402
from moto import mock_aws  # noqa: E402

from agentwake.agent.chain import ProviderChain  # noqa: E402
from agentwake.agent.providers.scripted import ScriptedProvider  # noqa: E402
from agentwake.agent.runner import Runner  # noqa: E402
from agentwake.agent.tools import ToolContext, ToolRegistry  # noqa: E402
from agentwake.agent.tools.send_message import SendMessageToUser  # noqa: E402
from agentwake.delivery.log import LogChannel  # noqa: E402
from agentwake.settings import Settings  # noqa: E402
from agentwake.store.dynamo import DynamoStore  # noqa: E402
from agentwake.store.models import SessionConfig, Task, task_token_hash  # noqa: E402
from agentwake.wake.background import wake_for_background_result  # noqa: E402
from agentwake.wake.messages import BackgroundResultMessage  # noqa: E402
from agentwake.wake.prompt import build_wake_messages  # noqa: E402
from agentwake.wake.run import WakeDeps  # noqa: E402
from tests.support.aws import create_resources  # noqa: E402

SCRIPT = [
    {"tool_calls": [{"name": "send_message_to_user", "arguments": {"text": "done"}}]},
    {"text": "told the user"},
]


def seed_history(store: DynamoStore, session: str, n: int) -> None:
    table = boto3.resource("dynamodb", region_name="us-east-1").Table(store.table)
    with table.batch_writer() as batch:
        for i in range(n):
            batch.put_item(
                Item={
                    "pk": f"SESSION#{session}",
                    "sk": f"MSG#{i:020d}#x",
                    "session_id": session,
                    "role": "user" if i % 2 == 0 else "assistant",
                    "content": f"message {i} " + "x" * 200,
                    "kind": "message",
                    "created_at": "2026-01-01T00:00:00Z",
                }
            )


def time_wakes(store: DynamoStore, deps: WakeDeps, session: str, runs: int) -> tuple[list[float], float]:
    out = []
    calls = [0]
    store.db.meta.events.register("before-call.dynamodb", lambda **kw: calls.__setitem__(0, calls[0] + 1))
    for i in range(runs):
        task_id = f"{session}-t{i}"
        store.put_task(
            Task(task_id=task_id, session_id=session, tool_name="bench", token_sha256=task_token_hash(task_id))
        )
        msg = BackgroundResultMessage(
            task_id=task_id,
            session_id=session,
            task_token=task_id,  # the bench's tasks use their id as token
            tool_name="bench",
            status="succeeded",
            result_text="r",
            summary_name="Bench",
            finished_at="2026-11-30T05:00:00Z",
        )
        t0 = time.perf_counter()
        wake_for_background_result(msg, deps)
        out.append(time.perf_counter() - t0)
    return out, (calls[0] - runs) / runs  # minus the put_task above


def time_bare_runner(runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        Runner(
            model=ProviderChain([ScriptedProvider("p", SCRIPT)]),
            tools=ToolRegistry([SendMessageToUser(LogChannel())]),
            messages=build_wake_messages(persona="p", kind="background", wake={}, history=[]),
            context=ToolContext(run_id="bg:x", session_id="s"),
        ).run()
        out.append(time.perf_counter() - t0)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    with mock_aws():
        res = create_resources()
        store = DynamoStore(res.table, client=boto3.client("dynamodb", region_name="us-east-1"))
        deps = WakeDeps(store=store, settings=Settings(table_name=res.table))
        for session, n in (("short", 10), ("long", 5000)):
            store.put_session(
                SessionConfig(session_id=session, providers=[{"type": "scripted", "id": "p", "script": SCRIPT}])
            )
            seed_history(store, session, n)
        reads_short = store.count_history_reads("short", 20)
        reads_long = store.count_history_reads("long", 20)
        short_times, short_calls = time_wakes(store, deps, "short", args.runs)
        long_times, long_calls = time_wakes(store, deps, "long", args.runs)
        short, long = statistics.median(short_times), statistics.median(long_times)
        bare = statistics.median(time_bare_runner(args.runs))
    print(f"history window reads: 10 entries -> {reads_short} items, 5,000 entries -> {reads_long} items")
    print(f"wake median: 10-entry history {short * 1000:.1f} ms, 5,000-entry history {long * 1000:.1f} ms")
    print(f"ratio long/short: {long / short:.2f} (bounded window: expect ~1.0)")
    print(f"DynamoDB calls per wake: 10-entry history {short_calls:.1f}, 5,000-entry history {long_calls:.1f}")
    print(f"bare runner (floor, no store) median {bare * 1000:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
