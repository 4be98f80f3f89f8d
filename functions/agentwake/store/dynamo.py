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
from decimal import Decimal
from typing import TYPE_CHECKING, Any, TypeVar

from agentwake.errors import CommitConflict, LeaseHeld, RunAlreadySucceeded, TaskExists
from agentwake.store.itemsize import JOURNAL_VALUE_BYTES, bound_json, safe_text
from agentwake.store.keys import (
    config_key,
    job_key,
    lease_key,
    run_key,
    run_pk,
    session_pk,
    task_key,
    usage_day,
    usage_key,
)
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

if TYPE_CHECKING:
    from agentwake.store.daily import DailyCounters

M = TypeVar("M", bound=_Stored)

MARKER_TEXT = "Output your last task result below."


@dataclass(frozen=True)
class DailyUsage:
    """A session's counters for one UTC day (``USAGE#{day}``) as read; 0 for an item not there yet."""

    session_id: str
    day: str
    tokens: int = 0
    deliveries: int = 0

    @classmethod
    def from_item(cls, session_id: str, day: str, item: dict[str, Any] | None) -> DailyUsage:
        item = item or {}
        return cls(
            session_id=session_id,
            day=day,
            tokens=int(item.get("tokens", {}).get("N", "0")),
            deliveries=int(item.get("deliveries", {}).get("N", "0")),
        )


@dataclass
class WakeRead:
    """What a wake reads before it starts, in one BatchGetItem: the run, the task or job, the
    session config and the session's daily counters of today (read whether or not the session has
    daily limits: the config that says so comes in the same read)."""

    run: RunRecord | None = None
    task: Task | None = None
    job: Job | None = None
    session: SessionConfig | None = None
    usage: DailyUsage | None = None


@dataclass
class Lease:
    """A held session lease and the attempt it was taken for (one conditional write took both)."""

    session_id: str
    token: str
    attempt: int
    #: set once a commit/failure transaction (or release_lease) deleted it, or it is known lost
    released: bool = False
    #: today's counters, checked unchanged by the write that took the lease (sessions with daily limits)
    usage: DailyUsage | None = None


@dataclass
class Unwritten:
    """Journal steps and deliveries not yet written: they ride on the next write (commit or failure)."""

    steps: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: record_delivery keyword arguments (``also``: items counted with that delivery)
    deliveries: list[dict[str, Any]] = field(default_factory=list)
    #: more transaction items that go with the steps (the session's daily token counter)
    also: list[dict[str, Any]] = field(default_factory=list)
    #: deliveries whose record was built when they were sent (``DynamoStore.delivery_record``):
    #: tagged transaction items, written as they are
    records: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.steps or self.deliveries or self.also or self.records)

    def __add__(self, other: Unwritten) -> Unwritten:
        return Unwritten(
            steps={**self.steps, **other.steps},
            deliveries=[*self.deliveries, *other.deliveries],
            also=[*self.also, *other.also],
            records=[*self.records, *other.records],
        )


def to_attr(value: Any) -> dict[str, Any]:
    """A plain value as a DynamoDB attribute value (what boto3's TypeSerializer does for the kinds
    agentwake stores: str, bool, int, float, None, lists and maps), without importing boto3."""
    if isinstance(value, str):
        return {"S": value}
    if isinstance(value, bool):
        return {"BOOL": value}
    if isinstance(value, int | float | Decimal):
        return {"N": str(value)}
    if value is None:
        return {"NULL": True}
    if isinstance(value, list | tuple):
        return {"L": [to_attr(v) for v in value]}
    if isinstance(value, dict):
        return {"M": {str(k): to_attr(v) for k, v in value.items()}}
    raise TypeError(f"cannot store a {type(value).__name__} in DynamoDB")


def from_attr(attr: dict[str, Any]) -> Any:
    """The inverse of ``to_attr``; numbers come back as int when whole, else float."""
    ((kind, value),) = attr.items()
    if kind == "S":
        return value
    if kind == "N":
        number = Decimal(value)
        return int(number) if number == number.to_integral_value() else float(number)
    if kind == "BOOL":
        return bool(value)
    if kind == "NULL":
        return None
    if kind == "L":
        return [from_attr(v) for v in value]
    if kind == "M":
        return {k: from_attr(v) for k, v in value.items()}
    if kind == "SS":
        return set(value)
    raise TypeError(f"unexpected DynamoDB attribute type {kind}")


