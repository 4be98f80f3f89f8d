"""The tree of runs an operator reads: which tasks and wakes (jobs) a run started, which run started a
task or job, and which runs each of them caused.

Links come from the records alone: ``Task.started_by`` / ``started_by_call`` and ``Job.created_by_run``
/ ``created_by_call`` (found by starting run with one Query of the session's ``TREE#`` partition:
``OperatorStore.started``), and the run ids a task or job causes (``bg:{task}``, ``bg:{task}:{n}`` per
outcome, ``sub:{task}`` for a subagent, ``cron:{job}:{time}``). Used by ``runs show``, ``tasks show``,
``runs list --tree`` and the console's run and task pages (one read model for all of them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from agentwake.domain.models import Task, background_run_id, subagent_run_id
from agentwake.domain.run_models import Job, RunRecord
from agentwake.store.codec import load_item
from agentwake.store.dynamo import DynamoStore
from agentwake.store.keys import run_key
from agentwake.store.operator import OperatorStore

#: ``cron:{job}:{scheduled time}``: the scheduled time is ISO (``2026-12-01T09:00:00Z``)
_CRON_RUN = re.compile(r"^cron:(?P<job>.+):(?P<time>\d{4}-\d{2}-\d{2}T[^:]*:.*)$")


@dataclass(frozen=True)
class RunRef:
    """A run a link points to, with its status (None: no record yet, e.g. not woken yet)."""

    run_id: str
    status: str | None

    def as_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "status": self.status}

    @property
    def shown(self) -> str:
        return f"{self.run_id} ({self.status or 'not started'})"


@dataclass
class TaskLinks:
    """A task and its links: the run (and tool call) that started it, its subagent's run, the wake
    run of each outcome."""

    task: Task
    started_by: RunRef | None
    sub_run: RunRef | None
    wake_runs: list[RunRef]

    @property
    def state(self) -> str:
        """What happened to it, in a few words: ``running``, ``succeeded``, ``failed``, ``cancelled``."""
        t = self.task
        if t.cancelled_at or t.status == "cancelled":
            return "cancelled"
        return t.outcome or t.status

    def as_dict(self) -> dict[str, Any]:
        t = self.task
        return {
            "task_id": t.task_id,
            "kind": t.kind,
            "name": t.subagent or t.tool_name,
            "status": t.status,
            "outcome": t.outcome,
            "outcome_reason": t.outcome_reason,
            "outcomes": t.outcomes,
            "deadline_at": t.deadline_at,
            "cancelled_at": t.cancelled_at,
            "late_completions": t.late_completions,
            "started_by": t.started_by,
            "started_by_call": t.started_by_call,
            "started_by_status": self.started_by.status if self.started_by else None,
            "sub_run": self.sub_run.as_dict() if self.sub_run else None,
            "wake_runs": [r.as_dict() for r in self.wake_runs],
        }


@dataclass
class JobLinks:
    """A wake (job) a run scheduled, and the runs of it found (``runs list --tree`` only)."""

    job: Job
    runs: list[RunRef] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        j = self.job
        return {
            "job_id": j.job_id,
            "name": j.name,
            "origin": j.origin,
            "status": j.status,
            "enabled": j.enabled,
            "schedule_expression": j.schedule_expression,
            "run_once": j.run_once,
            "fires": j.fires,
            "max_fires": j.max_fires,
            "note": j.note,
            "created_by_run": j.created_by_run,
            "created_by_call": j.created_by_call,
        }


@dataclass
class RunLinks:
    """What links one run into its session's tree."""

    run_id: str
    #: the task this run belongs to (a ``bg:`` wake or a ``sub:`` subagent run), with its links
    task: TaskLinks | None = None
    #: the job this run is a fire of (a ``cron:`` run)
    job: Job | None = None
    #: the tasks and wakes this run started
    started_tasks: list[TaskLinks] = field(default_factory=list)
    started_jobs: list[JobLinks] = field(default_factory=list)
    #: the approval requests this run's gated calls made (``domain.approvals.Approval``), oldest first
    approvals: list[Any] = field(default_factory=list)

    @property
    def started_by(self) -> str | None:
        """The run that started this run's task or created its job (None: the product or an operator)."""
        if self.task is not None:
            return self.task.task.started_by
        return self.job.created_by_run if self.job is not None else None

    def as_dict(self) -> dict[str, Any]:
        caused = self.task.wake_runs if self.task is not None and self.run_id.startswith("sub:") else []
        return {
            "started_by": self.started_by,
            "started_by_call": (
                self.task.task.started_by_call
                if self.task is not None
                else (self.job.created_by_call if self.job is not None else None)
            ),
            "task": self.task.as_dict() if self.task is not None else None,
            "job_id": self.job.job_id if self.job is not None else None,
            "caused_wakes": [r.as_dict() for r in caused],
            "started_tasks": [t.as_dict() for t in self.started_tasks],
            "started_jobs": [j.as_dict() for j in self.started_jobs],
            "approvals": [
                {"approval_id": a.approval_id, "tool": a.tool, "state": a.state, "requested_at": a.requested_at}
                for a in self.approvals
            ],
        }


