"""The product's live turns in the session lease: a live turn holds the session as a run does (the
same ``LEASE`` item, holder ``live:{turn}``), its messages are appended to the same history under
that lease (once per idempotency key), and the conversation is read back newest first.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentwake.errors import AgentwakeError, LeaseHeld
from agentwake.store.keys import HISTORY_PREFIX, append_key, history_sk, lease_key, session_pk
from agentwake.store.models import HistoryEntry, utcnow_iso
from agentwake.store.waitlist import WaitList

#: the most messages one append may carry (each is one item of its transaction)
MAX_APPEND_MESSAGES = 25
#: the holder of a session a live turn holds
LIVE_HOLDER_PREFIX = "live:"


class LiveTurnLost(AgentwakeError):
    """The live turn does not hold its session any more (it ended, or its lease expired and another
    writer took the session): begin a new one. Nothing of the call was written."""

    retryable = False


@dataclass(frozen=True)
class Appended:
    """The history entries of one append (``written``: False for a retried append found done)."""

    sort_keys: tuple[str, ...]
    written: bool


class LiveTurns(WaitList):
    def take_live_turn(self, session_id: str, turn_id: str, seconds: float) -> str:
        """The session's lease for the live turn ``turn_id``: returns its token, or raises LeaseHeld
        naming the holder (a run id, or ``live:{turn}``)."""
        token = uuid.uuid4().hex
        put = self.lease_put(session_id=session_id, run_id=LIVE_HOLDER_PREFIX + turn_id, token=token, seconds=seconds)
        try:
            self.db.put_item(**put["Put"])
        except self.db.exceptions.ConditionalCheckFailedException as exc:
            holder = (getattr(exc, "response", {}).get("Item") or {}).get("holder", {}).get("S")
            raise LeaseHeld(session_id, holder) from exc
        return token

    def renew_live_turn(self, session_id: str, token: str, seconds: float) -> float:
        """Hold the session ``seconds`` longer from now; returns the new end (epoch seconds)."""
        now = self.now()
        until = now + seconds
        try:
            self.db.update_item(
                TableName=self.table,
                Key=self._key(*lease_key(session_id)),
                UpdateExpression="SET lease_until = :until",
                ConditionExpression="#t = :me AND lease_until >= :now",
                ExpressionAttributeNames={"#t": "token"},
                ExpressionAttributeValues={
                    ":me": {"S": token},
                    ":now": {"N": f"{now:.3f}"},
                    ":until": {"N": f"{until:.3f}"},
                },
            )
        except self.db.exceptions.ConditionalCheckFailedException as exc:
            raise LiveTurnLost(f"the live turn does not hold session {session_id} any more") from exc
        return until

    def append_live(
        self, session_id: str, token: str, messages: Sequence[tuple[str, str]], idempotency_key: str
    ) -> Appended:
        """Append ``messages`` (role, content) to the session's history, under the live turn's lease
        and once per ``idempotency_key``: one transaction (lease check, append marker, entries)."""
        now = self.now()
        pk, marker_sk = append_key(session_id, idempotency_key)
        entries = [
            HistoryEntry(session_id=session_id, role=role, content=content, kind="live", sk=history_sk())  # type: ignore[arg-type]
            for role, content in messages
        ]
        sort_keys = tuple(e.sk for e in entries)
        items: list[tuple[str, Any]] = [
            (
                "lease",
                {
                    "ConditionCheck": {
                        "TableName": self.table,
                        "Key": self._key(*lease_key(session_id)),
                        "ConditionExpression": "#t = :me AND lease_until >= :now",
                        "ExpressionAttributeNames": {"#t": "token"},
                        "ExpressionAttributeValues": {":me": {"S": token}, ":now": {"N": f"{now:.3f}"}},
                    }
                },
            ),
            (
                "marker",
                {
                    "Put": {
                        "TableName": self.table,
                        "Item": {
                            "pk": {"S": pk},
                            "sk": {"S": marker_sk},
                            "sort_keys": {"S": json.dumps(sort_keys)},
                            "at": {"S": utcnow_iso()},
                            "expires_at": {"N": str(int(now + self.journal_ttl_s))},
                        },
                        "ConditionExpression": "attribute_not_exists(pk)",
                        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                    }
                },
            ),
            *(("entry", self._history_put(e)) for e in entries),
        ]
        try:
            self._transact(items)
        except self.db.exceptions.TransactionCanceledException as exc:
            failed: dict[str, Any] = getattr(exc, "failed_tags", {})
            marker = failed.get("marker") or {}
            if marker.get("Code") == "ConditionalCheckFailed" and marker.get("Item"):
                # appended before with this key: what it wrote then, nothing now
                return Appended(tuple(json.loads(marker["Item"]["sort_keys"]["S"])), written=False)
            if (failed.get("lease") or {}).get("Code") == "ConditionalCheckFailed":  # not a conflict: lost
                raise LiveTurnLost(
                    f"the live turn does not hold session {session_id} any more; nothing was appended"
                ) from exc
            raise
        return Appended(sort_keys, written=True)

    def conversation_page(
        self, session_id: str, *, limit: int, before: str | None = None
    ) -> tuple[list[HistoryEntry], str | None]:
        """History newest first, ``limit`` entries after the cursor ``before`` (a sort key); the
        cursor of the next page, or None at the first entry."""
        items = list(self._query(session_pk(session_id), HISTORY_PREFIX, forward=False, limit=limit, start=before))
        entries = [self._load(HistoryEntry, i) for i in items]
        return entries, (entries[-1].sk if len(entries) == limit and entries else None)
