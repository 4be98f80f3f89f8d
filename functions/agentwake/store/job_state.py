"""A job's operating state: its skipped and missed fires, its count of failed runs in a row,
pause and resume, the one fire buffered behind a running run (docs/operations.md, "Job policies").

Each change is one conditional write on the job item (and the fire's own item), so two wakes of
the same job never count one failure twice or record one fire twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentwake.store.codec import key, to_attr
from agentwake.store.keys import FIRE_PREFIX, job_fire_key, job_key
from agentwake.store.table import Table

if TYPE_CHECKING:
    from agentwake.domain.run_models import Job, JobFire

_COUNTERS = {"skipped": "skipped_fires", "missed": "missed_fires"}


class JobStates:
    """A job's operating state: its fires, its failures in a row, pause, the buffered fire."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def record_job_fire(self, fire: JobFire) -> bool:
        """Record a skipped or missed fire once, counting it on the job. False if it was recorded already."""
        items: list[tuple[str, Any]] = [
            (
                "fire",
                {
                    "Put": {
                        "TableName": self.table.name,
                        "Item": self.table.item(fire, *job_fire_key(fire.job_id, fire.kind, fire.scheduled_time)),
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                },
            ),
            (
                "job",
                {
                    "Update": {
                        "TableName": self.table.name,
                        "Key": key(*job_key(fire.job_id)),
                        "UpdateExpression": f"ADD {_COUNTERS[fire.kind]} :one",
                        "ConditionExpression": "attribute_exists(pk)",
                        "ExpressionAttributeValues": {":one": {"N": "1"}},
                    }
                },
            ),
        ]
        try:
            self.table.transact(items, droppable=frozenset({"job"}))
        except self.table.db.exceptions.TransactionCanceledException as exc:
            reason = getattr(exc, "failed_tags", {}).get("fire")
            if reason is not None and reason.get("Code") == "ConditionalCheckFailed":
                return False
            raise
        return True

    def job_fires(self, job_id: str, kind: str | None = None, *, limit: int | None = None) -> list[JobFire]:
        """The job's recorded fires of ``kind`` (all kinds when None), newest scheduled time first."""
        prefix = f"{FIRE_PREFIX}{kind}#" if kind else FIRE_PREFIX
        from agentwake.domain.run_models import JobFire

        items = [self.table.load(JobFire, i) for i in self.table.query(job_key(job_id)[0], prefix, forward=False)]
        items.sort(key=lambda f: f.scheduled_time, reverse=True)
        return items[:limit] if limit is not None else items

    def set_fire_outcome(self, fire: JobFire, outcome: str) -> None:
        self.table.db.update_item(
            TableName=self.table.name,
            Key=key(*job_fire_key(fire.job_id, fire.kind, fire.scheduled_time)),
            UpdateExpression="SET outcome = :o",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues={":o": {"S": outcome}},
        )

    def delete_job_fires(self, job_id: str) -> int:
        pk = job_key(job_id)[0]
        keys = [i["sk"]["S"] for i in self.table.query(pk, FIRE_PREFIX)]
        for sk in keys:
            self.table.db.delete_item(TableName=self.table.name, Key=key(pk, sk))
        return len(keys)

    def update_job(
        self, job_id: str, *, unless_paused: bool = False, buffer_free_for: str | None = None, **fields: Any
    ) -> Job | None:
        """Set the job's ``fields`` (None removes one); None if the job does not exist, or (guards,
        checked in the same write) ``unless_paused`` and it is paused, or ``buffer_free_for`` and
        another run than that one holds its buffered place. Returns the job as written."""
        sets: list[str] = []
        removes: list[str] = []
        names: dict[str, str] = {}
        values: dict[str, Any] = {}
        condition = "attribute_exists(pk)"
        if unless_paused:
            condition += " AND attribute_not_exists(paused_at)"
        if buffer_free_for is not None:
            condition += " AND (attribute_not_exists(buffered_run_id) OR buffered_run_id = :crun)"
            values[":crun"] = to_attr(buffer_free_for)
        for i, (name, value) in enumerate(sorted(fields.items())):
            names[f"#f{i}"] = name
            if value is None:
                removes.append(f"#f{i}")
            else:
                sets.append(f"#f{i} = :v{i}")
                values[f":v{i}"] = to_attr(value)
        expr = ("SET " + ", ".join(sets) if sets else "") + (" REMOVE " + ", ".join(removes) if removes else "")
        request: dict[str, Any] = {
            "TableName": self.table.name,
            "Key": key(*job_key(job_id)),
            "UpdateExpression": expr.strip(),
            "ConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ReturnValues": "ALL_NEW",
        }
        if values:
            request["ExpressionAttributeValues"] = values
        try:
            resp = self.table.db.update_item(**request)
        except self.table.db.exceptions.ConditionalCheckFailedException:
            return None
        from agentwake.domain.run_models import Job

        return self.table.load(Job, resp["Attributes"])

    def count_job_failure(self, job_id: str, run_id: str) -> Job | None:
        """One more failed run in a row, once per run id (a retry of the same run is not another).
        Returns the job as counted, or None when this run was counted already (or the job is gone)."""
        try:
            resp = self.table.db.update_item(
                TableName=self.table.name,
                Key=key(*job_key(job_id)),
                UpdateExpression="SET consecutive_failures = if_not_exists(consecutive_failures, :zero) + :one, "
                "last_failed_run_id = :rid",
                ConditionExpression="attribute_exists(pk) AND "
                "(attribute_not_exists(last_failed_run_id) OR last_failed_run_id <> :rid)",
                ExpressionAttributeValues={":zero": {"N": "0"}, ":one": {"N": "1"}, ":rid": {"S": run_id}},
                ReturnValues="ALL_NEW",
            )
        except self.table.db.exceptions.ConditionalCheckFailedException:
            return None
        from agentwake.domain.run_models import Job

        return self.table.load(Job, resp["Attributes"])

    def buffer_job_fire(self, job_id: str, run_id: str) -> bool:
        """Hold ``run_id`` as the one fire waiting behind this job's running run (overlap ``buffer_one``).
        False when another fire holds the place."""
        return self.update_job(job_id, buffer_free_for=run_id, buffered_run_id=run_id) is not None

    def release_job_buffer(self, job_id: str, run_id: str) -> None:
        """Free the buffered place if ``run_id`` holds it (it ran, or gave up waiting)."""
        try:
            self.table.db.update_item(
                TableName=self.table.name,
                Key=key(*job_key(job_id)),
                UpdateExpression="REMOVE buffered_run_id",
                ConditionExpression="buffered_run_id = :r",
                ExpressionAttributeValues={":r": {"S": run_id}},
            )
        except self.table.db.exceptions.ConditionalCheckFailedException:
            pass
