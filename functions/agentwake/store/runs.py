"""A run on the table, from its start: the wake's one batch read (the run record, the task or job,
the session config and the run's entry on the wait list, before anything is written), then the
start: the session's lease taken by one plain conditional write, the attempt counted by another
(or, with more to mark, one transaction).
What woke the run (``wake_item``) is kept by a failed attempt's record, for ``runs replay``. How a
run ends: ``run_end``.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agentwake.domain.models import SessionConfig, Task, _Stored, utcnow_iso
from agentwake.errors import LeaseHeld, RunAlreadySucceeded, StartRefused
from agentwake.session.lease import Lease, Waited
from agentwake.store.codec import key
from agentwake.store.itemsize import JOURNAL_VALUE_BYTES, bound_json
from agentwake.store.keys import (
    config_key,
    job_key,
    run_key,
    runs_by_day_set,
    runs_gsi_pk,
    runs_gsi_sk,
    task_key,
    wait_key,
    wake_key,
)
from agentwake.store.outcomes import outcome_unknown
from agentwake.store.port import WakeRead
from agentwake.store.session_lease import SessionLeases
from agentwake.store.table import CONFLICT_RETRIES, Table, conditional_write

if TYPE_CHECKING:
    from agentwake.domain.run_models import RunRecord


class _NotLanded(Exception):
    """The attempt write's outcome was unknown, and reading back showed it did not land."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(error)
        self.error = error


@dataclass(frozen=True)
class _Start:
    """What a run's start asks for (``Runs.begin_run``'s arguments), passed on as one value."""

    run_id: str
    kind: str
    session_id: str
    previous: RunRecord | None
    job_id: str | None
    wake: tuple[str, dict[str, Any]] | None
    waited: Waited | None
    message_id: str | None
    resuming: str | None


