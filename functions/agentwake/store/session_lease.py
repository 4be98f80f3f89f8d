"""Who holds a session, on the table: the one module that spells the session lease's attributes and
conditions, its wait list and the live turns that hold it (the states: ``agentwake.session.lease``;
the diagram: docs/durability.md, "Who holds a session").

The lease is one item per session (``SESSION#{id}`` / ``LEASE``): its holder (a run id or
``live:{turn}``), a token new on every acquisition, ``lease_until``, and either ``reserved_for``
(a release handed the session to that waiting run) or the parked mark (a run joined the wait list
while it was held). A waiter is one item per run (``SESSION#{session}`` / ``WAIT#{run}``): when it
first waited (``arrived``, never changed by a later wait of the same run), its state (``waiting`` →
``handed`` → ``started``), which copy of its record is current (``gen``) and what to re-send. While
it is ``waiting`` it also has a small place on the list (``agentwake.store.wait_places``), so that a
release finds the oldest waiter by reading the first few places and then that one waiter's item,
whatever the list's length and its waiters' sizes.

Other store parts never spell these: a run's start takes the lease by ``take`` (one plain
conditional write, then counts its attempt), and its end (commit, failure record, park) is
followed by ``release``: one plain conditional write, the one path of every release
(``agentwake.session.handoff.release``).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from agentwake.domain.models import HistoryEntry, task_token_hash, utcnow_iso
from agentwake.errors import AppendTooLarge, LeaseHeld, LiveTurnCapped, LiveTurnLost
from agentwake.session.lease import RESERVATION_S, Waiter, live_holder
from agentwake.store.codec import key
from agentwake.store.history import History
from agentwake.store.itemsize import oversize
from agentwake.store.keys import append_key, history_sk, lease_key, wait_key
from agentwake.store.outcomes import outcome_unknown
from agentwake.store.table import ALL_OLD, Table, conditional_write, gone
from agentwake.store.wait_places import PLACES_PAGE, WaitPlaces, waiter_from_item

#: the lease item's attributes
HOLDER = "holder"
TOKEN = "token"
UNTIL = "lease_until"
RESERVED_FOR = "reserved_for"
#: set on the lease item by a run that joins the session's wait list while the lease is held: a
#: release to nobody fails on it, so a holder that read the list before that run joined reads it again
PARKED = "waiter_parked"
#: set on a live turn's lease: the latest it may hold the session, renewals included (its begin plus
#: the cap, ``AGENTWAKE_LIVE_TURN_MAX_HOLD_S``); a renewal never moves ``lease_until`` past it
HOLD_UNTIL = "hold_until"

#: the session can be taken: no lease, or an expired one
FREE = f"attribute_not_exists(pk) OR {UNTIL} < :now"
#: ... or reserved for the run taking it (``:me``) by the release that handed it over
FREE_OR_RESERVED_FOR_ME = f"{FREE} OR {RESERVED_FOR} = :me"
#: the lease is held with the token ``:me`` (``#t``: the token attribute)
HELD_WITH_TOKEN = "#t = :me"
#: ... and has not expired
HELD_NOW = f"{HELD_WITH_TOKEN} AND {UNTIL} >= :now"
#: nobody marked the lease since it was read
NOT_PARKED = f"attribute_not_exists({PARKED})"
#: there is a lease and it has not expired (a holder is there to hand the session over)
HELD_BY_SOMEONE = f"attribute_exists(pk) AND {UNTIL} >= :now"
#: reserved for the run ``:me``
RESERVED_FOR_ME = f"{RESERVED_FOR} = :me"

#: how often a write of the lease item outside a transaction (a waiter's mark, a reservation, its
#: give-back) is tried when it meets a transaction writing the item
LEASE_WRITE_TRIES = 2
#: the most messages one append may carry (each is one item of its transaction)
MAX_APPEND_MESSAGES = 25
#: a renewal within this much of the turn's cap is refused rather than granted a sliver of a lease
HOLD_SLACK_S = 1.0


@dataclass(frozen=True)
class Appended:
    """The history entries of one append (``written``: False for a retried append found done)."""

    sort_keys: tuple[str, ...]
    written: bool


def holder_of(item: dict[str, Any] | None) -> str | None:
    """Who holds the session, from a lease item (a failed condition's old item)."""
    return (item or {}).get(HOLDER, {}).get("S")


class SessionLeases:
    """The session lease, its wait list and the live turns, on the one table."""

    def __init__(self, table: Table, history: History) -> None:
        self.table = table
        #: where a live turn's messages are appended, under its lease
        self.history = history
        #: the wait list's order: a place per waiting run
        self.places = WaitPlaces(table)

    # --- the lease: taken, released, reserved ------------------------------------------------------

    def take(
        self, *, session_id: str, holder: str, token: str, seconds: float, hold_until: float | None = None
    ) -> bool:
        """Take the session's lease for ``seconds`` if it is free, expired, or reserved for ``holder``
        (``hold_until``: a live turn's cap), by one plain conditional write. The token is new on
        every acquisition: not even another copy of the same run may enter a lease that is held (a
        crashed holder's lease simply expires). True when its answer was lost and it is read back as
        landed (botocore's second try refused on the lease the first wrote: ``ALL_OLD``; or one
        GetItem); raises LeaseHeld naming the holder found. A failed read-back undoes the take."""
        now = self.table.now()
        pk, sk = lease_key(session_id)
        item = {"pk": {"S": pk}, "sk": {"S": sk}, HOLDER: {"S": holder}, TOKEN: {"S": token}}
        item |= {UNTIL: {"N": f"{now + seconds:.3f}"}, "acquired_at": {"S": utcnow_iso()}}
        if hold_until is not None:
            item[HOLD_UNTIL] = {"N": f"{hold_until:.3f}"}
        put = {
            "TableName": self.table.name,
            "Item": item,
            "ConditionExpression": FREE_OR_RESERVED_FOR_ME,
            "ExpressionAttributeValues": {":now": {"N": f"{now:.3f}"}, ":me": {"S": holder}},
            **ALL_OLD,
        }
        found: list[dict[str, Any] | None] = []
        db = self.table.db
        try:
            ours = lambda item: self.taken_with(item, holder=holder, token=token)  # noqa: E731
            if conditional_write(db, lambda: db.put_item(**put), tries=LEASE_WRITE_TRIES, landed=ours, found=found):
                return bool(found)
        except Exception as exc:
            # another write of the lease right now (a conflict), or no answer: an earlier try may
            # have landed with its answer lost (botocore's, or ours): one consistent read says
            conflict = isinstance(exc, db.exceptions.TransactionConflictException)
            if not conflict and not outcome_unknown(exc):
                raise  # throttled, refused before it was applied: nothing landed
            try:
                if self.taken_with(self.table.read_item(*lease_key(session_id)), holder=holder, token=token):
                    return True
            except Exception:
                with suppress(Exception):  # else it lapses at its end
                    self.release(session_id, token)
                raise (LeaseHeld(session_id, None) if conflict else exc) from None
            if conflict:
                raise LeaseHeld(session_id, None) from exc  # another run is starting right now
            raise
        raise LeaseHeld(session_id, holder_of(found[-1] if found else None))

    def taken_with(self, item: dict[str, Any] | None, *, holder: str, token: str) -> bool:
        """Whether a lease item read back is the one a take with ``token`` wrote."""
        item = item or {}
        return item.get(TOKEN, {}).get("S") == token and holder_of(item) == holder

    def reservation_item(
        self, session_id: str, run_id: str, seconds: float = RESERVATION_S, *, by: str | None = None
    ) -> dict[str, Any]:
        """The lease item that holds the session for ``run_id`` alone (a hand-off): only that run's
        lease may replace it (``take``), anyone's once ``seconds`` have passed. ``by``: the
        token of the lease a release hands over: the reservation's token is then derived from it, so
        that the release made again (its answer lost) recognises the reservation it wrote."""
        pk, sk = lease_key(session_id)
        token = uuid.uuid4().hex if by is None else hashlib.sha256(f"{by}\n{run_id}".encode()).hexdigest()[:32]
        return {
            "pk": {"S": pk},
            "sk": {"S": sk},
            HOLDER: {"S": run_id},
            RESERVED_FOR: {"S": run_id},
            TOKEN: {"S": "reserved-" + token},
            UNTIL: {"N": f"{self.table.now() + seconds:.3f}"},
        }

    def release_write(self, session_id: str, token: str, hand_to: str | None, *, unless_parked: bool) -> dict[str, Any]:
        """The write that releases the lease held with ``token``: deleted, or (``hand_to``) turned
        into the reservation for that waiting run, in the same conditional write. ``unless_parked``
        (a release to nobody): not if a run marked the lease (``PARKED``) as it joined the wait
        list, after the holder read the list: the holder reads it again."""
        condition = HELD_WITH_TOKEN
        if hand_to is None and unless_parked:
            condition += f" AND {NOT_PARKED}"
        mine = {
            "ConditionExpression": condition,
            "ExpressionAttributeNames": {"#t": TOKEN},
            "ExpressionAttributeValues": {":me": {"S": token}},
        }
        if hand_to is not None:
            reservation = self.reservation_item(session_id, hand_to, by=token)
            return {"Put": {"TableName": self.table.name, "Item": reservation, **mine}}
        return {"Delete": {"TableName": self.table.name, "Key": key(*lease_key(session_id)), **mine}}

    def release(self, session_id: str, token: str, *, hand_to: str | None = None, unless_parked: bool = False) -> bool:
        """Release the lease held with ``token`` (``hand_to``: reserved for that waiting run).
        False when it was not held with it any more (expired and taken over: not ours to touch),
        or (``unless_parked``, releasing to nobody) a run joined the wait list since it was read;
        True when the lease is gone (released: by this write, whose answer was lost, or since)."""
        kind, request = next(iter(self.release_write(session_id, token, hand_to, unless_parked=unless_parked).items()))
        db = self.table.db
        if kind == "Put":
            return self._on_the_lease(lambda: db.put_item(**request, **ALL_OLD), landed=self._written(request["Item"]))
        return self._on_the_lease(lambda: db.delete_item(**request, **ALL_OLD), landed=gone)

    def reserve(self, session_id: str, run_id: str, seconds: float) -> bool:
        """Hold the free session for ``run_id`` alone for ``seconds`` (only its lease may replace
        this one). False when the session is not free: its holder hands off when it releases."""
        item = self.reservation_item(session_id, run_id, seconds)
        return self._on_the_lease(
            lambda: self.table.db.put_item(
                TableName=self.table.name,
                Item=item,
                ConditionExpression=FREE,
                ExpressionAttributeValues={":now": {"N": f"{self.table.now():.3f}"}},
                **ALL_OLD,
            ),
            landed=self._written(item),
        )

    def release_reservation(self, session_id: str, run_id: str) -> bool:
        """Give back a reservation ``run_id`` will not use (its run had already succeeded, or it
        was deferred). False when the session is not reserved for it."""
        return self._on_the_lease(
            lambda: self.table.db.delete_item(
                TableName=self.table.name,
                Key=key(*lease_key(session_id)),
                ConditionExpression=RESERVED_FOR_ME,
                ExpressionAttributeValues={":me": {"S": run_id}},
                **ALL_OLD,
            ),
            landed=gone,
        )

    def _written(self, item: dict[str, Any]) -> Callable[[dict[str, Any] | None], bool]:
        """Whether the lease item found is ``item``, the one a put wrote (its token is its own)."""
        return lambda found: found is not None and found.get(TOKEN) == item[TOKEN]

    def _on_the_lease(
        self, write: Callable[[], Any], *, landed: Callable[[dict[str, Any] | None], bool] | None = None
    ) -> bool:
        """One write of the lease item outside a transaction (a release, a reservation, its
        give-back, a waiter's mark): ``table.conditional_write``, made at most ``LEASE_WRITE_TRIES``
        times when it meets a transaction writing the item (a start, a commit)."""
        return conditional_write(self.table.db, write, tries=LEASE_WRITE_TRIES, landed=landed)

    def mark_parked(self, session_id: str) -> bool:
        """After joining the wait list: mark the session's lease (``PARKED``), so that its holder's
        release to nobody fails and it reads the wait list again, finding this run. False when the
        session has no lease, or an expired one, or the mark could not be made: nobody is sure to
        hand it over, so the run comes straight back (one UpdateItem, two if the first meets a
        transaction on the lease)."""
        db = self.table.db
        try:
            return self._on_the_lease(
                lambda: db.update_item(
                    TableName=self.table.name,
                    Key=key(*lease_key(session_id)),
                    UpdateExpression=f"SET {PARKED} = :yes",
                    ConditionExpression=HELD_BY_SOMEONE,
                    ExpressionAttributeValues={":yes": {"BOOL": True}, ":now": {"N": f"{self.table.now():.3f}"}},
                )
            )
        except db.exceptions.TransactionConflictException:  # the holder's commit kept writing it
            return False

    # --- the wait list -----------------------------------------------------------------------------

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
        kind: str = "background",
        target: str = "",
    ) -> None:
        """Put the run on the session's wait list (again): its first arrival is kept, its state is
        ``waiting``, its current copy the newer of ``gen`` and the one the list knows, and its place
        on the list (by that first arrival) is written after its item.
        ``attributes``: the record's message attributes, stored shape (``session.copies``);
        ``kind``/``target``: a cron waiter and the function ARN its copies are invoked through."""
        self.places.park(
            session_id=session_id,
            run_id=run_id,
            gen=gen,
            body=body,
            attributes=attributes,
            wait=wait,
            ttl_s=ttl_s,
            kind=kind,
            target=target,
        )

    def waiters(self, session_id: str, *, first: int = PLACES_PAGE, skip: str | None = None) -> list[Waiter]:
        """The first ``first`` runs still waiting (state ``waiting``), oldest arrival first, with what
        to re-send; ``skip``: a run left out. Reads the list's first places and the items of those
        runs only (``WaitPlaces.head``): not more for a longer list nor for bigger bodies."""
        return self.head(session_id, first=first, skip=skip)[0]

    def head(self, session_id: str, *, first: int = 1, skip: str | None = None) -> tuple[list[Waiter], bool]:
        """``waiters``, and whether ``skip`` has a place among those read (it waits on the list
        itself: its commit removes its item, and a later read of the list its place)."""

        def read(run_id: str) -> Waiter | None:
            item = self.table.read_item(*wait_key(session_id, run_id))
            return None if item is None else waiter_from_item(item)

        return self.places.head(session_id, read, first=first, skip=skip)

    def first_places(self, session_id: str, *, limit: int) -> list[str]:
        """The run ids of the wait list's first ``limit`` places (one Query of places alone)."""
        return self.places.first(session_id, limit=limit)

    def drop_waiter(self, session_id: str, run_id: str) -> None:
        """Take the run off the wait list: its item, then its place."""
        db = self.table.db
        old = db.delete_item(
            TableName=self.table.name, Key=key(*wait_key(session_id, run_id)), ReturnValues="ALL_OLD"
        ).get("Attributes")
        if old is not None:
            self.places.delete(session_id, run_id, waiter_from_item(old).arrived)

    def drop_waiter_item(self, session_id: str, run_id: str) -> dict[str, Any]:
        """The transaction item that takes the run off the wait list (its commit)."""
        return {"Delete": {"TableName": self.table.name, "Key": key(*wait_key(session_id, run_id))}}

    def started_items(self, session_id: str, run_id: str, arrived: float | None) -> list[dict[str, Any]]:
        """The transaction items marking the run's waiter started (in its attempt's transaction): no
        candidate for a hand-off any more (its copies stay current); its place (``arrived``, as the
        wake's batch read found it) leaves the list."""
        started = {
            "Update": {
                "TableName": self.table.name,
                "Key": key(*wait_key(session_id, run_id)),
                "UpdateExpression": "SET #st = :started, expires_at = :ttl",
                "ExpressionAttributeNames": {"#st": "state"},
                "ExpressionAttributeValues": {
                    ":started": {"S": "started"},
                    ":ttl": {"N": str(int(self.table.now() + self.table.journal_ttl_s))},
                },
            }
        }
        return [started] if arrived is None else [started, self.places.delete_item(session_id, run_id, arrived)]

    def waiter_gen(self, item: dict[str, Any]) -> int:
        """The current copy number of a waiter item (read in the wake's batch read)."""
        return int(item.get("gen", {}).get("N", "0"))

    def waiter_arrived(self, item: dict[str, Any]) -> float | None:
        """When a waiter item's run first waited (read in the wake's batch read): where its place is."""
        value = item.get("arrived", {}).get("N")
        return None if value is None else float(value)

    def mark_handed(self, session_id: str, run_id: str, gen: int, arrived: float | None = None) -> None:
        """The waiter was handed the session with its copy ``gen``: no longer a candidate (its place,
        ``arrived``, leaves the list in the same transaction); its older copies retire when they come
        back (``gen`` unchanged: the invocation that released the session runs it, and its delayed
        copy stays current)."""
        db = self.table.db
        handed = {
            "Update": {
                "TableName": self.table.name,
                "Key": key(*wait_key(session_id, run_id)),
                "UpdateExpression": "SET #st = :handed, gen = :gen",
                "ConditionExpression": "attribute_exists(pk) AND gen <= :gen",
                "ExpressionAttributeNames": {"#st": "state"},
                "ExpressionAttributeValues": {":handed": {"S": "handed"}, ":gen": {"N": str(gen)}},
            }
        }
        items = [("waiter", handed)]
        if arrived is not None:
            items.append(("place", self.places.delete_item(session_id, run_id, arrived)))
        try:
            self.table.transact(items)
        except db.exceptions.TransactionCanceledException:
            pass  # started or dropped meanwhile

    # --- live turns --------------------------------------------------------------------------------

    def take_live_turn(self, session_id: str, turn_id: str, seconds: float, *, hold_s: float) -> tuple[str, float]:
        """The session's lease for the live turn ``turn_id``: returns its token and when it ends
        (epoch seconds), or raises LeaseHeld naming the holder (a run id, or ``live:{turn}``).
        ``hold_s``: the most the turn may hold the session, renewals included; the lease is at most
        that long.

        One plain conditional write, as a run's (``take``: a lost answer is read back)."""
        token = uuid.uuid4().hex
        holder = live_holder(turn_id)
        now = self.table.now()
        until = now + min(seconds, hold_s)
        self.take(session_id=session_id, holder=holder, token=token, seconds=until - now, hold_until=now + hold_s)
        return token, until

    def renew_live_turn(self, session_id: str, token: str, seconds: float) -> float:
        """Hold the session ``seconds`` longer from now, but never past the turn's cap
        (``HOLD_UNTIL``); returns the new end (epoch seconds). LiveTurnLost when the turn does not
        hold the session; LiveTurnCapped when it has held it as long as it may (then the lease is
        still its own: its end hands the session on)."""
        now = self.table.now()
        until = now + seconds
        db = self.table.db
        for _ in range(2):
            try:
                db.update_item(
                    TableName=self.table.name,
                    Key=key(*lease_key(session_id)),
                    UpdateExpression=f"SET {UNTIL} = :until",
                    ConditionExpression=f"{HELD_NOW} AND (attribute_not_exists({HOLD_UNTIL}) OR {HOLD_UNTIL} >= :until)",
                    ExpressionAttributeNames={"#t": TOKEN},
                    ExpressionAttributeValues={
                        ":me": {"S": token},
                        ":now": {"N": f"{now:.3f}"},
                        ":until": {"N": f"{until:.3f}"},
                    },
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
                return until
            except db.exceptions.ConditionalCheckFailedException as exc:
                old = getattr(exc, "response", {}).get("Item") or {}
                if old.get(TOKEN, {}).get("S") != token:
                    raise LiveTurnLost(f"the live turn does not hold session {session_id} any more") from exc
                cap = float(old.get(HOLD_UNTIL, {}).get("N", "inf"))
                if cap - now <= HOLD_SLACK_S:
                    raise LiveTurnCapped(
                        f"the live turn has held session {session_id} as long as one turn may"
                    ) from exc
                if float(old.get(UNTIL, {}).get("N", "0")) < now:
                    raise LiveTurnLost(f"the live turn's lease on session {session_id} has expired") from exc
                until = cap  # renewed up to the cap, not past it
        raise LiveTurnLost(f"the live turn does not hold session {session_id} any more")

    def append_live(
        self, session_id: str, token: str, messages: Sequence[tuple[str, str]], idempotency_key: str
    ) -> Appended:
        """Append ``messages`` (role, content) to the session's history, under the live turn's lease
        and once per ``idempotency_key``: one transaction (lease check, append marker, entries).
        A token that does not hold the session is LiveTurnLost whether or not the key was used,
        unless the key's append was made with this token (its marker keeps the hash): the turn's own
        retry. AppendTooLarge, before any write, for more than DynamoDB takes in one transaction."""
        now = self.table.now()
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
                        "TableName": self.table.name,
                        "Key": key(*lease_key(session_id)),
                        "ConditionExpression": HELD_NOW,
                        "ExpressionAttributeNames": {"#t": TOKEN},
                        "ExpressionAttributeValues": {":me": {"S": token}, ":now": {"N": f"{now:.3f}"}},
                    }
                },
            ),
            (
                "marker",
                {
                    "Put": {
                        "TableName": self.table.name,
                        "Item": {
                            "pk": {"S": pk},
                            "sk": {"S": marker_sk},
                            "sort_keys": {"S": json.dumps(sort_keys)},
                            "turn_token_sha256": {"S": task_token_hash(token)},  # a token's hash, as a task's
                            "at": {"S": utcnow_iso()},
                            "expires_at": {"N": str(int(now + self.table.journal_ttl_s))},
                        },
                        "ConditionExpression": "attribute_not_exists(pk)",
                        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                    }
                },
            ),
            *(("entry", self.history.entry_put(e)) for e in entries),
        ]
        if (why := oversize(items)) is not None:
            raise AppendTooLarge(
                f"the append is too large: {why}. Nothing was appended: send fewer or shorter messages"
            )
        try:
            self.table.transact(items)
        except self.table.db.exceptions.TransactionCanceledException as exc:
            failed: dict[str, Any] = getattr(exc, "failed_tags", {})
            marker = failed.get("marker") or {}
            used = marker.get("Code") == "ConditionalCheckFailed" and bool(marker.get("Item"))
            lost = (failed.get("lease") or {}).get("Code") == "ConditionalCheckFailed"  # not a conflict: lost
            if used and (not lost or marker["Item"].get("turn_token_sha256", {}).get("S") == task_token_hash(token)):
                # appended before with this key (by this turn, or by whoever holds the session now):
                # what it wrote then, nothing now
                return Appended(tuple(json.loads(marker["Item"]["sort_keys"]["S"])), written=False)
            if lost:
                raise LiveTurnLost(
                    f"the live turn does not hold session {session_id} any more; nothing was appended"
                ) from exc
            raise
        return Appended(sort_keys, written=True)
