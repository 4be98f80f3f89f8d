"""Reading a whole SQS queue without consuming it: the scan every DLQ command stands on.

SQS has no "list": a reader receives messages, and a received message is hidden from everyone for
its visibility timeout (the *hold*). A scan therefore holds what it has seen while it pages on, and
the danger is a hold that runs out mid-scan: the message reappears, the scan receives it again,
sees "nothing new" and stops early — reporting success on a partial view.

A :class:`Scanner` makes that impossible to miss:

- **holds last the scan**: the hold is at least :data:`SCAN_HOLD_PER_MESSAGE` seconds for each
  message the queue reports when the scan starts (capped), and holds are **extended as the scan
  goes**: before any hold is within half its length of running out, every held message's
  visibility is renewed (``ChangeMessageVisibilityBatch``);
- **receivers work in parallel** (:data:`SCAN_RECEIVERS` threads, in rounds: each receives until
  a receive brings nothing new, then the queue's counts decide): SQS hides what one receiver
  holds from the others, and the holds are released as many batches at a time;
- **a message seen twice is counted once** (the newest receipt handle is kept: only it can delete);
- **the end is reconciled with the queue's own counts**: the scan ends when nothing is visible and
  the queue's in-flight count is what the scan holds; otherwise it keeps receiving, and after
  ``max_fruitless_rounds`` rounds that brought nothing new it gives up and says why;
- a hold that was lost (its renewal failed, or it ran out before it could be renewed) and not
  received again does not make the *view* incomplete (the message was seen), but nothing may act
  on that message: :meth:`Scanner.lost_holds` names them, and claims refuse them.

The result says whether it is complete and, if not, why (:attr:`ScanResult.problems`); callers turn
an incomplete scan into a non-zero exit (:class:`IncompleteScan`).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from agentwake_ops.context import OpsError

#: seconds each received message is held invisible while the scan pages on (renewed as it goes)
SCAN_HOLD_SECONDS = 60
#: ReceiveMessage calls a scan makes at a time (SQS serves concurrent receivers of one queue; each
#: call holds what it received, so no two receivers get the same message while the holds last)
SCAN_RECEIVERS = 8
#: a scan's hold is at least this per message the queue reports when the scan starts (capped by
#: SCAN_HOLD_CAP_SECONDS), so a large scan is not renewing holds while it still receives: 100 s for
#: 10,000 messages, which the local moto server scans in about 40 s on a shared 2-core machine
SCAN_HOLD_PER_MESSAGE = 0.01
SCAN_HOLD_CAP_SECONDS = 900
#: SQS's upper bound for a visibility timeout
MAX_VISIBILITY_SECONDS = 43_200
#: receives in a row that bring nothing new, while the queue says messages are visible, before giving up
MAX_FRUITLESS_ROUNDS = 20
#: re-reads of the queue's counts when they disagree with what the scan holds (approximate on AWS)
SETTLE_ROUNDS = 3


class IncompleteScan(OpsError):
    """A scan could not be sure it saw every message of the queue."""


#: (messages seen so far, the queue's count when the scan started) -> None
ScanProgress = Callable[[int, int], None]


@dataclass
class Held:
    """One message the scan holds: the newest copy received, its receipt handle, and until when."""

    message: dict[str, Any]
    handle: str
    #: clock() time by which the hold runs out (measured before the call that set it: conservative)
    until: float
    #: every receipt handle received for it (a hold that ran out yields the message again)
    handles: list[str] = field(default_factory=list)

    @property
    def message_id(self) -> str:
        return str(self.message["MessageId"])


@dataclass
class ScanResult:
    url: str
    held: dict[str, Held] = field(default_factory=dict)
    #: receives that returned at least one message (each costs one ApproximateReceiveCount per message)
    receives: int = 0
    #: copies of a message received more than once (its hold had run out)
    duplicates: int = 0
    #: ids whose hold was lost and not received again: seen, but not held now
    lost: set[str] = field(default_factory=set)
    #: the queue's counts when the scan ended: visible, in flight, delayed
    final_counts: tuple[int, int, int] = (0, 0, 0)
    problems: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.problems

    def messages(self) -> list[dict[str, Any]]:
        """Every distinct message seen, oldest sent first."""
        return sorted(
            (h.message for h in self.held.values()),
            key=lambda m: int((m.get("Attributes") or {}).get("SentTimestamp", "0")),
        )

    def require_complete(self, what: str) -> None:
        if self.problems:
            raise IncompleteScan(
                f"{what}: the scan of {queue_name(self.url)} saw {len(self.held)} message(s) but cannot be sure "
                f"it saw them all ({'; '.join(self.problems)}); nothing was changed — run it again"
            )


def queue_name(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


def queue_counts(sqs: Any, url: str) -> tuple[int, int, int]:
    """(visible, in flight, delayed) as the queue reports them (approximate on AWS)."""
    attrs = sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=[
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ],
    )["Attributes"]
    return (
        int(attrs.get("ApproximateNumberOfMessages", 0)),
        int(attrs.get("ApproximateNumberOfMessagesNotVisible", 0)),
        int(attrs.get("ApproximateNumberOfMessagesDelayed", 0)),
    )


def change_visibility(sqs: Any, url: str, handles: Iterable[str], seconds: int, *, workers: int = 1) -> list[str]:
    """ChangeMessageVisibilityBatch in tens, ``workers`` calls at a time; returns the handles that
    failed (never raises)."""
    chunks: list[list[str]] = []
    for handle in handles:
        if not chunks or len(chunks[-1]) == 10:
            chunks.append([])
        chunks[-1].append(handle)

    def change(batch: list[str]) -> list[str]:
        entries = [{"Id": str(i), "ReceiptHandle": h, "VisibilityTimeout": seconds} for i, h in enumerate(batch)]
        try:
            resp = sqs.change_message_visibility_batch(QueueUrl=url, Entries=entries)
        except Exception:
            return batch
        return [batch[int(e["Id"])] for e in resp.get("Failed", [])]

    if workers <= 1 or len(chunks) <= 1:
        return [h for batch in chunks for h in change(batch)]
    with ThreadPoolExecutor(min(workers, len(chunks)), thread_name_prefix="sqs-visibility") as pool:
        return [h for failed in pool.map(change, chunks) for h in failed]


def delete_batch(sqs: Any, url: str, handles: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """DeleteMessageBatch in tens for ``{message id: receipt handle}``; returns (deleted ids, {id: why not})."""
    deleted: list[str] = []
    failed: dict[str, str] = {}
    items = list(handles.items())
    for start in range(0, len(items), 10):
        chunk = items[start : start + 10]
        entries = [{"Id": str(i), "ReceiptHandle": handle} for i, (_, handle) in enumerate(chunk)]
        try:
            resp = sqs.delete_message_batch(QueueUrl=url, Entries=entries)
        except Exception as exc:
            failed.update({mid: f"{type(exc).__name__}: {exc}" for mid, _ in chunk})
            continue
        for ok in resp.get("Successful", []):
            deleted.append(chunk[int(ok["Id"])][0])
        for bad in resp.get("Failed", []):
            failed[chunk[int(bad["Id"])][0]] = f"{bad.get('Code', 'Failed')}: {bad.get('Message', '')}".rstrip(": ")
    return deleted, failed


class Scanner:
    """Receive every message of one queue, each held until :meth:`release` or :meth:`keep`."""

    def __init__(
        self,
        sqs: Any,
        url: str,
        *,
        hold_seconds: int = SCAN_HOLD_SECONDS,
        on_progress: ScanProgress | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        max_fruitless_rounds: int = MAX_FRUITLESS_ROUNDS,
        settle_delay: float = 1.0,
        receivers: int | None = None,
    ) -> None:
        self.sqs = sqs
        self.url = url
        self.hold = max(2, min(MAX_VISIBILITY_SECONDS, int(hold_seconds)))
        self.on_progress = on_progress
        self.clock = clock
        self.sleep = sleep
        self.max_fruitless_rounds = max_fruitless_rounds
        self.settle_delay = settle_delay
        #: ReceiveMessage calls at a time (default SCAN_RECEIVERS)
        self.receivers = max(1, int(SCAN_RECEIVERS if receivers is None else receivers))
        self.result = ScanResult(url)
        #: guards ``result`` (receivers take their batches concurrently); ``_renewing``: one renewal at a time
        self._lock = threading.Lock()
        self._renewing = threading.Lock()
        #: no hold runs out before this (a lower bound: renew_due is cheap until it nears)
        self._earliest = float("inf")
        self._expected = 0
        self._stop = threading.Event()
        self._executor: ThreadPoolExecutor | None = None

    # --- holding ---------------------------------------------------------------------------------

    def renew_due(self, *, force: bool = False) -> None:
        """Before any hold is within half a hold of running out, renew every hold within three
        quarters of it (all of them with ``force``).

        Cheap when nothing is due (the earliest hold is tracked), so every receive may call it; one
        receiver renews at a time while the others keep receiving."""
        if not force and self.clock() < self._earliest - self.hold / 2:
            return
        with self._renewing:
            with self._lock:
                now = self.clock()
                # once one is due, every hold within three quarters of running out: the next renewal
                # is then a quarter of a hold away, not one receive (a long scan renews in slices)
                due = [(h, h.handle) for h in self.result.held.values() if force or h.until - now < self.hold * 3 / 4]
                for h, _ in due:
                    if h.until <= now:
                        # ran out before it could be renewed: it may have been visible (and taken) meanwhile
                        self.result.lost.add(h.message_id)
            if due:
                started = self.clock()
                failed = set(
                    change_visibility(
                        self.sqs, self.url, (handle for _, handle in due), self.hold, workers=self.receivers
                    )
                )
                with self._lock:
                    for h, handle in due:
                        if h.handle != handle:
                            continue  # received again meanwhile: a fresh handle and hold
                        if handle in failed:
                            self.result.lost.add(h.message_id)
                        else:
                            h.until = started + self.hold
            with self._lock:
                self._earliest = min((h.until for h in self.result.held.values()), default=float("inf"))

    def _take(self, batch: list[dict[str, Any]], received_at: float) -> int:
        new = 0
        until = received_at + self.hold
        with self._lock:
            for message in batch:
                mid = str(message["MessageId"])
                handle = str(message["ReceiptHandle"])
                held = self.result.held.get(mid)
                if held is None:
                    self.result.held[mid] = Held(message, handle, until, [handle])
                    new += 1
                else:
                    self.result.duplicates += 1
                    held.message, held.handle, held.until = message, handle, until
                    held.handles.append(handle)
                    self.result.lost.discard(mid)  # held again, with a fresh handle
            if batch:
                self.result.receives += 1
                self._earliest = min(self._earliest, until)
            if new and self.on_progress:
                self.on_progress(len(self.result.held), max(self._expected, len(self.result.held)))
        return new

    # --- the scan --------------------------------------------------------------------------------

    def _receive(self) -> int:
        """One ReceiveMessage of up to ten messages, taken; returns how many were new."""
        self.renew_due()
        started = self.clock()
        resp = self.sqs.receive_message(
            QueueUrl=self.url,
            MaxNumberOfMessages=10,
            VisibilityTimeout=self.hold,
            WaitTimeSeconds=0,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        return self._take(resp.get("Messages", []), started)

    def _receive_until_nothing_new(self) -> None:
        """One receiver: receive until a receive brings nothing new (or another receiver failed)."""
        while not self._stop.is_set():
            try:
                if not self._receive():
                    return
            except BaseException:
                self._stop.set()
                raise

    def _round(self) -> int:
        """Every receiver receives until its receive brings nothing new; returns the new messages."""
        before = len(self.result.held)
        if self.receivers == 1:
            self._receive_until_nothing_new()
        else:
            self._stop.clear()
            futures = [self._pool().submit(self._receive_until_nothing_new) for _ in range(self.receivers)]
            for future in futures:
                future.exception()  # wait for all of them before raising any
            for future in futures:
                future.result()
        return len(self.result.held) - before

    def _pool(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.receivers, thread_name_prefix="sqs-scan")
        return self._executor

    def run(self) -> ScanResult:
        """Receive until reconciled with the queue's counts, or until it is clear it cannot be.

        The receives run in rounds, ``receivers`` at a time: each receiver receives until one of
        its receives brings nothing new; then the queue's counts decide whether the scan is done,
        goes on, or gives up (after ``max_fruitless_rounds`` rounds that brought nothing new while
        the queue says messages are visible)."""
        result = self.result
        visible, in_flight, delayed = queue_counts(self.sqs, self.url)
        self._expected = visible + in_flight + delayed
        # a hold long enough for the whole scan: renewing costs a call per ten held messages
        fits = min(SCAN_HOLD_CAP_SECONDS, math.ceil(self._expected * SCAN_HOLD_PER_MESSAGE))
        self.hold = max(self.hold, min(MAX_VISIBILITY_SECONDS, fits))
        fruitless = 0
        settle = 0
        try:
            while True:
                if self._round():
                    fruitless = 0
                # nothing new: short polling samples a subset of servers, so ask the queue itself
                self.renew_due()
                visible, in_flight, delayed = queue_counts(self.sqs, self.url)
                if visible == 0 and delayed == 0 and in_flight <= len(result.held):
                    break
                if visible > 0 and fruitless < self.max_fruitless_rounds:
                    fruitless += 1
                    continue
                if visible == 0 and settle < SETTLE_ROUNDS:
                    # in flight elsewhere, or delayed: the counts may also simply lag (they do on AWS)
                    settle += 1
                    self.sleep(self.settle_delay)
                    continue
                break
        finally:
            if self._executor is not None:
                # interrupted (Ctrl-C reaches only this thread): the receivers stop after their
                # current receive, so that what the scan holds is what the release makes visible
                self._stop.set()
                self._executor.shutdown(wait=True, cancel_futures=True)
                self._executor = None
        result.final_counts = (visible, in_flight, delayed)
        self._judge()
        if self.on_progress:
            self.on_progress(len(result.held), max(self._expected, len(result.held)))
        return result

    def _judge(self) -> None:
        result = self.result
        visible, in_flight, delayed = result.final_counts
        if visible:
            result.problems.append(
                f"the queue still reports {visible} visible message(s) after "
                f"{self.max_fruitless_rounds} receives that brought nothing new "
                f"(holds of {self.hold}s ran out {result.duplicates} time(s) during the scan)"
            )
        if in_flight > len(result.held):
            result.problems.append(
                f"{in_flight - len(result.held)} message(s) are in flight but were never received by this scan "
                "(another reader or a redrive in progress holds them)"
            )
        if delayed:
            result.problems.append(f"{delayed} message(s) are delayed and not yet visible")

    def lost_holds(self, message_ids: Iterable[str]) -> set[str]:
        """Those of ``message_ids`` this scan saw but no longer surely holds (a hold ran out or
        could not be renewed, and the message was not received again): nothing may act on them."""
        return {mid for mid in message_ids if mid in self.result.lost}

    # --- after the scan --------------------------------------------------------------------------

    def keep(self, message_ids: Iterable[str], seconds: int) -> set[str]:
        """Hold these messages for ``seconds`` more; returns the ids whose hold could not be renewed."""
        chosen = [self.result.held[mid] for mid in message_ids if mid in self.result.held]
        started = self.clock()
        failed = set(change_visibility(self.sqs, self.url, (h.handle for h in chosen), seconds, workers=self.receivers))
        lost = set()
        for h in chosen:
            if h.handle in failed:
                lost.add(h.message_id)
            else:
                h.until = started + seconds
        return lost

    def release(self, message_ids: Iterable[str] | None = None) -> None:
        """Make messages visible again at once (all held ones by default). Best effort."""
        ids = list(self.result.held) if message_ids is None else list(message_ids)
        handles = [self.result.held[mid].handle for mid in ids if mid in self.result.held]
        change_visibility(self.sqs, self.url, handles, 0, workers=self.receivers)


def peek(
    sqs: Any, url: str, *, hold_seconds: int = SCAN_HOLD_SECONDS, on_progress: ScanProgress | None = None
) -> ScanResult:
    """Every message of the queue, left on it and visible again (listing twice shows the same)."""
    scanner = Scanner(sqs, url, hold_seconds=hold_seconds, on_progress=on_progress)
    try:
        return scanner.run()
    finally:
        scanner.release()
