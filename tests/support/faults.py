"""Crash injection at every boundary of a run, for the durability tests.

A ``Crash`` stands for the Lambda dying at that point: the exception escapes the run.
"""

from __future__ import annotations

from collections.abc import Callable
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


def around(aggregate: Any, name: str, wrapper: Callable[..., Any]) -> None:
    """Make ``aggregate.name`` go through ``wrapper(original, *args, **kw)`` (an instance attribute:
    the aggregate's own calls of that method go through it too)."""
    original = getattr(aggregate, name)

    def call(*args: Any, **kw: Any) -> Any:
        return wrapper(original, *args, **kw)

    setattr(aggregate, name, call)


class FaultyStore(DynamoStore):
    """A DynamoStore that crashes once at a chosen boundary."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.armed: str | None = None
        around(self.journals, "journal_put", self._journal_put)
        around(self.history, "record_delivery", self._record_delivery)
        around(self.history, "delivery_record", self._delivery_record)
        around(self.ends, "commit_success", self._commit_success)

    def arm(self, boundary: str | None) -> None:
        assert boundary is None or boundary in BOUNDARIES, boundary
        self.armed = boundary

    def _fire(self, boundary: str) -> None:
        if self.armed == boundary:
            self.armed = None
            raise Crash(boundary)

    def _journal_put(self, put: Callable[..., None], run_id: str, key: str, value: dict[str, Any], **kw: Any) -> None:
        unwritten = kw.get("unwritten")
        delivered = bool(unwritten is not None and unwritten.deliveries)
        if delivered:
            self._fire("after_send_before_journal")  # sent; its marker/history/tool step not yet written
        put(run_id, key, value, **kw)
        if key.endswith(".reply"):
            self._fire("after_model_reply")
        elif ".tool." in key:
            if delivered:
                self._fire("after_delivery_recorded")
            self._fire("after_tool_result")

    def _record_delivery(self, record: Callable[..., bool], **kw: Any) -> bool:
        # a delivery recorded on its own (outside a journaled step)
        self._fire("after_send_before_journal")
        return record(**kw)

    def _delivery_record(self, build: Callable[..., list[tuple[str, Any]]], **kw: Any) -> list[tuple[str, Any]]:
        # deliver_final's answer was sent; its record (which the commit writes) is not yet built:
        # dying here leaves nothing that records the send
        self._fire("after_send_before_journal")
        return build(**kw)

    def _commit_success(self, commit: Callable[..., Any], **kw: Any) -> Any:
        self._fire("after_journal_before_commit")
        if self.armed == "inside_commit_not_landed":
            self.armed = None
            self.table.db.transact_write_items = _failing_transaction  # the service fails the transaction
            try:
                commit(**kw)
            finally:
                del self.table.db.transact_write_items
        lease = commit(**kw)
        self._fire("after_commit_landed")
        return lease


def _failing_transaction(**kwargs: Any) -> None:
    from botocore.exceptions import ClientError

    raise ClientError(
        {"Error": {"Code": "InternalServerError", "Message": "injected: the transaction did not land"}},
        "TransactWriteItems",
    )


# --- faults at the botocore level: one injected at the n-th DynamoDB call of a client ------------

#: what can go wrong with one DynamoDB call, as the wake sees it once botocore's own retries are spent
FAULT_KINDS = (
    "throttling",  # ProvisionedThroughputExceededException: nothing was written
    "server_error",  # 500 InternalServerError, answered before the request was applied
    "timeout_before",  # the read timed out; the request never reached the table
    "timeout_after",  # the request was applied, then the answer was lost: an unknown outcome
    "conditional",  # a condition failed: ConditionalCheckFailedException, or for a transaction a
    # TransactionCanceledException whose first item failed its condition
)


class CallFaults:
    """Injects one fault at the ``at``-th DynamoDB call a client makes after ``arm`` (botocore's
    ``before-call`` event answers in place of the service; ``after-call`` raises once the service
    applied the call). Every call after arming is listed in ``calls``, by operation name."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.calls: list[str] = []
        self.at: int | None = None
        self.kind: str | None = None
        #: (call number, operation, kind) of the fault that fired
        self.fired: tuple[int, str, str] | None = None
        self._raise_after = False
        #: a read the injector makes itself (the item a failed condition returns): not counted
        self._own_read = False
        client.meta.events.register("before-call.dynamodb", self._before)
        client.meta.events.register("after-call.dynamodb", self._after)

    def arm(self, at: int | None, kind: str | None = None) -> None:
        assert kind is None or kind in FAULT_KINDS, kind
        self.calls, self.at, self.kind, self.fired = [], at, kind, None

    def also(self, client: Any, service: str) -> None:
        """Count and fault ``client``'s calls too, in the same sequence (a Scheduler beside the table)."""
        client.meta.events.register(f"before-call.{service}", self._before)
        client.meta.events.register(f"after-call.{service}", self._after)

    def _before(self, model: Any, params: dict[str, Any], **_: Any) -> Any:
        if self._own_read:
            return None
        self.calls.append(model.name)
        if self.at is None or len(self.calls) != self.at or self.kind is None:
            return None
        kind, self.at = self.kind, None
        self.fired = (len(self.calls), model.name, kind)
        if kind == "timeout_after":
            self._raise_after = True
            return None  # let it land; the answer is lost in after-call
        if kind == "timeout_before":
            raise _read_timeout()
        return _error_answer(model.name, kind, params, self._item_as_stored)

    def _item_as_stored(self, table: str, key: dict[str, Any]) -> dict[str, Any] | None:
        """The item a failed condition of a single write returns (``ALL_OLD``), as DynamoDB does:
        the item as it stands (one consistent GetItem, not counted among the wake's calls)."""
        self._own_read = True
        try:
            return self.client.get_item(TableName=table, Key=key, ConsistentRead=True).get("Item")
        finally:
            self._own_read = False

    def _after(self, **_: Any) -> None:
        if self._raise_after:
            self._raise_after = False
            raise _read_timeout()


