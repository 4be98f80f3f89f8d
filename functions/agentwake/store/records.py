"""The records a wake works on: session configs, tasks and jobs (and reading a run's record)."""

from __future__ import annotations

import json
from itertools import islice
from typing import TYPE_CHECKING, Any, Literal

from agentwake.domain.models import SessionConfig, Task, truncate
from agentwake.errors import SessionChanged, TaskExists
from agentwake.store.codec import key
from agentwake.store.keys import (
    JOBS_GSI_PK,
    TREE_JOB,
    TREE_TASK,
    config_key,
    deleted_key,
    job_key,
    run_key,
    task_key,
    tasks_gsi_pk,
    tasks_gsi_sk,
    tree_keys,
)
from agentwake.store.table import Table, pages

if TYPE_CHECKING:
    from agentwake.domain.run_models import Job, RunRecord
    from agentwake.trust.session_checks import ConfigRules


def started_keys(record: Task | Job) -> dict[str, str]:
    """The index keys that link a task or job to the run that started it (``Task.started_by``,
    ``Job.created_by_run``): ``runs show`` and ``runs list --tree`` find it with one Query
    (docs/table-design.md). ``put_task`` and ``put_job`` add them; every other write of a whole task
    or job item must add them too (``**started_keys(record)`` beside its keys)."""
    if isinstance(record, Task):
        return tree_keys(record.session_id, record.started_by, record.created_at, TREE_TASK, record.task_id)
    return tree_keys(record.session_id, record.created_by_run, record.created_at, TREE_JOB, record.job_id)


