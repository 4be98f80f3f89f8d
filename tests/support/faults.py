"""Crash injection at every boundary of a run, for the durability tests.

A ``Crash`` stands for the Lambda dying at that point: the exception escapes the run.
"""

from __future__ import annotations

from typing import Any

from agentwake.store.dynamo import DynamoStore

BOUNDARIES = (
    "after_model_reply",  # the reply is journaled, its tool calls not yet run
    "after_tool_result",  # a tool result is journaled, the next step not yet started
    "after_send_before_journal",  # the webhook got the message; history/journal did not
    # the delivery's marker, history entry and tool result land in one transaction, so "in
    # history but its tool result not journaled" cannot happen: this is the moment right after it
    "after_delivery_recorded",
    "after_journal_before_commit",  # every step journaled but the last (the commit writes that); commit not attempted
    "inside_commit_not_landed",  # the commit transaction fails
    "after_commit_landed",  # the commit landed; the Lambda died before returning
)


class Crash(Exception):
    pass


class FaultyStore(DynamoStore):
    """A DynamoStore that crashes once at a chosen boundary."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.armed: str | None = None

    def arm(self, boundary: str | None) -> None:
        assert boundary is None or boundary in BOUNDARIES, boundary
        self.armed = boundary

    def _fire(self, boundary: str) -> None:
        if self.armed == boundary:
            self.armed = None
            raise Crash(boundary)

    def journal_put(self, run_id: str, key: str, value: dict[str, Any], **kw: Any) -> None:
        unwritten = kw.get("unwritten")
        delivered = bool(unwritten is not None and unwritten.deliveries)
        if delivered:
            self._fire("after_send_before_journal")  # sent; its marker/history/tool step not yet written
        super().journal_put(run_id, key, value, **kw)
        if key.endswith(".reply"):
            self._fire("after_model_reply")
        elif ".tool." in key:
            if delivered:
                self._fire("after_delivery_recorded")
            self._fire("after_tool_result")

    def record_delivery(self, **kw: Any) -> bool:
        # a delivery recorded on its own (outside a journaled step)
        self._fire("after_send_before_journal")
        return super().record_delivery(**kw)

    def delivery_record(self, **kw: Any) -> list[tuple[str, Any]]:
        # deliver_final's answer was sent; its record (which the commit writes) is not yet built:
        # dying here leaves nothing that records the send
        self._fire("after_send_before_journal")
        return super().delivery_record(**kw)

    def commit_success(self, **kw: Any) -> None:
        self._fire("after_journal_before_commit")
        if self.armed == "inside_commit_not_landed":
            self.armed = None
            self.db.transact_write_items = _failing_transaction  # the service fails the transaction
            try:
                super().commit_success(**kw)
            finally:
                del self.db.transact_write_items
        super().commit_success(**kw)
        self._fire("after_commit_landed")


def _failing_transaction(**kwargs: Any) -> None:
    from botocore.exceptions import ClientError

    raise ClientError(
        {"Error": {"Code": "InternalServerError", "Message": "injected: the transaction did not land"}},
        "TransactWriteItems",
    )
