"""Table access only the operator CLI needs (no wake path uses it): a run's whole partition, runs by
session from the ``gsi1`` index, a session's tasks, deleting a session. Table design:
docs/table-design.md. The read models built on these (run summaries, transcripts) live with the
CLI, in ``agentwake_ops.runs``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentwake.store.codec import load_item
from agentwake.store.dynamo import DynamoStore
from agentwake.store.keys import (
    CONFIG_SK,
    RUNS_PREFIX,
    SESSION_PREFIX,
    TASK_PREFIX,
    TASK_SK,
    run_pk,
    runs_gsi_pk,
    session_pk,
)
from agentwake.store.models import RunRecord, SessionConfig, Task
from agentwake.store.table import pages


@dataclass
class RunsPage:
    runs: list[RunRecord]
    #: pass as ``before`` for the next (older) page; None when there is none
    next_before: str | None


class OperatorStore:
    def __init__(self, store: DynamoStore) -> None:
        self.store = store
        self.db = store.db
        self.table = store.table

    def run_items(self, run_id: str) -> list[tuple[str, dict[str, Any]]]:
        """Every item of the run's partition as (sort key, raw DynamoDB item), in key order."""
        request = {
            "TableName": self.table,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": run_pk(run_id)}},
            "ConsistentRead": True,
        }
        return [(item["sk"]["S"], item) for item in pages(self.db.query, request)]

    def runs(
        self,
        *,
        session_id: str | None = None,
        status: str | None = None,
        since: str | None = None,
        before: str | None = None,
        limit: int = 20,
        run_prefix: str | None = None,
    ) -> RunsPage:
        """Runs newest first (by the start of their latest attempt), ``limit`` at a time.

        With a session: a Query of its ``RUNS#{session}`` partition of ``gsi1``, newest first.
        Without: a Scan of ``gsi1`` (it holds only runs and jobs), sorted here.
        ``since``/``before`` bound the attempt start (ISO-8601 prefixes compare as strings).
        """
        names = {"#s": "status"}
        values: dict[str, Any] = {}
        filters: list[str] = []
        if status:
            filters.append("#s = :status")
            values[":status"] = {"S": status}
        if run_prefix:  # one job's runs: ``cron:{job_id}:``
            filters.append("begins_with(run_id, :rp)")
            values[":rp"] = {"S": run_prefix}
        if session_id is not None:
            cond = ["gsi1pk = :p"]
            values[":p"] = {"S": runs_gsi_pk(session_id)}
            if before:
                cond.append("gsi1sk < :before")
                values[":before"] = {"S": before}
            kwargs: dict[str, Any] = {
                "TableName": self.table,
                "IndexName": "gsi1",
                "KeyConditionExpression": " AND ".join(cond),
                "ScanIndexForward": False,
                "ExpressionAttributeValues": values,
            }
            if filters:
                kwargs["FilterExpression"] = " AND ".join(filters)
            if status:
                kwargs["ExpressionAttributeNames"] = names
            found: list[tuple[str, dict[str, Any]]] = []
            for item in pages(self.db.query, kwargs):
                key = item["gsi1sk"]["S"]
                if since and key < since:
                    break  # newest first: everything after this is older still
                found.append((key, item))
                if len(found) > limit:
                    break
        else:
            filters.insert(0, "begins_with(gsi1pk, :runs)")
            values[":runs"] = {"S": RUNS_PREFIX}
            if since:
                filters.append("gsi1sk >= :since")
                values[":since"] = {"S": since}
            if before:
                filters.append("gsi1sk < :before")
                values[":before"] = {"S": before}
            kwargs = {
                "TableName": self.table,
                "IndexName": "gsi1",
                "FilterExpression": " AND ".join(filters),
                "ExpressionAttributeValues": values,
            }
            if status:
                kwargs["ExpressionAttributeNames"] = names
            found = sorted(((i["gsi1sk"]["S"], i) for i in pages(self.db.scan, kwargs)), key=lambda p: p[0])
            found.reverse()
        page = found[:limit]
        more = len(found) > limit
        runs = [load_item(RunRecord, item) for _, item in page]
        return RunsPage(runs, page[-1][0] if more and page else None)

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

    def delete_session(self, session_id: str) -> int:
        """Delete the session's partition (config, history, lease); returns how many items went."""
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": session_pk(session_id)}},
            "ProjectionExpression": "pk, sk",
            "ConsistentRead": True,
        }
        keys = [{"pk": i["pk"], "sk": i["sk"]} for i in pages(self.db.query, kwargs)]
        for start in range(0, len(keys), 25):
            requests = [{"DeleteRequest": {"Key": k}} for k in keys[start : start + 25]]
            pending: dict[str, Any] = {self.table: requests}
            while pending:
                resp = self.db.batch_write_item(RequestItems=pending)
                pending = resp.get("UnprocessedItems") or {}
        return len(keys)