def _read_timeout() -> Exception:
    from botocore.exceptions import ReadTimeoutError

    return ReadTimeoutError(endpoint_url="https://dynamodb.us-east-1.amazonaws.com/ (injected)")


#: the single writes whose failed condition returns the item found when asked (``ALL_OLD``)
SINGLE_WRITES = ("PutItem", "UpdateItem", "DeleteItem")


def _error_answer(
    operation: str,
    kind: str,
    params: dict[str, Any],
    stored: Callable[[str, dict[str, Any]], dict[str, Any] | None] | None = None,
) -> tuple[Any, dict[str, Any]]:
    """The (http response, parsed body) of a service error, as botocore's parser would give them.
    A failed condition of a single write that asked for ``ALL_OLD`` carries the item as it stands
    (``stored``: how to read it), as DynamoDB's answer does."""
    import json

    from botocore.awsrequest import AWSResponse

    status, code, message = 400, "ProvisionedThroughputExceededException", "injected: throughput exceeded"
    extra: dict[str, Any] = {}
    if kind == "server_error":
        status, code, message = 500, "InternalServerError", "injected: internal server error"
    elif kind == "conditional":
        code, message = "ConditionalCheckFailedException", "injected: the conditional request failed"
        if operation == "TransactWriteItems":
            body = params.get("body") or b"{}"
            count = len(json.loads(body.decode() if isinstance(body, bytes) else body).get("TransactItems", []))
            reasons = [{"Code": "ConditionalCheckFailed", "Message": "injected"}] + [{"Code": "None"}] * (count - 1)
            code = "TransactionCanceledException"
            message = (
                "Transaction cancelled, please refer cancellation reasons for specific reasons [ConditionalCheckFailed]"
            )
            extra["CancellationReasons"] = reasons
        elif operation in SINGLE_WRITES and stored is not None:
            body = params.get("body") or b"{}"
            request = json.loads(body.decode() if isinstance(body, bytes) else body)
            if request.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD":
                pk = request.get("Key") or {k: request["Item"][k] for k in ("pk", "sk")}
                item = stored(request["TableName"], pk)
                if item is not None:
                    extra["Item"] = item
    parsed = {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}, **extra}
    return AWSResponse("https://dynamodb.us-east-1.amazonaws.com/", status, {}, None), parsed


# --- faults at the model: one injected at the n-th model call of a wake ---------------------------

#: what can go wrong with one model call, as the provider chain sees it
MODEL_FAULT_KINDS = (
    "throttling",  # a transient error (ThrottlingException): the chain tries the provider again
    "auth",  # a permanent error (AccessDenied): the chain gives up on the provider; with one
    # provider every provider failed, the attempt ends ERROR and records a failure
)


class ModelFaults:
    """A provider factory for ``WakeDeps``: the providers ``inner`` builds, with one fault injected
    at the ``at``-th model call after ``arm`` (counted across attempts: a retry's calls go on from
    the last). Every call is listed in ``calls``, by step."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[int] = []
        self.at: int | None = None
        self.kind: str | None = None
        #: (call number, step, kind) of the fault that fired
        self.fired: tuple[int, int, str] | None = None

    def arm(self, at: int | None, kind: str | None = None) -> None:
        assert kind is None or kind in MODEL_FAULT_KINDS, kind
        self.calls, self.at, self.kind, self.fired = [], at, kind, None

    def __call__(self, spec: Any) -> Any:
        return _FaultyProvider(self.inner(spec), self)

    def _before(self, step: int) -> None:
        self.calls.append(step)
        if self.at is None or len(self.calls) != self.at or self.kind is None:
            return
        kind, self.at = self.kind, None
        self.fired = (len(self.calls), step, kind)
        from agentwake.errors import PermanentProviderError, TransientProviderError

        if kind == "throttling":
            raise TransientProviderError("injected: rate limit exceeded", code="ThrottlingException")
        raise PermanentProviderError("injected: invalid credentials", code="AccessDenied")


class _FaultyProvider:
    def __init__(self, inner: Any, faults: ModelFaults) -> None:
        self._inner, self._faults = inner, faults

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def complete(self, request: Any) -> Any:
        self._faults._before(request.step)
        return self._inner.complete(request)
