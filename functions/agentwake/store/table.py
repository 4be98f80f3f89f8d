"""The table every store part reads and writes: its client, clock, item access, the one
pagination helper and the one transaction helper (tagged items, droppable conditions).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from agentwake.domain.models import _Stored
from agentwake.store.codec import dump_item, key, load_item

M = TypeVar("M", bound=_Stored)

#: a transaction cancelled by a conflicting write of the same items is made again this often
CONFLICT_RETRIES = 3


def pages(
    call: Callable[..., dict[str, Any]], request: dict[str, Any], *, page_size: int | None = None
) -> Iterator[dict[str, Any]]:
    """Every item a Query or Scan returns, page after page (``LastEvaluatedKey`` →
    ``ExclusiveStartKey``). ``request`` is not changed. A request with ``Limit`` is one page.
    ``page_size``: pages of at most that many items read (``Limit``), followed for as long as the
    caller takes items, so a caller that stops early has read no more than one page beyond."""
    if page_size is not None:
        request = {**request, "Limit": page_size}
    while True:
        resp = call(**request)
        yield from resp.get("Items", [])
        if ("Limit" in request and page_size is None) or "LastEvaluatedKey" not in resp:
            return
        request = {**request, "ExclusiveStartKey": resp["LastEvaluatedKey"]}


def conflict_pause(conflicts: int) -> None:
    """Before writing again an item a transaction in flight held (``TransactionConflict``): 10-50 ms
    times the conflicts met so far, so that the retry does not meet the same transaction."""
    time.sleep(random.uniform(0.01, 0.05) * conflicts)


#: a conditional write's failure returns the item it found (``conditional_write``: did an earlier try land?)
ALL_OLD = {"ReturnValuesOnConditionCheckFailure": "ALL_OLD"}


def gone(found: dict[str, Any] | None) -> bool:
    """``landed`` of a conditional delete: the item is not there (deleted, by it or since)."""
    return found is None


def conditional_write(
    db: Any,
    write: Callable[[], Any],
    *,
    tries: int,
    landed: Callable[[dict[str, Any] | None], bool] | None = None,
    found: list[dict[str, Any] | None] | None = None,
) -> bool:
    """One conditional write outside a transaction: True when it landed, False when its condition
    failed. A write that meets a transaction writing the item is made again after
    ``conflict_pause``, at most ``tries`` times in all, so that the answer says what that transaction
    left; it never counts as made (DynamoDB applied nothing): the last TransactionConflictException
    is raised.

    ``landed``: asked of the item a failed condition found (the write asks for it with ``ALL_OLD``)
    whether it is what this write leaves. botocore makes a write again when its answer is lost (a
    timeout, a 500); when the first one had landed, the second one's condition fails on what the
    first wrote, and without ``landed`` a write that landed reads as one that did not. ``found``:
    the item a failed condition found is appended to it (who holds the lease, which attempt)."""
    conflicts = 0
    while True:
        try:
            write()
            return True
        except db.exceptions.ConditionalCheckFailedException as refused:
            item = refused.response.get("Item")
            if found is not None:
                found.append(item)
            return landed is not None and landed(item)
        except db.exceptions.TransactionConflictException:
            conflicts += 1
            if conflicts == tries:
                raise
            conflict_pause(conflicts)


class Table:
    """The single table every aggregate of ``DynamoStore`` holds (none inherits it): its name, client
    and clock, item access, the one pagination helper and the one transaction helper."""

    def __init__(
        self,
        table_name: str,
        *,
        client: Any = None,
        now: Callable[[], float] = time.time,
        journal_ttl_days: int = 22,
    ) -> None:
        if client is None:
            from agentwake.store.aws import client as make_client

            client = make_client("dynamodb")
        self.name = table_name
        self.db = client
        self.now = now
        self.journal_ttl_s = journal_ttl_days * 86400

    # --- items ------------------------------------------------------------------------------

    @staticmethod
    def item(model: _Stored, pk: str, sk: str, **extra: Any) -> dict[str, Any]:
        return dump_item(model, pk, sk, **extra)

    @staticmethod
    def load(cls: type[M], item: dict[str, Any]) -> M:
        return load_item(cls, item)

    @staticmethod
    def key(pk: str, sk: str) -> dict[str, Any]:
        return key(pk, sk)

    def read_item(self, pk: str, sk: str, *, consistent: bool = True) -> dict[str, Any] | None:
        """One item as stored (attribute values), or None: a GetItem."""
        resp = self.db.get_item(TableName=self.name, Key=key(pk, sk), ConsistentRead=consistent)
        return resp.get("Item")

    def query(
        self,
        pk: str,
        prefix: str,
        *,
        forward: bool = True,
        limit: int | None = None,
        start: str | None = None,
        projection: str | None = None,
        names: dict[str, str] | None = None,
    ) -> Iterator[dict[str, Any]]:
        """The partition's items whose sort key starts with ``prefix`` (all of them, or one page of
        ``limit`` after the sort key ``start``), consistent; ``projection``: only those attributes."""
        request: dict[str, Any] = {
            "TableName": self.name,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :p)" if prefix else "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": pk}, **({":p": {"S": prefix}} if prefix else {})},
            "ScanIndexForward": forward,
            "ConsistentRead": True,
        }
        if limit is not None:
            request["Limit"] = limit
        if start is not None:
            request["ExclusiveStartKey"] = {"pk": {"S": pk}, "sk": {"S": start}}
        if projection is not None:
            request["ProjectionExpression"] = projection
            if names:
                request["ExpressionAttributeNames"] = names
        return pages(self.db.query, request)

    # --- transactions -----------------------------------------------------------------------

    def transact(
        self,
        items: list[tuple[str, dict[str, Any]]],
        *,
        droppable: frozenset[str] = frozenset(),
        dropped: set[str] | None = None,
    ) -> set[str]:
        """One TransactWriteItems of ``(tag, item)`` pairs. When every item whose condition failed
        has a droppable tag (the part before ``:``), those items are dropped and the rest is written
        in one more call (a lease that is no longer ours, a task/job deleted mid-run, a delivery
        recorded already). Returns the dropped tags (also added to ``dropped`` as they are dropped,
        so that a caller whose later call's answer is lost still knows them). A transaction
        cancelled only by a conflict with another write of the same items (nothing applied) is made
        again, at most ``CONFLICT_RETRIES`` times. Otherwise re-raises TransactionCanceledException
        with ``failed_tags`` ({tag: cancellation reason}) set on it."""
        dropped = set() if dropped is None else dropped
        conflicts = 0
        while items:
            try:
                self.db.transact_write_items(TransactItems=[item for _, item in items])
                return dropped
            except self.db.exceptions.TransactionCanceledException as exc:
                reasons = exc.response.get("CancellationReasons", [])
                failed = {
                    tag: r for (tag, _), r in zip(items, reasons, strict=False) if r.get("Code") not in (None, "None")
                }
                exc.failed_tags = failed  # type: ignore[attr-defined]
                conflict = bool(failed) and all(r.get("Code") == "TransactionConflict" for r in failed.values())
                if conflict and conflicts < CONFLICT_RETRIES:
                    conflicts += 1
                    conflict_pause(conflicts)
                    continue
                if not failed or not all(
                    r.get("Code") == "ConditionalCheckFailed" and tag.split(":")[0] in droppable
                    for tag, r in failed.items()
                ):
                    raise
                dropped |= set(failed)
                items = [(t, i) for t, i in items if t not in failed]
        return dropped

    def batch_get(self, keys: list[dict[str, Any]], *, consistent: bool = True) -> list[dict[str, Any]]:
        """The items of ``keys`` that exist, in one BatchGetItem (again for keys left unprocessed);
        strongly consistent unless ``consistent`` is False (half the read units)."""
        request: dict[str, Any] = {self.name: {"Keys": keys, "ConsistentRead": consistent}}
        found: list[dict[str, Any]] = []
        for attempt in range(8):
            resp = self.db.batch_get_item(RequestItems=request)
            found += resp.get("Responses", {}).get(self.name, [])
            request = resp.get("UnprocessedKeys") or {}
            if not request:
                return found
            time.sleep(min(1.0, 0.05 * 2**attempt))  # throttled keys: back off, then ask again
        raise RuntimeError(f"DynamoDB left keys unprocessed after 8 tries: {list(request)}")
