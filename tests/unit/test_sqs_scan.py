"""The DLQ scan against an in-memory SQS with a clock the test moves: holds are renewed before they
run out, and a scan that cannot keep its holds says so instead of reporting a partial view."""

from __future__ import annotations

import threading
from typing import Any

from agentwake_ops.sqs_scan import Scanner


class ClockedSqs:
    """Just enough SQS for a scan: visibility timeouts on a manual clock, one receipt handle per
    receive (only the newest one changes visibility), and a cost in seconds per receive."""

    def __init__(self, count: int, receive_cost: float) -> None:
        self.now = 0.0
        self.receive_cost = receive_cost
        self.messages = [
            {"id": f"m{i:05d}", "visible_at": 0.0, "handle": "", "receives": 0, "sent": i} for i in range(count)
        ]
        #: messages received again after their hold had run out
        self.reappeared = 0
        #: the scan receives on several threads: one call at a time here, as one SQS server would
        self._lock = threading.RLock()

    def clock(self) -> float:
        return self.now

    def receive_message(self, **kwargs: Any) -> dict[str, Any]:
        with self._lock:
            return self._receive(**kwargs)

    def _receive(self, **kwargs: Any) -> dict[str, Any]:
        self.now += self.receive_cost
        out = []
        for m in self.messages:
            if m["visible_at"] <= self.now:
                if m["receives"]:
                    self.reappeared += 1
                m["receives"] += 1
                m["handle"] = f"{m['id']}#{m['receives']}"
                m["visible_at"] = self.now + kwargs["VisibilityTimeout"]
                out.append(
                    {
                        "MessageId": m["id"],
                        "ReceiptHandle": m["handle"],
                        "Body": "{}",
                        "Attributes": {"SentTimestamp": str(m["sent"])},
                    }
                )
                if len(out) == kwargs["MaxNumberOfMessages"]:
                    break
        return {"Messages": out} if out else {}

    def change_message_visibility_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:  # noqa: N803
        with self._lock:
            return self._change(Entries)

    def _change(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:  # noqa: N803
        by_handle = {m["handle"]: m for m in self.messages}
        failed = []
        for entry in Entries:
            m = by_handle.get(entry["ReceiptHandle"])
            if m is None:
                failed.append({"Id": entry["Id"], "Code": "ReceiptHandleIsInvalid"})
            else:
                m["visible_at"] = self.now + entry["VisibilityTimeout"]
        return {"Failed": failed}

    def get_queue_attributes(self, **_: Any) -> dict[str, Any]:
        with self._lock:
            return self._counts()

    def _counts(self) -> dict[str, Any]:
        visible = sum(1 for m in self.messages if m["visible_at"] <= self.now)
        return {
            "Attributes": {
                "ApproximateNumberOfMessages": str(visible),
                "ApproximateNumberOfMessagesNotVisible": str(len(self.messages) - visible),
                "ApproximateNumberOfMessagesDelayed": "0",
            }
        }


def test_a_scan_longer_than_its_hold_renews_the_holds_and_sees_every_message_once() -> None:
    # GIVEN 600 messages and receives that take 1 s each: the scan takes a minute, longer than its 20 s hold
    sqs = ClockedSqs(600, receive_cost=1.0)
    scanner = Scanner(sqs, "q", hold_seconds=20, clock=sqs.clock, sleep=lambda s: None)
    # WHEN it scans
    result = scanner.run()
    # THEN every message was seen exactly once, no hold ran out, and the scan is complete
    assert len(result.held) == 600 and result.duplicates == 0 and sqs.reappeared == 0
    assert result.complete and not result.lost
    # AND releasing makes every message visible again
    scanner.release()
    assert sqs.get_queue_attributes()["Attributes"]["ApproximateNumberOfMessages"] == "600"


def test_a_scan_whose_receives_outlast_the_hold_fails_loudly_instead_of_stopping_early() -> None:
    # GIVEN 100 messages and receives slower than the hold itself: every hold runs out during a receive
    sqs = ClockedSqs(100, receive_cost=30.0)
    scanner = Scanner(sqs, "q", hold_seconds=20, clock=sqs.clock, sleep=lambda s: None, max_fruitless_rounds=5)
    # WHEN it scans
    result = scanner.run()
    # THEN it does not claim to have seen everything: it names why it cannot be sure
    assert len(result.held) < 100
    assert not result.complete
    assert any("still reports" in p and "visible" in p for p in result.problems)


class CountedChanges(ClockedSqs):
    """ClockedSqs counting the ChangeMessageVisibilityBatch calls."""

    def __init__(self, count: int, receive_cost: float) -> None:
        super().__init__(count, receive_cost)
        self.changes = 0

    def change_message_visibility_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:  # noqa: N803
        self.changes += 1
        return super().change_message_visibility_batch(QueueUrl, Entries)


def test_a_large_queue_is_held_long_enough_for_its_scan_without_renewals() -> None:
    # GIVEN 2,000 messages, receives of 0.04 s each (8 s in all) and a configured hold of 5 s
    sqs = CountedChanges(2000, receive_cost=0.04)
    scanner = Scanner(sqs, "q", hold_seconds=5, clock=sqs.clock, sleep=lambda s: None)
    # WHEN it scans
    result = scanner.run()
    # THEN the hold fits the queue (0.01 s a message: 20 s, renewed from 10 s on), so no hold was renewed, and every
    # message was seen exactly once
    assert scanner.hold == 20
    assert sqs.changes == 0
    assert len(result.held) == 2000 and result.duplicates == 0 and result.complete
    # AND releasing makes every message visible again
    scanner.release()
    assert sqs.get_queue_attributes()["Attributes"]["ApproximateNumberOfMessages"] == "2000"


def test_an_interrupted_scan_stops_its_receivers_and_releases_all_it_took(monkeypatch: Any) -> None:
    import concurrent.futures

    import pytest

    # GIVEN 5,000 messages whose receives, past the first, wait until the scan was interrupted
    sqs = ClockedSqs(5000, receive_cost=0.01)
    interrupted = threading.Event()
    receive = sqs.receive_message

    def slow_receive(**kwargs: Any) -> dict[str, Any]:
        interrupted.wait(60)
        return receive(**kwargs)

    sqs.receive_message = slow_receive  # type: ignore[method-assign]
    scanner = Scanner(sqs, "q", hold_seconds=20, clock=sqs.clock, sleep=lambda s: None, receivers=8)

    def ctrl_c(self: Any, timeout: Any = None) -> Any:  # Ctrl-C while the main thread waits on a receiver
        interrupted.set()
        raise KeyboardInterrupt

    monkeypatch.setattr(concurrent.futures.Future, "exception", ctrl_c)
    # WHEN the scan is interrupted THEN it stops: its receivers end after their current receive
    with pytest.raises(KeyboardInterrupt):
        scanner.run()
    assert len(scanner.result.held) <= 8 * 10, len(scanner.result.held)
    # AND releasing makes every message it took visible again
    scanner.release()
    assert sqs.get_queue_attributes()["Attributes"]["ApproximateNumberOfMessages"] == "5000"
