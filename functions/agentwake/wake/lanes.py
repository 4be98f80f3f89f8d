"""The records of one SQS batch side by side, one lane per session (issue 37; docs/durability.md,
"Records side by side").

A wake spends almost all of its time waiting for its model. ``SessionLanes`` is Powertools'
``BatchProcessor`` with ``process()`` overridden: the batch's records are grouped into lanes by the
session they wake (``lane_of``: the session id the record's own message parser reads; a record
whose body does not parse gets a lane of its own, and fails alone as before), and the lanes run on a
thread pool of at most ``concurrency`` threads. A lane runs its records one after another in batch
order, so two records of one session never overlap and keep their order; lanes start in the order
of their first record (``handed_first`` puts the records a release handed the session to first).

Each record goes through Powertools' own ``_process_record``: its answer (success, or a batch item
failure) is its own, and the response lists the failures in batch order. Each record asks the
invocation's clock for its time when it starts (``lambda_context.get_remaining_time_in_millis``),
and its run's deadline comes from that: a slow record of one lane never shortens another's.

``concurrency`` 1, or a batch with a single lane, runs the records in the invocation's own thread,
one after another, exactly as ``BatchProcessor`` does. Each lane runs in a copy of the invocation's
context (``contextvars``): the run's deadline and the log keys a record sets stay in its lane.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord


class SessionLanes(BatchProcessor):
    """Powertools' SQS ``BatchProcessor``, running the lanes of different sessions side by side."""

    def __init__(self, lane_of: Callable[[SQSRecord], str], concurrency: int) -> None:
        super().__init__(event_type=EventType.SQS)
        self.lane_of = lane_of
        self.concurrency = max(1, concurrency)
        self._lock = threading.Lock()  # the success and failure lists, filled from the lanes

    def lanes(self) -> list[list[int]]:
        """The batch's record indexes by lane, each in batch order, the lanes in the order of their
        first record. A record whose session cannot be read (its body does not parse) is a lane."""
        by_key: dict[object, list[int]] = {}
        for index, record in enumerate(self.records):
            try:
                key: object = ("session", self.lane_of(SQSRecord(record)))
            except Exception:  # it fails alone, with its reason, when it runs
                key = ("unread", index)
            by_key.setdefault(key, []).append(index)
        return list(by_key.values())

    def process(self) -> list[tuple[Any, ...]]:
        if self.concurrency == 1 or len(self.records) < 2:
            return super().process()
        lanes = self.lanes()
        if len(lanes) == 1:
            return super().process()
        from concurrent.futures import ThreadPoolExecutor

        results: list[tuple[Any, ...]] = [()] * len(self.records)

        def run(lane: list[int]) -> None:
            for index in lane:
                results[index] = self._process_record(self.records[index])

        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(lanes)), thread_name_prefix="lane") as pool:
            futures = [pool.submit(contextvars.copy_context().run, run, lane) for lane in lanes]
            for future in futures:
                future.result()  # a BaseException of a record (not a batch item failure) ends the invocation
        # the answer in batch order, whatever order the lanes finished in
        self.success_messages[:] = [entry[2] for entry in results if entry[0] == "success"]
        self.fail_messages[:] = [entry[2] for entry in results if entry[0] == "fail"]
        return results

    def success_handler(self, record: Any, result: Any) -> Any:
        with self._lock:
            return super().success_handler(record, result)

    def failure_handler(self, record: Any, exception: Any) -> Any:
        with self._lock:
            return super().failure_handler(record, exception)
