"""The cost model: what a wake costs in dollars per million, per wake kind, from counted figures.

    make bench        (or: .venv/bin/python bench/cost.py [--wakes 20] [--model-latency 2])

Each wake runs through its deployed handler (``background_result.handler`` with a one-record SQS
event, ``cron_wake.handler`` with the schedule's input), on moto in-process with the local stack's
patches, over the dependencies the handler builds itself (``bootstrap``: the result queue included).
One warm-up wake per kind is left out (Lambda's init is billed apart); then, per wake, the median of:

- **calls**: DynamoDB and SQS/Scheduler calls, counted at the client (botocore ``before-call``);
- **capacity**: computed from item sizes, because moto answers ``ReturnConsumedCapacity`` with a
  constant (1 unit a call whatever the size, nothing for a transaction). For each item a call reads
  or writes, its size before and after the call is read from moto's table (its own item-size sum:
  attribute names plus values) and billed by DynamoDB's on-demand rules: a write 1 WRU a KB of the
  larger of before and after, doubled inside ``TransactWriteItems`` (a ``ConditionCheck`` billed as
  a transactional write of its item: an assumption, not checked against AWS's billing, and none of
  the kinds below makes one); each index 1 WRU a KB of what it projects for an item
  entering, leaving or changing in it, 2 when its index key changes (not doubled by a transaction; a
  keys-only index, template.yaml's ``gsi3`` and ``gsi4``, only when the item's keys on it change); a strongly consistent
  read 1 RRU per 4 KB (``BatchGetItem`` per item, a missing item 1 unit; ``Query`` per 4 KB of the
  items it returned, at least 1), an eventually consistent one half;
- **CPU outside the model**: this thread's CPU during the handler, less what moto's stub (the
  server's side) and this meter spent; the model is a scripted provider, whose CPU is nothing. The
  HTTP and TLS of real calls are not in it (moto answers in-process);
- **bytes logged**: what the handler wrote to stdout at the template's log level (INFO): its JSON
  log lines and its EMF metric lines. Lambda's own START/END/REPORT lines are not counted.

The dollars: Lambda's billed time is the model's latency per model step (assumed: 2 s, a flag) plus
the CPU plus an assumed round trip per AWS call, at the template's 512 MB on arm64. Every price is
printed beside the table (us-east-1 list prices, DynamoDB on-demand after its November 2024 cut).
Lambda gives a 512 MB function 512/1769 of a vCPU, so the CPU measured here on a whole core is
billed 3.46 times over, added to the waits (not overlapped: an upper bound).

The batch row: invocations of the result handler with one record of each of ``BatchSize`` (10)
sessions, as the event source hands them when the queue holds that many (a busy stack; a trickle of
results runs one record an invocation: the first row), its figures per wake. The invocation is
billed once for the whole batch: the handler runs its records ``--lanes`` at a time (template.yaml's
``BackgroundRecordConcurrency``, set for the handler here), so the model's latency is paid once a
wave; the event source's receive and delete are a batch's, not a record's.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.update(
    {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "POWERTOOLS_LOG_LEVEL": "INFO",  # template.yaml's LogLevel default
        "POWERTOOLS_SERVICE_NAME": "agentwake",
    }
)
os.environ.pop("AWS_ENDPOINT_URL", None)


class _CountingOut(io.TextIOBase):
    """stdout while the wakes run: counts the bytes written, keeps none (the report goes to the real one)."""

    def __init__(self) -> None:
        self.bytes = 0

    def write(self, text: str) -> int:
        self.bytes += len(text.encode("utf-8"))
        return len(text)

    def writable(self) -> bool:
        return True


#: installed before the runtime is imported: Powertools' logger keeps the stream it found then
LOGGED = _CountingOut()
REPORT = sys.stdout

#: us-east-1 list prices, $ (stated in the report)
PRICES = {
    "lambda_gb_s_arm64": 0.0000133334,
    "lambda_request": 0.20 / 1e6,
    "dynamodb_wru": 0.625 / 1e6,
    "dynamodb_rru": 0.125 / 1e6,
    "logs_gb_ingested": 0.50,
    "sqs_request": 0.40 / 1e6,
    "scheduler_invocation": 1.00 / 1e6,
}
MEMORY_GB = 512 / 1024  # template.yaml's Globals MemorySize
#: Lambda gives a function CPU in proportion to its memory, one vCPU at 1,769 MB (AWS Lambda docs,
#: "Memory and computing power"): a CPU second measured here on a whole core is this many billed seconds
CPU_SCALE = 1769 / 512


def _template_default(name: str) -> int:
    from agentwake_local.template import load_template

    return int(load_template(ROOT / "template.yaml").body["Parameters"][name]["Default"])


BATCH = _template_default("BatchSize")  # records of different sessions in one invocation (a busy stack's batch)


def _template_indexes() -> tuple[tuple[tuple[str, str], bool], ...]:
    """template.yaml's GSIs on AgentTable as ((hash key, range key), keys only?), as a fresh stack has them."""
    from agentwake_local.template import Resolver, load_template

    template = load_template(ROOT / "template.yaml")
    out = []
    for gsi in Resolver(template, None).resolve(
        template.resources["AgentTable"]["Properties"]["GlobalSecondaryIndexes"]
    ):
        hash_key, range_key = (k["AttributeName"] for k in gsi["KeySchema"])
        out.append(((hash_key, range_key), gsi["Projection"]["ProjectionType"] == "KEYS_ONLY"))
    return tuple(out)


