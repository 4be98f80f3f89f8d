"""The single-table DynamoDB store. Table design: docs/table-design.md.

Every write that must be all-or-nothing (a run's success, a failure, a delivery) is one
TransactWriteItems. History is append-only: each entry is its own item, never overwritten.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from agentwake.errors import CommitConflict
from agentwake.store.itemsize import JOURNAL_VALUE_BYTES, bound_json, safe_text
from agentwake.store.models import (
    FailureRecord,
    HistoryEntry,
    Job,
    RunRecord,
    SessionConfig,
    Task,
    _Stored,
    truncate,
    utcnow_iso,
)

M = TypeVar("M", bound=_Stored)

MARKER_TEXT = "Output your last task result below."


class RunAlreadySucceeded(Exception):
    """The commit found the run already succeeded: a duplicate copy, nothing to do."""


class TaskExists(ValueError):
    """A task id is registered already; reusing it would make the new result look like a duplicate."""


def session_pk(session_id: str) -> str:
    return f"SESSION#{session_id}"


def run_pk(run_id: str) -> str:
    return f"RUN#{run_id}"


def _serializers() -> tuple[Any, Any]:
    from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

    return TypeSerializer(), TypeDeserializer()


@dataclass
class RunSummary:
    """Everything an operator needs about one run (for ``agentwake runs show`` and DLQ triage)."""

    run: RunRecord | None
    failures: list[FailureRecord] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    deliveries: list[dict[str, Any]] = field(default_factory=list)

    @property
    def last_failure(self) -> FailureRecord | None:
        return self.failures[-1] if self.failures else None


class DynamoStore:
    def __init__(
        self,
        table_name: str,
        *,
        client: Any = None,
        now: Callable[[], float] = time.time,
        journal_ttl_days: int = 15,
    ) -> None:
        if client is None:
            from agentwake.store.aws import client as make_client

            client = make_client("dynamodb")
        self.table = table_name
        self.db = client
        self.now = now
        self.journal_ttl_s = journal_ttl_days * 86400
        self._ser, self._deser = _serializers()

    # --- item (de)serialisation -------------------------------------------------------------

    def _item(self, model: _Stored, pk: str, sk: str, **extra: Any) -> dict[str, Any]:
        data = model.model_dump(mode="json")
        plain: dict[str, Any] = {"pk": pk, "sk": sk, **extra}
        for key, value in data.items():
            if value is None:
                continue
            plain[key] = json.dumps(value) if key in model.JSON_FIELDS else value
        return {k: self._ser.serialize(v) for k, v in plain.items()}

    def _load(self, cls: type[M], item: dict[str, Any]) -> M:
        plain = {k: self._deser.deserialize(v) for k, v in item.items()}
        for key in cls.JSON_FIELDS:
            if isinstance(plain.get(key), str):
                plain[key] = json.loads(plain[key])
        return cls.model_validate(plain)

    def _get(self, pk: str, sk: str, consistent: bool = True) -> dict[str, Any] | None:
        resp = self.db.get_item(TableName=self.table, Key=self._key(pk, sk), ConsistentRead=consistent)
        return resp.get("Item")

    @staticmethod
    def _key(pk: str, sk: str) -> dict[str, Any]:
        return {"pk": {"S": pk}, "sk": {"S": sk}}

    def _query(self, pk: str, prefix: str, *, forward: bool = True, limit: int | None = None) -> Iterator[dict]:
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :p)" if prefix else "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": pk}, **({":p": {"S": prefix}} if prefix else {})},
            "ScanIndexForward": forward,
            "ConsistentRead": True,
        }
        if limit is not None:
            kwargs["Limit"] = limit
        while True:
            resp = self.db.query(**kwargs)
            yield from resp.get("Items", [])
            if limit is not None or "LastEvaluatedKey" not in resp:
                return
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]

    def _history_sk(self) -> str:
        # time-ordered and unique: nanoseconds since the epoch, then a random suffix
        return f"MSG#{time.time_ns():020d}#{uuid.uuid4().hex[:8]}"

    # --- sessions -----------------------------------------------------------------------------

    def put_session(self, config: SessionConfig) -> None:
        self.db.put_item(TableName=self.table, Item=self._item(config, session_pk(config.session_id), "CONFIG"))

    def get_session(self, session_id: str) -> SessionConfig | None:
        item = self._get(session_pk(session_id), "CONFIG")
        return self._load(SessionConfig, item) if item else None

    # --- history ------------------------------------------------------------------------------

    def _history_put(self, entry: HistoryEntry) -> dict[str, Any]:
        sk = entry.sk or self._history_sk()
        entry = entry.model_copy(update={"sk": sk})
        return {
            "Put": {
                "TableName": self.table,
                "Item": self._item(entry, session_pk(entry.session_id), sk),
                "ConditionExpression": "attribute_not_exists(pk)",
            }
        }

    def append_history(self, entry: HistoryEntry) -> None:
        put = self._history_put(entry)["Put"]
        self.db.put_item(**put)

    def history_window(self, session_id: str, limit: int) -> list[HistoryEntry]:
        """The newest ``limit`` entries, oldest first: one Query with Limit, whatever the length."""
        if limit <= 0:
            return []
        items = list(self._query(session_pk(session_id), "MSG#", forward=False, limit=limit))
        return [self._load(HistoryEntry, i) for i in reversed(items)]

    def count_history_reads(self, session_id: str, limit: int) -> int:
        """Items a window read touches (ScannedCount), for tests and benchmarks."""
        resp = self.db.query(
            TableName=self.table,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :p)",
            ExpressionAttributeValues={":pk": {"S": session_pk(session_id)}, ":p": {"S": "MSG#"}},
            ScanIndexForward=False,
            Limit=limit,
        )
        return int(resp["ScannedCount"])

    def history(self, session_id: str) -> list[HistoryEntry]:
        return [self._load(HistoryEntry, i) for i in self._query(session_pk(session_id), "MSG#")]

    # --- deliveries: history at the moment they are delivered, exactly once ----------------------

    def has_delivery(self, run_id: str, delivery_id: str) -> bool:
        return self._get(run_pk(run_id), f"DELIVERY#{delivery_id}") is not None

    def record_delivery(
        self, *, run_id: str, delivery_id: str, session_id: str, text: str, also: Sequence[dict[str, Any]] = ()
    ) -> bool:
        """Append a delivered message to history, once per delivery id. False if already recorded.

        ``also``: more transaction items written with it (the session's daily delivery counter)."""
        marker = {
            "pk": {"S": run_pk(run_id)},
            "sk": {"S": f"DELIVERY#{delivery_id}"},
            "session_id": {"S": session_id},
            "text": {"S": truncate(safe_text(text))},
            "at": {"S": utcnow_iso()},
        }
        entry = HistoryEntry(
            session_id=session_id,
            role="assistant",
            content=text,
            kind="delivery",
            run_id=run_id,
            delivery_id=delivery_id,
        )
        try:
            self.db.transact_write_items(
                TransactItems=[
                    {
                        "Put": {
                            "TableName": self.table,
                            "Item": marker,
                            "ConditionExpression": "attribute_not_exists(pk)",
                        }
                    },
                    self._history_put(entry),
                    *also,
                ]
            )
        except self.db.exceptions.TransactionCanceledException as exc:
            reasons = exc.response.get("CancellationReasons", [])
            if reasons and reasons[0].get("Code") == "ConditionalCheckFailed":
                return False
            raise
        return True

    # --- tasks --------------------------------------------------------------------------------

    def put_task(self, task: Task) -> None:
        """Register a task; its id must be new (``bg:{task_id}`` names exactly one run)."""
        try:
            self.db.put_item(
                TableName=self.table,
                Item=self._item(task, f"TASK#{task.task_id}", "TASK"),
                ConditionExpression="attribute_not_exists(pk)",
            )
        except self.db.exceptions.ConditionalCheckFailedException as exc:
            raise TaskExists(f"task {task.task_id!r} is already registered; use a new task id") from exc

    def get_task(self, task_id: str) -> Task | None:
        item = self._get(f"TASK#{task_id}", "TASK")
        return self._load(Task, item) if item else None

    def _task_update(self, task_id: str, status: str, last_error: str | None) -> dict[str, Any]:
        expr = "SET #s = :s"
        values: dict[str, Any] = {":s": {"S": status}}
        if last_error is None:
            expr += " REMOVE last_error"
        else:
            expr += ", last_error = :e"
            values[":e"] = {"S": truncate(last_error, 4000)}
        return {
            "Update": {
                "TableName": self.table,
                "Key": self._key(f"TASK#{task_id}", "TASK"),
                "UpdateExpression": expr,
                "ExpressionAttributeNames": {"#s": "status"},
                "ExpressionAttributeValues": values,
                "ConditionExpression": "attribute_exists(pk)",
            }
        }

    def mark_task_finished(self, task_id: str, finished_at: str) -> None:
        """running → finished; a task the wake already moved on is left as it is."""
        try:
            self.db.update_item(
                TableName=self.table,
                Key=self._key(f"TASK#{task_id}", "TASK"),
                UpdateExpression="SET #s = :s, finished_at = :f",
                ConditionExpression="#s = :running",
                ExpressionAttributeNames={"#s": "status"},
                ExpressionAttributeValues={
                    ":s": {"S": "finished"},
                    ":f": {"S": finished_at},
                    ":running": {"S": "running"},
                },
            )
        except self.db.exceptions.ConditionalCheckFailedException:
            pass

    # --- jobs ---------------------------------------------------------------------------------

    def put_job(self, job: Job) -> None:
        self.db.put_item(
            TableName=self.table,
            Item=self._item(job, f"JOB#{job.job_id}", "JOB", gsi1pk="JOBS", gsi1sk=job.job_id),
        )

    def get_job(self, job_id: str) -> Job | None:
        item = self._get(f"JOB#{job_id}", "JOB")
        return self._load(Job, item) if item else None

    def list_jobs(self) -> list[Job]:
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": "gsi1",
            "KeyConditionExpression": "gsi1pk = :j",
            "ExpressionAttributeValues": {":j": {"S": "JOBS"}},
        }
        jobs = []
        while True:
            resp = self.db.query(**kwargs)
            jobs += [self._load(Job, i) for i in resp.get("Items", [])]
            if "LastEvaluatedKey" not in resp:
                return jobs
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]

    def delete_job(self, job_id: str) -> None:
        self.db.delete_item(TableName=self.table, Key=self._key(f"JOB#{job_id}", "JOB"))

    def set_job_running(self, job_id: str) -> None:
        self.db.update_item(
            TableName=self.table,
            Key=self._key(f"JOB#{job_id}", "JOB"),
            UpdateExpression="SET #s = :s",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={":s": {"S": "running"}},
        )

    def _job_update(
        self, job_id: str, status: str, *, last_error: str | None, last_run_at: str | None, disable: bool
    ) -> dict[str, Any]:
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
        expr = "SET " + ", ".join(sets) + (" REMOVE " + ", ".join(removes) if removes else "")
        return {
            "Update": {
                "TableName": self.table,
                "Key": self._key(f"JOB#{job_id}", "JOB"),
                "UpdateExpression": expr,
                "ExpressionAttributeNames": {"#s": "status"},
                "ExpressionAttributeValues": values,
                "ConditionExpression": "attribute_exists(pk)",
            }
        }

    # --- runs, journal, failures ----------------------------------------------------------------

    def get_run(self, run_id: str) -> RunRecord | None:
        item = self._get(run_pk(run_id), "RUN")
        return self._load(RunRecord, item) if item else None

    def begin_attempt(self, run_id: str, *, kind: str, session_id: str) -> int:
        """Count one more attempt of the run (status back to running); returns the attempt number."""
        resp = self.db.update_item(
            TableName=self.table,
            Key=self._key(run_pk(run_id), "RUN"),
            UpdateExpression=(
                "SET #s = :running, kind = :k, session_id = :sid, started_at = if_not_exists(started_at, :now), "
                "run_id = :rid, gsi1pk = :g, gsi1sk = :rid ADD attempts :one"
            ),
            ConditionExpression="attribute_not_exists(#s) OR #s <> :succeeded",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={
                ":running": {"S": "running"},
                ":succeeded": {"S": "succeeded"},
                ":k": {"S": kind},
                ":sid": {"S": session_id},
                ":now": {"S": utcnow_iso()},
                ":rid": {"S": run_id},
                ":g": {"S": f"RUNS#{session_id}"},
                ":one": {"N": "1"},
            },
            ReturnValues="ALL_NEW",
        )
        return int(resp["Attributes"]["attempts"]["N"])

    def journal_entries(self, run_id: str) -> dict[str, dict[str, Any]]:
        out = {}
        for item in self._query(run_pk(run_id), "STEP#"):
            out[item["sk"]["S"][len("STEP#") :]] = json.loads(item["value"]["S"])
        return out

    def journal_put(self, run_id: str, key: str, value: dict[str, Any], *, also: Sequence[dict[str, Any]] = ()) -> None:
        """Journal one step. ``also``: more transaction items written with it in the same call (the
        session's daily token counter), so counting costs no extra round trip."""
        item = {
            "pk": {"S": run_pk(run_id)},
            "sk": {"S": f"STEP#{key}"},
            "value": {"S": json.dumps(value, ensure_ascii=False)},
            "at": {"S": utcnow_iso()},
            "expires_at": {"N": str(int(self.now()) + self.journal_ttl_s)},
        }
        if also:
            self.db.transact_write_items(TransactItems=[{"Put": {"TableName": self.table, "Item": item}}, *also])
        else:
            self.db.put_item(TableName=self.table, Item=item)

    def journal(self, run_id: str) -> DynamoJournal:
        return DynamoJournal(self, run_id)

    def put_wake(self, run_id: str, *, kind: str, wake: dict[str, Any]) -> None:
        """What woke the run (the prompt's wake JSON), kept beside its journal for ``runs replay``."""
        self.db.put_item(
            TableName=self.table,
            Item={
                "pk": {"S": run_pk(run_id)},
                "sk": {"S": "WAKE"},
                "kind": {"S": kind},
                # bounded like a journal step: a wake the item cannot hold must not fail the run
                "value": {
                    "S": json.dumps(
                        bound_json(json.loads(json.dumps(wake, default=str)), JOURNAL_VALUE_BYTES), ensure_ascii=False
                    )
                },
                "at": {"S": utcnow_iso()},
                "expires_at": {"N": str(int(self.now()) + self.journal_ttl_s)},
            },
        )

    def get_wake(self, run_id: str) -> tuple[str, dict[str, Any]] | None:
        """(kind, wake) as ``put_wake`` kept them, or None for a run that never started a step."""
        item = self._get(run_pk(run_id), "WAKE")
        if not item:
            return None
        return item["kind"]["S"], json.loads(item["value"]["S"])

    def commit_success(
        self,
        *,
        run_id: str,
        session_id: str,
        note: str,
        steps: int,
        task_id: str | None = None,
        job_id: str | None = None,
        disable_job: bool = False,
        usage: dict[str, Any] | None = None,
    ) -> None:
        """One transaction: marker + note in history, run succeeded, task woken / job completed.

        Conditional on the run not having succeeded already: raises RunAlreadySucceeded then.
        """
        now = utcnow_iso()
        marker = HistoryEntry(session_id=session_id, role="user", content=MARKER_TEXT, kind="marker", run_id=run_id)
        note_entry = HistoryEntry(session_id=session_id, role="assistant", content=note, kind="note", run_id=run_id)
        items = [
            self._history_put(marker),
            self._history_put(note_entry),
            {
                "Update": {
                    "TableName": self.table,
                    "Key": self._key(run_pk(run_id), "RUN"),
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
        ]
        if task_id is not None:
            items.append(self._task_update(task_id, "woken", None))
        if job_id is not None:
            items.append(self._job_update(job_id, "completed", last_error=None, last_run_at=now, disable=disable_job))
        try:
            self.db.transact_write_items(TransactItems=items)
        except self.db.exceptions.TransactionCanceledException as exc:
            reasons = exc.response.get("CancellationReasons", [])
            if len(reasons) > 2 and reasons[2].get("Code") == "ConditionalCheckFailed":
                # read, not assumed: only a run already succeeded is a duplicate to ignore
                run = self.get_run(run_id)
                if run is not None and run.status == "succeeded":
                    raise RunAlreadySucceeded(run_id) from exc
                state = "does not exist" if run is None else f"is {run.status!r}"
                raise CommitConflict(
                    f"the commit of {run_id} was cancelled on the run item, and the run {state}: "
                    "not a duplicate of a succeeded run"
                ) from exc
            raise

    def record_failure(
        self,
        failure: FailureRecord,
        *,
        task_id: str | None = None,
        job_id: str | None = None,
        usage: dict[str, Any] | None = None,
        kind: str | None = None,
    ) -> None:
        """One transaction: the failure record, run failed + last error, task/job failed + last_error.

        ``kind``: also create the run record if the run never began (a wake that gave up waiting).
        """
        identity, identity_values = "", {}
        if kind is not None:
            identity = (
                ", kind = if_not_exists(kind, :k), session_id = if_not_exists(session_id, :sid), run_id = :rid, "
                "gsi1pk = :g, gsi1sk = :rid, attempts = if_not_exists(attempts, :zero)"
            )
            identity_values = {
                ":k": {"S": kind},
                ":sid": {"S": failure.session_id},
                ":rid": {"S": failure.run_id},
                ":g": {"S": f"RUNS#{failure.session_id}"},
                ":zero": {"N": "0"},
            }
        items: list[dict[str, Any]] = [
            {
                "Put": {
                    "TableName": self.table,
                    "Item": self._item(
                        failure,
                        run_pk(failure.run_id),
                        f"FAILURE#{failure.attempt:05d}#{failure.at}",
                    ),
                }
            },
            {
                "Update": {
                    "TableName": self.table,
                    "Key": self._key(run_pk(failure.run_id), "RUN"),
                    "UpdateExpression": "SET #s = :s, ended_at = :now, last_error = :e, last_error_type = :t, "
                    "steps = :n, #u = :u" + identity,
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
        ]
        targets = []
        if task_id is not None:
            targets.append(self._task_update(task_id, "failed", failure.detail))
        if job_id is not None:
            targets.append(
                self._job_update(job_id, "failed", last_error=failure.detail, last_run_at=None, disable=False)
            )
        try:
            self.db.transact_write_items(TransactItems=items + targets)
        except self.db.exceptions.TransactionCanceledException as exc:
            reasons = exc.response.get("CancellationReasons", [])
            gone = [r.get("Code") for r in reasons[len(items) :]]
            if not targets or "ConditionalCheckFailed" not in gone:
                raise
            # the task/job was deleted mid-run: the failure itself must still be recorded
            self.db.transact_write_items(TransactItems=items)

    def failures(self, run_id: str) -> list[FailureRecord]:
        return [self._load(FailureRecord, i) for i in self._query(run_pk(run_id), "FAILURE#")]

    def run_summary(self, run_id: str) -> RunSummary:
        summary = RunSummary(run=None)
        for item in self._query(run_pk(run_id), ""):
            sk = item["sk"]["S"]
            if sk == "RUN":
                summary.run = self._load(RunRecord, item)
            elif sk.startswith("FAILURE#"):
                summary.failures.append(self._load(FailureRecord, item))
            elif sk.startswith("STEP#"):
                summary.steps.append(
                    {"key": sk[5:], "at": item.get("at", {}).get("S"), **json.loads(item["value"]["S"])}
                )
            elif sk.startswith("DELIVERY#"):
                summary.deliveries.append(
                    {
                        "delivery_id": sk[len("DELIVERY#") :],
                        "session_id": item["session_id"]["S"],
                        "text": item["text"]["S"],
                        "at": item["at"]["S"],
                    }
                )
        return summary

    # --- one wake per session at a time -----------------------------------------------------------

    def acquire_lease(self, session_id: str, run_id: str, seconds: float) -> str | None:
        """Take the session's lease if it is free or expired. Returns the lease token, or None.

        The token is new on every acquisition: not even another copy of the same run may enter a
        lease that is held (a crashed holder's lease simply expires).
        """
        now = self.now()
        token = uuid.uuid4().hex
        try:
            self.db.put_item(
                TableName=self.table,
                Item={
                    "pk": {"S": session_pk(session_id)},
                    "sk": {"S": "LEASE"},
                    "holder": {"S": run_id},
                    "token": {"S": token},
                    "lease_until": {"N": f"{now + seconds:.3f}"},
                    "acquired_at": {"S": utcnow_iso()},
                },
                ConditionExpression="attribute_not_exists(pk) OR lease_until < :now",
                ExpressionAttributeValues={":now": {"N": f"{now:.3f}"}},
            )
        except self.db.exceptions.ConditionalCheckFailedException:
            return None
        return token

    def lease_holder(self, session_id: str) -> tuple[str, float] | None:
        item = self._get(session_pk(session_id), "LEASE")
        if not item:
            return None
        return item["holder"]["S"], float(item["lease_until"]["N"])

    def release_lease(self, session_id: str, token: str) -> None:
        try:
            self.db.delete_item(
                TableName=self.table,
                Key=self._key(session_pk(session_id), "LEASE"),
                ConditionExpression="#t = :me",
                ExpressionAttributeNames={"#t": "token"},
                ExpressionAttributeValues={":me": {"S": token}},
            )
        except self.db.exceptions.ConditionalCheckFailedException:
            pass  # expired and taken over by another run: not ours to delete


class DynamoJournal:
    """The StepJournal port on DynamoDB: loads the run's completed steps once, writes each new one."""

    def __init__(self, store: DynamoStore, run_id: str) -> None:
        self.store = store
        self.run_id = run_id
        self.entries = store.journal_entries(run_id)

    def get(self, key: str) -> dict[str, Any] | None:
        return self.entries.get(key)

    def put(self, key: str, value: dict[str, Any], *, also: Sequence[dict[str, Any]] = ()) -> None:
        value = _cap_journal_value(value)
        if also:
            self.store.journal_put(self.run_id, key, value, also=also)
        else:
            self.store.journal_put(self.run_id, key, value)
        self.entries[key] = value


def _cap_journal_value(value: dict[str, Any]) -> dict[str, Any]:
    """Bounded in bytes as DynamoDB counts them (any text, tool arguments included): see itemsize."""
    return bound_json(value, JOURNAL_VALUE_BYTES)