def task_run_ids(task: Task) -> tuple[str | None, list[str]]:
    """(its subagent's run id or None, the wake run id of each outcome: ``bg:{task}`` and, after a
    redrive that succeeded, ``bg:{task}:2``)."""
    sub = subagent_run_id(task.task_id) if task.kind == "subagent" else None
    return sub, [background_run_id(task.task_id, n) for n in range(1, max(task.outcomes, 1) + 1)]


def _statuses(store: DynamoStore, run_ids: set[str]) -> dict[str, str]:
    """The status of each run of ``run_ids`` that has a record: BatchGetItems of 100 keys."""
    ids = sorted(run_ids)
    found: dict[str, str] = {}
    for start in range(0, len(ids), 100):
        keys = [store.table.key(*run_key(r)) for r in ids[start : start + 100]]
        for item in store.table.batch_get(keys):
            run = load_item(RunRecord, item)
            found[run.run_id] = run.status
    return found


def _task_links(task: Task, statuses: dict[str, str]) -> TaskLinks:
    sub, wakes = task_run_ids(task)
    return TaskLinks(
        task=task,
        started_by=RunRef(task.started_by, statuses.get(task.started_by)) if task.started_by else None,
        sub_run=RunRef(sub, statuses.get(sub)) if sub else None,
        wake_runs=[RunRef(w, statuses.get(w)) for w in wakes],
    )


def _runs_named(tasks: list[Task]) -> set[str]:
    ids: set[str] = set()
    for t in tasks:
        sub, wakes = task_run_ids(t)
        ids |= set(wakes) | ({sub} if sub else set()) | ({t.started_by} if t.started_by else set())
    return ids


def task_links(store: DynamoStore, task: Task) -> TaskLinks:
    """A task's links, with the status of each run named (one BatchGetItem)."""
    return _task_links(task, _statuses(store, _runs_named([task])))


def _task_of(store: DynamoStore, run_id: str) -> Task | None:
    """The task a ``bg:``/``sub:`` run belongs to (``bg:{task}:{n}``: outcome n of ``task``)."""
    kind, _, rest = run_id.partition(":")
    if kind not in ("bg", "sub") or not rest:
        return None
    task = store.records.get_task(rest)
    if task is None and kind == "bg":
        head, _, outcome = rest.rpartition(":")
        if head and outcome.isdigit():
            task = store.records.get_task(head)
    return task


def _job_of(store: DynamoStore, run_id: str) -> Job | None:
    found = _CRON_RUN.match(run_id)
    return store.records.get_job(found.group("job")) if found else None


def run_links(store: DynamoStore, run: RunRecord) -> RunLinks:
    """The links of ``run``: the task or job it belongs to (and so the run that started that), and
    the tasks and jobs it started (one Query of its session's tree by its id, never a Scan), with
    the status of every run named (BatchGetItem)."""
    links = RunLinks(run_id=run.run_id)
    task = _task_of(store, run.run_id)
    links.job = _job_of(store, run.run_id) if task is None else None
    started, asked = OperatorStore(store).tree_entries(run.session_id, run.run_id)
    links.approvals = [a for _, a in asked]
    tasks = [r for _, r in started if isinstance(r, Task)]
    statuses = _statuses(store, _runs_named([*tasks, *([task] if task else [])]))
    links.task = _task_links(task, statuses) if task is not None else None
    links.started_tasks = [_task_links(t, statuses) for t in tasks]
    links.started_jobs = [JobLinks(r) for _, r in started if isinstance(r, Job)]
    return links


# --------------------------------------------------------------------------------------------
# a session's tree