#: the GSIs' keys, and whether each projects keys only (a change of other attributes writes nothing on it)
INDEX_SPECS = _template_indexes()
INDEXES = tuple(keys for keys, _ in INDEX_SPECS)
ONE_STEP = [{"text": "Nothing to tell the user."}]
TWO_STEP = [
    {"tool_calls": [{"name": "send_message_to_user", "arguments": {"text": "done"}}]},
    {"text": "told the user"},
]


@dataclass(frozen=True)
class Snapshot:
    """An item as stored at one moment: its size, its content, its key on each index (None: not in it)."""

    size: int
    body: str
    index_keys: tuple[tuple[Any, ...] | None, ...]


@dataclass
class Meter:
    """Calls, capacity and the meter's own CPU, summed over the calls of one wake."""

    calls: list[str] = field(default_factory=list)
    wru_table: float = 0.0
    wru_index: float = 0.0
    rru: float = 0.0
    overhead_s: float = 0.0  # CPU of this meter and of moto's stub: not the wake's

    @property
    def wru(self) -> float:
        return self.wru_table + self.wru_index


class Capacity:
    """Registers on the runtime's DynamoDB client; bills each call from moto's items (see the module doc)."""

    def __init__(self, client: Any, table: str) -> None:
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.dynamodb.models import dynamodb_backends

        self.backend = dynamodb_backends[DEFAULT_ACCOUNT_ID]["us-east-1"]
        self.table = table
        self.meter = Meter()
        self.lock = threading.Lock()  # a batch's records call at once: one meter, each call's state its thread's
        self._call = threading.local()
        client.meta.events.register("before-call.dynamodb", self._on_before)
        client.meta.events.register("after-call.dynamodb", self._on_after)

    def _item(self, key: dict[str, Any]) -> Snapshot | None:
        """The stored item now, copied (moto updates its items in place)."""
        item = self.backend.get_item(self.table, {"pk": key["pk"], "sk": key["sk"]})
        if item is None:
            return None
        keys = tuple(
            tuple(item.attrs[a].value for a in index) if all(a in item.attrs for a in index) else None
            for index in INDEXES
        )
        return Snapshot(item.size(), json.dumps(item.to_json(), sort_keys=True, default=str), keys)

    def _writes(self, name: str, params: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        if name == "TransactWriteItems":
            out = []
            for entry in params["TransactItems"]:
                ((kind, spec),) = entry.items()
                out.append((f"txn-{kind}", spec.get("Key") or {k: spec["Item"][k] for k in ("pk", "sk")}))
            return out
        if name in ("PutItem", "UpdateItem", "DeleteItem"):
            return [(name, params.get("Key") or {k: params["Item"][k] for k in ("pk", "sk")})]
        if name == "BatchWriteItem":
            return [
                ("BatchWriteItem", (r.get("PutRequest") or {}).get("Item") or r["DeleteRequest"]["Key"])
                for r in params["RequestItems"].get(self.table, [])
            ]
        return []

    def _on_before(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        t0 = time.thread_time()
        params = json.loads(params["body"])  # the request as serialized (botocore's request_dict)
        with self.lock:
            self.meter.calls.append(model.name)
            self._call.before = [(kind, key, self._item(key)) for kind, key in self._writes(model.name, params)]
            self._call.params = params
            self.meter.overhead_s += time.thread_time() - t0

    def _on_after(self, model: Any, parsed: dict[str, Any], **_: Any) -> None:
        t0 = time.thread_time()
        with self.lock:
            self._bill(model.name, self._call.params, self._call.before, parsed)
            self.meter.overhead_s += time.thread_time() - t0

    def _bill(self, name: str, params: dict[str, Any], writes: list[Any], parsed: dict[str, Any]) -> None:
        if "Error" not in parsed:
            for kind, key, before in writes:
                after = self._item(key)
                if kind == "txn-ConditionCheck":
                    after = before
                size = max(before.size if before else 0, after.size if after else 0)
                self.meter.wru_table += max(1, math.ceil(size / 1024)) * (2 if kind.startswith("txn-") else 1)
                self.meter.wru_index += sum(_index_writes(before, after, n) for n in range(len(INDEXES)))
            if name == "GetItem":
                self.meter.rru += _read_units([parsed.get("Item")], params.get("ConsistentRead", False))
            elif name == "BatchGetItem":
                request = params["RequestItems"].get(self.table, {})
                found = parsed.get("Responses", {}).get(self.table, [])
                units = sum(_read_units([item], request.get("ConsistentRead", False)) for item in found)
                self.meter.rru += units + len(request.get("Keys", [])) - len(found)  # a missing key: 1 unit
            elif name == "Query":
                self.meter.rru += _read_units(
                    parsed.get("Items", []), params.get("ConsistentRead", False), sum_first=True
                )


def _index_writes(before: Snapshot | None, after: Snapshot | None, n: int) -> int:
    """Write units of one item's change on index ``n`` (1 a KB of what it projects; 2 writes when its
    index key changes). A keys-only index projects the table's and its own keys: well under a KB,
    and only a change of those writes on it."""
    old = before.index_keys[n] if before else None
    new = after.index_keys[n] if after else None
    if old is None and new is None:
        return 0
    keys_only = INDEX_SPECS[n][1]
    units = 1 if keys_only else max(1, math.ceil(max(before.size if before else 0, after.size if after else 0) / 1024))
    if old is not None and new is not None:
        if old != new:
            return 2 * units
        if keys_only or (before is not None and after is not None and before.body == after.body):
            return 0  # nothing it projects changed
    return units


def _read_units(items: list[Any], consistent: bool, *, sum_first: bool = False) -> float:
    from moto.dynamodb.models.dynamo_type import Item

    def size(item: Any) -> int:
        return Item(hash_key=None, range_key=None, attrs=item).size() if item else 0  # type: ignore[arg-type]

    sizes = [size(i) for i in items]
    units = max(1, math.ceil(sum(sizes) / 4096)) if sum_first else sum(max(1, math.ceil(s / 4096)) for s in sizes)
    return units * (1.0 if consistent else 0.5)


@dataclass(frozen=True)
class Kind:
    label: str
    steps: int  # model calls per wake
    script: list[dict[str, Any]]
    cron: bool = False
    deliver_final: str = "never"


KINDS = (
    Kind("one-step background", 1, ONE_STEP),
    Kind("one-step background, final answer sent (log channel)", 1, ONE_STEP, deliver_final="if_nothing_sent"),
    Kind("two-step background, one delivery (log channel)", 2, TWO_STEP),
    Kind("one-step cron", 1, ONE_STEP, cron=True),
)


@dataclass
class Figures:
    calls: list[str]
    other_calls: list[str]
    wru_table: float
    wru_index: float
    rru: float
    cpu_s: float
    logged: int


LOCK = threading.Lock()


@contextmanager
def _moto_cpu(meter_of: Callable[[], Meter]) -> Iterator[None]:
    """Charges the CPU spent inside moto's botocore stub (the server's side) to the meter's overhead."""
    from moto.core.botocore_stubber import BotocoreStubber

    original = BotocoreStubber.__call__

    def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        t0 = time.thread_time()
        try:
            return original(self, *args, **kwargs)
        finally:
            spent = time.thread_time() - t0
            with LOCK:
                meter_of().overhead_s += spent

    BotocoreStubber.__call__ = timed  # type: ignore[method-assign]
    try:
        yield
    finally:
        BotocoreStubber.__call__ = original  # type: ignore[method-assign]


def measure(wakes: int) -> dict[str, list[Figures]]:
    from moto import mock_aws

    from agentwake_local import moto_patches

    moto_patches.apply()
    out: dict[str, list[Figures]] = {}
    with mock_aws():
        from agentwake import bootstrap
        from agentwake.handlers import background_result, cron_wake
        from agentwake.store import aws
        from tests.integration.test_wake_handlers import result_body, sqs_record
        from tests.support.aws import FakeLambdaContext, create_resources
        from tests.support.builders import seed_job, seed_session, seed_task
        from tests.support.probes import AwsCalls

        res = create_resources()
        os.environ.update(res.env())
        os.environ["AGENTWAKE_RUN_TIMEOUT_MARGIN_MS"] = "5000"  # as template.yaml
        bootstrap.reset_caches()
        store = bootstrap.store()
        capacity = Capacity(store.table.db, res.table)
        others = [AwsCalls(aws.client(s), s) for s in ("sqs", "scheduler")]
        with _moto_cpu(lambda: capacity.meter):
            for k, kind in enumerate(KINDS):
                session = f"s{k}"
                seed_session(
                    store,
                    session,
                    providers=[{"type": "scripted", "id": "p", "script": kind.script}],
                    deliver_final=kind.deliver_final,
                )
                if kind.cron:
                    seed_job(store, f"j{k}", session)
                figures = []
                for i in range(wakes + 1):  # the first: a warm-up, left out
                    if kind.cron:
                        event: dict[str, Any] = {
                            "job_id": f"j{k}",
                            "session_id": session,
                            "scheduled_time": f"2026-11-30T06:{i // 60:02d}:{i % 60:02d}Z",
                        }
                    else:
                        task = f"{session}-t{i}"
                        seed_task(store, task, session)
                        event = {"Records": [sqs_record(result_body(task, session))]}
                    capacity.meter = Meter()
                    before_other = [len(o.calls) for o in others]
                    logged, t0 = LOGGED.bytes, time.thread_time()
                    answer = (cron_wake.handler if kind.cron else background_result.handler)(event, FakeLambdaContext())
                    cpu = time.thread_time() - t0 - capacity.meter.overhead_s
                    if answer.get("batchItemFailures") or answer.get("status", "succeeded") != "succeeded":
                        raise AssertionError(f"{kind.label}: the wake did not succeed: {answer}")
                    other = [c for o, n in zip(others, before_other, strict=True) for c in o.calls[n:]]
                    m, capacity.meter = capacity.meter, Meter()  # the next seed is not this wake's
                    figures.append(Figures(m.calls, other, m.wru_table, m.wru_index, m.rru, cpu, LOGGED.bytes - logged))
                out[kind.label] = figures[1:]
            out[BATCH_LABEL] = _batches(store, capacity, others, max(2, wakes // BATCH) + 1)[1:]
    return out


BATCH_LABEL = f"one-step background, batch of {BATCH} sessions"


def _batches(store: Any, capacity: Capacity, others: list[Any], n: int) -> list[Figures]:
    """``n`` invocations of the result handler, each with one record of each of ``BATCH`` sessions
    (the first a warm-up): the figures of the whole batch (its calls, capacity, CPU, bytes logged)."""
    from agentwake.handlers import background_result
    from tests.integration.test_wake_handlers import result_body, sqs_record
    from tests.support.aws import FakeLambdaContext
    from tests.support.builders import seed_session, seed_task

    sessions = [f"b{i}" for i in range(BATCH)]
    for session in sessions:
        seed_session(
            store, session, providers=[{"type": "scripted", "id": "p", "script": ONE_STEP}], deliver_final="never"
        )
    figures = []
    for i in range(n):
        records = []
        for session in sessions:
            seed_task(store, f"{session}-t{i}", session)
            records.append(sqs_record(result_body(f"{session}-t{i}", session)))
        capacity.meter = Meter()
        before_other = [len(o.calls) for o in others]
        logged, t0 = LOGGED.bytes, time.process_time()  # every thread's CPU: the records may run side by side
        answer = background_result.handler({"Records": records}, FakeLambdaContext())
        cpu = time.process_time() - t0 - capacity.meter.overhead_s
        if answer.get("batchItemFailures"):
            raise AssertionError(f"{BATCH_LABEL}: a record did not succeed: {answer}")
        other = [c for o, b in zip(others, before_other, strict=True) for c in o.calls[b:]]
        m, capacity.meter = capacity.meter, Meter()
        figures.append(Figures(m.calls, other, m.wru_table, m.wru_index, m.rru, cpu, LOGGED.bytes - logged))
    return figures


def dollars(
    kind: Kind, f: Figures, *, latency_s: float, rtt_s: float, records: int = 1, lanes: int = 1
) -> dict[str, float]:
    """$ per million wakes of one kind, by share. ``f``: the figures of one invocation holding
    ``records`` records of different sessions, run ``lanes`` at a time (1, 1: a wake alone).

    Billed time: per wave of ``lanes`` records, the model's latency per step and a round trip per
    AWS call of one record; then the invocation's CPU, scaled to the function's share of a vCPU and
    added (not overlapped with the waits: an upper bound). Divided among the records."""
    waves = math.ceil(records / lanes)
    calls_per_record = (len(f.calls) + len(f.other_calls)) / records
    billed_s = waves * (kind.steps * latency_s + calls_per_record * rtt_s) + f.cpu_s * CPU_SCALE
    sqs = len([c for c in f.other_calls if c in ("SendMessage", "SendMessageBatch")])
    if kind.cron:  # the schedule's invocation
        queue = records * PRICES["scheduler_invocation"] + sqs * PRICES["sqs_request"]
    else:  # the producer's SendMessage a record; the event source's ReceiveMessage and DeleteMessage(Batch) a batch
        queue = (records + 2 + sqs) * PRICES["sqs_request"]
    lambda_ = billed_s * MEMORY_GB * PRICES["lambda_gb_s_arm64"] + PRICES["lambda_request"]
    dynamodb = (f.wru_table + f.wru_index) * PRICES["dynamodb_wru"] + f.rru * PRICES["dynamodb_rru"]
    logs = f.logged / 1e9 * PRICES["logs_gb_ingested"]
    return {
        "lambda": 1e6 * lambda_ / records,
        "dynamodb": 1e6 * dynamodb / records,
        "logs+queue": 1e6 * (logs + queue) / records,
    }


def median_figures(figures: list[Figures]) -> Figures:
    def med(get: Callable[[Figures], float]) -> float:
        return float(statistics.median(get(f) for f in figures))

    calls = statistics.median_low([(len(f.calls), f.calls, f.other_calls) for f in figures])
    return Figures(
        calls[1],
        calls[2],
        med(lambda f: f.wru_table),
        med(lambda f: f.wru_index),
        med(lambda f: f.rru),
        med(lambda f: f.cpu_s),
        int(med(lambda f: f.logged)),
    )


def report(measured: dict[str, list[Figures]], *, latency_s: float, rtt_s: float, lanes: int) -> list[str]:
    lines = [
        f"cost per wake kind (median of {len(next(iter(measured.values())))} warm wakes each through the deployed "
        f"handler, each kind's session keeping the history its earlier wakes wrote; the batch row: invocations of {BATCH} "
        f"records of {BATCH} sessions, its figures per wake; capacity computed from item sizes: moto's "
        "ReturnConsumedCapacity is a constant):",
        f"  {'wake':60s} {'calls':>5s} {'WRU (table+index)':>17s} {'RRU':>4s} {'CPU ms':>6s} {'logged B':>8s}"
        f" {'$/M lambda':>10s} {'dynamodb':>8s} {'logs+queue':>10s} {'total':>6s}",
    ]
    rows = [(kind.label, kind, 1, 1) for kind in KINDS]
    rows.insert(1, (f"{BATCH_LABEL}, {lanes} at a time", KINDS[0], BATCH, lanes))
    for label, kind, records, lanes_ in rows:
        f = median_figures(measured[BATCH_LABEL if records > 1 else label])
        d = dollars(kind, f, latency_s=latency_s, rtt_s=rtt_s, records=records, lanes=lanes_)
        per = records  # the batch's figures are shown per wake
        wru = f"{(f.wru_table + f.wru_index) / per:g} ({f.wru_table / per:g}+{f.wru_index / per:g})"
        calls = (len(f.calls) + len(f.other_calls)) / per
        lines.append(
            f"  {label:60s} {calls:5g} {wru:>17s} {f.rru / per:4g} {f.cpu_s * 1000 / per:6.1f}"
            f" {f.logged // per:8,d} {d['lambda']:10.2f} {d['dynamodb']:8.2f} {d['logs+queue']:10.2f}"
            f" {sum(d.values()):6.2f}"
        )
        if records == 1:
            lines.append(f"    calls: {' '.join(f.calls + f.other_calls)}")
    p = PRICES
    lines += [
        f"  assumed: the model answers in {latency_s:g} s a step; {rtt_s * 1000:g} ms a round trip per AWS call; "
        f"{MEMORY_GB * 1024:.0f} MB arm64 (template.yaml), whose CPU share is 512/1769 of a vCPU: CPU ms measured "
        f"here x {CPU_SCALE:.2f} billed, added to the waits; model tokens not priced",
        f"  prices (us-east-1 list): Lambda arm64 ${p['lambda_gb_s_arm64']:.10f}/GB-s + ${p['lambda_request'] * 1e6:.2f}/M "
        f"requests; DynamoDB on-demand ${p['dynamodb_wru'] * 1e6:.3f}/M WRU, ${p['dynamodb_rru'] * 1e6:.3f}/M RRU; "
        f"CloudWatch Logs ${p['logs_gb_ingested']:.2f}/GB ingested; SQS ${p['sqs_request'] * 1e6:.2f}/M requests "
        f"(a background wake: the producer's send, the event source's receive and delete, and its own sends); "
        f"EventBridge Scheduler ${p['scheduler_invocation'] * 1e6:.2f}/M invocations (cron)",
        "  peers for a one-step background wake (issue 37's model, not measured here): "
        "Step Functions Standard >= $125/M, Lambda durable functions >= $38/M",
    ]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wakes", type=int, default=20, help="measured wakes per kind (after one warm-up)")
    parser.add_argument("--model-latency", type=float, default=2.0, help="assumed seconds per model step")
    parser.add_argument("--round-trip-ms", type=float, default=10.0, help="assumed ms per AWS call")
    parser.add_argument(
        "--lanes",
        type=int,
        default=_template_default("BackgroundRecordConcurrency"),
        help="records of different sessions one invocation runs at once (default: template.yaml's)",
    )
    args = parser.parse_args()
    os.environ["AGENTWAKE_RECORD_CONCURRENCY"] = str(args.lanes)  # the handler runs its batch so
    sys.stdout = LOGGED
    try:
        measured = measure(args.wakes)
    finally:
        sys.stdout = REPORT
    lanes = args.lanes
    print("\n".join(report(measured, latency_s=args.model_latency, rtt_s=args.round_trip_ms / 1000, lanes=lanes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
