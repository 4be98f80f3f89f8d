"""How a wake ends: one transaction, a success (marker and note in history, run succeeded, task or
job updated) or a failure (the failure record, run failed, task or job failed), each carrying the
run's last steps and deliveries not yet written. The session's lease is released after it, by one
plain conditional write (``session.handoff.release``), whatever the end: it is not part of what
must land together with the note.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from agentwake.domain.models import truncate, utcnow_iso
from agentwake.domain.steps import is_last_reply
from agentwake.errors import CommitConflict, RunAlreadySucceeded
from agentwake.session.lease import Lease
from agentwake.store.codec import key
from agentwake.store.history import History
from agentwake.store.itemsize import visible_controls
from agentwake.store.journal import Journals
from agentwake.store.keys import (
    FAILURE_PREFIX,
    failure_sk,
    job_key,
    run_key,
    run_pk,
    runs_by_day_set,
    runs_gsi_pk,
    runs_gsi_sk,
    task_key,
)
from agentwake.store.outcomes import outcome_unknown
from agentwake.store.port import Journal
from agentwake.store.records import Records
from agentwake.store.runs import wake_item
from agentwake.store.session_lease import SessionLeases
from agentwake.store.table import Table

if TYPE_CHECKING:
    from agentwake.domain.run_models import FailureRecord

#: the condition on a task a wake's failure updates: not ended by a cancel or its deadline
TASK_NOT_ENDED = "attribute_exists(pk) AND attribute_not_exists(cancelled_at) AND attribute_not_exists(timed_out_at)"
#: ...and on the task a wake's commit marks woken: a cancelled task never wakes
TASK_NOT_CANCELLED = "attribute_exists(pk) AND attribute_not_exists(cancelled_at)"


class RunEnds:
    """How a run ends: its commit (DONE) or its failure record (ERROR), each one transaction that
    carries the run's last steps; the lease is released after it (``session.handoff.release``)."""

    def __init__(
        self, table: Table, *, records: Records, history: History, journals: Journals, leases: SessionLeases
    ) -> None:
        self.table = table
        self.records = records
        self.history = history
        self.journals = journals
        self.leases = leases

    def _target_update(
        self,
        target: tuple[str, str],
        status: str,
        *,
        last_error: str | None,
        last_run_at: str | None = None,
        disable: bool = False,
        disabled_reason: str | None = None,
        reset_failures: bool = False,
        count_fire: bool = False,
    ) -> dict[str, Any]:
        """The update of the task or job a run belongs to (in the commit or failure transaction):
        its status, its last error (removed on success), and for jobs the last run, ``enabled`` (and
        why not) and ``fires``, the runs of it that succeeded (``max_fires`` counts them)."""
        sets = ["#s = :s"]
        values: dict[str, Any] = {":s": {"S": status}}
        removes = []
        if last_error is None:
            removes.append("last_error")
        else:
            sets.append("last_error = :e")
            values[":e"] = {"S": truncate(last_error, 4000)}
        if last_run_at is not None:
            sets.append("last_run_at = :r")
            values[":r"] = {"S": last_run_at}
        if disable:
            sets.append("enabled = :f")
            values[":f"] = {"BOOL": False}
            if disabled_reason is not None:
                sets.append("disabled_reason = :why")
                values[":why"] = {"S": truncate(disabled_reason, 500)}
        if reset_failures:  # a job's success ends its run of failures (agentwake.store.job_state)
            sets.append("consecutive_failures = :zero")
            values[":zero"] = {"N": "0"}
        if count_fire:
            values[":one"] = {"N": "1"}
        expr = (
            "SET "
            + ", ".join(sets)
            + (" REMOVE " + ", ".join(removes) if removes else "")
            + (" ADD fires :one" if count_fire else "")
        )
        return {
            "Update": {
                "TableName": self.table.name,
                "Key": key(*target),
                "UpdateExpression": expr,
                "ExpressionAttributeNames": {"#s": "status"},
                "ExpressionAttributeValues": values,
                "ConditionExpression": "attribute_exists(pk)",
            }
        }

    def commit_success(
        self,
        *,
        run_id: str,
        session_id: str,
        note: str | None,
        steps: int,
        task_id: str | None = None,
        job_id: str | None = None,
        disable_job: bool = False,
        disabled_reason: str | None = None,
        journal: Journal | None = None,
        lease: Lease | None = None,
        usage: dict[str, Any] | None = None,
        waited: bool = False,
        task_outcome: str | None = None,
    ) -> None:
        """One transaction: marker + note in history (one item: ``History.note_put``; none when ``note`` is None: a subagent's run,
        which writes no history), run succeeded, task woken / job completed,
        the steps and deliveries ``journal`` has not written yet (deliver_final's entry, the
        deliveries no step reported; the run's last reply only when there is no note to keep its
        text: ``runs show`` reads a succeeded run's final answer from its note), and (``waited``)
        the run's entry on the session's wait list removed: with the success, so that no release
        hands the session to a run that has succeeded. Once it landed, the journal has nothing left
        to write. The lease is not part of it: the caller releases it after (one plain conditional
        write, ``session.handoff.release``; docs/table-design.md, "Capacity per wake").

        Conditional on the run not having succeeded already: raises RunAlreadySucceeded then.
        ``lease``: the lease the run holds, whose token a lost answer is read back by.
        """
        now = utcnow_iso()
        unwritten = journal.unwritten(for_commit=True) if journal is not None else None
        if unwritten is not None and note is not None:
            # the run's last reply is not written (2 WRU): the note keeps its text, the run item its
            # tokens, and a run that succeeded is never retried from its journal (its counter, the
            # deliveries it reports and the other steps are); a failure still writes it (issue 37)
            unwritten = replace(unwritten, steps={k: v for k, v in unwritten.steps.items() if not is_last_reply(k, v)})
        # built first: a delivery the run made (deliver_final's) sorts before the marker and the note
        earlier = self.journals.unwritten_items(run_id, unwritten)
        items: list[tuple[str, Any]] = []
        if note is not None:  # the marker rides on the note's item (History.note_put): one write
            items.append(("note", self.history.note_put(session_id=session_id, run_id=run_id, note=note)))
        items += [
            (
                "run",
                {
                    "Update": {
                        "TableName": self.table.name,
                        "Key": key(*run_key(run_id)),
                        "UpdateExpression": "SET #s = :s, ended_at = :now, steps = :steps, #u = :u "
                        "REMOVE last_error, last_error_type",
                        "ConditionExpression": "attribute_exists(pk) AND #s <> :s",
                        "ExpressionAttributeNames": {"#s": "status", "#u": "usage"},
                        "ExpressionAttributeValues": {
                            ":s": {"S": "succeeded"},
                            ":now": {"S": now},
                            ":steps": {"N": str(steps)},
                            ":u": {"S": json.dumps(usage or {})},
                        },
                    }
                },
            ),
        ]
        if task_id is not None:
            woken = self._target_update(task_key(task_id), "woken", last_error=None)
            # a task a cancel or its deadline ended while this wake ran gets no note: the wake that
            # began without a claim (a completion sent straight to the queue) must not overtake them
            woken["Update"]["ConditionExpression"] = TASK_NOT_CANCELLED
            if task_outcome is not None:
                # ...and one whose claimed outcome differs (its deadline claimed ``failed``) gets none either
                claimed = "attribute_not_exists(outcome) OR outcome = :claimed"
                woken["Update"]["ExpressionAttributeValues"][":claimed"] = {"S": task_outcome}
                if task_outcome == "failed":
                    # ...but outcome 1, a worker's failure, stays claimed when its redriven success
                    # claimed outcome 2 (the only second outcome) before this wake committed
                    claimed += " OR outcomes = :two"
                    woken["Update"]["ExpressionAttributeValues"][":two"] = {"N": "2"}
                woken["Update"]["ConditionExpression"] += f" AND ({claimed})"
            items.append(("task", woken))
        if job_id is not None:
            items.append(
                (
                    "job",
                    self._target_update(
                        job_key(job_id),
                        "completed",
                        last_error=None,
                        last_run_at=now,
                        disable=disable_job,
                        disabled_reason=disabled_reason,
                        reset_failures=True,
                        count_fire=True,
                    ),
                )
            )
        items += earlier
        if waited:
            items.append(("waiter", self.leases.drop_waiter_item(session_id, run_id)))
        try:
            self.table.transact(items, droppable=frozenset({"delivery"}))
        except self.table.db.exceptions.TransactionCanceledException as exc:
            task_reason = getattr(exc, "failed_tags", {}).get("task")
            if task_id is not None and task_reason is not None and task_reason.get("Code") == "ConditionalCheckFailed":
                if self.records.get_task(task_id) is None:  # read, not assumed: say what is true
                    raise CommitConflict(
                        f"task {task_id} of {run_id} is not registered any more (its item was deleted while "
                        "its wake ran): no note is written"
                    ) from exc
                raise CommitConflict(
                    f"the task of {run_id} was cancelled or timed out while its wake ran: no note is written; "
                    "the retry finds its outcome claimed and changes nothing"
                ) from exc
            run_reason = getattr(exc, "failed_tags", {}).get("run")
            if run_reason is not None and run_reason.get("Code") == "ConditionalCheckFailed":
                # read, not assumed: only a run already succeeded is a duplicate to ignore
                run = self.records.get_run(run_id)
                if run is not None and run.status == "succeeded":
                    raise RunAlreadySucceeded(run_id) from exc
                state = "does not exist" if run is None else f"is {run.status!r}"
                raise CommitConflict(
                    f"the commit of {run_id} was cancelled on the run item, and the run {state}: "
                    "not a duplicate of a succeeded run"
                ) from exc
            raise
        except Exception as exc:
            # the answer was lost: read the run back; the commit landed if it is succeeded by this
            # attempt (its token), and then this is a success, not a failure to record and retry
            if not (outcome_unknown(exc) and self._committed(run_id, lease)):
                raise
        if journal is not None:
            journal.mark_written()

    def record_park(
        self,
        *,
        run_id: str,
        session_id: str,
        approval_id: str,
        asked: tuple[str, dict[str, Any]],
        steps: int,
        job_id: str | None = None,
        journal: Journal | None = None,
        lease: Lease | None = None,
        usage: dict[str, Any] | None = None,
        waited: bool = False,
    ) -> None:
        """The park (issue 35), one transaction: run ``parked`` (since when, on what), its job
        ``parked``, the steps and the delivery the journal has not written (the request's ``asked``
        step, its marker and history entry), the request's ``asked`` mark (``asked``: its item, on
        ``state = pending``) and the run off the wait list (``waited``); the lease is released or
        handed on after it, as after a commit. No note, no failure record.

        Raises ApprovalAlreadyDecided when the request was decided meanwhile (nothing written: the
        run goes on in place); RunAlreadySucceeded when another copy committed the run."""
        from agentwake.errors import ApprovalAlreadyDecided

        now = utcnow_iso()
        earlier = self.journals.unwritten_items(
            run_id, journal.unwritten(for_commit=True) if journal is not None else None
        )
        run_update: dict[str, Any] = {
            "Update": {
                "TableName": self.table.name,
                "Key": key(*run_key(run_id)),
                "UpdateExpression": "SET #s = :s, parked_at = :now, waiting_for = :id, steps = :steps, #u = :u "
                "REMOVE last_error, last_error_type",
                "ConditionExpression": "attribute_exists(pk) AND #s <> :ok",
                "ExpressionAttributeNames": {"#s": "status", "#u": "usage"},
                "ExpressionAttributeValues": {
                    ":s": {"S": "parked"},
                    ":ok": {"S": "succeeded"},
                    ":now": {"S": now},
                    ":id": {"S": approval_id},
                    ":steps": {"N": str(steps)},
                    ":u": {"S": json.dumps(usage or {})},
                },
            }
        }
        if lease is not None:
            run_update["Update"]["ConditionExpression"] += " AND attempt_token = :tok"
            run_update["Update"]["ExpressionAttributeValues"][":tok"] = {"S": lease.token}
        items: list[tuple[str, Any]] = [("run", run_update), asked]
        if job_id is not None:
            items.append(("target", self._target_update(job_key(job_id), "parked", last_error=None)))
        items += earlier
        if waited:
            items.append(("waiter", self.leases.drop_waiter_item(session_id, run_id)))
        try:
            self.table.transact(items, droppable=frozenset({"target", "delivery"}))
        except self.table.db.exceptions.TransactionCanceledException as exc:
            failed = getattr(exc, "failed_tags", {})
            if "approval" in failed:
                raise ApprovalAlreadyDecided(f"approval {approval_id} was decided before {run_id} parked") from exc
            if "run" in failed:
                run = self.records.get_run(run_id)
                if run is not None and run.status == "succeeded":
                    raise RunAlreadySucceeded(run_id) from exc
                raise CommitConflict(
                    f"the park of {run_id} was cancelled on the run item: another attempt holds it"
                ) from exc
            raise
        except Exception as exc:
            if not (outcome_unknown(exc) and self._parked(run_id, approval_id, lease)):
                raise
        if journal is not None:
            journal.mark_written()

    def _parked(self, run_id: str, approval_id: str, lease: Lease | None) -> bool:
        """Whether the park landed (its answer lost): the run is parked on ``approval_id`` by this attempt."""
        try:
            item = self.table.read_item(*run_key(run_id)) or {}
        except Exception:  # noqa: BLE001 -- unresolved: the caller treats it as not landed
            return False
        if item.get("status", {}).get("S") != "parked" or item.get("waiting_for", {}).get("S") != approval_id:
            return False
        return lease is None or item.get("attempt_token", {}).get("S") in (lease.token, None)

    def _committed(self, run_id: str, lease: Lease | None) -> bool:
        """Whether the run is succeeded, by the attempt that holds ``lease`` (one GetItem)."""
        try:
            item = self.table.read_item(*run_key(run_id)) or {}
        except Exception:  # noqa: BLE001 -- unresolved: the caller treats it as not landed
            return False
        if item.get("status", {}).get("S") != "succeeded":
            return False
        return lease is None or item.get("attempt_token", {}).get("S") in (lease.token, None)

    def record_failure(
        self,
        failure: FailureRecord,
        *,
        task_id: str | None = None,
        job_id: str | None = None,
        journal: Journal | None = None,
        usage: dict[str, Any] | None = None,
        kind: str | None = None,
        wake: tuple[str, dict[str, Any]] | None = None,
    ) -> None:
        """One transaction: the failure record, run failed + last error, task/job failed + last_error,
        the steps and deliveries ``journal`` kept back (not the deliveries no step reported: that
        step is redone, docs/durability.md). A task/job deleted mid-run is left out, and the failure
        itself is still recorded. The lease is released after it, as after a commit (one path).

        ``kind``: also create the run record if the run never began (a wake that gave up waiting).
        ``wake``: (kind, what woke the run), kept for ``runs replay`` (``runs.wake_item``): only a
        failed run is replayed, so its failure keeps it and a success never writes it.
        The detail and provider errors are stored with control characters made visible (``\\x1b``):
        a provider's ESC sequence never reaches a terminal that shows them, whoever reads them.
        """
        failure = _inert_failure(failure)
        identity, identity_values = "", {}
        if kind is not None:
            identity = (
                ", kind = if_not_exists(kind, :k), session_id = if_not_exists(session_id, :sid), run_id = :rid, "
                "gsi3pk = :g, gsi3sk = if_not_exists(gsi3sk, :g1sk), attempts = if_not_exists(attempts, :zero)"
            )
            identity_values = {
                ":k": {"S": kind},
                ":sid": {"S": failure.session_id},
                ":rid": {"S": failure.run_id},
                ":g": {"S": runs_gsi_pk(failure.session_id)},
                ":g1sk": {"S": runs_gsi_sk(created := utcnow_iso(), failure.run_id)},
                ":zero": {"N": "0"},
            }
            by_day, by_day_values = runs_by_day_set(created, failure.run_id, keep=True)  # gsi4: runs by time
            identity += by_day
            identity_values.update(by_day_values)
        items: list[tuple[str, Any]] = [
            (
                "failure",
                {
                    "Put": {
                        "TableName": self.table.name,
                        "Item": self.table.item(
                            failure, run_pk(failure.run_id), failure_sk(failure.attempt, failure.at)
                        ),
                    }
                },
            ),
            (
                "run",
                {
                    "Update": {
                        "TableName": self.table.name,
                        "Key": key(*run_key(failure.run_id)),
                        "UpdateExpression": "SET #s = :s, ended_at = :now, last_error = :e, last_error_type = :t, "
                        "steps = :n, #u = :u"
                        + identity
                        # a run written before gsi3/gsi4 leaves gsi1/gsi2 (listed once, by this end)
                        + (" REMOVE gsi1pk, gsi1sk, gsi2pk, gsi2sk" if identity else ""),
                        "ConditionExpression": "attribute_not_exists(#s) OR #s <> :ok",
                        "ExpressionAttributeNames": {"#s": "status", "#u": "usage"},
                        "ExpressionAttributeValues": {
                            **identity_values,
                            ":s": {"S": "failed"},
                            ":ok": {"S": "succeeded"},
                            ":now": {"S": failure.at},
                            ":e": {"S": truncate(failure.detail, 4000)},
                            ":t": {"S": failure.error_type},
                            ":n": {"N": str(failure.steps_done)},
                            ":u": {"S": json.dumps(usage or {})},
                        },
                    }
                },
            ),
        ]
        if task_id is not None:
            failed = self._target_update(task_key(task_id), "failed", last_error=failure.detail)
            # a task a cancel or its deadline ended keeps that status (the target is dropped)
            failed["Update"]["ConditionExpression"] = TASK_NOT_ENDED
            items.append(("target", failed))
        if job_id is not None:
            items.append(
                (
                    "target",
                    self._target_update(job_key(job_id), "failed", last_error=failure.detail),
                )
            )
        items += self.journals.unwritten_items(failure.run_id, journal.unwritten() if journal is not None else None)
        if wake is not None:
            items.append(("wake", wake_item(self.table, failure.run_id, kind=wake[0], wake=wake[1])))
        try:
            self.table.transact(items, droppable=frozenset({"target", "delivery"}))
        except Exception as exc:
            # the answer was lost: the failure record is there if the transaction landed
            if not (outcome_unknown(exc) and self._failure_landed(failure)):
                raise
        if journal is not None:
            journal.mark_written()

    def _failure_landed(self, failure: FailureRecord) -> bool:
        try:
            return self.table.read_item(run_pk(failure.run_id), failure_sk(failure.attempt, failure.at)) is not None
        except Exception:  # noqa: BLE001 -- unresolved: the caller treats it as not landed
            return False

    def failures(self, run_id: str) -> list[FailureRecord]:
        from agentwake.domain.run_models import FailureRecord

        return [self.table.load(FailureRecord, i) for i in self.table.query(run_pk(run_id), FAILURE_PREFIX)]


def _inert_failure(failure: FailureRecord) -> FailureRecord:
    """The failure with its texts (detail, error type, provider errors) free of control characters."""
    return failure.model_copy(
        update={
            "error_type": visible_controls(failure.error_type),
            "detail": visible_controls(failure.detail),
            "provider_errors": {
                visible_controls(pid): visible_controls(err) for pid, err in failure.provider_errors.items()
            },
        }
    )
