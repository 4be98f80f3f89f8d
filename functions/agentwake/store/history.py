"""The conversation's history (append-only, one item per entry) and the deliveries recorded into
it: a delivered message is history at the moment it is delivered, exactly once per delivery id.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentwake.domain.models import HistoryEntry, truncate, utcnow_iso
from agentwake.store.itemsize import safe_text
from agentwake.store.keys import HISTORY_PREFIX, MARKER_CURSOR, delivery_sk, history_sk, run_pk, session_pk
from agentwake.store.table import Table

#: the user turn before a run's note in history
MARKER_TEXT = "Output your last task result below."
#: on a note item: it stands for two entries, the marker (``MARKER_TEXT``) and the note after it.
#: A commit writes the pair as this one item (one write, not two); the readers below expand it, so
#: every reader sees the two entries it saw when they were two items (which older versions wrote)
WITH_MARKER = "with_marker"


class History:
    """The conversation's entries, append-only, and the deliveries recorded into them."""

    def __init__(self, table: Table) -> None:
        self.table = table

    # --- history ------------------------------------------------------------------------------

    def entry_put(self, entry: HistoryEntry) -> dict[str, Any]:
        sk = entry.sk or history_sk()
        entry = entry.model_copy(update={"sk": sk})
        return {
            "Put": {
                "TableName": self.table.name,
                "Item": self.table.item(entry, session_pk(entry.session_id), sk),
                "ConditionExpression": "attribute_not_exists(pk)",
            }
        }

    def note_put(self, *, session_id: str, run_id: str, note: str) -> dict[str, Any]:
        """A DONE run's marker and note, one item (``WITH_MARKER``): the reads expand it into both."""
        entry = HistoryEntry(session_id=session_id, role="assistant", content=note, kind="note", run_id=run_id)
        put = self.entry_put(entry)
        put["Put"]["Item"][WITH_MARKER] = {"BOOL": True}
        return put

    def entries_of(self, item: dict[str, Any]) -> list[HistoryEntry]:
        """The entries one history item holds, oldest first: one, or a note's marker and the note."""
        if WITH_MARKER not in item:
            return [self.table.load(HistoryEntry, item)]
        note = self.table.load(HistoryEntry, {k: v for k, v in item.items() if k != WITH_MARKER})
        marker = note.model_copy(update={"role": "user", "content": MARKER_TEXT, "kind": "marker"})
        # each its own sort key, each a cursor: "before the note" is its marker and older
        # (``MARKER_CURSOR``), "before the marker" the items older than this one
        return [marker, note.model_copy(update={"sk": f"{note.sk}{MARKER_CURSOR}"})]

    def history_window(self, session_id: str, limit: int) -> list[HistoryEntry]:
        """The newest ``limit`` entries, oldest first: one Query with Limit, whatever the length
        (``limit`` items hold at least ``limit`` entries: a note's item holds its marker too)."""
        if limit <= 0:
            return []
        items = list(self.table.query(session_pk(session_id), HISTORY_PREFIX, forward=False, limit=limit))
        return [e for i in reversed(items) for e in self.entries_of(i)][-limit:]

    def history(self, session_id: str) -> list[HistoryEntry]:
        return [e for i in self.table.query(session_pk(session_id), HISTORY_PREFIX) for e in self.entries_of(i)]

    # --- deliveries: history at the moment they are delivered, exactly once ----------------------

    def has_delivery(self, run_id: str, delivery_id: str) -> bool:
        return self.table.read_item(run_pk(run_id), delivery_sk(delivery_id)) is not None

    def delivery_items(
        self,
        *,
        run_id: str,
        delivery_id: str,
        session_id: str,
        text: str,
        also: Sequence[dict[str, Any]] = (),
        receipts: Sequence[dict[str, Any]] = (),
    ) -> list[tuple[str, Any]]:
        """The delivery marker (once per delivery id), its history entry and ``also`` (the session's
        daily delivery counter), tagged ``delivery:{id}``: dropped together if it is recorded already.

        ``receipts``: the platforms' proofs (``Receipt.to_dict()``), kept on the marker as JSON."""
        marker = {
            "pk": {"S": run_pk(run_id)},
            "sk": {"S": delivery_sk(delivery_id)},
            "session_id": {"S": session_id},
            "text": {"S": truncate(safe_text(text))},
            "at": {"S": utcnow_iso()},
        }
        if receipts:
            marker["receipts"] = {"S": receipts_json(receipts)}
        entry = HistoryEntry(
            session_id=session_id,
            role="assistant",
            content=text,
            kind="delivery",
            run_id=run_id,
            delivery_id=delivery_id,
        )
        tag = f"delivery:{delivery_id}"
        put = {"Put": {"TableName": self.table.name, "Item": marker, "ConditionExpression": "attribute_not_exists(pk)"}}
        return [(tag, put), (tag, self.entry_put(entry)), *((tag, item) for item in also)]

    def delivery_record(
        self,
        *,
        run_id: str,
        delivery_id: str,
        session_id: str,
        text: str,
        also: Sequence[dict[str, Any]] = (),
        receipts: Sequence[dict[str, Any]] = (),
    ) -> list[tuple[str, Any]]:
        """The record of a delivery just sent (marker, history entry, ``also``), built at the moment
        of the send (its history entry sorts there) and written by the run's next transaction:
        deliver_final's answer rides on the commit (or the failure record) this way."""
        return self.delivery_items(
            run_id=run_id, delivery_id=delivery_id, session_id=session_id, text=text, also=also, receipts=receipts
        )

    def record_delivery(
        self,
        *,
        run_id: str,
        delivery_id: str,
        session_id: str,
        text: str,
        also: Sequence[dict[str, Any]] = (),
        receipts: Sequence[dict[str, Any]] = (),
    ) -> bool:
        """Append a delivered message to history, once per delivery id. False if already recorded.

        ``also``: more transaction items written with it (the session's daily delivery counter)."""
        items = self.delivery_items(
            run_id=run_id, delivery_id=delivery_id, session_id=session_id, text=text, also=also, receipts=receipts
        )
        try:
            return not self.table.transact(items, droppable=frozenset({"delivery"}))
        except Exception as exc:
            from agentwake.store.outcomes import outcome_unknown

            # the answer was lost: the marker says whether it landed (the write is all or nothing)
            if outcome_unknown(exc) and self.has_delivery(run_id, delivery_id):
                return True
            raise

    def conversation_page(
        self, session_id: str, *, limit: int, before: str | None = None
    ) -> tuple[list[HistoryEntry], str | None]:
        """History newest first, ``limit`` entries after the cursor ``before`` (a sort key); the
        cursor of the next page, or None at the first entry. A note's item holds two entries (the
        note, then its marker, newest first): a page that ends between them ends with the note, and
        its cursor (``MARKER_CURSOR``) starts the next page at that item's marker."""
        items = list(self.table.query(session_pk(session_id), HISTORY_PREFIX, forward=False, limit=limit, start=before))
        marker_of = before[: -len(MARKER_CURSOR)] if before is not None and before.endswith(MARKER_CURSOR) else None
        entries: list[HistoryEntry] = []
        for n, item in enumerate(items):
            shown = self.entries_of(item)[::-1]
            if item["sk"]["S"] == marker_of:
                shown = shown[1:]  # its note was on the page before
            if len(entries) + len(shown) > limit:  # the page ends inside this item: after its note
                return entries + shown[:1], item["sk"]["S"] + MARKER_CURSOR
            entries += shown
            if len(entries) == limit and n + 1 < len(items):
                return entries, entries[-1].sk
        return entries, (items[-1]["sk"]["S"] if len(items) == limit and items else None)