@dataclass
class TreeNode:
    """One line of the tree: a run, a task or a job, and what hangs under it."""

    kind: str  # run | task | job | approval
    id: str
    #: a run: its RunRecord (None: not in the listed page; shown as a leaf); a task: its TaskLinks;
    #: a job: its JobLinks
    record: Any
    status: str | None = None
    children: list[TreeNode] = field(default_factory=list)
    #: a root run started by a run outside the listed page
    started_by: str | None = None

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"kind": self.kind, "id": self.id}
        if self.kind == "run":
            data["status"] = self.status
            data["started_at"] = self.record.started_at if self.record is not None else None
            data["listed"] = self.record is not None
            data["started_by"] = self.started_by
        elif self.kind == "approval":
            a = self.record
            data["approval"] = {"approval_id": a.approval_id, "tool": a.tool, "state": a.state}
        else:
            data[self.kind] = self.record.as_dict()
        data["children"] = [c.as_dict() for c in self.children]
        return data


def _start(run: RunRecord) -> str:
    return run.started_at or ""


def session_tree(store: DynamoStore, session_id: str, *, limit: int = 20) -> tuple[list[TreeNode], int]:
    """The session's latest ``limit`` runs as a tree, oldest first at every level: each run, under it
    the tasks and jobs it started (in the order they were created), under each of those the runs it
    caused. A run whose starter is not among them is a root (``started_by`` says which run it was).
    Returns (roots, runs listed). Reads: the session's runs (one Query of the keys-only ``gsi3`` and
    one BatchGetItem of their items, one Query of ``gsi1`` for runs written before it), everything
    its runs started (one Query of ``gsi2``), the status of the runs the listed runs' tasks caused
    that are not listed (BatchGetItem): no Scan, and nothing read per run shown."""
    operator = OperatorStore(store)
    runs = {r.run_id: r for r in operator.runs(session_id=session_id, limit=limit).runs}
    started, asked = operator.tree_entries(session_id)
    approvals_of: dict[str, list[Any]] = {}
    for starter, approval in asked:
        approvals_of.setdefault(starter, []).append(approval)
    by_starter: dict[str, list[Task | Job]] = {}
    #: the run that started the task or job each run id belongs to
    starter_of: dict[str, str] = {}
    job_starter: dict[str, str] = {}
    for starter, record in started:
        by_starter.setdefault(starter, []).append(record)
        if isinstance(record, Task):
            sub, wakes = task_run_ids(record)
            for rid in [*wakes, *([sub] if sub else [])]:
                starter_of[rid] = starter
        else:
            job_starter[record.job_id] = starter
    for rid in runs:
        job = _CRON_RUN.match(rid)
        if job and job.group("job") in job_starter:
            starter_of[rid] = job_starter[job.group("job")]
    # only what the listed runs started is shown: the status of the runs those name (a run they
    # caused that is not listed is a leaf: its own page has the rest)
    shown_tasks = [r for starter, r in started if isinstance(r, Task) and starter in runs]
    statuses: dict[str, str] = {r.run_id: r.status for r in runs.values()}
    statuses.update(_statuses(store, {i for i in _runs_named(shown_tasks) if i not in statuses}))
    placed: set[str] = set()

    def run_node(run_id: str) -> TreeNode:
        placed.add(run_id)
        node = TreeNode("run", run_id, runs.get(run_id), statuses.get(run_id))
        for child in by_starter.get(run_id, []) if run_id in runs else []:
            if isinstance(child, Task):
                links = _task_links(child, statuses)
                tnode = TreeNode("task", child.task_id, links, links.state)
                caused = ([links.sub_run] if links.sub_run else []) + links.wake_runs
                for ref in caused:
                    if ref.run_id not in placed and (ref.run_id in runs or ref.status is not None):
                        tnode.children.append(run_node(ref.run_id))
                node.children.append(tnode)
            else:
                jnode = TreeNode("job", child.job_id, JobLinks(child), child.status)
                prefix = f"cron:{child.job_id}:"
                for rid, rec in sorted(runs.items(), key=lambda p: _start(p[1])):
                    if rid.startswith(prefix) and rid not in placed:
                        jnode.record.runs.append(RunRef(rid, rec.status))
                        jnode.children.append(run_node(rid))
                node.children.append(jnode)
        if run_id in runs:
            node.children += [TreeNode("approval", a.approval_id, a, a.state) for a in approvals_of.get(run_id, [])]
        return node

    roots: list[TreeNode] = []
    ordered = sorted(runs.values(), key=lambda r: (_start(r), r.run_id))
    # a run whose starter is listed hangs under it; the others are roots, oldest first
    for run in ordered:
        if run.run_id in placed or starter_of.get(run.run_id) in runs:
            continue
        roots.append(run_node(run.run_id))
        roots[-1].started_by = starter_of.get(run.run_id)
    for run in ordered:  # starters that start each other (records no run writes): shown, not lost
        if run.run_id not in placed:
            roots.append(run_node(run.run_id))
    return roots, len(runs)
