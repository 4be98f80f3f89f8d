"""The batch processor that runs a batch's records side by side, one lane per session
(``agentwake.wake.lanes``; docs/durability.md, "Records side by side").

Concurrency is shown without timing anything: records of different sessions wait at a barrier
that only opens when all of them are in their handler at once (a generous bound breaks it), and
the handler counts how many are in flight. One session's records are shown in order and never
overlapping by the intervals the handler records (a counter, not a clock).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.utilities.batch import process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from agentwake.observability import logger
from agentwake.wake.background import handed_first
from agentwake.wake.lanes import SessionLanes

#: how long a barrier waits for every record it expects (a bound, never a measure)
BOUND_S = 120.0


def record(message_id: str, session: str | None, *, body: str | None = None, handed: bool = False) -> dict[str, Any]:
    attributes = {"agentwake-handed-at": {"stringValue": "1", "dataType": "String"}} if handed else {}
    return {
        "messageId": message_id,
        "receiptHandle": f"rh-{message_id}",
        "body": body if body is not None else json.dumps({"session_id": session, "id": message_id}),
        "attributes": {"ApproximateReceiveCount": "1"},
        "messageAttributes": attributes,
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:results",
    }


def session_of(r: SQSRecord) -> str:
    return str(json.loads(r.body)["session_id"])


class Flight:
    """What the handler saw: each record's start and end (a shared counter's ticks), the most records
    in their handler at once, and the thread each ran on."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tick = 0
        self.in_flight = 0
        self.most = 0
        self.spans: dict[str, tuple[int, int]] = {}

    def enter(self) -> int:
        with self._lock:
            self._tick += 1
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            return self._tick

    def leave(self, message_id: str, started: int) -> None:
        with self._lock:
            self._tick += 1
            self.in_flight -= 1
            self.spans[message_id] = (started, self._tick)


def run_batch(
    records: list[dict[str, Any]],
    work: Callable[[SQSRecord], None],
    *,
    concurrency: int,
    flight: Flight | None = None,
) -> dict[str, Any]:
    flight = flight or Flight()

    def handler(record: SQSRecord) -> str:  # Powertools passes it by this name
        started = flight.enter()
        try:
            work(record)
        finally:
            flight.leave(record.message_id, started)
        return "ok"

    processor = SessionLanes(session_of, concurrency)
    return dict(
        process_partial_response(event=handed_first({"Records": records}), record_handler=handler, processor=processor)
    )


def test_records_of_different_sessions_are_in_flight_at_once() -> None:
    # GIVEN ten records of ten sessions, each waiting until all ten are in their handler
    records = [record(f"m{i}", f"s{i}") for i in range(10)]
    barrier = threading.Barrier(10, timeout=BOUND_S)
    flight = Flight()
    # WHEN the batch runs with a concurrency of 10
    answer = run_batch(records, lambda r: barrier.wait(), concurrency=10, flight=flight)
    # THEN all ten were in flight at once (the barrier opened), and every record succeeded
    assert flight.most == 10
    assert answer == {"batchItemFailures": []}


def test_one_sessions_records_run_in_batch_order_and_never_overlap() -> None:
    # GIVEN three records of session A among seven of other sessions, the others waiting until A's
    # lane and theirs are all running (so the lanes do overlap)
    others = [record(f"o{i}", f"s{i}") for i in range(7)]
    mine = [record(f"a{i}", "A") for i in range(3)]
    records = [others[0], mine[0], others[1], others[2], mine[1], others[3], others[4], mine[2], others[5], others[6]]
    barrier = threading.Barrier(8, timeout=BOUND_S)  # seven others and A's first record

    def work(r: SQSRecord) -> None:
        if r.message_id != "a1" and r.message_id != "a2":
            barrier.wait()

    flight = Flight()
    # WHEN the batch runs with a concurrency of 10
    answer = run_batch(records, work, concurrency=10, flight=flight)
    # THEN the lanes overlapped, A's three records ran in batch order, each after the one before ended
    assert flight.most == 8
    spans = [flight.spans[f"a{i}"] for i in range(3)]
    assert spans == sorted(spans)
    assert all(before[1] < after[0] for before, after in zip(spans, spans[1:], strict=False)), spans
    assert answer == {"batchItemFailures": []}


