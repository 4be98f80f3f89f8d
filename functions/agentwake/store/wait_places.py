"""The wait list's order: one small item per waiting run, its **place** (``SESSION#{session}`` /
``QUEUE#{arrived}#{run}``: the run id and a TTL, no body), sorted by when the run first waited.

A release reads the first few places (one Query with ``Limit``, key and run id only) and then the
item of the one waiter it hands the session to (``agentwake.store.session_lease``): what it reads
does not grow with the list's length nor with the waiters' bodies. A place exists while its run is
``waiting``: it is written when the run joins the list, removed in the same write that marks the
run handed or started, and with the run's item when the run leaves. A place left behind by a crash
between two writes is removed by the first read of the list that finds its run no longer waiting.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentwake.session.lease import Waiter
from agentwake.store.codec import key
from agentwake.store.keys import QUEUE_PREFIX, queue_key, session_pk
from agentwake.store.table import Table

#: a read of the list reads its places this many at a time (one Query page, ``Limit``)
PLACES_PAGE = 8
#: ... and the items of at most this many waiters, looking for those still waiting
MAX_PLACES_CHECKED = 16


class WaitPlaces:
    """The places of the sessions' wait lists, on the one table."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def put(self, session_id: str, run_id: str, arrived: float, expires_at: str) -> None:
        """The run's place (again: the same key for the same first arrival)."""
        pk, sk = queue_key(session_id, arrived, run_id)
        self.table.db.put_item(
            TableName=self.table.name,
            Item={"pk": {"S": pk}, "sk": {"S": sk}, "run_id": {"S": run_id}, "expires_at": {"N": expires_at}},
        )

    def delete_item(self, session_id: str, run_id: str, arrived: float) -> dict[str, Any]:
        """The transaction item that takes the run's place off the list."""
        return {"Delete": {"TableName": self.table.name, "Key": key(*queue_key(session_id, arrived, run_id))}}

    def delete(self, session_id: str, run_id: str, arrived: float) -> None:
        self.table.db.delete_item(**self.delete_item(session_id, run_id, arrived)["Delete"])

    def first(self, session_id: str, *, limit: int) -> list[str]:
        """The run ids of the list's first ``limit`` places, oldest first: one Query of the places
        alone (``Limit``), however long the list is."""
        return [run_id for _, run_id in self._page(session_pk(session_id), limit, None)]

    def head(
        self,
        session_id: str,
        read_waiter: Callable[[str], Waiter | None],
        *,
        first: int,
        skip: str | None,
    ) -> tuple[list[Waiter], bool]:
        """The first ``first`` runs still waiting, oldest first, each read by ``read_waiter`` (its
        item: one GetItem), and whether ``skip`` (left out) has a place among those read. Reads at
        most ``MAX_PLACES_CHECKED`` waiters' items; a place whose run is not waiting any more is
        removed as it is found."""
        found: list[Waiter] = []
        skipped = False
        checked = 0
        pk, start = session_pk(session_id), None
        while len(found) < first and checked < MAX_PLACES_CHECKED:
            page = self._page(pk, PLACES_PAGE, start)
            for sk, run_id in page:
                if run_id == skip:
                    skipped = True
                    continue
                if len(found) >= first or checked >= MAX_PLACES_CHECKED:
                    continue  # the page is read: only ``skip`` is looked for in the rest of it
                checked += 1
                waiter = read_waiter(run_id)
                if waiter is None or waiter.state != "waiting":
                    # its run started or left, and a crash kept its place: not a waiter any more
                    self.table.db.delete_item(TableName=self.table.name, Key=key(pk, sk))
                else:
                    found.append(waiter)
            if len(page) < PLACES_PAGE:
                break
            start = page[-1][0]
        return found, skipped

    def _page(self, pk: str, limit: int, start: str | None) -> list[tuple[str, str]]:
        items = self.table.query(pk, QUEUE_PREFIX, limit=limit, start=start, projection="sk, run_id")
        return [(item["sk"]["S"], item["run_id"]["S"]) for item in items]
