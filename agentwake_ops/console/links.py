"""The console's view of the tree of runs: on a run's page, the run that started it and the tasks and
wakes it started, the approvals it asked for and, parked, what it waits for (with the decision's
buttons); the task page (``/task?id=TASK``, ``tasks show``) with links both ways. (The pages import
this module, never the other way.)

Read through :mod:`agentwake_ops.tree` (the read model ``runs show`` and ``tasks show`` print) and
rows from :mod:`agentwake_ops.render`'s plain-text builders, so a page says what the command prints.
"""

from __future__ import annotations

from typing import Any

from agentwake_ops import approvals_view
from agentwake_ops.console.html import Markup, facts, h, hidden, link, table
from agentwake_ops.context import OpsContext, OpsError
from agentwake_ops.render import (
    STARTED_JOB_COLUMNS,
    STARTED_TASK_COLUMNS,
    started_job_row,
    started_task_row,
    task_facts,
    tree_label,
)
from agentwake_ops.tree import RunLinks, RunRef, TaskLinks, TreeNode, session_tree, task_links


def _run_link(ref: RunRef | None) -> Any:
    if ref is None:
        return None
    if ref.status is None:  # no record yet (not woken yet): no page to link to
        return h(f"{ref.run_id} (not started)")
    return Markup(f"{link('/run', ref.run_id, id=ref.run_id)} ({h(ref.status or 'not started')})")


def _runs_links(refs: list[RunRef]) -> Markup:
    return Markup(", ".join(str(_run_link(r)) for r in refs))


def run_link_rows(links: RunLinks) -> list[tuple[str, Any]]:
    """The facts that place a run in its tree, with links: the run that started its task (or created
    its job), its task or job, and (a ``sub:`` run) the wake its outcome caused."""
    rows: list[tuple[str, Any]] = []
    if links.task is not None:
        t = links.task
        rows.append(("started by", _run_link(t.started_by) or "the product or an operator (no run)"))
        rows.append(("task", Markup(f"{link('/task', t.task.task_id, id=t.task.task_id)} ({h(t.state)})")))
        if links.run_id.startswith("sub:"):
            rows.append(("wake it caused", _runs_links(t.wake_runs)))
    elif links.job is not None:
        j = links.job
        rows.append(("job", link("/jobs", j.job_id, id=j.job_id)))
        starter = j.created_by_run
        rows.append(("started by", link("/run", starter, id=starter) if starter else "the product or an operator"))
    for a in links.approvals:
        rows.append(
            ("approval", Markup(f"{link('/approval', a.approval_id, id=a.approval_id)} ({h(a.tool)}, {h(a.state)})"))
        )
    return rows


def started_sections(links: RunLinks) -> Markup:
    """The tables of the tasks and the wakes (jobs) a run started, each linked to its page."""
    task_rows = []
    for t in links.started_tasks:
        cells = started_task_row(t)
        runs = [*([t.sub_run] if t.sub_run else []), *t.wake_runs]
        wakes = cells[4] if cells[4].startswith("none") else _runs_links(runs)
        task_rows.append((link("/task", t.task.task_id, id=t.task.task_id), *cells[1:4], wakes))
    job_rows = [(link("/jobs", j.job.job_id, id=j.job.job_id), *started_job_row(j)[1:]) for j in links.started_jobs]
    return Markup(
        f"<h2>tasks this run started ({len(task_rows)})</h2>"
        + table(STARTED_TASK_COLUMNS, task_rows, cls="started-tasks")
        + f"<h2>wakes this run scheduled ({len(job_rows)})</h2>"
        + table(STARTED_JOB_COLUMNS, job_rows, cls="started-jobs")
    )


