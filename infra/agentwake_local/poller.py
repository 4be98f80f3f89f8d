"""Lambda's SQS event source mapping, emulated locally with partial batch responses.

moto's own event source mapping ignores ``batchItemFailures`` (it deletes or keeps whole batches),
so it cannot show what agentwake promises. This poller does what Lambda does:

1. ReceiveMessage up to BatchSize with every system and message attribute;
2. build the exact Lambda SQS event and invoke the function;
3. the handler raised (or timed out, or returned an invalid batch response): delete nothing;
   with ReportBatchItemFailures: delete every record not listed in ``batchItemFailures``;
   without it: a success deletes the whole batch;
4. records not deleted reappear after the queue's visibility timeout (or after the local
   ``visibility_timeout_override``, applied with ChangeMessageVisibility to keep tests fast).

In the background ("up") mode a mapping runs ``concurrency`` pollers at once, each receiving its
own batch and invoking the function, as Lambda's event source mapping scales up to the event's
``ScalingConfig.MaximumConcurrency`` (``DEFAULT_CONCURRENCY`` when the template sets none).

The redrive policy (DLQ after ``maxReceiveCount`` receives) is the queue's business, as on AWS:
moto's ReceiveMessage moves a message whose receive count has reached ``maxReceiveCount`` to the
dead-letter queue instead of delivering it, so the poller does not implement it.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentwake_local.functions import FunctionSpec, SqsEventSource
from agentwake_local.lambda_runtime import Invocation

logger = logging.getLogger(__name__)

_RECORD_SYSTEM_ATTRIBUTES = (
    "ApproximateReceiveCount",
    "SentTimestamp",
    "SenderId",
    "ApproximateFirstReceiveTimestamp",
    "SequenceNumber",
    "MessageGroupId",
    "MessageDeduplicationId",
    "AWSTraceHeader",
    "DeadLetterQueueSourceArn",
)


def _b64(value: bytes | str) -> str:
    raw = value.encode() if isinstance(value, str) else value
    return base64.b64encode(raw).decode("ascii")


def lambda_message_attribute(value: Mapping[str, Any]) -> dict[str, Any]:
    """SQS API shape (``StringValue``/``BinaryValue``/...) -> Lambda event shape (camelCase, base64)."""
    attribute: dict[str, Any] = {}
    if "StringValue" in value:
        attribute["stringValue"] = value["StringValue"]
    if "BinaryValue" in value:
        attribute["binaryValue"] = _b64(value["BinaryValue"])
    attribute["stringListValues"] = list(value.get("StringListValues") or [])
    attribute["binaryListValues"] = [_b64(item) for item in value.get("BinaryListValues") or []]
    attribute["dataType"] = value["DataType"]
    return attribute


def lambda_sqs_record(message: Mapping[str, Any], queue_arn: str, region: str) -> dict[str, Any]:
    """One ReceiveMessage message -> one record of Lambda's SQS event."""
    system = message.get("Attributes") or {}
    record: dict[str, Any] = {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message.get("Body", ""),
        "attributes": {name: system[name] for name in _RECORD_SYSTEM_ATTRIBUTES if name in system},
        "messageAttributes": {
            name: lambda_message_attribute(value) for name, value in (message.get("MessageAttributes") or {}).items()
        },
        "md5OfBody": message.get("MD5OfBody"),
    }
    if message.get("MD5OfMessageAttributes"):
        record["md5OfMessageAttributes"] = message["MD5OfMessageAttributes"]
    record.update({"eventSource": "aws:sqs", "eventSourceARN": queue_arn, "awsRegion": region})
    return record


class InvalidBatchResponse(ValueError):
    """A response Lambda treats as a complete batch failure."""


def batch_item_failures(response: Any, message_ids: Iterable[str]) -> set[str]:
    """The message ids a ReportBatchItemFailures response asks to retry (raises if invalid).

    Complete success: a null response, an empty object, a null or empty ``batchItemFailures``.
    Complete failure (``InvalidBatchResponse``): anything else that is not a list of
    ``{"itemIdentifier": <a message id of this batch>}``.
    """
    if response is None:
        return set()
    if not isinstance(response, dict):
        raise InvalidBatchResponse(f"response is not a JSON object: {response!r:.200}")
    failures = response.get("batchItemFailures")
    if failures is None:
        return set()
    if not isinstance(failures, list):
        raise InvalidBatchResponse(f"batchItemFailures is not a list: {failures!r:.200}")
    known = set(message_ids)
    failed: set[str] = set()
    for item in failures:
        identifier = item.get("itemIdentifier") if isinstance(item, dict) else None
        if not isinstance(identifier, str) or not identifier:
            raise InvalidBatchResponse(f"invalid batch item failure {item!r:.200}")
        if identifier not in known:
            raise InvalidBatchResponse(f"itemIdentifier {identifier!r} is not a message of this batch")
        failed.add(identifier)
    return failed


