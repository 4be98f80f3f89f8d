"""The lists read newest first from the keys-only indexes: a session's runs and tasks (``gsi3``), the
runs of a day (``gsi4``). Keys only, so that the status a wake's commit changes on the run and the
task writes nothing on an index (docs/table-design.md, "Capacity per wake"): a page's keys are read
from the index, its items with one ``BatchGetItem`` a hundred keys, and any filter (a status, a run
prefix) is the caller's, on the items.

Runs and tasks written before ``gsi3``/``gsi4`` existed are on ``gsi1``/``gsi2`` (projected ``ALL``)
under the same partition and sort keys: each list reads both, merged by sort key, each item once
(a run retried since has moved to the new index: ``Runs.attempt_update`` removes its old keys).
An index the table does not have yet, or that is still filling (a stack between the two deploys of
its upgrade: README, "Upgrading a stack"), is read as empty, and its name given to the caller.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any

from agentwake.store.table import Table, pages

#: keys a ``BatchGetItem`` takes at most
BATCH_KEYS = 100


@dataclass(frozen=True)
class Index:
    name: str
    pk: str
    sk: str
    #: projected ``KEYS_ONLY``: the items are read from the table
    keys_only: bool


#: a session's runs (``RUNS#{session}``) and tasks (``TASKS#{session}``): gsi3, then what gsi1 still holds
BY_SESSION = (Index("gsi3", "gsi3pk", "gsi3sk", True), Index("gsi1", "gsi1pk", "gsi1sk", False))
#: runs by the UTC day their latest attempt started (``RUNDAY#{day}``): gsi4, then what gsi2 still holds
BY_DAY = (Index("gsi4", "gsi4pk", "gsi4sk", True), Index("gsi2", "gsi2pk", "gsi2sk", False))


def newest_first(
    table: Table,
    indexes: Iterable[Index],
    partition: str,
    *,
    before: str | None = None,
    since: str | None = None,
    page_size: int = BATCH_KEYS,
    seen: set[str] | None = None,
    missing: set[str] | None = None,
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(sort key, item) of ``partition`` on ``indexes``, newest first, each item once; sort keys
    below ``before``, or (without it) from ``since`` on. Lazy: a caller that stops early has read
    at most a page of ``page_size`` keys beyond on each index. ``seen``: the items' keys listed
    already (a walk over several partitions shares it: an item on the old index under one day and
    the new one under another is listed once). ``missing``: where the names of the indexes the
    table does not have yet are added (the caller says so to its reader)."""
    streams = [_partition(table, index, partition, before, since, page_size, missing) for index in indexes]
    seen = set() if seen is None else seen
    for sort_key, item in heapq.merge(*streams, key=lambda pair: pair[0], reverse=True):
        if item["pk"]["S"] not in seen:
            seen.add(item["pk"]["S"])
            yield sort_key, item


def scan_all(
    table: Table, indexes: Iterable[Index], prefix: str, *, missing: set[str] | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """(sort key, item) of every partition beginning with ``prefix`` on ``indexes`` (Scans), newest
    first, each item once: ``runs list --scan``, for runs no by-day index names."""
    found: dict[str, tuple[str, dict[str, Any]]] = {}
    for index in indexes:
        request = {
            "TableName": table.name,
            "IndexName": index.name,
            "FilterExpression": f"begins_with({index.pk}, :prefix)",
            "ExpressionAttributeValues": {":prefix": {"S": prefix}},
        }
        entries = _missing_is_empty(index, pages(table.db.scan, request), missing)
        for sort_key, item in _items(table, index, entries, BATCH_KEYS):
            if item["pk"]["S"] not in found or found[item["pk"]["S"]][0] < sort_key:
                found[item["pk"]["S"]] = (sort_key, item)
    return sorted(found.values(), key=lambda pair: pair[0], reverse=True)


def _partition(
    table: Table,
    index: Index,
    partition: str,
    before: str | None,
    since: str | None,
    page_size: int,
    missing: set[str] | None,
) -> Iterator[tuple[str, dict[str, Any]]]:
    cond = f"{index.pk} = :p"
    values: dict[str, Any] = {":p": {"S": partition}}
    if before is not None:
        cond += f" AND {index.sk} < :before"
        values[":before"] = {"S": before}
    elif since is not None:
        cond += f" AND {index.sk} >= :since"
        values[":since"] = {"S": since}
    request = {
        "TableName": table.name,
        "IndexName": index.name,
        "KeyConditionExpression": cond,
        "ExpressionAttributeValues": values,
        "ScanIndexForward": False,
    }
    page = min(page_size, BATCH_KEYS)
    return _items(table, index, _missing_is_empty(index, pages(table.db.query, request, page_size=page), missing), page)


def _items(
    table: Table, index: Index, entries: Iterator[dict[str, Any]], chunk: int
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(sort key, item) of each index entry, in its order: a keys-only index's items read from the
    table (one ``BatchGetItem`` per ``chunk`` entries, eventually consistent as the index itself is;
    an item deleted meanwhile is skipped)."""
    if not index.keys_only:
        for entry in entries:
            yield entry[index.sk]["S"], entry
        return
    while batch := list(islice(entries, chunk)):
        # one key once: an index being changed might show an item under its old and its new key a
        # moment, and BatchGetItem refuses a key named twice
        keys = {(e["pk"]["S"], e["sk"]["S"]): {"pk": e["pk"], "sk": e["sk"]} for e in batch}
        got = table.batch_get(list(keys.values()), consistent=False)
        by_key = {(i["pk"]["S"], i["sk"]["S"]): i for i in got}
        for entry in batch:
            item = by_key.get((entry["pk"]["S"], entry["sk"]["S"]))
            if item is not None:  # in the index's order (the item may have moved on since: listed once)
                yield entry[index.sk]["S"], item


#: how DynamoDB refuses a Query or Scan of an index the table does not have (yet), or not yet whole:
#: "The table does not have the specified index: gsi4", "Cannot read from backfilling global
#: secondary index: gsi4"; and moto: ResourceNotFoundException "Invalid index: gsi4 for table: …"
NOT_THERE = (("ValidationException", "does not have the specified index"), ("ValidationException", "backfilling"))
NOT_THERE_LOCAL = ("ResourceNotFoundException", "Invalid index:")


def _missing_is_empty(
    index: Index, entries: Iterator[dict[str, Any]], missing: set[str] | None
) -> Iterator[dict[str, Any]]:
    """``entries``, or none when the table does not have the index yet (between an upgrade's two
    deploys, or while its new index fills), its name added to ``missing``."""
    from botocore.exceptions import ClientError

    try:
        yield from entries
    except ClientError as exc:
        error = exc.response.get("Error", {})
        code, message = error.get("Code", ""), error.get("Message", "")
        if not any(code == c and m in message for c, m in (*NOT_THERE, NOT_THERE_LOCAL)):
            raise
        if missing is not None:
            missing.add(index.name)