def task_page(ctx: OpsContext, task_id: str) -> Markup:
    """``tasks show TASK``: its facts, linked to the run that started it, its subagent's run and the
    wake run of each outcome (the console's ``/task?id=TASK``)."""
    record = ctx.store.records.get_task(task_id)
    if record is None:
        raise OpsError(f"no task {task_id!r} in the store")
    links: TaskLinks = task_links(ctx.store, record)
    linked = {
        "session": link("/sessions", record.session_id, id=record.session_id),
        "started by": _run_link(links.started_by) or "the product or an operator (no run)",
        "subagent run": _run_link(links.sub_run),
    }
    rows: list[tuple[str, Any]] = [(label, linked.get(label, value)) for label, value in task_facts(links)]
    rows = [
        (label, _runs_links(links.wake_runs) if label == "wake runs" and not str(value).startswith("none") else value)
        for label, value in rows
    ]
    return Markup(facts(rows))


def _tree_item(node: TreeNode) -> str:
    route = {"run": "/run", "task": "/task", "job": "/jobs", "approval": "/approval"}[node.kind]
    label = tree_label(node)
    # the node's id is the link (a run not listed may have no record: its id plain), the rest text
    rest = label.split(node.id, 1)[1] if node.id in label else ""
    head = label[: label.index(node.id)] if node.id in label else label
    linked = link(route, node.id, id=node.id) if node.kind != "run" or node.status else h(node.id)
    children = "".join(_tree_item(c) for c in node.children)
    return (
        f"<li class='tree-{node.kind}'>{h(head)}{linked}{h(rest)}"
        + (f"<ul>{children}</ul>" if children else "")
        + "</li>"
    )


def tree_page(ctx: OpsContext, session_id: str, limit: int) -> Markup:
    """``runs list --session S --tree``: the session's runs as a tree, each node linked to its page."""
    roots, listed = session_tree(ctx.store, session_id, limit=limit)
    if not roots:
        return Markup(f"<p class='muted'>No runs of session {h(session_id)}.</p>")
    return Markup(
        f"<p class='muted'>{listed} run(s) of session {h(session_id)}, oldest first, each with the tasks "
        "and wakes it started and the runs those caused (<code>runs list --session S --tree</code>).</p>"
        f"<ul class='tree'>{''.join(_tree_item(r) for r in roots)}</ul>"
    )


#: the approval page's decisions (``console/approvals.py``'s confirm and decide take the same)
DECISION_VERBS = ("approve", "reject")


def cancel_button(task: Any, csrf: str) -> str:
    """The task page's form: a task with no outcome yet can be cancelled (after a confirmation)."""
    if task.outcome is not None or task.status != "running":
        return ""
    return (
        f"<form method='post' action='task/cancel-confirm' id='cancel-form'>{hidden('csrf', csrf)}"
        f"{hidden('id', task.task_id)}<button id='cancel-task'>Cancel this task</button></form>"
    )


def decide_buttons(shown: approvals_view.ApprovalOut, csrf: str) -> str:
    """While pending: approve and reject, each to its confirmation page."""
    if shown.state != "pending":
        return ""
    return "".join(
        f"<form method='post' action='approval/confirm' class='inline' id='{verb}-form'>{hidden('csrf', csrf)}"
        f"{hidden('id', shown.approval_id)}{hidden('decision', verb)}<button id='{verb}'>{verb.title()}</button></form>"
        for verb in DECISION_VERBS
    )


def parked_block(ctx: OpsContext, record: Any, csrf: str) -> Markup:
    """A parked run's page: what it waits for, since when, until when and then what, and the buttons."""
    waiting = getattr(record, "waiting_for", None)
    if getattr(record, "status", None) != "parked" or not waiting:
        return Markup("")
    found = ctx.approvals.approvals.get(waiting)
    if found is None:
        return Markup(f"<p class='note' id='parked'>parked: waiting for approval {h(waiting)} (not found)</p>")
    shown = approvals_view.view(found)
    line = approvals_view.waiting_for(
        shown, parked_at=getattr(record, "parked_at", None), step=getattr(found, "step", None)
    )
    return Markup(
        f"<h2>parked</h2><p class='note' id='parked'>{h(line)}</p><p>"
        + link("/approval", f"approval {shown.approval_id}", id=shown.approval_id)
        + "</p>"
        + decide_buttons(shown, csrf)
    )
