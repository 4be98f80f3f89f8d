"""Benchmark: wakes through the local stack, against the same DynamoDB writes alone.

    make bench              (N = 500)     make bench-5000     (N = 5,000)
    .venv/bin/python bench/bench_local.py --n 500 [--failing-percent 10] [--sessions 100]

The embedded moto server runs in a process of its own (``agentwake_local.server.main``) so its
memory is its own. This process runs the local stack on it, provisioned from template.yaml, with
its background threads as ``agentwake local up`` runs them (Lambda's SQS poller, the async queue,
the scheduler), and a webhook receiver on 127.0.0.1.

1. **wakes**: N finished tasks (N / sessions per session) are sent to BackgroundResultQueue; each
   session's scripted model takes two steps, the first a ``send_message_to_user`` delivered to the
   receiver. ``--failing-percent`` of the sessions have every provider failing: their results end in
   the DLQ after MaxReceiveCount receives (failed records come back after 0 s here). Timed from the
   pollers' start until every message is accounted for: a note in its session, or in the DLQ.
   Then checked: every succeeded task has exactly one note, every failing one is in the DLQ after
   exactly MaxReceiveCount attempts (printed as a histogram of attempts per failing run, with the
   total), each delivery id reached the receiver exactly once.
2. **floor**: every DynamoDB write the wakes made (recorded on the way), replayed in order against
   fresh copies of the two tables on the same server, by one client: the cost of the storage work
   alone, without the model, the poller or the handler.

Reported: wakes/s, floor wakes/s (N / replay time), their ratio, and the server's peak RSS
(VmHWM) after the wakes and after the floor, with its RSS before.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ["POWERTOOLS_LOG_LEVEL"] = "ERROR"
os.environ["POWERTOOLS_METRICS_DISABLED"] = "true"
os.environ.pop("AWS_ENDPOINT_URL", None)

import warnings  # noqa: E402

warnings.filterwarnings("ignore")

from botocore.client import BaseClient  # noqa: E402

from agentwake.domain.models import SessionConfig, Task, task_token_hash  # noqa: E402
from agentwake.store.dynamo import DynamoStore  # noqa: E402
from agentwake.trust.session_checks import ConfigRules  # noqa: E402
from agentwake_local import timing  # noqa: E402
from agentwake_local.stack import LocalStackRuntime  # noqa: E402
from agentwake_ops.sqs_scan import queue_counts  # noqa: E402
from bench.bench_dlq_list import start_server  # noqa: E402  (the embedded moto server, in a process of its own)
from tests.support.receiver import CountingReceiver  # noqa: E402

WRITES = {"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem"}
SCRIPT = [
    {"tool_calls": [{"name": "send_message_to_user", "arguments": {"text": "done"}}]},
    {"text": "told the user"},
]
FAILING = [{"type": "scripted", "id": "broken", "script": [{"error": "server"}]}]
WAIT_S = 3600


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS / VmHWM (peak RSS) of a process, in KiB (Linux /proc)."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


# --- recording the DynamoDB writes of the wakes -------------------------------------------------------


class WriteRecorder:
    """Every DynamoDB write any client of this process makes (the handlers build their own)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        self._original = BaseClient._make_api_call

    def __enter__(self) -> WriteRecorder:
        recorder = self

        def _make_api_call(client: Any, operation: str, params: dict[str, Any]) -> Any:
            if operation in WRITES and client.meta.service_model.service_name == "dynamodb":
                with recorder._lock:
                    recorder.calls.append((operation, json.loads(json.dumps(params, default=str))))
            return recorder._original(client, operation, params)

        BaseClient._make_api_call = _make_api_call  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        BaseClient._make_api_call = self._original  # type: ignore[method-assign]


