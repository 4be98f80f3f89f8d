"""The session's wait list: the runs waiting for a busy session, in the order they arrived, and the
hand-off that gives the session to the oldest of them the moment its holder releases it.

A waiter is one item per run (``SESSION#{session}`` / ``WAIT#{run}``): when it first waited
(``arrived``, never changed by a later wait of the same run), its state (``waiting`` → ``handed``
→ ``started``), which copy of its record is current (``gen``) and what to re-send (the record's
body and the producer's attributes). The delayed copy each waiter keeps in the result queue stays
the fallback when a hand-off is lost (docs/durability.md, "Waiting for the session").
"""

from __future__ import annotations

import json
from typing import Any

from agentwake.store.keys import WAIT_PREFIX, lease_key, session_pk, wait_key
from agentwake.store.port import Waiter
from agentwake.store.wake_begin import PARKED
from agentwake.store.wake_end import WakeEnd

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
    )


class WaitList(WakeEnd):
    def park_waiter(
        self,
        *,
        session_id: str,
        run_id: str,
        gen: int,
        body: str,
        attributes: dict[str, Any],
        wait: dict[str, str],
        ttl_s: float,
    ) -> None:
        """Put the run on the session's wait list (again): its first arrival is kept, its state is
        ``waiting``, its current copy the newer of ``gen`` and the one the list knows."""
        now = self.now()
        self.db.update_item(
            TableName=self.table,
            Key=self._key(*wait_key(session_id, run_id)),
            UpdateExpression=(
                "SET arrived = if_not_exists(arrived, :now), #st = :waiting, session_id = :sid, run_id = :rid, "
                "body = :body, attributes = :attrs, #w = :wait, expires_at = :ttl, "
                "gen = if_not_exists(gen, :gen)"
            ),
            ExpressionAttributeNames={"#st": "state", "#w": "wait"},
            ExpressionAttributeValues={
                ":now": {"N": f"{now:.3f}"},
                ":waiting": {"S": "waiting"},
                ":sid": {"S": session_id},
                ":rid": {"S": run_id},
                ":body": {"S": body},
                ":attrs": {"S": json.dumps(_json_attributes(attributes))},
                ":wait": {"S": json.dumps(wait)},
                ":ttl": {"N": str(int(now + ttl_s + WAITER_TTL_MARGIN_S))},
                ":gen": {"N": str(gen)},
            },
        )
        if gen:
            # a newer copy (a hand-off that lost its race) is the current one from now on
            try:
                self.db.update_item(
                    TableName=self.table,
                    Key=self._key(*wait_key(session_id, run_id)),
                    UpdateExpression="SET gen = :gen",
                    ConditionExpression="gen < :gen",
                    ExpressionAttributeValues={":gen": {"N": str(gen)}},
                )
            except self.db.exceptions.ConditionalCheckFailedException:
                pass

    def waiters(self, session_id: str) -> list[Waiter]:
        """The runs still waiting (state ``waiting``), oldest arrival first, with what to re-send:
        one Query (a wait list holds a few small items: the records of one session's results)."""
        found = [waiter_from_item(i) for i in self._query(session_pk(session_id), WAIT_PREFIX)]
        return sorted((w for w in found if w.state == "waiting"), key=lambda w: (w.arrived, w.run_id))

    def drop_waiter(self, session_id: str, run_id: str) -> None:
        self.db.delete_item(TableName=self.table, Key=self._key(*wait_key(session_id, run_id)))

    def mark_parked(self, session_id: str) -> bool:
        """After joining the wait list: mark the session's lease (``PARKED``), so that its holder's
        release to nobody fails and it reads the wait list again, finding this run. False when the
        session has no lease, or an expired one: nobody will hand it over (one UpdateItem)."""
        try:
            self.db.update_item(
                TableName=self.table,
                Key=self._key(*lease_key(session_id)),
                UpdateExpression=f"SET {PARKED} = :yes",
                ConditionExpression="attribute_exists(pk) AND lease_until >= :now",
                ExpressionAttributeValues={":yes": {"BOOL": True}, ":now": {"N": f"{self.now():.3f}"}},
            )
        except self.db.exceptions.ConditionalCheckFailedException:
            return False
        except self.db.exceptions.TransactionConflictException:
            # a transaction is writing the lease right now (a commit, another start): no mark,
            # so the waiter keeps its fallback pause, as a hand-off that is lost would
            return True
        return True

    def reserve_session(self, session_id: str, run_id: str, seconds: float) -> bool:
        """Hold the free session for ``run_id`` alone for ``seconds`` (only its lease may replace
        this one). False when the session is not free: its holder hands off when it releases."""
        now = self.now()
        try:
            self.db.put_item(
                TableName=self.table,
                Item=self.reservation_item(session_id, run_id, seconds),
                ConditionExpression="attribute_not_exists(pk) OR lease_until < :now",
                ExpressionAttributeValues={":now": {"N": f"{now:.3f}"}},
            )
        except self.db.exceptions.ConditionalCheckFailedException:
            return False
        except self.db.exceptions.TransactionConflictException:
            # a transaction is writing the lease right now (a commit, another start): no mark,
            # so the waiter keeps its fallback pause, as a hand-off that is lost would
            return True
        return True

    def release_reservation(self, session_id: str, run_id: str) -> bool:
        """Give back a reservation ``run_id`` will not use (its run had already succeeded, or it
        was deferred). False when the session is not reserved for it."""
        try:
            self.db.delete_item(
                TableName=self.table,
                Key=self._key(*lease_key(session_id)),
                ConditionExpression="reserved_for = :me",
                ExpressionAttributeValues={":me": {"S": run_id}},
            )
        except self.db.exceptions.ConditionalCheckFailedException:
            return False
        except self.db.exceptions.TransactionConflictException:
            # a transaction is writing the lease right now (a commit, another start): no mark,
            # so the waiter keeps its fallback pause, as a hand-off that is lost would
            return True
        return True

    def mark_handed(self, session_id: str, run_id: str, gen: int) -> None:
        """The waiter was handed the session with its copy ``gen``: no longer a candidate; its
        older copies retire when they come back (``gen`` unchanged: the invocation that released
        the session runs it, and its delayed copy stays current)."""
        try:
            self.db.update_item(
                TableName=self.table,
                Key=self._key(*wait_key(session_id, run_id)),
                UpdateExpression="SET #st = :handed, gen = :gen",
                ConditionExpression="attribute_exists(pk) AND gen <= :gen",
                ExpressionAttributeNames={"#st": "state"},
                ExpressionAttributeValues={":handed": {"S": "handed"}, ":gen": {"N": str(gen)}},
            )
        except self.db.exceptions.ConditionalCheckFailedException:
            pass  # started or dropped meanwhile


def _json_attributes(attributes: dict[str, Any]) -> dict[str, Any]:
    """The producer's attributes as JSON (a binary value as base64)."""
    import base64

    out: dict[str, Any] = {}
    for name, value in attributes.items():
        if "BinaryValue" in value:
            raw = value["BinaryValue"]
            out[name] = {"DataType": value["DataType"], "BinaryValue64": base64.b64encode(raw).decode()}
        else:
            out[name] = value
    return out


def sqs_attributes(stored: dict[str, Any] | None) -> dict[str, Any]:
    """A waiter's stored attributes back in the SQS API shape."""
    import base64

    out: dict[str, Any] = {}
    for name, value in (stored or {}).items():
        if "BinaryValue64" in value:
            out[name] = {"DataType": value["DataType"], "BinaryValue": base64.b64decode(value["BinaryValue64"])}
        else:
            out[name] = value
    return out