class Runs:
    """A run's batch read and its start (the lease, then the attempt); what woke it."""

    def __init__(self, table: Table, leases: SessionLeases) -> None:
        self.table = table
        #: the session's lease, taken by the start's first write
        self.leases = leases

    def read_wake(
        self,
        *,
        run_id: str,
        session_id: str | None = None,
        task_id: str | None = None,
        job_id: str | None = None,
        waiter: bool = False,
    ) -> WakeRead:
        """The run record, the task or job and the session config in one (consistent) BatchGetItem;
        with ``waiter``, the run's entry on the session's wait list too. Not today's counters of a
        session with daily limits: its run reads them under its lease (``wake/attempt.py``), where
        no other run of the session can move them."""
        keys: dict[tuple[str, str], str] = {run_key(run_id): "run"}
        if task_id is not None:
            keys[task_key(task_id)] = "task"
        if job_id is not None:
            keys[job_key(job_id)] = "job"
        if session_id is not None:
            keys[config_key(session_id)] = "session"
            if waiter:
                keys[wait_key(session_id, run_id)] = "waiter"
        found = self.table.batch_get([key(pk, sk) for pk, sk in keys])
        read = WakeRead()
        for item in found:
            name = keys.get((item["pk"]["S"], item["sk"]["S"]))
            if name == "waiter":
                read.waiter_gen = self.leases.waiter_gen(item)
                read.waiter_arrived = self.leases.waiter_arrived(item)
            elif name is not None:
                setattr(read, name, self.table.load(_read_model(name), item))
        return read

    def begin_run(
        self,
        *,
        run_id: str,
        kind: str,
        session_id: str,
        seconds: float,
        previous: RunRecord | None,
        job_id: str | None = None,
        wake: tuple[str, dict[str, Any]] | None = None,
        waited: Waited | None = None,
        message_id: str | None = None,
        resuming: str | None = None,
    ) -> Lease:
        """Take the session's lease (one plain conditional write: ``SessionLeases.take``), then count
        the attempt (``_count``): two plain writes for a run with nothing else to mark, where one
        transaction of both cost twice as much (docs/table-design.md, "Capacity per wake").

        ``waited``: the run waited for its session (it is on the session's wait list): how long,
        and how long the session sat idle between the release that handed it over and this start.
        Its waiter is marked started with the attempt, and both figures go on the run.

        ``wake`` (kind, wake JSON): what woke the run, for ``runs replay``, written by a retry's start
        (``previous`` is not None) with the attempt; a first attempt does not write it (a run that
        succeeds at once never does, issue 37) and a failure's record keeps it
        (``RunEnds.record_failure``), so every run that reached a retry or a failure has it.

        ``message_id``: the SQS message (its first id) the attempt runs for: the run counts the
        attempts made for it (``message_attempts``), wherever they ran.

        ``resuming``: the approval request a parked run resumes on (issue 35), marked resumed by this
        attempt in the same transaction (``resumed_at``, ``resumed_attempt``).

        An unknown outcome (the answer timed out, a 5xx) is read back, not waited out: the lease
        carries this acquisition's token and the run its attempt and that token
        (``attempt_token``), so a write that landed is recognised and adopted (``Lease.adopted``);
        one that did not is made again. A process that dies between the two writes leaves the lease
        with no attempt counted until it expires, as a crash anywhere in a run does.

        Raises LeaseHeld (another run holds the session) before anything is written; StartRefused,
        carrying the lease taken, when the attempt's write is refused (RunAlreadySucceeded; LeaseHeld:
        another copy of this run started since ``previous`` was read) or fails: its caller gives the
        lease back through the one release path (``wake/run``). With ``job_id`` the job is marked
        running too.
        """
        lost: BaseException | None = None
        for _ in range(3):
            token = uuid.uuid4().hex
            try:
                adopted = self.leases.take(session_id=session_id, holder=run_id, token=token, seconds=seconds)
                break
            except LeaseHeld:
                raise
            except Exception as exc:
                if not outcome_unknown(exc):
                    raise
                lost = exc  # read back: it did not land, the take is made again
        else:
            assert lost is not None
            raise lost
        lease = Lease(session_id=session_id, token=token, attempt=0, adopted=adopted)
        start = _Start(run_id, kind, session_id, previous, job_id, wake, waited, message_id, resuming)
        try:
            return self._count(lease, start)
        except Exception as exc:
            raise StartRefused(lease, exc) from exc

    def _count(self, lease: Lease, start: _Start) -> Lease:
        """Count the attempt under ``lease`` (its token is the attempt's): written again, the lease
        kept, when a lost answer did not land."""
        lost: BaseException | None = None
        for _ in range(3):
            try:
                attempt, adopted = self._attempt(lease.token, start)
                return replace(lease, attempt=attempt, adopted=lease.adopted or adopted)
            except _NotLanded as not_landed:
                lost = not_landed.error  # nothing was written: the same write is made again
        assert lost is not None  # each try returned or set it (as the take's loop above)
        raise lost

    def attempt_update(
        self,
        *,
        run_id: str,
        kind: str,
        session_id: str,
        previous: RunRecord | None,
        token: str | None = None,
        waited: Waited | None = None,
        message_id: str | None = None,
    ) -> tuple[int, dict[str, Any]]:
        """The attempt number and the write that counts it on the run record (status running),
        conditional on ``previous`` being what is stored (no record for a first attempt).
        ``token``: the lease's, kept as the attempt's own (``attempt_token``), so that an attempt
        whose write had an unknown outcome recognises it when it reads the run back."""
        attempt = (previous.attempts if previous is not None else 0) + 1
        started = utcnow_iso()
        values: dict[str, Any] = {
            ":running": {"S": "running"},
            ":k": {"S": kind},
            ":sid": {"S": session_id},
            ":now": {"S": started},
            ":rid": {"S": run_id},
            ":g": {"S": runs_gsi_pk(session_id)},
            ":n": {"N": str(attempt)},
            # newest attempt first in `agentwake runs list` (agentwake.store.operator)
            ":g1sk": {"S": runs_gsi_sk(started, run_id)},
            ":tok": {"S": token or ""},
        }
        by_day, by_day_values = runs_by_day_set(started, run_id)  # gsi4: runs by time, all sessions
        values.update(by_day_values)
        if previous is None:
            condition = "attribute_not_exists(pk)"
        else:
            # optimistic: the attempt count read with the run is still the one stored
            values[":succeeded"] = {"S": "succeeded"}
            values[":prev"] = {"N": str(previous.attempts)}
            condition = "#s <> :succeeded AND attempts = :prev"
            if previous.attempts == 0:
                condition = "#s <> :succeeded AND (attempts = :prev OR attribute_not_exists(attempts))"
        also = ""
        if message_id:
            same = previous is not None and previous.message_id == message_id
            also += ", message_id = :mid, message_attempts = :ma"
            values[":mid"] = {"S": message_id}
            values[":ma"] = {"N": str((previous.message_attempts if same and previous else 0) + 1)}
        if previous is not None and previous.status == "parked" and previous.parked_at:
            # the time it waited for a person, counted as it resumes
            parked = datetime.fromisoformat(started.replace("Z", "+00:00")) - datetime.fromisoformat(
                previous.parked_at.replace("Z", "+00:00")
            )
            also += ", parked_s = :parked"
            values[":parked"] = {"N": f"{previous.parked_s + max(0.0, parked.total_seconds()):.3f}"}
        if waited is not None:
            also += ", waited_s = :waited" + (", idle_before_s = :idle" if waited.idle_s is not None else "")
            values[":waited"] = {"N": f"{waited.waited_s:.3f}"}
            if waited.idle_s is not None:
                values[":idle"] = {"N": f"{waited.idle_s:.3f}"}
        return attempt, {
            "Update": {
                "TableName": self.table.name,
                "Key": key(*run_key(run_id)),
                "UpdateExpression": (
                    "SET #s = :running, kind = :k, session_id = :sid, started_at = if_not_exists(started_at, :now), "
                    "run_id = :rid, gsi3pk = :g, gsi3sk = :g1sk, attempts = :n, attempt_token = :tok"
                    + by_day
                    + also
                    # a parked run resuming waits for nothing any more (issue 35); a run written before
                    # gsi3/gsi4 existed leaves gsi1/gsi2 (projected ALL: its every change an index write)
                    + " REMOVE waiting_for, gsi1pk, gsi1sk, gsi2pk, gsi2sk"
                ),
                "ConditionExpression": condition,
                "ExpressionAttributeNames": {"#s": "status"},
                "ExpressionAttributeValues": values,
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }

    def begin_unleased(
        self, *, run_id: str, kind: str, session_id: str, previous: RunRecord | None, wake: dict[str, Any]
    ) -> int:
        """Count an attempt of a run that holds no session lease (a background subagent's ``sub:``
        run: it writes no history and sends nothing to the user), keeping what woke it on a first
        attempt, in one transaction. Returns the attempt number. Raises RunAlreadySucceeded, or
        LeaseHeld when another copy of the run counted an attempt since ``previous`` was read."""
        attempt, run_update = self.attempt_update(run_id=run_id, kind=kind, session_id=session_id, previous=previous)
        items: list[tuple[str, Any]] = [("run", run_update)]
        if previous is None:
            items.append(("wake", self.wake_put(run_id, kind=kind, wake=wake)))
        try:
            self.table.transact(items)
        except self.table.db.exceptions.TransactionCanceledException as exc:
            failed: dict[str, Any] = getattr(exc, "failed_tags", {})
            old = (failed.get("run") or {}).get("Item") or {}
            if old.get("status", {}).get("S") == "succeeded":
                raise RunAlreadySucceeded(run_id) from exc
            raise LeaseHeld(session_id, run_id, detail=f"another copy of {run_id} started meanwhile") from exc
        return attempt

    def _attempt(self, token: str, start: _Start) -> tuple[int, bool]:
        """The attempt's write: ``attempt_update`` alone as a plain conditional update when it is the
        only item, else one transaction with the waiter's mark, a retry's wake, the job, the
        resume's mark. Returns the attempt number and whether its answer was
        lost and read back as landed (the run carries ``token`` and the attempt)."""
        run_id, session_id, previous, waited = start.run_id, start.session_id, start.previous, start.waited
        wake, job_id, resuming = start.wake, start.job_id, start.resuming
        attempt, run_update = self.attempt_update(
            run_id=run_id,
            kind=start.kind,
            session_id=session_id,
            previous=previous,
            token=token,
            waited=waited,
            message_id=start.message_id,
        )

        def ours(item: dict[str, Any] | None) -> bool:
            item = item or {}
            return item.get("attempt_token", {}).get("S") == token and item.get("attempts", {}).get("N") == str(attempt)

        items: list[tuple[str, Any]] = [("run", run_update)]
        if waited is not None:
            tags = ("waiter", "waiter:place")
            items += zip(tags, self.leases.started_items(session_id, run_id, waited.arrived), strict=False)
        if previous is not None and wake is not None:
            # a retry keeps what woke the run (a first attempt does not: a run that succeeds at once
            # never writes it; a failed one's record keeps it): a run whose every attempt was killed
            # before its failure record (out of memory, a timeout) can still be replayed from its retry
            items.append(("wake", wake_item(self.table, run_id, kind=wake[0], wake=wake[1])))
        if job_id is not None:
            items.append(
                (
                    "job",
                    {
                        "Update": {
                            "TableName": self.table.name,
                            "Key": key(*job_key(job_id)),
                            "UpdateExpression": "SET #s = :s",
                            "ConditionExpression": "attribute_exists(pk)",
                            "ExpressionAttributeNames": {"#s": "status"},
                            "ExpressionAttributeValues": {":s": {"S": "running"}},
                        }
                    },
                )
            )
        if resuming is not None:
            from agentwake.store.approvals import resumed_item

            items.append(resumed_item(self.table, resuming, attempt))
        db = self.table.db
        found: list[dict[str, Any] | None] = []
        error: BaseException | None = None
        try:
            if len(items) > 1:
                # a request gone (its TTL) does not stop its run's resume: only its mark is dropped
                self.table.transact(items, droppable=frozenset({"approval"}))
                return attempt, False
            write = run_update["Update"]
            if conditional_write(db, lambda: db.update_item(**write), tries=CONFLICT_RETRIES, landed=ours, found=found):
                return attempt, bool(found)
            failed: dict[str, Any] = {"run": {"Code": "ConditionalCheckFailed", "Item": found[-1] if found else None}}
        except db.exceptions.TransactionConflictException as exc:
            raise LeaseHeld(session_id, None) from exc  # another copy is starting right now
        except db.exceptions.TransactionCanceledException as exc:
            failed, error = getattr(exc, "failed_tags", {}), exc
        except Exception as exc:
            if not outcome_unknown(exc):
                raise  # throttled, refused before it was applied: nothing landed
            if not ours(self.table.read_item(*run_key(run_id))):
                raise _NotLanded(exc) from exc
            return attempt, True  # it landed and its answer was lost: this is our attempt
        if ours((failed.get("run") or {}).get("Item")):
            return attempt, True  # its answer was lost and botocore made it again: it had landed
        if any(r.get("Code") == "TransactionConflict" for r in failed.values()):
            raise LeaseHeld(session_id, None) from error  # another copy is starting right now
        if "run" in failed and failed["run"].get("Code") == "ConditionalCheckFailed":
            old = failed["run"].get("Item") or {}
            if old.get("status", {}).get("S") == "succeeded":
                raise RunAlreadySucceeded(run_id) from error
            # another copy of this run started meanwhile (the run found says so; none found: who, unknown)
            raise LeaseHeld(session_id, run_id if old else None) from error
        assert error is not None
        raise error

    # --- what woke the run, for ``runs replay`` ---------------------------------------------------

    def wake_put(self, run_id: str, *, kind: str, wake: dict[str, Any]) -> dict[str, Any]:
        """What woke the run: ``wake_item`` (a subagent's run keeps it at its first attempt)."""
        return wake_item(self.table, run_id, kind=kind, wake=wake)

    def get_wake(self, run_id: str) -> tuple[str, dict[str, Any]] | None:
        """(kind, wake) as a failed attempt's record kept them (or, written by versions before issue
        37, the first attempt's start), or None: the run never failed with a record (it succeeded,
        never began, or each attempt died without writing one: a hard kill)."""
        item = self.table.read_item(*wake_key(run_id))
        if not item:
            return None
        return item["kind"]["S"], json.loads(item["value"]["S"])


def wake_item(table: Table, run_id: str, *, kind: str, wake: dict[str, Any]) -> dict[str, Any]:
    """What woke the run (the prompt's wake JSON), kept beside its journal for ``runs replay``: a Put
    in the failure transaction (``RunEnds.record_failure``; each failed attempt writes the same), so a
    run that succeeds writes it never. Bounded like a journal step: a wake the item cannot hold must
    not fail the record."""
    pk, sk = wake_key(run_id)
    value = bound_json(json.loads(json.dumps(wake, default=str)), JOURNAL_VALUE_BYTES)
    return {
        "Put": {
            "TableName": table.name,
            "Item": {
                "pk": {"S": pk},
                "sk": {"S": sk},
                "kind": {"S": kind},
                "value": {"S": json.dumps(value, ensure_ascii=False)},
                "at": {"S": utcnow_iso()},
                "expires_at": {"N": str(int(table.now()) + table.journal_ttl_s)},
            },
        }
    }


def _read_model(name: str) -> type[_Stored]:
    """The model of an item the wake's read found. A run's or a job's record is there only on a
    retry or for a cron wake: its model is loaded then, not by every cold start."""
    if name == "task":
        return Task
    if name == "session":
        return SessionConfig
    from agentwake.domain.run_models import Job, RunRecord

    return RunRecord if name == "run" else Job