class Records:
    """Session configs, tasks, jobs, and reading a run's record."""

    def __init__(self, table: Table) -> None:
        self.table = table

    # --- sessions -----------------------------------------------------------------------------

    def put_session(
        self, config: SessionConfig, rules: ConfigRules | None = None, *, replacing: SessionConfig | None | bool = True
    ) -> None:
        """Write a session config its wakes can run: refused (ConfigError, nothing written) when it
        names no providers, a secret outside the stack's scope or a URL the outbound policy refuses
        (``rules``: the stack's; this process's Settings by default).

        ``replacing``: True (the operator's write) whatever is there; None only if there is no config
        yet; a config only if that one is still there (the product API checked its owners):
        otherwise SessionChanged and nothing written."""
        from agentwake.trust.session_checks import check_session

        check_session(config, rules)
        request: dict[str, Any] = {
            "TableName": self.table.name,
            "Item": self.table.item(config, *config_key(config.session_id)),
        }
        if replacing is None:
            request["ConditionExpression"] = "attribute_not_exists(pk)"
        elif not isinstance(replacing, bool):
            request["ConditionExpression"] = "updated_at = :seen"
            request["ExpressionAttributeValues"] = {":seen": {"S": replacing.updated_at}}
        try:
            self.table.db.put_item(**request)
        except self.table.db.exceptions.ConditionalCheckFailedException as exc:
            raise SessionChanged(
                f"session {config.session_id} was created or changed meanwhile: nothing was written; read it and try again"
            ) from exc

    def mark_deleted(self, session_id: str, owners: list[str]) -> None:
        """Before its owners delete a session over the product API: keep who owned it, so that its
        id is never given to another principal (a task registered for it may still complete)."""
        self.table.db.put_item(
            TableName=self.table.name,
            Item={**key(*deleted_key(session_id)), "owners": {"S": json.dumps(owners)}},
        )

    def deleted_owners(self, session_id: str) -> list[str] | None:
        """The owners of a session deleted over the product API; None if it never was."""
        item = self.table.read_item(*deleted_key(session_id))
        if item is None:
            return None
        owners = json.loads(item.get("owners", {}).get("S", "[]"))
        return [o for o in owners if isinstance(o, str)] if isinstance(owners, list) else []

    def get_session(self, session_id: str) -> SessionConfig | None:
        item = self.table.read_item(*config_key(session_id))
        return self.table.load(SessionConfig, item) if item else None

    # --- tasks --------------------------------------------------------------------------------

    def put_task(self, task: Task) -> None:
        """Register a task; its id must be new (``bg:{task_id}`` names exactly one run)."""
        try:
            self.table.db.put_item(
                TableName=self.table.name,
                Item=self.table.item(
                    task,
                    *task_key(task.task_id),
                    gsi3pk=tasks_gsi_pk(task.session_id),
                    gsi3sk=tasks_gsi_sk(task.created_at, task.task_id),
                    **started_keys(task),
                ),
                ConditionExpression="attribute_not_exists(pk)",
            )
        except self.table.db.exceptions.ConditionalCheckFailedException as exc:
            raise TaskExists(f"task {task.task_id!r} is already registered; use a new task id") from exc

    def get_task(self, task_id: str) -> Task | None:
        item = self.table.read_item(*task_key(task_id))
        return self.table.load(Task, item) if item else None

    def claim_task_work(self, task_id: str, token_sha256: str) -> bool:
        """The background-work function begins a task's work with the token its message carried:
        False if that is not the task's token (a retried start rotated it: this copy is stale) or
        another token claimed the work. The same token may claim again (a retry of the same message)."""
        try:
            self.table.db.update_item(
                TableName=self.table.name,
                Key=key(*task_key(task_id)),
                UpdateExpression="SET work_claimed = :h",
                ConditionExpression="token_sha256 = :h AND (attribute_not_exists(work_claimed) OR work_claimed = :h)",
                ExpressionAttributeValues={":h": {"S": token_sha256}},
            )
        except self.table.db.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def rotate_task_token(self, task_id: str, token_sha256: str) -> bool:
        """A retried start of a task whose work nobody has begun: a new token (the work message
        sent with the old one, if it was sent, can no longer claim the work, and the deadline check
        the start sends with the new one is the live check). False once the work was claimed: then
        nothing must be sent again."""
        try:
            self.table.db.update_item(
                TableName=self.table.name,
                Key=key(*task_key(task_id)),
                UpdateExpression="SET token_sha256 = :h REMOVE deadline_check",
                ConditionExpression="attribute_exists(pk) AND attribute_not_exists(work_claimed)",
                ExpressionAttributeValues={":h": {"S": token_sha256}},
            )
        except self.table.db.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def claim_deadline_check(self, task_id: str, *, token_sha256: str, after: str | None, check: str) -> bool:
        """Deadline check ``check``, sent by ``after`` (None: the first of its chain), takes the
        place in the task's one chain: False if another successor of ``after`` took it first, or the
        token changed (a retried start began a new chain). ``wake.task_deadline``."""
        values: dict[str, Any] = {":h": {"S": token_sha256}, ":c": {"S": check}}
        condition = "token_sha256 = :h AND "
        if after is None:
            condition += "attribute_not_exists(deadline_check)"
        else:
            condition += "deadline_check = :after"
            values[":after"] = {"S": after}
        try:
            self.table.db.update_item(
                TableName=self.table.name,
                Key=key(*task_key(task_id)),
                UpdateExpression="SET deadline_check = :c",
                ConditionExpression=condition,
                ExpressionAttributeValues=values,
            )
        except self.table.db.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def session_tasks(self, session_id: str, *, limit: int, before: str | None = None) -> tuple[list[Task], str | None]:
        """A session's tasks, newest first: at most ``limit``, registered before the cursor ``before``
        (its ``TASKS#{session}`` partition of the keys-only ``gsi3``, the items read by one
        ``BatchGetItem``; ``store/listings.py``). Returns the page and the cursor of the next one
        (None: no more). Tasks registered before any index named them are not listed."""
        from agentwake.store.listings import BY_SESSION, newest_first  # the product API's only

        found = list(
            islice(
                newest_first(self.table, BY_SESSION, tasks_gsi_pk(session_id), before=before, page_size=limit + 1),
                limit + 1,
            )
        )
        tasks = [self.table.load(Task, item) for _, item in found[:limit]]
        return tasks, (found[limit - 1][0] if len(found) > limit else None)

    def mark_task_finished(self, task_id: str, finished_at: str) -> None:
        """running → finished; a task the wake already moved on is left as it is."""
        try:
            self.table.db.update_item(
                TableName=self.table.name,
                Key=key(*task_key(task_id)),
                UpdateExpression="SET #s = :s, finished_at = :f",
                ConditionExpression="#s = :running",
                ExpressionAttributeNames={"#s": "status"},
                ExpressionAttributeValues={
                    ":s": {"S": "finished"},
                    ":f": {"S": finished_at},
                    ":running": {"S": "running"},
                },
            )
        except self.table.db.exceptions.ConditionalCheckFailedException:
            pass

    def claim_task_outcome(
        self,
        task_id: str,
        *,
        number: int,
        outcome: Literal["succeeded", "failed"],
        reason: str | None,
        at: str,
        by: Literal["completion", "deadline", "cancel"] = "completion",
    ) -> bool:
        """Claim the task's outcome ``number`` (domain.task_outcome): True if this call claimed it,
        False if another completion, the deadline or a cancel got there first (nothing written).
        Outcome 1 only while the task has none; outcome 2 only over its worker's ``failed`` outcome 1,
        never over a cancel or a timeout. A deadline also stamps ``timed_out_at``; a cancel
        ``cancelled_at`` and the status ``cancelled``."""
        sets = ["outcome = :o", "outcomes = :n", "finished_at = :at"]
        values: dict[str, Any] = {":o": {"S": outcome}, ":n": {"N": str(number)}, ":at": {"S": at}}
        names: dict[str, str] = {}
        removes: list[str] = []
        if reason is None:
            removes.append("outcome_reason")
        else:
            sets.append("outcome_reason = :r")
            values[":r"] = {"S": truncate(reason, 2000)}
        if number == 1:
            condition = "attribute_exists(pk) AND attribute_not_exists(outcome)"
            if by != "completion":  # the deadline and a cancel end only a running task
                condition += " AND #s = :running"
                names["#s"] = "status"
                values[":running"] = {"S": "running"}
        else:
            condition = (
                "outcome = :failed AND outcomes = :prev AND attribute_not_exists(cancelled_at)"
                " AND attribute_not_exists(timed_out_at)"
            )
            values[":failed"] = {"S": "failed"}
            values[":prev"] = {"N": str(number - 1)}
        if by == "deadline":
            sets.append("timed_out_at = :at")
        elif by == "cancel":
            sets += ["cancelled_at = :at", "#s = :cancelled"]
            names["#s"] = "status"
            values[":cancelled"] = {"S": "cancelled"}
        request: dict[str, Any] = {
            "TableName": self.table.name,
            "Key": key(*task_key(task_id)),
            "UpdateExpression": "SET " + ", ".join(sets) + (" REMOVE " + ", ".join(removes) if removes else ""),
            "ConditionExpression": condition,
            "ExpressionAttributeValues": values,
        }
        if names:
            request["ExpressionAttributeNames"] = names
        try:
            self.table.db.update_item(**request)
        except self.table.db.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def count_late_completion(self, task_id: str) -> None:
        """A completion that changed nothing (the task had ended otherwise): counted on the task."""
        try:
            self.table.db.update_item(
                TableName=self.table.name,
                Key=key(*task_key(task_id)),
                UpdateExpression="ADD late_completions :one",
                ConditionExpression="attribute_exists(pk)",
                ExpressionAttributeValues={":one": {"N": "1"}},
            )
        except self.table.db.exceptions.ConditionalCheckFailedException:
            pass

    # --- jobs ---------------------------------------------------------------------------------

    def put_job(self, job: Job) -> None:
        self.table.db.put_item(
            TableName=self.table.name,
            Item=self.table.item(job, *job_key(job.job_id), gsi1pk=JOBS_GSI_PK, gsi1sk=job.job_id, **started_keys(job)),
        )

    def get_job(self, job_id: str) -> Job | None:
        item = self.table.read_item(*job_key(job_id))
        from agentwake.domain.run_models import Job

        return self.table.load(Job, item) if item else None

    def list_jobs(self) -> list[Job]:
        request = {
            "TableName": self.table.name,
            "IndexName": "gsi1",
            "KeyConditionExpression": "gsi1pk = :j",
            "ExpressionAttributeValues": {":j": {"S": JOBS_GSI_PK}},
        }
        from agentwake.domain.run_models import Job

        return [self.table.load(Job, i) for i in pages(self.table.db.query, request)]

    def delete_job(self, job_id: str) -> None:
        self.table.db.delete_item(TableName=self.table.name, Key=key(*job_key(job_id)))

    # --- runs ---------------------------------------------------------------------------------

    def get_run(self, run_id: str) -> RunRecord | None:
        item = self.table.read_item(*run_key(run_id))
        from agentwake.domain.run_models import RunRecord

        return self.table.load(RunRecord, item) if item else None
