"""The wait list: each waiting run's item (``SessionLeases.park_waiter`` writes it through ``park``:
its body, attributes and wait state) and its order: one small item per waiting run, its **place** (``SESSION#{session}`` /
``QUEUE#{arrived}#{run}``: the run id and a TTL, no body), sorted by when the run first waited.

A release reads the first few places (one Query with ``Limit``, key and run id only) and then the
item of the one waiter it hands the session to (``agentwake.store.session_lease``): what it reads
does not grow with the list's length nor with the waiters' bodies. A place exists while its run is
``waiting``: it is written when the run joins the list, removed in the same write that marks the
run handed or started, and with the run's item when the run leaves. A place left behind by a crash
between two writes is removed by the first read of the list that finds its run no longer waiting.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from agentwake.session.lease import Waiter
from agentwake.store.codec import key
from agentwake.store.keys import QUEUE_PREFIX, queue_key, session_pk, wait_key
from agentwake.store.table import Table

#: a read of the list reads its places this many at a time (one Query page, ``Limit``)
PLACES_PAGE = 8
#: ... and the items of at most this many waiters, looking for those still waiting
MAX_PLACES_CHECKED = 16


#: a waiter's item outlives the longest wait by this much, then DynamoDB's TTL removes it
WAITER_TTL_MARGIN_S = 86400.0


def waiter_from_item(item: dict[str, Any]) -> Waiter:
    def text(name: str) -> str:
        return str(item.get(name, {}).get("S", ""))

    return Waiter(
        session_id=text("session_id"),
        run_id=text("run_id"),
        arrived=float(item.get("arrived", {}).get("N", "0")),
        state=text("state") or "waiting",
        gen=int(item.get("gen", {}).get("N", "0")),
        body=text("body"),
        attributes=json.loads(text("attributes") or "{}"),
        wait=json.loads(text("wait") or "{}"),
        kind=text("kind") or "background",
        target=text("target"),
    )


class WaitPlaces:
    """The places of the sessions' wait lists, on the one table."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def park(
        self,
        *,
        session_id: str,
        run_id: str,
        gen: int,
        body: str,
        attributes: dict[str, Any],
        wait: dict[str, str],
        ttl_s: float,
        kind: str,
        target: str,
    ) -> None:
        """The run's item on the wait list (its first arrival kept, its state ``waiting``, its copy
        the newer of ``gen`` and the one the list knows), then its place (``SessionLeases.park_waiter``)."""
        now = self.table.now()
        expires_at = str(int(now + ttl_s + WAITER_TTL_MARGIN_S))
        db = self.table.db
        resp = db.update_item(
            TableName=self.table.name,
            Key=key(*wait_key(session_id, run_id)),
            UpdateExpression=(
                "SET arrived = if_not_exists(arrived, :now), #st = :waiting, session_id = :sid, run_id = :rid, "
                "body = :body, attributes = :attrs, #w = :wait, expires_at = :ttl, #k = :kind, #tg = :target, "
                "gen = if_not_exists(gen, :gen)"
            ),
            ExpressionAttributeNames={"#st": "state", "#w": "wait", "#k": "kind", "#tg": "target"},
            ExpressionAttributeValues={
                ":now": {"N": f"{now:.3f}"},
                ":waiting": {"S": "waiting"},
                ":sid": {"S": session_id},
                ":rid": {"S": run_id},
                ":body": {"S": body},
                ":attrs": {"S": json.dumps(attributes)},
                ":wait": {"S": json.dumps(wait)},
                ":ttl": {"N": expires_at},
                ":gen": {"N": str(gen)},
                ":kind": {"S": kind},
                ":target": {"S": target},
            },
            ReturnValues="UPDATED_NEW",
        )
        arrived = float(resp.get("Attributes", {}).get("arrived", {}).get("N", f"{now:.3f}"))
        self.put(session_id, run_id, arrived, expires_at)
        if gen:
            # a newer copy (a hand-off that lost its race) is the current one from now on
            try:
                db.update_item(
                    TableName=self.table.name,
                    Key=key(*wait_key(session_id, run_id)),
                    UpdateExpression="SET gen = :gen",
                    ConditionExpression="gen < :gen",
                    ExpressionAttributeValues={":gen": {"N": str(gen)}},
                )
            except db.exceptions.ConditionalCheckFailedException:
                pass

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