def test_a_failing_record_is_exactly_the_one_batch_item_failure() -> None:
    # GIVEN five records of five sessions in flight at once, of which one fails
    records = [record(f"m{i}", f"s{i}") for i in range(5)]
    barrier = threading.Barrier(5, timeout=BOUND_S)

    def work(r: SQSRecord) -> None:
        barrier.wait()
        if r.message_id == "m3":
            raise RuntimeError("the run failed")

    # WHEN the batch runs  THEN exactly that record's id is answered as a failure; the others stand
    assert run_batch(records, work, concurrency=5) == {"batchItemFailures": [{"itemIdentifier": "m3"}]}


def test_failures_are_answered_in_batch_order_whatever_order_the_lanes_end_in() -> None:
    # GIVEN four records of four sessions that all fail, the last one of the batch first
    records = [record(f"m{i}", f"s{i}") for i in range(4)] + [record("ok", "s9")]
    order = [threading.Event() for _ in range(4)]

    def work(r: SQSRecord) -> None:
        if r.message_id == "ok":
            return
        i = int(r.message_id[1:])
        if i < 3:
            assert order[i + 1].wait(BOUND_S)
        order[i].set()
        raise RuntimeError(f"failed {i}")

    # WHEN the batch runs  THEN the failures are listed as the batch lists them
    answer = run_batch(records, work, concurrency=10)
    assert answer == {"batchItemFailures": [{"itemIdentifier": f"m{i}"} for i in range(4)]}


def test_a_body_that_does_not_parse_fails_alone_in_a_lane_of_its_own() -> None:
    # GIVEN a malformed body among records of two sessions, all in flight at once
    records = [record("m0", "s0"), record("bad", None, body='{"session_id": 4'), record("m1", "s1")]
    barrier = threading.Barrier(3, timeout=BOUND_S)

    def work(r: SQSRecord) -> None:
        barrier.wait()
        session_of(r)  # the use case's own parser refuses it

    flight = Flight()
    # WHEN the batch runs  THEN it ran beside the others (its own lane) and is the one failure
    assert run_batch(records, work, concurrency=3, flight=flight) == {"batchItemFailures": [{"itemIdentifier": "bad"}]}
    assert flight.most == 3


def test_concurrency_one_runs_the_batch_one_record_after_another_in_order() -> None:
    # GIVEN records of three sessions, with a concurrency of 1
    records = [record(f"m{i}", f"s{i}") for i in range(3)]
    flight = Flight()
    threads: list[str] = []
    # WHEN the batch runs
    run_batch(records, lambda r: threads.append(threading.current_thread().name), concurrency=1, flight=flight)
    # THEN one at a time, in batch order, on the invocation's own thread (as BatchProcessor does)
    assert flight.most == 1
    spans = [flight.spans[f"m{i}"] for i in range(3)]
    assert spans == sorted(spans)
    assert set(threads) == {threading.current_thread().name}


def test_lanes_start_with_the_records_a_release_handed_the_session_to() -> None:
    # GIVEN a batch whose last record was handed its session, with two threads for three lanes
    records = [record("m0", "s0"), record("m1", "s1"), record("h", "s2", handed=True)]
    # WHEN the handler orders the batch and the processor makes its lanes
    processor = SessionLanes(session_of, 2)
    processor.records = handed_first({"Records": records})["Records"]
    # THEN the handed record's lane comes first: it is submitted to the threads first
    assert [processor.records[lane[0]]["messageId"] for lane in processor.lanes()] == ["h", "m0", "m1"]