@dataclass
class PollResult:
    """What one poll did: ids of the messages received, deleted and left to be retried."""

    function: str
    event_source: str
    queue_url: str
    received: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    error: dict[str, Any] | None = None  # the handler's error payload: the whole batch failed
    invalid_response: str | None = None  # why a batch response counted as a complete failure
    request_id: str | None = None
    response: Any = None

    @property
    def empty(self) -> bool:
        return not self.received


InvokeFn = Callable[[Any], Invocation]

#: concurrent invocations of a mapping without ``ScalingConfig.MaximumConcurrency`` (Lambda's own
#: ceiling is the account's concurrency; locally a small bound keeps a laptop responsive)
DEFAULT_CONCURRENCY = 5
#: seconds an idle poller waits at most between receives (it starts at ``idle_interval`` and
#: doubles while the queue stays empty); its other threads wait ``IDLE_FACTOR`` times longer
MAX_IDLE_INTERVAL = 1.0
IDLE_FACTOR = 5
#: the template's function whose queue carries the task deadline checks
BACKGROUND_WORK_FUNCTION = "BackgroundWorkFunction"


class SqsPoller:
    """The event source mapping of one function's SQS event; ``poll_once``/``drain`` or a thread."""

    def __init__(
        self,
        function: FunctionSpec,
        source: SqsEventSource,
        *,
        sqs_client: Any,
        invoke: InvokeFn,
        region: str | None = None,
        visibility_timeout_override: int | None = None,
        idle_interval: float = 0.2,
        concurrency: int | None = None,
    ) -> None:
        if not source.queue_url:
            raise ValueError(f"{function.logical_id}/{source.name}: queue {source.queue_arn} is not local")
        self.function = function
        self.source = source
        self.sqs = sqs_client
        self.invoke = invoke
        self.region = region or function.region
        self.visibility_timeout_override = visibility_timeout_override
        self.idle_interval = idle_interval
        self.concurrency = max(1, concurrency or source.maximum_concurrency or DEFAULT_CONCURRENCY)
        #: the longest wait between two empty receives of the first thread (the others wait
        #: ``IDLE_FACTOR`` times longer, or until the first finds records): an idle stack costs
        #: next to nothing, a record waits at most this long
        self.max_idle_interval = max(idle_interval, MAX_IDLE_INTERVAL)
        #: a drain waits for delayed messages too (a result re-sent while it waited for its session
        #: comes back in seconds); not on the background-work function's queue, whose delayed
        #: messages are task deadline checks, due minutes to days later (agentwake.wake.task_deadline)
        self.waits_for_delayed = function.logical_id != BACKGROUND_WORK_FUNCTION
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return f"{self.function.logical_id}/{self.source.name}"

    @property
    def queue_url(self) -> str:
        return str(self.source.queue_url)

    # -- one batch ------------------------------------------------------------------------

    def _receive(self) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        while len(messages) < self.source.batch_size:
            response = self.sqs.receive_message(
                QueueUrl=self.queue_url,
                MaxNumberOfMessages=min(10, self.source.batch_size - len(messages)),
                AttributeNames=["All"],
                MessageSystemAttributeNames=["All"],
                MessageAttributeNames=["All"],
                WaitTimeSeconds=0,
            )
            batch = response.get("Messages") or []
            if not batch:
                break
            messages.extend(batch)
        return messages

    def poll_once(self) -> PollResult:
        """Receive one batch, invoke the function once, delete what succeeded."""
        with self._lock:
            return self._poll_once()

    def _poll_once(self) -> PollResult:
        result = PollResult(self.function.logical_id, self.source.name, self.queue_url)
        messages = self._receive()
        if not messages:
            return result
        records = [lambda_sqs_record(m, self.source.queue_arn, self.region) for m in messages]
        result.received = [r["messageId"] for r in records]
        invocation = self.invoke({"Records": records})
        result.request_id = invocation.request_id
        result.response = invocation.response

        if invocation.error is not None:
            result.error = invocation.error
            failed = set(result.received)
        elif self.source.report_batch_item_failures:
            try:
                failed = batch_item_failures(invocation.response, result.received)
            except InvalidBatchResponse as exc:
                result.invalid_response = str(exc)
                failed = set(result.received)
        else:
            failed = set()

        by_id = {r["messageId"]: r["receiptHandle"] for r in records}
        result.failed = [mid for mid in result.received if mid in failed]
        result.deleted = self._delete([mid for mid in result.received if mid not in failed], by_id)
        self._release(result.failed, by_id)
        self._log(result, invocation)
        return result

    def _delete(self, message_ids: list[str], handles: Mapping[str, str]) -> list[str]:
        deleted: list[str] = []
        for start in range(0, len(message_ids), 10):
            chunk = message_ids[start : start + 10]
            entries = [{"Id": str(i), "ReceiptHandle": handles[mid]} for i, mid in enumerate(chunk)]
            response = self.sqs.delete_message_batch(QueueUrl=self.queue_url, Entries=entries)
            ok = {int(entry["Id"]) for entry in response.get("Successful") or []}
            deleted.extend(mid for i, mid in enumerate(chunk) if i in ok)
            for failure in response.get("Failed") or []:
                logger.warning("sqs %s: delete failed for %s: %s", self.name, chunk[int(failure["Id"])], failure)
        return deleted

    def _release(self, message_ids: list[str], handles: Mapping[str, str]) -> None:
        """Failed records come back after the visibility timeout; locally it may be shortened."""
        if self.visibility_timeout_override is None or not message_ids:
            return
        for start in range(0, len(message_ids), 10):
            chunk = message_ids[start : start + 10]
            entries = [
                {
                    "Id": str(i),
                    "ReceiptHandle": handles[mid],
                    "VisibilityTimeout": int(self.visibility_timeout_override),
                }
                for i, mid in enumerate(chunk)
            ]
            self.sqs.change_message_visibility_batch(QueueUrl=self.queue_url, Entries=entries)

    def _log(self, result: PollResult, invocation: Invocation) -> None:
        outcome = f"batch item failures: {', '.join(result.failed)}" if result.failed else "ok"
        if result.error is not None:
            outcome = f"error {result.error.get('errorType')}: {str(result.error.get('errorMessage'))[:200]}"
        elif result.invalid_response:
            outcome = f"invalid batch response: {result.invalid_response}"
        logger.info(
            "sqs %s request_id=%s received=%d deleted=%d failed=%d duration_ms=%.0f %s",
            self.name,
            invocation.request_id,
            len(result.received),
            len(result.deleted),
            len(result.failed),
            invocation.duration_ms,
            outcome,
        )

    # -- many batches ---------------------------------------------------------------------

    def queue_is_empty(self) -> bool:
        """No message visible, in flight or (``waits_for_delayed``) delayed (one in flight may still come back)."""
        names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
        if self.waits_for_delayed:
            names.append("ApproximateNumberOfMessagesDelayed")
        attributes = self.sqs.get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=names)["Attributes"]
        return all(int(value) == 0 for value in attributes.values())

    def drain(self, until_empty: bool = True, max_rounds: int = 100, timeout: float = 30.0) -> list[PollResult]:
        """Poll until no message is left: at most ``max_rounds`` invocations, ``timeout`` seconds.

        ``until_empty``: also wait for in-flight messages to reappear (failed records coming back
        after the visibility timeout) until the queue is empty; otherwise stop at the first
        empty receive. Returns the non-empty polls.
        """
        results: list[PollResult] = []
        deadline = time.monotonic() + timeout
        while len(results) < max_rounds:
            result = self.poll_once()
            if not result.empty:
                results.append(result)
                continue
            if not until_empty or self.queue_is_empty() or time.monotonic() >= deadline:
                break
            time.sleep(min(self.idle_interval, 0.05))
        return results

    # -- background thread ----------------------------------------------------------------

    @property
    def running(self) -> bool:
        return any(thread.is_alive() for thread in self._threads)

    def start(self) -> None:
        """``concurrency`` threads, each receiving a batch and invoking the function in turn."""
        if self.running:
            return
        self._stop.clear()
        self._threads = [
            threading.Thread(target=self._run, args=(n,), name=f"sqs-poller:{self.name}#{n}", daemon=True)
            for n in range(self.concurrency)
        ]
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        from agentwake_local.server import SQS_SENDS

        self._stop.set()
        SQS_SENDS.notify()  # wake the idle threads
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._threads = []

    def _run(self, index: int = 0) -> None:
        """Receive and invoke until stopped. While the queue stays empty the waits between receives
        double (from ``idle_interval`` to ``max_idle_interval``; the threads but the first wait
        longer still), so an idle stack polls about once a second. A message sent to any queue of
        the embedded server, or records received by one thread, end every thread's wait at once
        (as Lambda's long-polling receive would): a record sent with no delay is not left waiting."""
        from agentwake_local.server import SQS_SENDS

        wait = self.idle_interval
        longest = self.max_idle_interval * (1 if index == 0 else IDLE_FACTOR)
        while not self._stop.is_set():
            sends = SQS_SENDS.count
            try:
                result = self._poll_once()
            except Exception:  # the server went away, a transient error: keep the thread alive
                logger.exception("sqs %s: poll failed", self.name)
                self._stop.wait(1.0)
                continue
            if not result.empty:
                wait = self.idle_interval
                SQS_SENDS.notify()  # the other threads join in
                continue
            SQS_SENDS.wait_after(sends, wait)  # a send ends the wait at once
            wait = min(wait * 2, longest)
