"""The run's journal on DynamoDB: each completed step under the run id (``STEP#…``), read back by
a retry in one Query with the deliveries already recorded, and ``DynamoJournal``, the journal a
wake's agent writes through.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from agentwake.domain.models import truncate, utcnow_iso
from agentwake.domain.steps import STEP_ATTEMPT, final_delivery_id, is_model_reply, kept_for_commit
from agentwake.errors import StepInterrupted
from agentwake.store.history import History
from agentwake.store.itemsize import JOURNAL_VALUE_BYTES, bound_json, cut_text, json_bytes, safe_text, utf8_len
from agentwake.store.keys import (
    DELIVERY_PREFIX,
    FAILURE_PREFIX,
    SENDING_PREFIX,
    STEP_PREFIX,
    after,
    intent_key_parts,
    run_pk,
    sending_sk,
    step_sk,
)
from agentwake.store.outcomes import outcome_unknown
from agentwake.store.port import Counters, Unwritten
from agentwake.store.table import Table, pages

if TYPE_CHECKING:
    from agentwake.delivery.intents import Intent

#: a run's intents: delivery id -> target -> intent
Intents = dict[str, dict[str, "Intent"]]


class Journals:
    """The runs' journals: each completed step under its run id, and ``DynamoJournal`` to write one."""

    def __init__(self, table: Table, history: History) -> None:
        self.table = table
        #: where the deliveries a step reports are recorded
        self.history = history

    def journal_entries(self, run_id: str) -> dict[str, dict[str, Any]]:
        return {
            after(STEP_PREFIX, item["sk"]["S"]): json.loads(item["value"]["S"])
            for item in self.table.query(run_pk(run_id), STEP_PREFIX)
        }

    def run_journal(self, run_id: str) -> tuple[dict[str, dict[str, Any]], set[str], Intents]:
        """A retry's one read of its run: the completed steps, the delivery ids already recorded and
        the intents of sends that may be in doubt (one Query of the run's partition, failure records
        filtered out; sized by the run's steps, never by the conversation)."""
        request: dict[str, Any] = {
            "TableName": self.table.name,
            "KeyConditionExpression": "pk = :pk",
            "FilterExpression": "NOT begins_with(sk, :failure)",
            "ExpressionAttributeValues": {":pk": {"S": run_pk(run_id)}, ":failure": {"S": FAILURE_PREFIX}},
            "ConsistentRead": True,
        }
        steps: dict[str, dict[str, Any]] = {}
        delivered: set[str] = set()
        intents: Intents = {}
        for item in pages(self.table.db.query, request):
            sk = item["sk"]["S"]
            if sk.startswith(STEP_PREFIX):
                steps[after(STEP_PREFIX, sk)] = json.loads(item["value"]["S"])
            elif sk.startswith(DELIVERY_PREFIX):
                delivered.add(after(DELIVERY_PREFIX, sk))
            elif sk.startswith(SENDING_PREFIX):
                intent = intent_of(item)
                intents.setdefault(intent.delivery_id, {})[intent.target] = intent
        return steps, delivered, intents

    def intent_put(self, run_id: str, intent: Intent) -> dict[str, Any]:
        """The intent's item (``RUN#{run}`` / ``SENDING#{delivery}#{target}``), a whole Put: each
        state of it is written as a whole, idempotently."""
        item: dict[str, Any] = {
            "pk": {"S": run_pk(run_id)},
            "sk": {"S": sending_sk(intent.delivery_id, intent.target)},
            "delivery_id": {"S": intent.delivery_id},
            "session_id": {"S": intent.session_id},
            "channel": {"S": intent.channel},
            "target": {"S": intent.target},
            "where": {"S": intent.where},
            "text": {"S": truncate(safe_text(intent.text))},
            "at": {"S": intent.at or utcnow_iso()},
            "state": {"S": intent.state},
            "expires_at": {"N": str(int(self.table.now()) + self.table.journal_ttl_s)},
        }
        if intent.receipt is not None:
            item["receipt"] = {"S": json.dumps(intent.receipt.to_dict(), separators=(",", ":"), ensure_ascii=False)}
        if intent.not_before is not None:
            item["not_before"] = {"S": intent.not_before}
        if intent.probe:
            item["probe"] = {"S": json.dumps(intent.probe, separators=(",", ":"), ensure_ascii=False)}
        return {"Put": {"TableName": self.table.name, "Item": item}}

    def step_put(self, run_id: str, key: str, value: dict[str, Any]) -> dict[str, Any]:
        return {
            "Put": {
                "TableName": self.table.name,
                "Item": {
                    "pk": {"S": run_pk(run_id)},
                    "sk": {"S": step_sk(key)},
                    "value": {"S": json.dumps(value, ensure_ascii=False)},
                    "at": {"S": utcnow_iso()},
                    "expires_at": {"N": str(int(self.table.now()) + self.table.journal_ttl_s)},
                },
            }
        }

    def unwritten_items(self, run_id: str, unwritten: Unwritten | None) -> list[tuple[str, Any]]:
        if not unwritten:
            return []
        items: list[tuple[str, Any]] = [("step", self.step_put(run_id, k, v)) for k, v in unwritten.steps.items()]
        items += [("step", item) for item in unwritten.also]
        for d in unwritten.deliveries:
            items += self.history.delivery_items(**d)
        items += unwritten.records
        return items

    def journal_put(
        self,
        run_id: str,
        key: str,
        value: dict[str, Any],
        *,
        unwritten: Unwritten | None = None,
        also: Sequence[dict[str, Any]] = (),
    ) -> None:
        """Journal one completed step. With ``unwritten`` (deliveries sent during this step, steps
        kept back) or ``also`` (the session's daily token counter), all of it lands in one
        transaction: a delivery's marker, its history entry and the tool result that reports it
        are never apart."""
        if not unwritten and not also:
            self.table.db.put_item(**self.step_put(run_id, key, value)["Put"])
            return
        items = [("step", self.step_put(run_id, key, value)), *(("step", item) for item in also)]
        items += self.unwritten_items(run_id, unwritten)
        self.table.transact(items, droppable=frozenset({"delivery"}))

    def step_landed(self, run_id: str, key: str, value: dict[str, Any]) -> bool:
        """Whether this step is journaled with this value (one consistent GetItem): how a write
        whose answer was lost is read back. The write is all or nothing, so the step tells for the
        deliveries and counters that rode on it."""
        item = self.table.read_item(run_pk(run_id), step_sk(key))
        return item is not None and item.get("value", {}).get("S") == json.dumps(value, ensure_ascii=False)

    def journal(
        self, run_id: str, *, fresh: bool = False, counters: Counters | None = None, attempt: int | None = None
    ) -> DynamoJournal:
        """The run's journal. ``fresh``: the run had no record before this attempt, so there is
        nothing to read (a first attempt skips the journal read). ``counters``: each new model
        reply's tokens are added to the session's daily counter in the same write as the reply.
        ``attempt``: the run's attempt number, written into each step this attempt journals."""
        return DynamoJournal(self, run_id, fresh=fresh, counters=counters, attempt=attempt)