def test_a_records_log_keys_never_reach_another_records_lines() -> None:
    # GIVEN six records of six sessions in flight at once, each setting its keys, then logging once
    # all of them have set theirs, into a buffer in place of stdout
    records = [record(f"m{i}", f"s{i}") for i in range(6)]
    keyed = threading.Barrier(6, timeout=BOUND_S)
    handler = logger.registered_handler
    assert isinstance(handler, logging.StreamHandler)
    buffer, previous = io.StringIO(), logger.log_level

    def work(r: SQSRecord) -> None:
        logger.thread_safe_clear_keys()
        logger.thread_safe_append_keys(message_id=r.message_id)
        logger.thread_safe_append_keys(session_id=session_of(r), run_id=f"run-{r.message_id}")
        keyed.wait()
        logger.info("a line of the record")

    # WHEN the batch runs
    stream = handler.setStream(buffer)
    logger.setLevel(logging.INFO)
    try:
        run_batch(records, work, concurrency=6)
    finally:
        handler.setStream(stream)
        logger.setLevel(previous)
    # THEN each line carries its own record's keys and no other's
    lines = [json.loads(line) for line in buffer.getvalue().splitlines()]
    assert len(lines) == 6, buffer.getvalue()
    for line in lines:
        i = line["message_id"][1:]
        assert (line["session_id"], line["run_id"]) == (f"s{i}", f"run-m{i}"), line


def test_metrics_added_from_records_side_by_side_are_all_kept() -> None:
    # GIVEN two records adding the same new metric at once, Powertools' metric set made to hold each
    # lookup of a missing name until the other record looks it up too (or 2 s pass): unguarded, both
    # find it missing, each starts a list of its own, and the second write drops the first's value
    from agentwake.observability import add_metric, metrics

    meet = threading.Barrier(2, timeout=2)

    class Meeting(dict):  # type: ignore[type-arg]
        def get(self, name: Any, default: Any = None) -> Any:
            found = super().get(name, default)
            if name not in self:  # found missing: held until the other finds it too
                with contextlib.suppress(threading.BrokenBarrierError):  # guarded: the other waits outside
                    meet.wait()
            return found

    metrics.clear_metrics()
    shared = metrics.provider.metric_set
    metrics.provider.metric_set = Meeting()
    threads = [threading.Thread(target=add_metric, kwargs={"name": "Steps", "unit": "Count", "value": 1}) for _ in "ab"]
    # WHEN they run
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(BOUND_S)
        # THEN no value was lost: Powertools' read-change-write of its metric set happened one at a time
        assert len(metrics.provider.metric_set["Steps"]["Value"]) == 2
    finally:
        metrics.provider.metric_set = shared
        metrics.clear_metrics()


def test_every_concurrent_runs_secrets_are_redacted_from_every_runs_text() -> None:
    # GIVEN two runs side by side, each resolving its own secret, one ending before the other
    from agentwake.trust.redact import redact, register_secret
    from tests.support.process_state import forget_secrets

    resolved = threading.Barrier(2, timeout=BOUND_S)
    seen: dict[str, str] = {}

    def run(name: str, secret: str, other: str) -> None:
        register_secret(secret)
        resolved.wait()
        seen[name] = redact(f"{name} saw {secret} and {other}")

    try:
        a = threading.Thread(target=run, args=("A", "run-a-secret-0001", "run-b-secret-0002"))
        b = threading.Thread(target=run, args=("B", "run-b-secret-0002", "run-a-secret-0001"))
        for thread in (a, b):
            thread.start()
        for thread in (a, b):
            thread.join(BOUND_S)
        # THEN each run's text lost both secrets, and the one that ended first took none away
        assert seen == {"A": "A saw [REDACTED] and [REDACTED]", "B": "B saw [REDACTED] and [REDACTED]"}
        assert redact("later: run-a-secret-0001 run-b-secret-0002") == "later: [REDACTED] [REDACTED]"
    finally:
        forget_secrets()