#: a marker's receipts stay small: a WebSocket receipt lists at most this many connection ids
_MAX_RECEIPTS_BYTES = 4000


def receipts_json(receipts: Sequence[dict[str, Any]]) -> str:
    """The marker's ``receipts`` attribute: JSON of at most ``_MAX_RECEIPTS_BYTES`` UTF-8 bytes. A
    long id list is cut (with its count); if that is not enough, fields are dropped (``where``, then
    ``extra``, then ``ids``) from the last receipt back, then whole receipts: always valid JSON."""
    import json

    def fits(rs: list[dict[str, Any]]) -> str | None:
        out = json.dumps(rs, separators=(",", ":"), ensure_ascii=False)
        return out if len(out.encode()) <= _MAX_RECEIPTS_BYTES else None

    cut = [dict(r) for r in receipts]
    if (out := fits(cut)) is not None:
        return out
    for r in cut:
        ids = list(r.get("ids") or ())
        if len(ids) > 5:
            r["ids"] = ids[:5]
            r["extra"] = {**(r.get("extra") or {}), "ids_total": len(ids)}
    if (out := fits(cut)) is not None:
        return out
    for name in ("where", "extra", "ids"):
        for r in reversed(cut):
            if r.pop(name, None) is not None and (out := fits(cut)) is not None:
                return out
    while cut:
        cut.pop()
        if (out := fits(cut)) is not None:
            return out
    return "[]"