class DynamoJournal:
    """The StepJournal port on DynamoDB, and the recorder of the run's deliveries.

    - A retry loads the run's completed steps and recorded delivery ids in one Query; a first
      attempt (no run record before it) has none, and reads nothing.
    - A reply that calls tools is written at once: its tools may act on the world.
    - A delivery is staged when it is sent and lands in the same transaction as the step that
      reports it (marker, history entry and tool result together).
    - The run's last steps (the reply without tool calls, deliver_final's entry) are kept back and
      written by the commit (or failure) transaction, with the deliveries they report; anything
      kept back is written before a message is sent.
    - deliver_final's answer is recorded like a tool step's delivery: its reply is durable before
      the send (flushed), its record is staged when it is sent and lands with the entry that reports
      it (``final.delivery``), which the commit writes — the next write after the send, as for
      ``send_message_to_user`` (docs/durability.md).
    - With ``counters`` (a session with daily limits), a new reply's tokens are added to the day's
      counter in the same write as the reply (a transaction instead of a put: still one round trip).
    """

    def __init__(
        self,
        store: Journals,
        run_id: str,
        *,
        fresh: bool = False,
        counters: Counters | None = None,
        attempt: int | None = None,
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.counters = counters
        #: the run's attempt that journals through this (``STEP_ATTEMPT`` of each step it writes)
        self.attempt = attempt
        if fresh:
            self.entries: dict[str, dict[str, Any]] = {}
            self.delivered: set[str] = set()
            #: sends that may be in doubt, by delivery id and target (delivery/intents.py)
            self.intended: Intents = {}
        else:
            self.entries, self.delivered, self.intended = store.run_journal(run_id)
        #: steps kept back, with the deliveries they report and their counter items
        self.pending = Unwritten()
        #: deliveries sent since the last step was put, not yet reported by any step
        self.loose: list[dict[str, Any]] = []
        #: records of such deliveries built when they were sent (deliver_final's answer)
        self.staged: list[tuple[str, Any]] = []

    def get(self, key: str) -> dict[str, Any] | None:
        return self.entries.get(key)

    def learn(self, key: str, value: dict[str, Any]) -> None:
        """Know a step another writer journaled (an approval's decision, written by the decision's
        own transaction) without writing it: the next replay takes it."""
        self.entries[key] = value

    def put(self, key: str, value: dict[str, Any], *, also: Sequence[dict[str, Any]] = ()) -> None:
        also = [*also, *self._counted(key, value)]
        if self.attempt is not None:  # which attempt did the step: a replayed step keeps its own
            value = {**value, STEP_ATTEMPT: self.attempt}
        value = _cap_journal_value(value)
        if self._keep_back(key, value):
            self.pending = self.pending + Unwritten(
                steps={key: value}, deliveries=self.loose, also=list(also), records=self.staged
            )
        else:
            self._write(key, value, self.pending + Unwritten(deliveries=self.loose, records=self.staged), also)
        self.loose = []
        self.staged = []
        self.entries[key] = value

    def _write(
        self,
        key: str,
        value: dict[str, Any],
        rest: Unwritten,
        also: Sequence[dict[str, Any]] = (),
        *,
        kept_back: bool = False,
    ) -> None:
        """Journal one step with what rides on it (``rest``: steps kept back, deliveries it reports;
        ``kept_back``: the step itself was kept back, and stays so if the write fails).

        An unknown outcome (the answer lost) is read back first: a write that landed is not a
        failure. A write that failed otherwise loses nothing that left the process: when it
        carried deliveries, the step and those deliveries (marker, history entry, the tool result
        that reports them) become what the run's failure transaction writes (``unwritten()``), as
        deliver_final's answer is recorded, so a retry replays the step and sends nothing again.
        """
        try:
            self.store.journal_put(self.run_id, key, value, unwritten=rest or None, also=also)
        except Exception as exc:
            unknown = outcome_unknown(exc)
            if unknown:
                landed: bool | None
                try:
                    landed = self.store.step_landed(self.run_id, key, value)
                except Exception:  # noqa: BLE001 -- unresolved: the failure transaction decides
                    landed = None
                if landed:
                    self.pending = Unwritten()
                    return  # it landed; only its answer was lost
                unknown = landed is None
            if unknown:
                # perhaps landed: no counter is added twice (the step and the delivery records are
                # idempotent or conditional, an ADD is not); an intent's whole Put is idempotent and
                # is kept (its state may be all that tells a retry nothing was sent)
                rest = Unwritten(
                    steps=rest.steps, deliveries=rest.deliveries, records=rest.records, also=_intent_puts(rest.also)
                )
                also = _intent_puts(also)
            keep = kept_back or bool(rest.deliveries or rest.records)
            self.pending = rest + Unwritten(steps={key: value}, also=list(also)) if keep else rest
            self.loose, self.staged = [], []
            raise
        self.pending = Unwritten()

    def _counted(self, key: str, value: dict[str, Any]) -> list[dict[str, Any]]:
        """The daily counter's item for a reply's tokens (none without counters, or for no tokens)."""
        usage = value.get("usage") if self.counters is not None and is_model_reply(key) else None
        tokens = int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0)) if usage else 0
        if not tokens or self.counters is None:
            return []
        return [self.counters.add(tokens=tokens)]

    def _keep_back(self, key: str, value: dict[str, Any]) -> bool:
        """The run's last step: the commit writes it (a reply with no tool calls ends the run)."""
        return kept_for_commit(key, value)

    def flush(self) -> None:
        """Write the steps kept back (before anything leaves the process)."""
        if self.pending.steps:
            *earlier, (key, value) = self.pending.steps.items()
            rest = Unwritten(
                steps=dict(earlier),
                deliveries=self.pending.deliveries,
                also=self.pending.also,
                records=self.pending.records,
            )
            self._write(key, value, rest, kept_back=True)

    def unwritten(self, *, for_commit: bool = False) -> Unwritten:
        """What the run's last transaction must write: the steps kept back, and a step whose own
        write failed with the deliveries it carried (``_write``). A success also records the
        deliveries no step reported yet; a failure does not (the step that sent them never tried to
        write, so it is redone and resends them under the same delivery id: the at-least-once edge
        of docs/durability.md)."""
        if for_commit:
            return self.pending + Unwritten(deliveries=self.loose, records=self.staged)
        return self.pending

    def mark_written(self) -> None:
        self.pending = Unwritten()
        self.loose = []
        self.staged = []

    # --- the intent log of delivery/intents.py (IntentLog) ---------------------------------------

    def intents(self, delivery_id: str) -> dict[str, Intent]:
        """The delivery's intents by target, as this attempt's journal read loaded them (no read)."""
        return dict(self.intended.get(delivery_id) or {})

    def intend(self, intent: Intent) -> None:
        """Write the intent now: the request leaves right after it (a crash in between is the window
        the next attempt settles by it). Steps kept back ride on the same write (deliver_final's
        reply, flushed before its send: the intent costs it no round trip); if that write fails,
        the intent is not left for the failure transaction (nothing was sent)."""
        put = self.store.intent_put(self.run_id, intent)
        try:
            if self.pending.steps:
                self.pending = self.pending + Unwritten(also=[put])
                self.flush()
            else:
                self.store.table.db.put_item(**put["Put"])
        except BaseException:
            # the write failed, or perhaps landed with its answer lost: nothing was sent, and the
            # run's next write says so (a whole Put, right whether or not the "sending" one landed)
            not_sent = self.store.intent_put(self.run_id, replace(intent, state="not_sent"))
            self.pending.also = [item for item in self.pending.also if item is not put] + [not_sent]
            self.intended.setdefault(intent.delivery_id, {})[intent.target] = replace(intent, state="not_sent")
            raise
        self.intended.setdefault(intent.delivery_id, {})[intent.target] = intent

    def settle_intent(self, intent: Intent) -> None:
        """``not_sent`` (a certain failure) rides on the run's next write: the failure transaction,
        or the step that reports the error to the model; lost with a hard kill, it leaves the intent
        in doubt (a lookup, or an operator's word). ``sent`` (a route target's receipt) is put now:
        a later target may fail the run."""
        self.intended.setdefault(intent.delivery_id, {})[intent.target] = intent
        put = self.store.intent_put(self.run_id, intent)
        if intent.state == "not_sent":
            self.pending = self.pending + Unwritten(also=[put])
            return
        try:
            self.store.table.db.put_item(**put["Put"])
        except Exception as exc:
            # the target took the delivery: an ``error:`` result would have the model send it again
            raise StepInterrupted(
                f"{intent.channel} took delivery {intent.delivery_id}, and its receipt could not be kept "
                f"({type(exc).__name__}): the retry settles it"
            ) from exc

    # --- the recorder port of RecordingChannel -----------------------------------------------

    def has_delivery(self, run_id: str, delivery_id: str) -> bool:
        if run_id != self.run_id:
            return self.store.history.has_delivery(run_id, delivery_id)
        return delivery_id in self.delivered

    def before_send(self) -> None:
        self.flush()

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
        """Stage a sent delivery: it is written with the step that reports it (a tool result, or
        ``final.delivery`` for deliver_final's answer, which the commit or the failure record
        writes). A delivery to another session is recorded on its own, at once."""
        if run_id != self.run_id:
            return self.store.history.record_delivery(
                run_id=run_id, delivery_id=delivery_id, session_id=session_id, text=text, also=also, receipts=receipts
            )
        if delivery_id == final_delivery_id(self.run_id):
            # built now, so its history entry sorts at the send, before the commit's marker and note
            self.staged += self.store.history.delivery_record(
                run_id=run_id, delivery_id=delivery_id, session_id=session_id, text=text, also=also, receipts=receipts
            )
            self.delivered.add(delivery_id)
            return True
        self.loose.append(
            {
                "run_id": run_id,
                "delivery_id": delivery_id,
                "session_id": session_id,
                "text": text,
                "also": list(also),
                "receipts": list(receipts),
            }
        )
        self.delivered.add(delivery_id)
        return True


