"""The console's sessions and jobs pages: views over the CLI's own reads and renderers.

``/sessions`` is ``sessions list`` (``OperatorStore.sessions``: every config, with or without runs)
and ``sessions show`` / ``sessions history`` for one; ``/jobs`` is ``jobs list`` with each job's
paused state and policy counters, and ``/jobs?id=JOB`` is ``jobs show`` (``JobsService.show``: next
fires, the last runs, skipped and missed fires, and the fires waiting in SchedulerDLQ). Rows come
from :mod:`agentwake_ops.render`'s plain-text row builders, so a page says what the command prints.
"""

from __future__ import annotations

from agentwake_ops.console.html import Markup, facts, h, link, pretty, table
from agentwake_ops.console.pages import Query, one
from agentwake_ops.context import OpsContext
from agentwake_ops.render import (
    JOB_COLUMNS,
    JOB_FIRE_COLUMNS,
    JOB_RUN_COLUMNS,
    SESSION_COLUMNS,
    dead_lettered_fire_row,
    job_facts,
    job_fire_row,
    job_missing,
    job_row,
    job_run_row,
    session_row,
    when,
)


def sessions(ctx: OpsContext, query: Query, csrf: str) -> Markup:
    """Every session config (``sessions list``), or one's config (secrets masked) and history."""
    session_id = one(query, "id")
    parts = [
        "<form class='filters' method='get' action='sessions'>"
        f"<label>session id<input name='id' value='{h(session_id)}'></label><button>Show</button></form>"
    ]
    if not session_id:
        from agentwake.store.operator import OperatorStore

        configs = OperatorStore(ctx.store).sessions()
        rows = [(link("/sessions", c.session_id, id=c.session_id), *session_row(c)[1:]) for c in configs]
        parts.append(f"<h2>{len(configs)} session(s)</h2>")
        parts.append(table(SESSION_COLUMNS, rows, cls="sessions"))
        return Markup("".join(str(p) for p in parts))
    config = ctx.store.records.get_session(session_id)
    if config is None:
        parts.append(f"<p class='note'>No config for session {h(session_id)}.</p>")
    else:
        parts.append("<h2>config (secrets masked)</h2>" + pretty(config.model_dump(mode="json")))
    entries = ctx.store.history.history_window(session_id, 30)
    parts.append("<h2>history (latest 30)</h2>")
    parts.append(
        table(
            ("time", "role", "kind", "run", "content"),
            [(when(e.created_at), e.role, e.kind, e.run_id, e.content) for e in entries],
            cls="history",
        )
    )
    parts.append("<p>" + link("/runs", "runs of this session", session=session_id) + "</p>")
    return Markup("".join(str(p) for p in parts))


def jobs(ctx: OpsContext, query: Query, csrf: str) -> Markup:
    """``jobs list`` with each job's paused state and counters; ``?id=JOB``: ``jobs show``."""
    job_id = one(query, "id")
    if job_id:
        return job(ctx, job_id)
    rows = []
    for j in ctx.jobs.list():
        cells = job_row(j)
        paused_by = link("/run", j.pause_run_id, id=j.pause_run_id) if j.pause_run_id else "-"
        rows.append(
            (
                link("/jobs", j.job_id, id=j.job_id),
                *cells[1:2],
                link("/sessions", j.session_id, id=j.session_id),
                *cells[3:],
                when(j.paused_at),
                paused_by,
                j.consecutive_failures,
                j.skipped_fires,
                j.missed_fires,
            )
        )
    headers = (*JOB_COLUMNS, "paused since", "paused by run", "failures in a row", "skipped fires", "missed fires")
    return Markup(
        f"<p class='muted'>{len(rows)} job(s); click one for its last runs and its skipped and missed fires "
        "(<code>jobs show</code>).</p>" + table(headers, rows, cls="jobs")
    )


def job(ctx: OpsContext, job_id: str) -> Markup:
    """``jobs show JOB``: facts and policies, why paused, next fires, last runs, skipped and missed
    fires, and the job's fires in SchedulerDLQ (listed, none consumed)."""
    from agentwake_ops.commands.jobs import _dead_lettered_fires

    view = ctx.jobs.show(job_id, runs=20)
    parts: list[str] = [facts(job_facts(view))]
    missing = job_missing(view)
    if missing:
        parts.append(f"<p class='note' id='missing'>{h(missing)}</p>")
    parts.append(f"<h2>last {len(view.runs)} run(s)</h2>")
    run_rows = [(link("/run", r.run_id, id=r.run_id), *job_run_row(r)[1:]) for r in view.runs]
    parts.append(table(JOB_RUN_COLUMNS, run_rows, cls="job-runs"))
    for title, cls, fires_ in (("skipped", "skipped-fires", view.skipped), ("missed", "missed-fires", view.missed)):
        parts.append(f"<h2>{len(fires_)} {title} fire(s) (newest first)</h2>")
        parts.append(table(JOB_FIRE_COLUMNS, [job_fire_row(f) for f in fires_], cls=cls))
    dead, note = _dead_lettered_fires(ctx, job_id)
    parts.append(f"<h2>{len(dead)} fire(s) the Scheduler could not deliver (SchedulerDLQ)</h2>")
    if note:
        parts.append(f"<p class='note'>{h(note)}</p>")
    dead_rows = [(*dead_lettered_fire_row(m)[:3], link("/dlq/message", m.short_id, id=m.message_id)) for m in dead]
    parts.append(table(("scheduled time", "run id", "error", "message"), dead_rows, cls="dead-lettered-fires"))
    parts.append("<p>" + link("/runs", "runs of this job's session", session=view.job.session_id) + "</p>")
    return Markup("".join(str(p) for p in parts))
