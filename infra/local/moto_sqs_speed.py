"""Two patches that keep the embedded moto's SQS fast with thousands of messages in a queue.

1. **The clock.** moto's SQS asks "is this message visible / delayed?" for every message of a
   queue on every receive, count and send, and each question computes the current time through
   datetime objects (``moto.core.utils.unix_time``: ``utcnow() - utcfromtimestamp(0)``), ~20 µs.
   ``time.time()`` is the same value (seconds since the epoch) at a hundredth of the cost. Only
   the names ``moto.sqs.models`` uses are replaced, and only for "now".
2. **Receipt handles.** ``ChangeMessageVisibility`` looks for the message by walking the queue and
   rebuilding each message's list of past handles: renewing or releasing the holds of a scan of
   n messages costs n². Handles are indexed as moto issues them (``Message.mark_received``); a
   handle the index does not know goes to moto's own code, which raises what AWS raises.
3. **Whole-queue attributes for one value.** SendMessage reads ``ContentBasedDeduplication``
   through the queue's attributes, which count every message of the queue; it now reads the one
   attribute it needs. (ReceiveMessage's retention check, which did the same, is patched with the
   other pinned patches in ``moto_patches``.)

Written for moto 5.2.5 (pyproject pins it); another version is left unpatched (slower, not wrong).
"""

from __future__ import annotations

import contextvars
import time
import weakref
from typing import Any

MOTO_VERSION = "5.2.5"
_applied = False
#: every receipt handle moto issued -> its message (a handle stays valid while its message lives)
_HANDLES: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
#: inside SendMessage (which reads one attribute of the queue)
_SENDING: contextvars.ContextVar[bool] = contextvars.ContextVar("agentwake_sqs_sending", default=False)


def apply() -> bool:
    """Patch once per process; False when the installed moto is not the one this was written for."""
    global _applied
    if _applied:
        return True
    import moto
    from moto.sqs import models
    from moto.sqs.exceptions import InvalidParameterValue

    if moto.__version__ != MOTO_VERSION:
        return False

    original_unix_time = models.unix_time
    original_unix_time_millis = models.unix_time_millis

    def unix_time(dt: Any = None) -> float:
        return time.time() if dt is None else float(original_unix_time(dt))

    def unix_time_millis(dt: Any = None) -> float:
        return time.time() * 1000.0 if dt is None else float(original_unix_time_millis(dt))

    models.unix_time = unix_time  # type: ignore[assignment]
    models.unix_time_millis = unix_time_millis  # type: ignore[assignment]

    original_mark_received = models.Message.mark_received

    def mark_received(self: Any, visibility_timeout: int | None = None) -> None:
        original_mark_received(self, visibility_timeout)
        _HANDLES[self.receipt_handle] = self

    original_change = models.SQSBackend.change_message_visibility

    def change_message_visibility(self: Any, queue_name: str, receipt_handle: str, visibility_timeout: int) -> None:
        queue = self.get_queue(queue_name)
        message = _HANDLES.get(receipt_handle)
        if message is None or message not in queue._messages:
            return original_change(self, queue_name, receipt_handle, visibility_timeout)  # type: ignore[no-any-return]
        # moto's own checks and effects, without the walk over the queue
        given = unix_time_millis() + int(visibility_timeout) * 1000
        if given - message.sent_timestamp > 43200 * 1000:
            raise InvalidParameterValue(
                f"Value {visibility_timeout} for parameter VisibilityTimeout is invalid. Reason: Total "
                "VisibilityTimeout for the message is beyond the limit [43200 seconds]"
            )
        message.change_visibility(visibility_timeout)
        if message.visible and message in queue.pending_messages:
            queue.pending_messages.remove(message)
        return None

    original_send = models.SQSBackend.send_message
    original_attributes: Any = models.Queue.__dict__["attributes"]  # the property object

    def attributes(self: Any) -> dict[str, Any]:
        if _SENDING.get():
            # SendMessage only reads ContentBasedDeduplication here: no need to count the queue
            if not self.fifo_queue:  # moto lists the attribute for FIFO queues only
                return {}
            return {"ContentBasedDeduplication": str(bool(self.content_based_deduplication)).lower()}
        return original_attributes.fget(self)  # type: ignore[no-any-return]

    def send_message(self: Any, *args: Any, **kwargs: Any) -> Any:
        token = _SENDING.set(True)
        try:
            return original_send(self, *args, **kwargs)
        finally:
            _SENDING.reset(token)

    models.SQSBackend.send_message = send_message  # type: ignore[method-assign]
    models.Queue.attributes = property(attributes)  # type: ignore[assignment,method-assign]
    models.Message.mark_received = mark_received  # type: ignore[method-assign]
    models.SQSBackend.change_message_visibility = change_message_visibility  # type: ignore[method-assign]
    _applied = True
    return True