def intent_of(item: dict[str, Any]) -> Intent:
    """An intent item as the guard reads it."""
    from agentwake.delivery import Receipt
    from agentwake.delivery.intents import Intent

    def text(name: str) -> str:
        return str(item.get(name, {}).get("S", ""))

    delivery_id = text("delivery_id")
    target = text("target")
    if not delivery_id:  # written without the attribute: the key says (its target has no '#')
        delivery_id, _, target = intent_key_parts(item["sk"]["S"])
    state = text("state") or "sending"
    return Intent(
        delivery_id=delivery_id,
        target=target,
        channel=text("channel"),
        session_id=text("session_id"),
        where=text("where"),
        text=text("text"),
        at=text("at"),
        state=state if state in ("sending", "not_sent", "sent") else "sending",  # type: ignore[arg-type]
        receipt=Receipt.from_dict(json.loads(text("receipt"))) if text("receipt") else None,
        not_before=text("not_before") or None,
        probe=json.loads(text("probe")) if text("probe") else {},
    )


def _cap_journal_value(value: dict[str, Any]) -> dict[str, Any]:
    """Bounded in bytes as DynamoDB counts them (any text, tool arguments included): see itemsize.

    ``bound_json`` cuts the longest string, then the next, one at a time, each time measuring the
    whole value again: a reply with many long strings (up to 64 tool calls, each with a long id, name
    and arguments) took seconds and could run out of cuts, the reply unjournaled and billed again
    on every retry. So an oversized value first has every string longer than one level cut to it
    (the level found in one pass, the longest strings cut first as ``bound_json`` does), and
    ``bound_json`` only fixes what JSON escapes add."""
    size = json_bytes(value)
    if size > JOURNAL_VALUE_BYTES:
        level = _cut_level(sorted(_string_sizes(value), reverse=True), size - JOURNAL_VALUE_BYTES)
        if level is not None:
            value = _each_cut(value, level)
    return bound_json(value, JOURNAL_VALUE_BYTES)