class _UsageMoved(Exception):
    """The day's counters changed between the wake's read and its lease: here is what they are now."""

    def __init__(self, usage: DailyUsage) -> None:
        super().__init__(usage)
        self.usage = usage


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

    # --- item (de)serialisation -------------------------------------------------------------

    def _item(self, model: _Stored, pk: str, sk: str, **extra: Any) -> dict[str, Any]:
        data = model.model_dump(mode="json")
        plain: dict[str, Any] = {"pk": pk, "sk": sk, **extra}
        for key, value in data.items():
            if value is None:
                continue
            plain[key] = json.dumps(value) if key in model.JSON_FIELDS else value
        return {k: to_attr(v) for k, v in plain.items()}

    def _load(self, cls: type[M], item: dict[str, Any]) -> M:
        plain = {k: from_attr(v) for k, v in item.items()}
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

    def _transact(
        self, items: list[tuple[str, dict[str, Any]]], *, droppable: frozenset[str] = frozenset()
    ) -> set[str]:
        """One TransactWriteItems of ``(tag, item)`` pairs. When every item whose condition failed
        has a droppable tag (the part before ``:``), those items are dropped and the rest is written
        in one more call (a lease that is no longer ours, a task/job deleted mid-run, a delivery
        recorded already). Returns the dropped tags. Otherwise re-raises TransactionCanceledException
        with ``failed_tags`` ({tag: cancellation reason}) set on it."""
        dropped: set[str] = set()
        while items:
            try:
                self.db.transact_write_items(TransactItems=[item for _, item in items])
                return dropped
            except self.db.exceptions.TransactionCanceledException as exc:
                reasons = exc.response.get("CancellationReasons", [])
                failed = {
                    tag: r for (tag, _), r in zip(items, reasons, strict=False) if r.get("Code") not in (None, "None")
                }
                exc.failed_tags = failed  # type: ignore[attr-defined]
                if not failed or not all(
                    r.get("Code") == "ConditionalCheckFailed" and tag.split(":")[0] in droppable
                    for tag, r in failed.items()
                ):
                    raise
                dropped |= set(failed)
                items = [(t, i) for t, i in items if t not in failed]
        return dropped

    def _history_sk(self) -> str:
        # time-ordered and unique: nanoseconds since the epoch, then a random suffix
        return f"MSG#{time.time_ns():020d}#{uuid.uuid4().hex[:8]}"

    # --- sessions -----------------------------------------------------------------------------

    def put_session(self, config: SessionConfig) -> None:
        self.db.put_item(TableName=self.table, Item=self._item(config, *config_key(config.session_id)))

    def get_session(self, session_id: str) -> SessionConfig | None:
        item = self._get(*config_key(session_id))
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

    def history(self, session_id: str) -> list[HistoryEntry]:
        return [self._load(HistoryEntry, i) for i in self._query(session_pk(session_id), "MSG#")]

    # --- deliveries: history at the moment they are delivered, exactly once ----------------------

    def has_delivery(self, run_id: str, delivery_id: str) -> bool:
        return self._get(run_pk(run_id), f"DELIVERY#{delivery_id}") is not None

    def _delivery_items(
        self, *, run_id: str, delivery_id: str, session_id: str, text: str, also: Sequence[dict[str, Any]] = ()
    ) -> list[tuple[str, Any]]:
        """The delivery marker (once per delivery id), its history entry and ``also`` (the session's
        daily delivery counter), tagged ``delivery:{id}``: dropped together if it is recorded already."""
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
        tag = f"delivery:{delivery_id}"
        put = {"Put": {"TableName": self.table, "Item": marker, "ConditionExpression": "attribute_not_exists(pk)"}}
        return [(tag, put), (tag, self._history_put(entry)), *((tag, item) for item in also)]

    def delivery_record(
        self, *, run_id: str, delivery_id: str, session_id: str, text: str, also: Sequence[dict[str, Any]] = ()
    ) -> list[tuple[str, Any]]:
        """The record of a delivery just sent (marker, history entry, ``also``), built at the moment
        of the send (its history entry sorts there) and written by the run's next transaction:
        deliver_final's answer rides on the commit (or the failure record) this way."""
        return self._delivery_items(run_id=run_id, delivery_id=delivery_id, session_id=session_id, text=text, also=also)

    def record_delivery(
        self, *, run_id: str, delivery_id: str, session_id: str, text: str, also: Sequence[dict[str, Any]] = ()
    ) -> bool:
        """Append a delivered message to history, once per delivery id. False if already recorded.

        ``also``: more transaction items written with it (the session's daily delivery counter)."""
        items = self._delivery_items(
            run_id=run_id, delivery_id=delivery_id, session_id=session_id, text=text, also=also
        )
        return not self._transact(items, droppable=frozenset({"delivery"}))

    # --- tasks --------------------------------------------------------------------------------

    def put_task(self, task: Task) -> None:
        """Register a task; its id must be new (``bg:{task_id}`` names exactly one run)."""
        try:
            self.db.put_item(
                TableName=self.table,
                Item=self._item(task, *task_key(task.task_id)),
                ConditionExpression="attribute_not_exists(pk)",
            )
        except self.db.exceptions.ConditionalCheckFailedException as exc:
            raise TaskExists(f"task {task.task_id!r} is already registered; use a new task id") from exc

    def get_task(self, task_id: str) -> Task | None:
        item = self._get(*task_key(task_id))
        return self._load(Task, item) if item else None

    def mark_task_finished(self, task_id: str, finished_at: str) -> None:
        """running → finished; a task the wake already moved on is left as it is."""
        try:
            self.db.update_item(
                TableName=self.table,
                Key=self._key(*task_key(task_id)),
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
            Item=self._item(job, *job_key(job.job_id), gsi1pk="JOBS", gsi1sk=job.job_id),
        )

    def get_job(self, job_id: str) -> Job | None:
        item = self._get(*job_key(job_id))
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
        self.db.delete_item(TableName=self.table, Key=self._key(*job_key(job_id)))

    def set_job_running(self, job_id: str) -> None:
        self.db.update_item(
            TableName=self.table,
            Key=self._key(*job_key(job_id)),
            UpdateExpression="SET #s = :s",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={":s": {"S": "running"}},
        )

    def _target_update(
        self,
        key: tuple[str, str],
        status: str,
        *,
        last_error: str | None,
        last_run_at: str | None = None,
        disable: bool = False,
    ) -> dict[str, Any]:
        """The update of the task or job a run belongs to (in the commit or failure transaction):
        its status, its last error (removed on success), and for jobs the last run and ``enabled``."""
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
                "Key": self._key(*key),
                "UpdateExpression": expr,
                "ExpressionAttributeNames": {"#s": "status"},
                "ExpressionAttributeValues": values,
                "ConditionExpression": "attribute_exists(pk)",
            }
        }

    # --- runs, journal, failures ----------------------------------------------------------------

    def get_run(self, run_id: str) -> RunRecord | None:
        item = self._get(*run_key(run_id))
        return self._load(RunRecord, item) if item else None

    def begin_attempt(self, run_id: str, *, kind: str, session_id: str) -> int:
        """Count one more attempt of the run (status back to running); returns the attempt number."""
        now = utcnow_iso()
        resp = self.db.update_item(
            TableName=self.table,
            Key=self._key(*run_key(run_id)),
            UpdateExpression=(
                "SET #s = :running, kind = :k, session_id = :sid, started_at = if_not_exists(started_at, :now), "
                "run_id = :rid, gsi1pk = :g, gsi1sk = :g1sk ADD attempts :one"
            ),
            ConditionExpression="attribute_not_exists(#s) OR #s <> :succeeded",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={
                ":running": {"S": "running"},
                ":succeeded": {"S": "succeeded"},
                ":k": {"S": kind},
                ":sid": {"S": session_id},
                ":now": {"S": now},
                ":rid": {"S": run_id},
                ":g": {"S": f"RUNS#{session_id}"},
                # newest attempt first in `agentwake runs list` (agentwake.store.operator)
                ":g1sk": {"S": f"{now}#{run_id}"},
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

    def run_journal(self, run_id: str) -> tuple[dict[str, dict[str, Any]], set[str]]:
        """A retry's one read of its run: the completed steps and the delivery ids already recorded
        (one Query of the run's partition, failure records filtered out; sized by the run's steps,
        never by the conversation)."""
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "pk = :pk",
            "FilterExpression": "NOT begins_with(sk, :failure)",
            "ExpressionAttributeValues": {":pk": {"S": run_pk(run_id)}, ":failure": {"S": "FAILURE#"}},
            "ConsistentRead": True,
        }
        steps: dict[str, dict[str, Any]] = {}
        delivered: set[str] = set()
        while True:
            resp = self.db.query(**kwargs)
            for item in resp.get("Items", []):
                sk = item["sk"]["S"]
                if sk.startswith("STEP#"):
                    steps[sk[len("STEP#") :]] = json.loads(item["value"]["S"])
                elif sk.startswith("DELIVERY#"):
                    delivered.add(sk[len("DELIVERY#") :])
            if "LastEvaluatedKey" not in resp:
                return steps, delivered
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]

    def _step_put(self, run_id: str, key: str, value: dict[str, Any]) -> dict[str, Any]:
        return {
            "Put": {
                "TableName": self.table,
                "Item": {
                    "pk": {"S": run_pk(run_id)},
                    "sk": {"S": f"STEP#{key}"},
                    "value": {"S": json.dumps(value, ensure_ascii=False)},
                    "at": {"S": utcnow_iso()},
                    "expires_at": {"N": str(int(self.now()) + self.journal_ttl_s)},
                },
            }
        }

    def _unwritten_items(self, run_id: str, unwritten: Unwritten | None) -> list[tuple[str, Any]]:
        if not unwritten:
            return []
        items: list[tuple[str, Any]] = [("step", self._step_put(run_id, k, v)) for k, v in unwritten.steps.items()]
        items += [("step", item) for item in unwritten.also]
        for d in unwritten.deliveries:
            items += self._delivery_items(**d)
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
            self.db.put_item(**self._step_put(run_id, key, value)["Put"])
            return
        items = [("step", self._step_put(run_id, key, value)), *(("step", item) for item in also)]
        items += self._unwritten_items(run_id, unwritten)
        self._transact(items, droppable=frozenset({"delivery"}))

    def journal(self, run_id: str, *, fresh: bool = False, counters: DailyCounters | None = None) -> DynamoJournal:
        """The run's journal. ``fresh``: the run had no record before this attempt, so there is
        nothing to read (a first attempt skips the journal read). ``counters``: each new model
        reply's tokens are added to the session's daily counter in the same write."""
        journal = DynamoJournal(self, run_id, fresh=fresh)
        if counters is None:
            return journal
        from agentwake.store.daily import CountingJournal

        return CountingJournal(journal, counters)  # type: ignore[return-value]  # offers all DynamoJournal does

    def daily_counters(self, session_id: str, *, day: str | None = None) -> DailyCounters:
        """The session's counters of one UTC day (today unless ``day``)."""
        from agentwake.store.daily import DailyCounters

        return DailyCounters(self, session_id, day=day)

    # --- the wake path: one batch read, one conditional write to start, one transaction to end ---

    def read_wake(
        self,
        *,
        run_id: str,
        session_id: str | None = None,
        task_id: str | None = None,
        job_id: str | None = None,
    ) -> WakeRead:
        """The run record, the task or job, the session config and the session's counters of today
        (``USAGE#{day}``) in one (consistent) BatchGetItem."""
        keys: dict[tuple[str, str], str] = {run_key(run_id): "run"}
        if task_id is not None:
            keys[task_key(task_id)] = "task"
        if job_id is not None:
            keys[job_key(job_id)] = "job"
        day = usage_day(self.now())
        if session_id is not None:
            keys[config_key(session_id)] = "session"
            # one more key, not one more round trip: whether the session has daily limits is in
            # its config, which this same read fetches
            keys[usage_key(session_id, day)] = "usage"
        request: dict[str, Any] = {self.table: {"Keys": [self._key(pk, sk) for pk, sk in keys], "ConsistentRead": True}}
        found: list[dict[str, Any]] = []
        for attempt in range(8):
            resp = self.db.batch_get_item(RequestItems=request)
            found += resp.get("Responses", {}).get(self.table, [])
            request = resp.get("UnprocessedKeys") or {}
            if not request:
                break
            time.sleep(min(1.0, 0.05 * 2**attempt))  # throttled keys: back off, then ask again
        else:
            raise RuntimeError(f"DynamoDB left keys unprocessed after 8 tries: {list(request)}")
        read = WakeRead()
        if session_id is not None:
            read.usage = DailyUsage(session_id=session_id, day=day)
        models: dict[str, type[_Stored]] = {"run": RunRecord, "task": Task, "job": Job, "session": SessionConfig}
        for item in found:
            name = keys.get((item["pk"]["S"], item["sk"]["S"]))
            if name == "usage" and session_id is not None:
                read.usage = DailyUsage.from_item(session_id, day, item)
            elif name is not None:
                setattr(read, name, self._load(models[name], item))
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
        wake: dict[str, Any] | None = None,
        usage: DailyUsage | None = None,
    ) -> Lease:
        """Take the session's lease and count the attempt in one TransactWriteItems.

        ``wake``: what woke the run, kept for ``runs replay`` in the same transaction on a first
        attempt (``previous`` is None), so it costs no round trip.

        ``usage``: the session's daily counters as the batch read found them (a session with daily
        limits). They were read before the lease, so the same transaction checks them unchanged: a
        run of the session that counted a delivery or tokens between that read and this lease makes
        the check fail, and the transaction is made again with the counters it returned. The lease
        carries the counters it was taken with.

        Raises LeaseHeld (another run holds the session, or another copy of this run started since
        ``previous`` was read) or RunAlreadySucceeded. With ``job_id`` the job is marked running too.
        """
        for _ in range(3):
            try:
                return self._begin_run(
                    run_id=run_id,
                    kind=kind,
                    session_id=session_id,
                    seconds=seconds,
                    previous=previous,
                    job_id=job_id,
                    wake=wake,
                    usage=usage,
                )
            except _UsageMoved as moved:
                usage = moved.usage
        # the counters keep moving: some run of the session is writing them, so it is busy
        raise LeaseHeld(
            session_id,
            None,
            detail=f"session {session_id} is busy: its daily counters changed between the wake's read and "
            "the lease three times in a row (another run of the session is counting deliveries or tokens)",
        )

    def _usage_check(self, usage: DailyUsage) -> dict[str, Any]:
        """A ConditionCheck that the day's counters are still what was read."""
        conditions, values = [], {}
        for name, value in (("tokens", usage.tokens), ("deliveries", usage.deliveries)):
            values[f":{name}"] = {"N": str(value)}
            same = f"{name} = :{name}"
            conditions.append(f"(attribute_not_exists({name}) OR {same})" if value == 0 else same)
        return {
            "ConditionCheck": {
                "TableName": self.table,
                "Key": self._key(*usage_key(usage.session_id, usage.day)),
                "ConditionExpression": " AND ".join(conditions),
                "ExpressionAttributeValues": values,
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }

    def _begin_run(
        self,
        *,
        run_id: str,
        kind: str,
        session_id: str,
        seconds: float,
        previous: RunRecord | None,
        job_id: str | None,
        wake: dict[str, Any] | None,
        usage: DailyUsage | None,
    ) -> Lease:
        now = self.now()
        token = uuid.uuid4().hex
        attempt = (previous.attempts if previous is not None else 0) + 1
        lease_put = {
            "Put": {
                "TableName": self.table,
                "Item": {
                    "pk": {"S": session_pk(session_id)},
                    "sk": {"S": "LEASE"},
                    "holder": {"S": run_id},
                    "token": {"S": token},
                    "lease_until": {"N": f"{now + seconds:.3f}"},
                    "acquired_at": {"S": utcnow_iso()},
                },
                "ConditionExpression": "attribute_not_exists(pk) OR lease_until < :now",
                "ExpressionAttributeValues": {":now": {"N": f"{now:.3f}"}},
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }
        started = utcnow_iso()
        values: dict[str, Any] = {
            ":running": {"S": "running"},
            ":k": {"S": kind},
            ":sid": {"S": session_id},
            ":now": {"S": started},
            ":rid": {"S": run_id},
            ":g": {"S": f"RUNS#{session_id}"},
            ":n": {"N": str(attempt)},
            # newest attempt first in `agentwake runs list` (agentwake.store.operator)
            ":g1sk": {"S": f"{started}#{run_id}"},
        }
        if previous is None:
            condition = "attribute_not_exists(pk)"
        else:
            # optimistic: the attempt count read with the run is still the one stored
            values[":succeeded"] = {"S": "succeeded"}
            values[":prev"] = {"N": str(previous.attempts)}
            condition = "#s <> :succeeded AND attempts = :prev"
            if previous.attempts == 0:
                condition = "#s <> :succeeded AND (attempts = :prev OR attribute_not_exists(attempts))"
        run_update = {
            "Update": {
                "TableName": self.table,
                "Key": self._key(*run_key(run_id)),
                "UpdateExpression": (
                    "SET #s = :running, kind = :k, session_id = :sid, started_at = if_not_exists(started_at, :now), "
                    "run_id = :rid, gsi1pk = :g, gsi1sk = :g1sk, attempts = :n"
                ),
                "ConditionExpression": condition,
                "ExpressionAttributeNames": {"#s": "status"},
                "ExpressionAttributeValues": values,
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }
        items: list[tuple[str, Any]] = [("lease", lease_put), ("run", run_update)]
        if previous is None and wake is not None:
            items.append(("wake", self._wake_put(run_id, kind=kind, wake=wake)))
        if job_id is not None:
            items.append(
                (
                    "job",
                    {
                        "Update": {
                            "TableName": self.table,
                            "Key": self._key(*job_key(job_id)),
                            "UpdateExpression": "SET #s = :s",
                            "ConditionExpression": "attribute_exists(pk)",
                            "ExpressionAttributeNames": {"#s": "status"},
                            "ExpressionAttributeValues": {":s": {"S": "running"}},
                        }
                    },
                )
            )
        if usage is not None:
            items.append(("usage", self._usage_check(usage)))
        try:
            self._transact(items)
        except self.db.exceptions.TransactionCanceledException as exc:
            failed: dict[str, Any] = getattr(exc, "failed_tags", {})
            if any(r.get("Code") == "TransactionConflict" for r in failed.values()):
                raise LeaseHeld(session_id, None) from exc  # another copy is starting right now
            if (
                usage is not None
                and set(failed) == {"usage"}
                and failed["usage"].get("Code") == "ConditionalCheckFailed"
            ):
                now_item = failed["usage"].get("Item")
                raise _UsageMoved(DailyUsage.from_item(usage.session_id, usage.day, now_item)) from exc
            if "run" in failed and failed["run"].get("Code") == "ConditionalCheckFailed":
                old = failed["run"].get("Item") or {}
                if old.get("status", {}).get("S") == "succeeded":
                    raise RunAlreadySucceeded(run_id) from exc
                raise LeaseHeld(session_id, run_id) from exc  # another copy of this run started meanwhile
            if "lease" in failed:
                holder = (failed["lease"].get("Item") or {}).get("holder", {}).get("S")
                raise LeaseHeld(session_id, holder) from exc
            raise
        return Lease(session_id=session_id, token=token, attempt=attempt, usage=usage)

    def _lease_delete(self, lease: Lease) -> tuple[str, Any]:
        return (
            "lease",
            {
                "Delete": {
                    "TableName": self.table,
                    "Key": self._key(*lease_key(lease.session_id)),
                    "ConditionExpression": "#t = :me",
                    "ExpressionAttributeNames": {"#t": "token"},
                    "ExpressionAttributeValues": {":me": {"S": lease.token}},
                }
            },
        )

    def _wake_put(self, run_id: str, *, kind: str, wake: dict[str, Any]) -> dict[str, Any]:
        return {
            "Put": {
                "TableName": self.table,
                "Item": {
                    "pk": {"S": run_pk(run_id)},
                    "sk": {"S": "WAKE"},
                    "kind": {"S": kind},
                    # bounded like a journal step: a wake the item cannot hold must not fail the run
                    "value": {
                        "S": json.dumps(
                            bound_json(json.loads(json.dumps(wake, default=str)), JOURNAL_VALUE_BYTES),
                            ensure_ascii=False,
                        )
                    },
                    "at": {"S": utcnow_iso()},
                    "expires_at": {"N": str(int(self.now()) + self.journal_ttl_s)},
                },
            }
        }

    def put_wake(self, run_id: str, *, kind: str, wake: dict[str, Any]) -> None:
        """What woke the run (the prompt's wake JSON), kept beside its journal for ``runs replay``.
        A wake writes it inside ``begin_run``'s transaction on its first attempt (no extra call)."""
        self.db.put_item(**self._wake_put(run_id, kind=kind, wake=wake)["Put"])

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
        unwritten: Unwritten | None = None,
        lease: Lease | None = None,
        usage: dict[str, Any] | None = None,
    ) -> None:
        """One transaction: marker + note in history, run succeeded, task woken / job completed,
        the steps and deliveries not yet written (the run's last step), and the lease released.

        Conditional on the run not having succeeded already: raises RunAlreadySucceeded then.
        A lease that is no longer ours (expired and taken) is left alone and the rest committed.
        """
        now = utcnow_iso()
        # built first: a delivery the run made (deliver_final's) sorts before the marker and the note
        earlier = self._unwritten_items(run_id, unwritten)
        marker = HistoryEntry(session_id=session_id, role="user", content=MARKER_TEXT, kind="marker", run_id=run_id)
        note_entry = HistoryEntry(session_id=session_id, role="assistant", content=note, kind="note", run_id=run_id)
        items: list[tuple[str, Any]] = [
            ("marker", self._history_put(marker)),
            ("note", self._history_put(note_entry)),
            (
                "run",
                {
                    "Update": {
                        "TableName": self.table,
                        "Key": self._key(*run_key(run_id)),
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
            items.append(("task", self._target_update(task_key(task_id), "woken", last_error=None)))
        if job_id is not None:
            items.append(
                (
                    "job",
                    self._target_update(
                        job_key(job_id), "completed", last_error=None, last_run_at=now, disable=disable_job
                    ),
                )
            )
        items += earlier
        if lease is not None and not lease.released:
            items.append(self._lease_delete(lease))
        try:
            self._transact(items, droppable=frozenset({"lease", "delivery"}))
        except self.db.exceptions.TransactionCanceledException as exc:
            run_reason = getattr(exc, "failed_tags", {}).get("run")
            if run_reason is not None and run_reason.get("Code") == "ConditionalCheckFailed":
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
        if lease is not None:
            lease.released = True  # deleted, or found not ours any more

    def record_failure(
        self,
        failure: FailureRecord,
        *,
        task_id: str | None = None,
        job_id: str | None = None,
        unwritten: Unwritten | None = None,
        lease: Lease | None = None,
        usage: dict[str, Any] | None = None,
        kind: str | None = None,
    ) -> None:
        """One transaction: the failure record, run failed + last error, task/job failed + last_error,
        the steps and deliveries not yet written, and the lease released. A task/job deleted mid-run
        or a lease no longer ours is left out, and the failure itself is still recorded.

        ``kind``: also create the run record if the run never began (a wake that gave up waiting).
        """
        identity, identity_values = "", {}
        if kind is not None:
            identity = (
                ", kind = if_not_exists(kind, :k), session_id = if_not_exists(session_id, :sid), run_id = :rid, "
                "gsi1pk = :g, gsi1sk = if_not_exists(gsi1sk, :g1sk), attempts = if_not_exists(attempts, :zero)"
            )
            identity_values = {
                ":k": {"S": kind},
                ":sid": {"S": failure.session_id},
                ":rid": {"S": failure.run_id},
                ":g": {"S": f"RUNS#{failure.session_id}"},
                ":g1sk": {"S": f"{utcnow_iso()}#{failure.run_id}"},
                ":zero": {"N": "0"},
            }
        items: list[tuple[str, Any]] = [
            (
                "failure",
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
            ),
            (
                "run",
                {
                    "Update": {
                        "TableName": self.table,
                        "Key": self._key(*run_key(failure.run_id)),
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
            ),
        ]
        if task_id is not None:
            items.append(("target", self._target_update(task_key(task_id), "failed", last_error=failure.detail)))
        if job_id is not None:
            items.append(
                (
                    "target",
                    self._target_update(job_key(job_id), "failed", last_error=failure.detail),
                )
            )
        items += self._unwritten_items(failure.run_id, unwritten)
        if lease is not None and not lease.released:
            items.append(self._lease_delete(lease))
        self._transact(items, droppable=frozenset({"target", "lease", "delivery"}))
        if lease is not None:
            lease.released = True

    def failures(self, run_id: str) -> list[FailureRecord]:
        return [self._load(FailureRecord, i) for i in self._query(run_pk(run_id), "FAILURE#")]

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
        item = self._get(*lease_key(session_id))
        if not item:
            return None
        return item["holder"]["S"], float(item["lease_until"]["N"])

    def release_lease(self, session_id: str, token: str) -> None:
        try:
            self.db.delete_item(
                TableName=self.table,
                Key=self._key(*lease_key(session_id)),
                ConditionExpression="#t = :me",
                ExpressionAttributeNames={"#t": "token"},
                ExpressionAttributeValues={":me": {"S": token}},
            )
        except self.db.exceptions.ConditionalCheckFailedException:
            pass  # expired and taken over by another run: not ours to delete


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
    """

    #: a step that ends the run besides a reply without tool calls (deliver_final's entry)
    LAST_STEP_KEYS = frozenset({"final.delivery"})

    def __init__(self, store: DynamoStore, run_id: str, *, fresh: bool = False) -> None:
        self.store = store
        self.run_id = run_id
        if fresh:
            self.entries: dict[str, dict[str, Any]] = {}
            self.delivered: set[str] = set()
        else:
            self.entries, self.delivered = store.run_journal(run_id)
        #: steps kept back, with the deliveries they report and their counter items
        self.pending = Unwritten()
        #: deliveries sent since the last step was put, not yet reported by any step
        self.loose: list[dict[str, Any]] = []
        #: records of such deliveries built when they were sent (deliver_final's answer)
        self.staged: list[tuple[str, Any]] = []

    def get(self, key: str) -> dict[str, Any] | None:
        return self.entries.get(key)

    def put(self, key: str, value: dict[str, Any], *, also: Sequence[dict[str, Any]] = ()) -> None:
        value = _cap_journal_value(value)
        if self._keep_back(key, value):
            self.pending = self.pending + Unwritten(
                steps={key: value}, deliveries=self.loose, also=list(also), records=self.staged
            )
        else:
            rest = self.pending + Unwritten(deliveries=self.loose, records=self.staged)
            self.store.journal_put(self.run_id, key, value, unwritten=rest or None, also=also)
            self.pending = Unwritten()
        self.loose = []
        self.staged = []
        self.entries[key] = value

    def _keep_back(self, key: str, value: dict[str, Any]) -> bool:
        """The run's last step: the commit writes it (a reply with no tool calls ends the run)."""
        return key in self.LAST_STEP_KEYS or (key.endswith(".reply") and not value.get("tool_calls"))

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
            self.store.journal_put(self.run_id, key, value, unwritten=rest or None)
            self.pending = Unwritten()

    def unwritten(self, *, for_commit: bool = False) -> Unwritten:
        """What the run's last transaction must write. A success also records the deliveries no step
        reported yet; a failure does not (the step that sent them is redone, and resends them under
        the same delivery id: the at-least-once edge of docs/durability.md)."""
        if for_commit:
            return self.pending + Unwritten(deliveries=self.loose, records=self.staged)
        return self.pending

    def mark_written(self) -> None:
        self.pending = Unwritten()
        self.loose = []
        self.staged = []

    # --- the recorder port of RecordingChannel -----------------------------------------------

    def has_delivery(self, run_id: str, delivery_id: str) -> bool:
        if run_id != self.run_id:
            return self.store.has_delivery(run_id, delivery_id)
        return delivery_id in self.delivered

    def before_send(self) -> None:
        self.flush()

    def record_delivery(
        self, *, run_id: str, delivery_id: str, session_id: str, text: str, also: Sequence[dict[str, Any]] = ()
    ) -> bool:
        """Stage a sent delivery: it is written with the step that reports it (a tool result, or
        ``final.delivery`` for deliver_final's answer, which the commit or the failure record
        writes). A delivery to another session is recorded on its own, at once."""
        if run_id != self.run_id:
            return self.store.record_delivery(
                run_id=run_id, delivery_id=delivery_id, session_id=session_id, text=text, also=also
            )
        if delivery_id == f"{self.run_id}#final":
            # built now, so its history entry sorts at the send, before the commit's marker and note
            self.staged += self.store.delivery_record(
                run_id=run_id, delivery_id=delivery_id, session_id=session_id, text=text, also=also
            )
            self.delivered.add(delivery_id)
            return True
        self.loose.append(
            {"run_id": run_id, "delivery_id": delivery_id, "session_id": session_id, "text": text, "also": list(also)}
        )
        self.delivered.add(delivery_id)
        return True


def _cap_journal_value(value: dict[str, Any]) -> dict[str, Any]:
    """Bounded in bytes as DynamoDB counts them (any text, tool arguments included): see itemsize."""
    return bound_json(value, JOURNAL_VALUE_BYTES)