def retarget(value: Any, tables: dict[str, str]) -> Any:
    """The same request, aimed at the floor's copies of the tables."""
    if isinstance(value, dict):
        return {
            (tables.get(k, k) if isinstance(k, str) else k): (
                tables.get(v, v) if k == "TableName" and isinstance(v, str) else retarget(v, tables)
            )
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [retarget(v, tables) for v in value]
    return value


def floor(runtime: LocalStackRuntime, calls: list[tuple[str, dict[str, Any]]]) -> tuple[float, int]:
    """Replay the writes against empty copies of the tables; (seconds, conditional failures)."""
    ddb = runtime.client("dynamodb")
    tables: dict[str, str] = {}
    for logical_id in ("AgentTable",):
        name = runtime.stack.ref(logical_id)
        described = ddb.describe_table(TableName=name)["Table"]
        copy = f"{name}-floor-{uuid.uuid4().hex[:6]}"
        request: dict[str, Any] = {
            "TableName": copy,
            "KeySchema": described["KeySchema"],
            "AttributeDefinitions": described["AttributeDefinitions"],
            "BillingMode": "PAY_PER_REQUEST",
        }
        if described.get("GlobalSecondaryIndexes"):
            request["GlobalSecondaryIndexes"] = [
                {k: g[k] for k in ("IndexName", "KeySchema", "Projection")} for g in described["GlobalSecondaryIndexes"]
            ]
        ddb.create_table(**request)
        tables[name] = copy
    replay = [(op, retarget(params, tables)) for op, params in calls]
    method = {
        "PutItem": ddb.put_item,
        "UpdateItem": ddb.update_item,
        "DeleteItem": ddb.delete_item,
        "TransactWriteItems": ddb.transact_write_items,
        "BatchWriteItem": ddb.batch_write_item,
    }
    failed = 0
    started = time.perf_counter()
    for operation, params in replay:
        try:
            method[operation](**params)
        except (ddb.exceptions.ConditionalCheckFailedException, ddb.exceptions.TransactionCanceledException):
            failed += 1  # the wakes met the same conditions
    return time.perf_counter() - started, failed


# --- the wakes ----------------------------------------------------------------------------------------


def run(n: int, sessions: int, failing_percent: int) -> int:
    server, endpoint = start_server()
    try:
        before = memory_kib(server.pid)
        home = Path(tempfile.mkdtemp(prefix="agentwake-bench-"))
        os.environ["AGENTWAKE_HOME"] = str(home)  # never a developer's own local stack
        runtime = LocalStackRuntime(home=home, timing=timing.immediate(0), poll_interval=0.05)
        runtime.start(ROOT / "template.yaml", {"LogLevel": "CRITICAL"}, endpoint_url=endpoint)
        store = DynamoStore(runtime.outputs["AgentTableName"], client=runtime.client("dynamodb"))
        sqs = runtime.client("sqs")
        queue, dlq = runtime.outputs["BackgroundResultQueueUrl"], runtime.outputs["BackgroundResultDLQUrl"]
        failing_sessions = {f"bench-s{i}" for i in range(sessions) if i * 100 < failing_percent * sessions}
        # the sessions are written from this process: checked by the local stack's rules (loopback webhook)
        rules = ConfigRules.from_env(runtime.function_env("BackgroundResultFunction"))
        max_receive = int(runtime.function_env("BackgroundResultFunction")["AGENTWAKE_MAX_RECEIVE_COUNT"])
        with CountingReceiver() as receiver:
            for i in range(sessions):
                session_id = f"bench-s{i}"
                store.records.put_session(
                    SessionConfig(
                        session_id=session_id,
                        providers=FAILING
                        if session_id in failing_sessions
                        else [{"type": "scripted", "id": "p", "script": SCRIPT}],
                        delivery={"type": "webhook", "url": receiver.url},
                        retry_base_delay_ms=0,
                        retry_max_attempts=1,
                    ),
                    rules,
                )
            tasks: dict[str, str] = {}
            for i in range(n):
                task_id, session_id = f"bench-t{i}", f"bench-s{i % sessions}"
                store.records.put_task(
                    Task(
                        task_id=task_id,
                        session_id=session_id,
                        tool_name="bench",
                        token_sha256=task_token_hash(f"bench-token-{task_id}"),
                    )
                )
                tasks[task_id] = session_id
            ids = list(tasks)
            for start in range(0, n, 10):
                entries = [
                    {
                        "Id": str(j),
                        "MessageBody": json.dumps(
                            {
                                "task_id": task_id,
                                "task_token": f"bench-token-{task_id}",
                                "session_id": tasks[task_id],
                                "tool_name": "bench",
                                "status": "succeeded",
                                "result_text": "r",
                                "summary_name": "Bench",
                                "finished_at": "2026-11-30T05:00:00Z",
                            }
                        ),
                    }
                    for j, task_id in enumerate(ids[start : start + 10])
                ]
                sqs.send_message_batch(QueueUrl=queue, Entries=entries)
            expected_dlq = sum(1 for s in tasks.values() if s in failing_sessions)

            # the functions' logs and metrics go to stdout, as on Lambda: not this report's business
            with WriteRecorder() as recorder, open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
                started = time.perf_counter()
                runtime.start_background()
                deadline = time.monotonic() + WAIT_S
                while time.monotonic() < deadline:
                    if sum(queue_counts(sqs, queue)) == 0:
                        break
                    time.sleep(0.5)
                elapsed = time.perf_counter() - started
                runtime.stop_background()
            after_wakes = memory_kib(server.pid)

            # every message accounted for: a note, or the DLQ; each delivery once
            notes: Counter[str] = Counter()
            for session_id in {f"bench-s{i}" for i in range(sessions)}:
                for entry in store.history.history(session_id):
                    if entry.kind == "note" and entry.run_id:
                        notes[entry.run_id.removeprefix("bg:")] += 1
            dead = sum(queue_counts(sqs, dlq))
            # attempts per failing run, as its run record counts them (issue 36: MaxReceiveCount each)
            attempts: Counter[int] = Counter()
            other_counts: list[str] = []
            for task_id, session_id in tasks.items():
                if session_id in failing_sessions:
                    failed_run = store.records.get_run(f"bg:{task_id}")
                    made = failed_run.attempts if failed_run is not None else 0
                    attempts[made] += 1
                    if made != max_receive:
                        other_counts.append(f"bg:{task_id} ({made})")
            ok_tasks = [t for t, s in tasks.items() if s not in failing_sessions]
            deliveries = receiver.by_delivery_id()
        floor_s, floor_failed = floor(runtime, recorder.calls)
        after_floor = memory_kib(server.pid)
        runtime.stop()
    finally:
        server.terminate()
        server.wait(30)

    problems = []
    if sorted(notes) != sorted(ok_tasks) or any(c != 1 for c in notes.values()):
        problems.append(f"notes: {len(notes)} tasks with a note, expected {len(ok_tasks)} with exactly one")
    if dead != expected_dlq:
        problems.append(f"DLQ holds {dead}, expected {expected_dlq}")
    if set(attempts) - {max_receive}:
        problems.append(
            f"attempts: {len(other_counts)} failing run(s) made other than MaxReceiveCount ({max_receive}) attempts: "
            + ", ".join(other_counts[:5])
        )
    if len(deliveries) != len(ok_tasks) or any(c != 1 for c in deliveries.values()):
        problems.append(
            f"deliveries: {len(deliveries)} ids, {sum(deliveries.values())} received, expected {len(ok_tasks)} once each"
        )

    writes = len(recorder.calls)
    print(f"N = {n} completions, {sessions} sessions, {failing_percent}% failing ({expected_dlq} to the DLQ)")
    print(f"wakes: {elapsed:.1f} s, {n / elapsed:.1f} wakes/s  ({writes} DynamoDB writes, {writes / n:.1f} per wake)")
    print(
        f"floor: the same {writes} writes replayed in {floor_s:.1f} s, {n / floor_s:.1f} wakes/s "
        f"({floor_failed} conditional failures, as in the wakes)"
    )
    print(f"ratio floor/wakes: {(n / floor_s) / (n / elapsed):.1f}x (how much slower a wake is than its writes alone)")
    print(
        "moto server memory: RSS {:.0f} MiB before, peak {:.0f} MiB after the wakes, peak {:.0f} MiB after the floor".format(
            before["VmRSS"] / 1024, after_wakes["VmHWM"] / 1024, after_floor["VmHWM"] / 1024
        )
    )
    print(
        f"accounted for: {len(notes)} notes + {dead} in the DLQ = {len(notes) + dead} of {n}; "
        f"{len(deliveries)} deliveries, each received {set(deliveries.values()) or {0}} time(s)"
    )
    if attempts:
        histogram = ", ".join(f"{k} x{v}" for k, v in sorted(attempts.items()))
        total = sum(k * v for k, v in attempts.items())
        print(
            f"attempts per failing run: {histogram}; total {total} for {sum(attempts.values())} failing runs "
            f"(MaxReceiveCount {max_receive} each: {max_receive * sum(attempts.values())} expected)"
        )
    for problem in problems:
        print(f"PROBLEM: {problem}")
    return 1 if problems else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--failing-percent", type=int, default=10)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    return run(args.n, min(args.sessions, args.n), args.failing_percent)


if __name__ == "__main__":
    sys.exit(main())