def test_the_clients_pool_holds_at_least_the_records_in_flight() -> None:
    # GIVEN the most records an invocation runs side by side, as the template and the settings bound it
    from pathlib import Path

    from cfnlint.decode.cfn_yaml import loads

    from agentwake.settings import MAX_RECORD_CONCURRENCY
    from agentwake.store.aws import MAX_POOL_CONNECTIONS

    body = loads((Path(__file__).resolve().parents[2] / "template.yaml").read_text(encoding="utf-8"))
    parameter = body["Parameters"]["BackgroundRecordConcurrency"]
    # THEN the settings accept exactly the template's range, and a shared client keeps enough connections
    assert int(parameter["MaxValue"]) == MAX_RECORD_CONCURRENCY == int(body["Parameters"]["BatchSize"]["MaxValue"])
    assert MAX_POOL_CONNECTIONS >= MAX_RECORD_CONCURRENCY


def test_no_runtime_module_sets_a_shared_log_key_or_adds_a_metric_unguarded() -> None:
    # GIVEN the runtime's modules
    from pathlib import Path

    runtime = Path(__file__).resolve().parents[2] / "functions" / "agentwake"
    offenders = {
        str(path.relative_to(runtime)): needle
        for path in runtime.rglob("*.py")
        if path.name != "observability.py"
        for needle in ("logger.append_keys(", "logger.remove_keys(", "metrics.add_metric(")
        if needle in path.read_text(encoding="utf-8")
    }
    # THEN per-record keys are thread-safe keys and every metric goes through observability.add_metric
    assert offenders == {}, offenders


def test_a_slow_record_does_not_shorten_the_time_of_another_sessions_record() -> None:
    # GIVEN an invocation with 120 s left, a slow record of session A (it uses 100 s) ahead of a
    # record of session B in the batch, and A's second record after both
    left = [120_000]

    class Context:
        def get_remaining_time_in_millis(self) -> int:
            return left[0]

    records = [record("a1", "A"), record("b", "B"), record("a2", "A")]
    started = threading.Barrier(2, timeout=BOUND_S)
    seen: dict[str, int] = {}

    def handler(record: SQSRecord, lambda_context: Any) -> str:  # Powertools passes both by name
        seen[record.message_id] = lambda_context.get_remaining_time_in_millis()
        if record.message_id in ("a1", "b"):
            started.wait()
        if record.message_id == "a1":
            left[0] -= 100_000  # the slow record's time passes
        return "ok"

    # WHEN the batch runs side by side
    processor = SessionLanes(session_of, 10)
    process_partial_response(event={"Records": records}, record_handler=handler, processor=processor, context=Context())  # type: ignore[arg-type]
    # THEN B's record had the invocation's whole time, not what A's slow record left; A's next
    # record, behind it in its lane, has what is left (and is deferred if that is too little)
    assert seen == {"a1": 120_000, "b": 120_000, "a2": 20_000}


def test_the_invocations_metric_flush_holds_the_lock_records_add_metrics_under() -> None:
    # GIVEN the process's one Metrics, flushed by each invocation (metrics.log_metrics), while on the
    # local stack another invocation's records of the same process may be adding to it
    from agentwake.observability import add_metric, metrics, stdout_lock

    held_elsewhere: list[bool] = []
    serialize = metrics.provider.serialize_metric_set

    def watching(*args: Any, **kwargs: Any) -> Any:
        # WHILE the flush walks the set, another thread tries the lock add_metric takes
        probe = threading.Thread(target=lambda: held_elsewhere.append(not stdout_lock().acquire(blocking=False)))
        probe.start()
        probe.join(60)
        return serialize(*args, **kwargs)

    add_metric(name="Probe", unit="Count", value=1)
    metrics.provider.serialize_metric_set = watching  # type: ignore[method-assign]
    try:
        metrics.flush_metrics()
    finally:
        del metrics.provider.serialize_metric_set
    # THEN it could not take it: no record adds a metric in the middle of the flush
    assert held_elsewhere == [True]
