"""Table access only the operator CLI needs (no wake path uses it): a run's whole partition, runs by
session (``gsi3``) and by time (``gsi4``; both through ``store/listings.py``), a session's tasks, deleting a session,
settling a send in doubt (``settle_delivered``, ``settle_resend``). Table design:
docs/table-design.md. The read models built on these (run summaries, transcripts) live with the
CLI, in ``agentwake_ops.runs``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from agentwake.domain.approvals import Approval
from agentwake.domain.models import HistoryEntry, SessionConfig, Task
from agentwake.domain.run_models import Job, RunRecord
from agentwake.store.codec import key, load_item
from agentwake.store.dynamo import DynamoStore
from agentwake.store.keys import (
    CONFIG_SK,
    DELETED_SK,
    HISTORY_PREFIX,
    RUNS_PREFIX,
    SESSION_PREFIX,
    TASK_PREFIX,
    TASK_SK,
    TREE_APPROVAL,
    TREE_TASK,
    delivery_sk,
    run_pk,
    runs_by_day_pk,
    runs_gsi_pk,
    session_pk,
    tree_gsi_pk,
    tree_run_prefix,
)
from agentwake.store.listings import BATCH_KEYS, BY_DAY, BY_SESSION, newest_first, scan_all
from agentwake.store.table import pages


@dataclass
class RunsPage:
    runs: list[RunRecord]
    #: pass as ``before`` for the next (older) page; None when there is none
    next_before: str | None
    #: how the runs were found: ``session`` (gsi3 Query), ``by-day`` (gsi4 Queries) or ``scan``
    method: str = "session"
    #: by-day without ``since``: the oldest day looked at, when the walk stopped at ``QUIET_DAYS``
    #: days in a row without a run (older runs: give ``since``)
    looked_back_to: str | None = None
    #: the indexes it would have read that the table does not have yet (between the two deploys of
    #: an upgrade, or while a new index fills: README, "Upgrading a stack"); their runs are not listed
    missing_indexes: tuple[str, ...] = ()


#: seconds either side of a succeeded run's ``ended_at`` where ``run_note`` looks for its note
NOTE_WINDOW_S = 300
#: ``runs`` by day without ``since`` stops after this many days in a row without a run
QUIET_DAYS = 31


class OperatorStore:
    def __init__(self, store: DynamoStore) -> None:
        self.store = store
        self.db = store.table.db
        self.table = store.table.name

    def run_items(self, run_id: str) -> list[tuple[str, dict[str, Any]]]:
        """Every item of the run's partition as (sort key, raw DynamoDB item), in key order."""
        request = {
            "TableName": self.table,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": run_pk(run_id)}},
            "ConsistentRead": True,
        }
        return [(item["sk"]["S"], item) for item in pages(self.db.query, request)]

    def run_note(self, run: RunRecord) -> HistoryEntry | None:
        """The note a succeeded run's commit wrote to its session's history (None: not found, e.g. a
        run whose history was deleted). Its commit stamped the run's ``ended_at`` and the note's
        sort key in the same process a moment apart, so one Query of the minutes around ``ended_at``
        finds it, filtered to the run; it never walks the rest of the conversation."""
        if not run.ended_at:
            return None
        ended = datetime.fromisoformat(run.ended_at.replace("Z", "+00:00")).timestamp()
        low, high = (f"{HISTORY_PREFIX}{int((ended + d) * 1e9):020d}" for d in (-NOTE_WINDOW_S, NOTE_WINDOW_S))
        request = {
            "TableName": self.table,
            "KeyConditionExpression": "pk = :pk AND sk BETWEEN :low AND :high",
            "FilterExpression": "run_id = :rid AND #k = :note",
            "ExpressionAttributeNames": {"#k": "kind"},
            "ExpressionAttributeValues": {
                ":pk": {"S": session_pk(run.session_id)},
                ":low": {"S": low},
                ":high": {"S": high},
                ":rid": {"S": run.run_id},
                ":note": {"S": "note"},
            },
        }
        for item in pages(self.db.query, request):
            return next(e for e in self.store.history.entries_of(item) if e.kind == "note")
        return None

    def runs(
        self,
        *,
        session_id: str | None = None,
        status: str | None = None,
        since: str | None = None,
        before: str | None = None,
        limit: int = 20,
        run_prefix: str | None = None,
        scan: bool = False,
    ) -> RunsPage:
        """Runs newest first (by the start of their latest attempt), ``limit`` at a time.

        With a session: its ``RUNS#{session}`` partition of ``gsi3``, newest first. Without: the
        day partitions of ``gsi4`` (``RUNDAY#{day}``), newest day first, until the page is full;
        back to the day of ``since``, or (without it) until ``QUIET_DAYS`` days in a row had no run.
        ``scan``: Scans of the runs' partitions sorted here instead (for runs no by-day index names).
        Both indexes are keys only (``store/listings.py`` reads the items, and what ``gsi1``/``gsi2``
        hold of runs written before them); ``status`` and ``run_prefix`` filter the items read.
        ``since``/``before`` bound the attempt start (ISO-8601 prefixes compare as strings).
        """

        def wanted(item: dict[str, Any]) -> bool:
            if status and item.get("status", {}).get("S") != status:
                return False
            return not run_prefix or item.get("run_id", {}).get("S", "").startswith(run_prefix)

        page_size = limit + 1 if not (status or run_prefix) else BATCH_KEYS
        missing: set[str] = set()
        if scan and session_id is None:
            found = [
                (k, i)
                for k, i in scan_all(self.store.table, BY_SESSION, RUNS_PREFIX, missing=missing)
                if wanted(i) and (not since or k >= since) and (not before or k < before)
            ]
            return _page(found, limit, method="scan", missing=missing)
        if session_id is None:
            return self._runs_by_day(wanted, since=since, before=before, limit=limit, page_size=page_size)
        found = []
        partition = runs_gsi_pk(session_id)
        listed = newest_first(
            self.store.table, BY_SESSION, partition, before=before, page_size=page_size, missing=missing
        )
        for sort_key, item in listed:
            if since and sort_key < since:
                break  # newest first: everything after this is older still
            if wanted(item):
                found.append((sort_key, item))
                if len(found) > limit:
                    break
        return _page(found, limit, method="session", missing=missing)

    def _runs_by_day(
        self,
        wanted: Callable[[dict[str, Any]], bool],
        *,
        since: str | None,
        before: str | None,
        limit: int,
        page_size: int,
    ) -> RunsPage:
        """``runs`` without a session: newest day partition of ``gsi4`` first (see ``runs``)."""
        # a day ahead of this clock too: a Lambda's clock a little ahead across midnight
        day = date.fromisoformat(before[:10]) if before else datetime.fromtimestamp(self.store.table.now(), UTC).date()
        if not before:
            day += timedelta(days=1)
        last = date.fromisoformat(since[:10]) if since else None
        found: list[tuple[str, dict[str, Any]]] = []
        quiet = 0
        seen: set[str] = set()  # a run on an old day partition and a new one is listed once
        missing: set[str] = set()
        while True:
            got = 0
            for sort_key, item in newest_first(
                self.store.table,
                BY_DAY,
                runs_by_day_pk(day.isoformat()),
                before=before,
                since=since,
                page_size=page_size,
                seen=seen,
                missing=missing,
            ):
                if since and sort_key < since:
                    break
                if wanted(item):  # a day with no run the filter keeps counts as quiet, as before
                    got += 1
                    found.append((sort_key, item))
                    if len(found) > limit:
                        break
            if len(found) > limit:
                return _page(found, limit, method="by-day", missing=missing)
            if last is not None:
                if day <= last:
                    return _page(found, limit, method="by-day", missing=missing)
            else:
                quiet = 0 if got else quiet + 1
                if quiet >= QUIET_DAYS:
                    return _page(found, limit, method="by-day", looked_back_to=day.isoformat(), missing=missing)
            day -= timedelta(days=1)

    def started(self, session_id: str, run_id: str | None = None) -> list[tuple[str, Task | Job]]:
        """The tasks and jobs runs of ``session_id`` started (only ``run_id``'s, when given), as
        (starting run, record), by starting run and then in the order they were created."""
        return self.tree_entries(session_id, run_id)[0]

    def tree_entries(
        self, session_id: str, run_id: str | None = None
    ) -> tuple[list[tuple[str, Task | Job]], list[tuple[str, Approval]]]:
        """What runs of ``session_id`` started (only ``run_id``'s, when given): the tasks and jobs, and
        the approval requests their gated calls made, each as (run, record), by run and then in the
        order they were created: one Query of the session's ``TREE#`` partition of ``gsi2`` (never a Scan)."""
        cond = "gsi2pk = :t"
        values: dict[str, Any] = {":t": {"S": tree_gsi_pk(session_id)}}
        if run_id is not None:
            cond += " AND begins_with(gsi2sk, :r)"
            values[":r"] = {"S": tree_run_prefix(run_id)}
        request = {
            "TableName": self.table,
            "IndexName": "gsi2",
            "KeyConditionExpression": cond,
            "ExpressionAttributeValues": values,
        }
        found: list[tuple[str, Task | Job]] = []
        asked: list[tuple[str, Approval]] = []
        for item in pages(self.db.query, request):
            starter, _, rest = item["gsi2sk"]["S"].partition("#")
            kind = rest.split("#")[-2] if rest.count("#") >= 2 else ""
            if kind == TREE_APPROVAL:
                asked.append((starter, load_item(Approval, item)))
                continue
            found.append((starter, load_item(Task, item) if kind == TREE_TASK else load_item(Job, item)))
        return found, asked

    def tasks_of_session(self, session_id: str) -> list[Task]:
        """The session's tasks (a Scan: tasks are keyed by task id only)."""
        return self.tasks(session_id=session_id)

    def tasks(self, *, session_id: str | None = None, status: str | None = None) -> list[Task]:
        """Tasks, newest first (a Scan: tasks are keyed by task id only), of one session and/or
        in one status."""
        filters = ["begins_with(pk, :t)", "sk = :sk"]
        values: dict[str, Any] = {":t": {"S": TASK_PREFIX}, ":sk": {"S": TASK_SK}}
        names: dict[str, str] = {}
        if session_id is not None:
            filters.append("session_id = :s")
            values[":s"] = {"S": session_id}
        if status is not None:
            filters.append("#st = :st")
            values[":st"] = {"S": status}
            names["#st"] = "status"
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "FilterExpression": " AND ".join(filters),
            "ExpressionAttributeValues": values,
        }
        if names:
            kwargs["ExpressionAttributeNames"] = names
        found = [load_item(Task, item) for item in pages(self.db.scan, kwargs)]
        return sorted(found, key=lambda t: (t.created_at, t.task_id), reverse=True)

    def sessions(self) -> list[SessionConfig]:
        """Every session config, by session id (a Scan of the ``CONFIG`` items)."""
        kwargs = {
            "TableName": self.table,
            "FilterExpression": "begins_with(pk, :p) AND sk = :sk",
            "ExpressionAttributeValues": {":p": {"S": SESSION_PREFIX}, ":sk": {"S": CONFIG_SK}},
        }
        return sorted(
            (load_item(SessionConfig, item) for item in pages(self.db.scan, kwargs)), key=lambda c: c.session_id
        )

    def delete_session(self, session_id: str, *, keep_deleted_mark: bool = False) -> int:
        """Delete the session's partition (config, history, lease); returns how many items went.
        The config goes last, so a delete cut short leaves a session its owners still hold and can
        delete again. ``keep_deleted_mark``: the product API's delete keeps who owned it
        (``Records.mark_deleted``)."""
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": session_pk(session_id)}},
            "ProjectionExpression": "pk, sk",
            "ConsistentRead": True,
        }
        keys = [
            {"pk": i["pk"], "sk": i["sk"]}
            for i in pages(self.db.query, kwargs)
            if not (keep_deleted_mark and i["sk"]["S"] == DELETED_SK)
        ]
        keys.sort(key=lambda k: k["sk"]["S"] == CONFIG_SK)  # the config last
        for start in range(0, len(keys), 25):
            requests = [{"DeleteRequest": {"Key": k}} for k in keys[start : start + 25]]
            pending: dict[str, Any] = {self.table: requests}
            while pending:
                resp = self.db.batch_write_item(RequestItems=pending)
                pending = resp.get("UnprocessedItems") or {}
        return len(keys)

    # --- sends in doubt: an operator's word on what the user's chat shows ------------------------

    def settle_delivered(
        self,
        *,
        run_id: str,
        delivery_id: str,
        session_id: str,
        text: str,
        intents: list[tuple[str, dict[str, Any]]],
        kept: list[dict[str, Any]] | None = None,
        also: list[dict[str, Any]] | None = None,
    ) -> bool:
        """Record a delivery the operator saw in the user's chat: its marker with the operator's
        receipts (``Receipt.to_dict()`` of each intent ``(sort key, receipt)``) and its history entry
        (``History.delivery_items``, the wake's own builder), each intent ``sent`` — one
        transaction, on condition that no marker exists and each intent is still ``sending``. False
        (nothing written) when either condition failed: delivered already, or settled meanwhile.
        ``kept``: receipts the delivery's other targets already have (an ``each`` route's, on their
        intents), kept on the marker too."""
        items = self.store.history.delivery_items(
            run_id=run_id,
            delivery_id=delivery_id,
            session_id=session_id,
            text=text,
            also=also or (),
            receipts=[*(kept or ()), *(receipt for _, receipt in intents)],
        )
        for sk, receipt in intents:
            items.append((f"intent:{sk}", self._intent_update(run_id, sk, "sent", receipt=receipt)))
        return self._transact(items)

    def settle_resend(self, *, run_id: str, delivery_id: str, intent_sks: list[str]) -> bool:
        """Mark sends in doubt ``not_sent`` (the operator saw they did not arrive): the next attempt
        sends them again without asking. On condition that the delivery has no marker and each
        intent is still ``sending``; False (nothing written) otherwise."""
        items: list[tuple[str, Any]] = [
            (
                f"delivery:{delivery_id}",
                {
                    "ConditionCheck": {
                        "TableName": self.table,
                        "Key": key(run_pk(run_id), delivery_sk(delivery_id)),
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                },
            )
        ]
        items += [(f"intent:{sk}", self._intent_update(run_id, sk, "not_sent")) for sk in intent_sks]
        return self._transact(items)

    def _intent_update(
        self, run_id: str, sk: str, state: str, *, receipt: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        import json

        values: dict[str, Any] = {":to": {"S": state}, ":doubt": {"S": "sending"}}
        update = "SET #state = :to"
        if receipt is not None:
            update += ", receipt = :r"
            values[":r"] = {"S": json.dumps(receipt, separators=(",", ":"), ensure_ascii=False)}
        return {
            "Update": {
                "TableName": self.table,
                "Key": key(run_pk(run_id), sk),
                "UpdateExpression": update,
                "ConditionExpression": "attribute_exists(pk) AND #state = :doubt",
                "ExpressionAttributeNames": {"#state": "state"},
                "ExpressionAttributeValues": values,
            }
        }

    def _transact(self, items: list[tuple[str, Any]]) -> bool:
        try:
            self.store.table.transact(items)
        except self.db.exceptions.TransactionCanceledException as exc:
            reasons = getattr(exc, "failed_tags", {}) or {}
            if reasons and all(r.get("Code") == "ConditionalCheckFailed" for r in reasons.values()):
                return False
            raise
        return True


def _page(
    found: list[tuple[str, dict[str, Any]]],
    limit: int,
    *,
    method: str,
    looked_back_to: str | None = None,
    missing: set[str] | None = None,
) -> RunsPage:
    """The first ``limit`` of ``found`` (newest first); a cursor when there is one more."""
    page = found[:limit]
    more = len(found) > limit
    runs = [load_item(RunRecord, item) for _, item in page]
    return RunsPage(
        runs,
        page[-1][0] if more and page else None,
        method,
        None if more else looked_back_to,
        tuple(sorted(missing or ())),
    )