#: what the level keeps for a cut string's marker, and what it removes beyond the excess
_MARKER_ROOM = 80
_LEVEL_MARGIN = 1024


def _cut_level(sizes: list[int], excess: int) -> int | None:
    """The length L such that cutting every string longer than L to L removes ``excess`` bytes
    (``sizes`` longest first); None when no string is long enough to cut."""
    excess += _LEVEL_MARGIN
    total = 0
    for k, longest in enumerate(sizes, start=1):
        total += longest
        level = (total - excess) // k
        following = sizes[k] if k < len(sizes) else 0
        if level >= following:
            return max(_MARKER_ROOM, level) if level < longest else None
    return None


def _string_sizes(value: Any) -> list[int]:
    if isinstance(value, dict):
        return [n for v in value.values() for n in _string_sizes(v)]
    if isinstance(value, list | tuple):
        return [n for v in value for n in _string_sizes(v)]
    return [utf8_len(value)] if isinstance(value, str) else []


def _each_cut(value: Any, max_bytes: int) -> Any:
    if isinstance(value, dict):
        return {k: _each_cut(v, max_bytes) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_each_cut(v, max_bytes) for v in value]
    return cut_text(value, max_bytes) if isinstance(value, str) and utf8_len(value) > max_bytes else value


def _intent_puts(items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The intents' whole Puts among transaction items (idempotent: kept on an unknown outcome)."""
    return [
        i for i in items if str(i.get("Put", {}).get("Item", {}).get("sk", {}).get("S", "")).startswith(SENDING_PREFIX)
    ]
