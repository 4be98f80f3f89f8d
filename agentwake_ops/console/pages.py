"""The console's GET pages. Each reads through the CLI's own read models: the DLQ pipeline
(``agentwake_ops.dlq.select.list_messages`` / ``find_message``: complete scans, joined with runs),
``agentwake_ops.runs`` (run summaries, transcripts, runs by time) and the store's session reads
(the sessions and jobs pages: :mod:`agentwake_ops.console.sessions_jobs`). Nothing here queries
DynamoDB or SQS itself.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agentwake_ops.console.html import Markup, facts, h, hidden, link, pretty, table
from agentwake_ops.context import OpsContext, OpsError
from agentwake_ops.render import age, when

if TYPE_CHECKING:
    from agentwake.store.operator import RunsPage

Query = dict[str, list[str]]
#: DLQ rows per page
PAGE_SIZE = 100


def one(query: Query, name: str, default: str = "") -> str:
    values = query.get(name) or [default]
    return values[0].strip()


def _moment(iso: str | None) -> float | None:
    if not iso:
        return None
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _seconds_back(value: str, option: str) -> float:
    """A duration filter (30m, 6h, 2d) or an ISO time, as seconds back from now (runs list's rule)."""
    from agentwake_ops.commands.runs import _since

    try:
        moment = _moment(_since(value))
    except OpsError as exc:
        raise OpsError(str(exc).replace("--since", option)) from None
    return max(0.0, time.time() - (moment or time.time()))


# --------------------------------------------------------------------------------------------
# the DLQ


def dlq(ctx: OpsContext, query: Query, csrf: str) -> Markup:
    """Every DLQ message (one complete scan per queue, joined), counts, filters, a page of rows."""
    from agentwake_ops.dlq.scan import DLQS
    from agentwake_ops.dlq.select import Selection, list_messages
    from agentwake_ops.sqs_scan import IncompleteScan

    error_type, session, text = one(query, "error_type"), one(query, "session"), one(query, "text")
    older, newer = one(query, "older"), one(query, "newer")
    page_text = one(query, "page", "1")
    page = max(1, int(page_text)) if page_text.isdigit() else 1
    notes = [
        f"the {name} DLQ is unknown here and is not listed" for name, role in DLQS.items() if not ctx.has_queue(role)
    ]
    started = time.monotonic()
    try:
        messages = list_messages(ctx, "all")
    except IncompleteScan as exc:
        return Markup(
            f"<div class='error' id='incomplete'>The DLQ scan could not be completed, so no list is shown "
            f"(a partial list could hide messages): {h(str(exc))}</div>"
        )
    took = time.monotonic() - started
    by_type = Counter(m.error_type or "-" for m in messages)
    by_session = Counter(m.session_id or "-" for m in messages)
    selection = Selection(error_type=error_type or None, session_id=session or None)
    older_s = _seconds_back(older, "older") if older else None
    newer_s = _seconds_back(newer, "newer") if newer else None
    needle = text.lower()

    def keep(m: Any) -> bool:
        if not selection.matches(m):
            return False
        if older_s is not None and (m.age_seconds is None or m.age_seconds < older_s):
            return False
        if newer_s is not None and (m.age_seconds is None or m.age_seconds > newer_s):
            return False
        if needle:
            hay = " ".join(str(x or "") for x in (m.message_id, m.run_id, m.error_type, m.error_detail, m.body))
            return needle in hay.lower()
        return True

    shown_messages = [m for m in messages if keep(m)]
    first = (page - 1) * PAGE_SIZE
    rows_page = shown_messages[first : first + PAGE_SIZE]
    parts: list[str] = [f"<div class='note'>{h(n)}</div>" for n in notes]
    parts.append(
        f"<p class='muted' id='scan-summary'>{len(messages)} message(s) in the DLQs, every one seen once "
        f"(a complete scan, none consumed) in {took:.1f} s.</p>"
    )
    parts.append(_refresh_toggle("/dlq", query))
    parts.append("<div class='counts'>")
    parts.append(
        "<div><h2>by error type</h2>"
        + table(("error type", "messages"), _count_rows(by_type.most_common(), "error_type"), cls="by-error-type")
        + "</div>"
    )
    parts.append(
        "<div><h2>by session</h2>"
        + table(("session", "messages"), _count_rows(by_session.most_common(20), "session"), cls="by-session")
        + "</div></div>"
    )
    parts.append(
        "<form class='filters' method='get' action='dlq'>"
        f"<label>error type<input name='error_type' value='{h(error_type)}'></label>"
        f"<label>session<input name='session' value='{h(session)}'></label>"
        f"<label>in DLQ longer than (30m, 6h, 2d)<input name='older' value='{h(older)}'></label>"
        f"<label>in DLQ less than<input name='newer' value='{h(newer)}'></label>"
        f"<label>text<input name='text' value='{h(text)}'></label>"
        "<button type='submit'>Filter</button></form>"
    )
    last = min(first + PAGE_SIZE, len(shown_messages))
    parts.append(
        f"<p id='shown-count'>{len(shown_messages)} message(s) match; showing {first + 1 if rows_page else 0}–{last}.</p>"
    )
    params = {"error_type": error_type, "session": session, "older": older, "newer": newer, "text": text}
    nav = []
    if page > 1:
        nav.append(link("/dlq", "previous page", **params, page=page - 1))
    if last < len(shown_messages):
        nav.append(link("/dlq", "next page", **params, page=page + 1))
    parts.append("<p>" + " · ".join(nav) + "</p>")
    sources = list(dict.fromkeys(m.in_dlq_since_source or "-" for m in rows_page))
    if len(sources) == 1:
        parts.append(f"<p class='muted' id='age-from'>“in DLQ for” counts from: {h(sources[0])}.</p>")
    elif sources:
        parts.append(
            "<p class='muted' id='age-from'>“in DLQ for” counts from: "
            + "; ".join(f"[{i}] {h(src)}" for i, src in enumerate(sources, 1))
            + ".</p>"
        )
    if rows_page:  # no empty table: the count above says none matched
        parts.append(_message_table(rows_page, sources, csrf))
    parts.append(
        f"<h2>export</h2><form method='post' action='dlq/export'>{hidden('csrf', csrf)}"
        "<label>write every DLQ message as JSON lines to <input name='out' size='50' "
        "placeholder='/path/on/this/machine/dlq.jsonl'></label> <button>Export</button>"
        "<p class='muted'>As <code>agentwake dlq export --out PATH</code>: the file holds task tokens in clear; "
        "nothing is deleted.</p></form>"
    )
    return Markup("".join(parts))


def _message_table(rows_page: list[Any], sources: list[str], csrf: str) -> str:
    """The page's messages, each with its box to tick, and the redrive/delete buttons. The column
    "age from" appears only when the page mixes sources of age (one is said once above)."""
    mixed = len(sources) > 1
    parts: list[str] = []
    parts.append(f"<form method='post' action='dlq/confirm'>{hidden('csrf', csrf)}")
    parts.append(
        "<table id='dlq-messages'><thead><tr><th><input type='checkbox' id='select-all' aria-label='select all'></th>"
        "<th>id</th><th>queue</th><th>run</th><th>session</th><th>attempts</th><th>error type</th>"
        "<th>last reason</th><th>in DLQ for</th>" + ("<th>age from</th>" if mixed else "") + "</tr></thead><tbody>"
    )
    for m in rows_page:
        reason = (m.error_detail or "").splitlines()[0] if m.error_detail else "-"
        run = link("/run", m.run_id, id=m.run_id) if m.run_id else h(None)
        parts.append(
            f"<tr data-message-id='{h(m.message_id)}'><td><input type='checkbox' class='pick' name='id' "
            f"value='{h(m.message_id)}' aria-label='select {h(m.short_id)}'></td>"
            f"<td>{link('/dlq/message', m.short_id, id=m.message_id)}</td><td>{h(m.queue)}</td><td>{run}</td>"
            f"<td>{h(m.session_id)}</td><td>{h(m.attempts)}</td><td class='error-type'>{h(m.error_type)}</td>"
            f"<td class='reason'>{h(reason[:300])}</td><td>{h(age(m.age_seconds))}</td>"
            + (f"<td>[{sources.index(m.in_dlq_since_source or '-') + 1}]</td>" if mixed else "")
            + "</tr>"
        )
    parts.append("</tbody></table>")
    parts.append(
        "<p><button name='action' value='redrive' id='redrive-selected'>Redrive selected "
        "(<span class='picked-count'>0</span>)…</button> "
        "<button name='action' value='delete' id='delete-selected'>Delete selected "
        "(<span class='picked-count'>0</span>)…</button> <span class='muted'>Both ask for confirmation with "
        "the exact count first.</span></p></form>"
    )
    return "".join(parts)


def _count_rows(counts: list[tuple[str, int]], name: str) -> list[tuple[Markup | str, Markup | int]]:
    """Count rows whose label and count link to the DLQ page filtered on it ("-": nothing to filter)."""
    return [
        (link("/dlq", key, **{name: key}), link("/dlq", count, **{name: key})) if key != "-" else (key, count)
        for key, count in counts
    ]


#: seconds between two loads of a page that refreshes itself (``every=N`` in its URL: 5 to 3600)
REFRESH_SECONDS = 30
REFRESH_RANGE = (5, 3600)


def _refresh_every(query: Query) -> int:
    """The page's refresh period: ``every`` when it is a whole number of seconds in range, else 30."""
    given = one(query, "every")
    low, high = REFRESH_RANGE
    return int(given) if given.isdigit() and low <= int(given) <= high else REFRESH_SECONDS


def _refresh_toggle(route: str, query: Query) -> str:
    """The opt-in auto-refresh of a page: ``refresh=1`` in its URL (a link turns it on and off),
    every ``every`` seconds. The reload itself is the script's (console.js), which skips it while a
    form is being filled."""
    params = {k: v[0] for k, v in query.items() if k not in ("refresh", "every") and v}
    seconds = _refresh_every(query)
    if seconds != REFRESH_SECONDS:
        params["every"] = str(seconds)
    if one(query, "refresh") == "1":
        return (
            f"<p class='muted' id='auto-refresh' data-seconds='{seconds}'>This page reloads itself every "
            f"{seconds} s (not while you fill a form or tick a message). "
            + link(route, "stop refreshing", **params)
            + "</p>"
        )
    return (
        "<p class='muted' id='auto-refresh-off'>"
        + link(route, f"refresh this page every {seconds} s", **params, refresh="1")
        + "</p>"
    )


def message(ctx: OpsContext, query: Query, csrf: str) -> Markup:
    """One DLQ message in full (``dlq show``): body masked, every attempt, deliveries, its run."""
    from agentwake_ops.dlq.select import find_message

    message_id = one(query, "id")
    if not message_id:
        raise OpsError("say which message: /dlq/message?id=ID")
    msg = find_message(ctx, message_id)
    data = msg.full()
    rows = [
        ("message id", msg.message_id),
        ("queue", msg.queue),
        ("kind", msg.kind),
        ("run", link("/run", msg.run_id, id=msg.run_id) if msg.run_id else None),
        ("run status", msg.run_status),
        ("session", msg.session_id),
        ("task / job", msg.task_id or msg.job_id),
        ("attempts", msg.attempts),
        ("in the DLQ since", f"{when(msg.in_dlq_since)} ({age(msg.age_seconds)} ago; from {msg.in_dlq_since_source})"),
        ("last error", f"{msg.error_type}: {msg.error_detail}" if msg.error_type else msg.error_detail),
        ("error from", msg.error_source),
    ]
    parts = [str(facts(rows))]
    parts.append(
        f"<form method='post' action='dlq/confirm'>{hidden('csrf', csrf)}{hidden('id', msg.message_id)}"
        "<button name='action' value='redrive'>Redrive this message…</button> "
        "<button name='action' value='delete'>Delete this message…</button></form>"
    )
    parts.append("<h2>body (task token masked)</h2>" + pretty(data.get("body_json") or data.get("body")))
    parts.append("<h2>message attributes</h2>" + pretty(data.get("message_attributes") or {}))
    if msg.summary is not None:
        parts.append(_attempts_and_deliveries(msg.summary))
        parts.append(in_doubt_section(msg.summary.in_doubt, actions=settle_buttons(msg.message_id, csrf)))
    return Markup("".join(parts))


@dataclass
class FailureGroup:
    """Failed attempts that failed the same way (type, reason, provider errors): shown once."""

    failures: list[Any]

    @property
    def first(self) -> Any:
        return self.failures[0]

    @property
    def attempts(self) -> str:
        """The attempts it covers: ``1–5``, or ``1, 3`` when others came between."""
        numbers = [f.attempt for f in self.failures]
        if len(numbers) > 1 and numbers == list(range(numbers[0], numbers[0] + len(numbers))):
            return f"{numbers[0]}–{numbers[-1]}"
        return ", ".join(str(n) for n in numbers)

    @property
    def steps_done(self) -> str:
        done = sorted({f.steps_done for f in self.failures})
        return str(done[0]) if len(done) == 1 else f"{done[0]}–{done[-1]}"

    def provider_errors(self) -> str:
        return "; ".join(f"{k}: {v}" for k, v in self.first.provider_errors.items())


def failure_groups(failures: list[Any]) -> list[FailureGroup]:
    """The run's failed attempts grouped by how they failed, in the order each way first happened."""
    groups: dict[tuple[Any, ...], FailureGroup] = {}
    for f in failures:
        key = (f.error_type, (f.detail or "").strip(), tuple(sorted(f.provider_errors.items())))
        groups.setdefault(key, FailureGroup([])).failures.append(f)
    return list(groups.values())


def _failure_title(group: FailureGroup) -> str:
    if len(group.failures) == 1:
        return f"attempt {group.first.attempt} failed: {group.first.error_type}"
    return f"attempts {group.attempts} failed the same way ×{len(group.failures)}: {group.first.error_type}"


def _last_error(record: Any, groups: list[FailureGroup]) -> str | None:
    """The run's last error, or, when it is a failure shown below, a pointer to it (not its text again)."""
    if not record.last_error:
        return None
    for group in groups:
        if record.last_error_type == group.first.error_type and record.last_error.strip() == group.first.detail.strip():
            return f"{record.last_error_type}: the failure of attempt(s) {group.attempts}, below"
    return f"{record.last_error_type}: {record.last_error}"


def _timeline(summary: Any, groups: list[FailureGroup]) -> list[Any]:
    """The run's transcript with each distinct failure once (at its first time), not once per attempt."""
    from agentwake_ops.runs import TranscriptEntry, transcript

    entries = transcript(replace(summary, failures=[]))
    outcome = [e for e in entries if e.kind == "outcome"]
    rest = [e for e in entries if e.kind != "outcome"]
    for group in groups:
        lines = [group.first.detail]
        lines += [f"provider {pid}: {err}" for pid, err in group.first.provider_errors.items()]
        if len(group.failures) > 1:
            lines.append(f"last at {when(group.failures[-1].at)}")
        lines.append(f"steps done before it failed: {group.steps_done}")
        rest.append(TranscriptEntry("failure", group.first.at, _failure_title(group), lines))
    rest.sort(key=lambda e: e.at or "")
    return rest + outcome


def _attempts_and_deliveries(summary: Any) -> str:
    groups = failure_groups(summary.failures)
    distinct = f"; {len(groups)} distinct" if len(groups) != len(summary.failures) else ""
    parts = [
        f"<h2>failed attempts ({len(summary.failures)}{distinct})</h2>",
        table(
            ("attempts", "times", "first", "last", "error type", "reason", "provider errors"),
            [
                (
                    g.attempts,
                    f"×{len(g.failures)}",
                    when(g.first.at),
                    when(g.failures[-1].at),
                    g.first.error_type,
                    g.first.detail,
                    g.provider_errors(),
                )
                for g in groups
            ],
            cls="attempts",
            empty="no failed attempt",
        ),
        f"<h2>deliveries the user already received ({len(summary.deliveries)})</h2>",
        table(
            ("delivery id", "time", "text", "the user already received"),
            [
                (d["delivery_id"], when(d.get("at")), d["text"], "\n".join(d.get("received") or ()) or "-")
                for d in summary.deliveries
            ],
            cls="deliveries",
            empty="none",
        ),
    ]
    return "".join(str(p) for p in parts)


def in_doubt_section(in_doubt: list[dict[str, Any]], *, note: str = "", actions: Any = None) -> str:
    """The run's sends in doubt ("sent? unknown"): channel, where, when, the text's start, what to do;
    ``actions(intent)``: the buttons of a row (the DLQ message page's settle forms)."""
    from agentwake_ops.runs import IN_DOUBT_HINT, in_doubt_line
    from agentwake_ops.terminal import first_line

    if not in_doubt:
        return ""
    headers = ("delivery id", "sent", "channel", "time", "text (start)") + (("settle",) if actions else ())
    rows = [
        (i["delivery_id"], "unknown", in_doubt_line(i), when(i.get("at")), first_line(i["text"], 100))
        + ((actions(i),) if actions else ())
        for i in in_doubt
    ]
    said = f" — {note}" if note else ""
    return (
        f"<h2 id='in-doubt-title'>sent? unknown ({len(in_doubt)}){h(said)}</h2>"
        + str(table(headers, rows, cls="in-doubt"))
        + f"<p class='note' id='in-doubt-hint'>{h(IN_DOUBT_HINT[0].upper() + IN_DOUBT_HINT[1:])}.</p>"
    )


def settle_buttons(message_id: str, csrf: str) -> Any:
    """A send in doubt's two answers on the DLQ message page, each confirmed on the next page."""

    def buttons(intent: dict[str, Any]) -> Markup:
        return Markup(
            f"<form method='post' action='dlq/settle-confirm'>{hidden('csrf', csrf)}{hidden('id', message_id)}"
            f"{hidden('delivery', intent['delivery_id'])}"
            "<button name='how' value='delivered' class='settle-delivered'>The user has it: mark delivered…</button> "
            "<button name='how' value='resend' class='settle-resend'>Not in the chat: resend…</button></form>"
        )

    return buttons


# --------------------------------------------------------------------------------------------
# a run


def _delta(previous: float | None, current: float | None) -> str:
    if previous is None or current is None:
        return ""
    seconds = current - previous
    return f"+{seconds:.3f} s" if seconds < 120 else f"+{age(seconds)}"


def run(ctx: OpsContext, query: Query, csrf: str) -> Markup:
    """A run's facts, its replay form, model calls by provider, and its timeline in order (each distinct
    failure once, with the attempts it covers)."""
    from agentwake_ops.runs import run_summary

    run_id = one(query, "id")
    if not run_id:
        raise OpsError("say which run: /run?id=RUN_ID")
    summary = run_summary(ctx.store, run_id, with_note=True)
    if summary.empty:
        raise OpsError(f"no run {run_id!r} in the store")
    record = summary.run
    groups = failure_groups(summary.failures)
    parts: list[str] = []
    if record is not None:
        from agentwake_ops.console.links import run_link_rows, started_sections
        from agentwake_ops.tree import run_links

        links = run_links(ctx.store, record)
        parts.append(
            facts(
                [
                    ("run id", record.run_id),
                    ("kind", record.kind),
                    ("session", link("/sessions", record.session_id, id=record.session_id)),
                    ("status", record.status),
                    ("attempts", record.attempts),
                    ("steps", record.steps),
                    ("started", when(record.started_at)),
                    ("ended", when(record.ended_at)),
                    ("last error", _last_error(record, groups)),
                    *run_link_rows(links),
                ]
            )
        )
        from agentwake_ops.console.links import parked_block

        parts.append(parked_block(ctx, record, csrf))
        parts.append(_replay_form(ctx, record, csrf))
        parts.append(started_sections(links))
        parts.append("<p>" + link("/tree", "this session's runs as a tree", session=record.session_id) + "</p>")
        usage = record.usage or {}
        providers = usage.get("by_provider") or {}
        if providers:
            rows = [
                (
                    pid,
                    row.get("model"),
                    row.get("calls", 0),
                    row.get("input_tokens", 0),
                    row.get("output_tokens", 0),
                    f"{row.get('latency_ms', 0)} ms",
                    _cost(row.get("estimated_cost_usd")),
                )
                for pid, row in providers.items()
            ]
            parts.append("<h2>model calls by provider</h2>")
            parts.append(
                table(
                    ("provider", "model", "calls", "input tokens", "output tokens", "latency", "estimated cost"), rows
                )
            )
    parts.append(in_doubt_section(summary.in_doubt, note="redrive its DLQ message with the user's answer"))
    parts.append("<h2>timeline</h2>")
    entries = _timeline(summary, groups)
    rows_t, classes, previous = [], [], None
    for entry in entries:
        moment = _moment(entry.at)
        rows_t.append((when(entry.at), _delta(previous, moment), entry.kind, entry.title, "\n".join(entry.lines)))
        classes.append(f"kind-{entry.kind}")
        previous = moment if moment is not None else previous
    parts.append(
        table(("time", "since previous", "kind", "what", "details"), rows_t, cls="timeline", row_classes=classes)
    )
    # no attempts/deliveries tables here: the timeline shows each distinct failure and every delivery
    # once (the message page has the tables)
    return Markup("".join(str(p) for p in parts))


def task(ctx: OpsContext, query: Query, csrf: str) -> Markup:
    """``tasks show``: a task linked to the run that started it and the runs it caused."""
    from agentwake_ops.console.links import cancel_button, task_page

    task_id = one(query, "id")
    if not task_id:
        raise OpsError("say which task: /task?id=TASK_ID")
    page = task_page(ctx, task_id)
    record = ctx.store.records.get_task(task_id)
    return Markup(page + Markup(cancel_button(record, csrf))) if record is not None else page


def tree(ctx: OpsContext, query: Query, csrf: str) -> Markup:
    """``runs list --session S --tree``: a session's latest runs as a tree (``limit``: 1-1000, 50 by default)."""
    from agentwake_ops.console.links import tree_page

    session = one(query, "session")
    if not session:
        raise OpsError("say which session: /tree?session=SESSION")
    raw = one(query, "limit", "50")
    if not raw.isdigit() or not 1 <= int(raw) <= 1000:
        raise OpsError(f"limit must be a whole number from 1 to 1000, got {raw!r}")
    return tree_page(ctx, session, int(raw))


def _cost(value: Any) -> str:
    return "-" if value is None else f"${float(value):.6f}"


def _replay_form(ctx: OpsContext, record: Any, csrf: str) -> str:
    session = ctx.store.records.get_session(record.session_id)
    providers = json.dumps(session.providers, indent=2) if session is not None else "[]"
    return (
        "<h2>replay with a fix (nothing is written, nothing delivered, no side-effecting tool called)</h2>"
        f"<form method='post' action='run/replay' id='replay-form'>{hidden('csrf', csrf)}{hidden('id', record.run_id)}"
        f"<label>provider chain (JSON list; the session's now)<textarea name='providers' rows='6'>{h(providers)}"
        "</textarea></label>"
        f"<label>max steps <input name='max_steps' size='4' value='{h(session.max_steps if session else '')}'></label> "
        "<label>persona <input name='persona' size='60' placeholder='(unchanged)'></label> "
        "<button id='replay'>Replay</button></form>"
    )


# --------------------------------------------------------------------------------------------
# runs (sessions and jobs: sessions_jobs.py)


def runs_note(page: RunsPage) -> Markup | None:
    """What a page of runs searched and missed (``runs_page_note``), in the console's words (its
    query's ``since``, ``scan=1``), as a note; None when there is nothing to say."""
    from agentwake_ops.runs import runs_page_note

    note = runs_page_note(page)
    if not note:
        return None
    for flag, words in (
        ("--session and --scan list", "the runs page's session=ID and scan=1 list"),
        ("--scan lists", "the runs page's scan=1 lists"),
        ("runs show RUN_ID reads", "the run page, /run?id=RUN_ID, reads"),
        ("--since WHEN", "since"),
        ("--scan", "scan=1"),
        ("--session", "session=ID"),
    ):
        note = note.replace(flag, words)
    return Markup(f"<p class='note'>{h(note)}</p>")


def runs(ctx: OpsContext, query: Query, csrf: str) -> Markup:
    """``runs list``: by session (gsi3) or by time (gsi4), newest first, a page at a time."""
    from agentwake_ops.commands.runs import RUN_STATUSES, _since
    from agentwake_ops.runs import list_runs

    session, status, since, before = (one(query, n) for n in ("session", "status", "since", "before"))
    if status and status not in RUN_STATUSES:
        raise OpsError(f"status must be one of {', '.join(RUN_STATUSES)}, got {status!r}")
    page = list_runs(
        ctx.store,
        session_id=session or None,
        status=status or None,
        since=_since(since) if since else None,
        before=before or None,
        limit=50,
        scan=one(query, "scan") == "1",
    )
    rows = [
        (
            link("/run", r.run_id, id=r.run_id),
            r.session_id,
            r.status,
            r.attempts,
            r.steps,
            when(r.started_at),
            when(r.ended_at),
            f"{r.last_error_type}: {(r.last_error or '').splitlines()[0] if r.last_error else ''}"
            if r.last_error_type
            else "-",
        )
        for r in page.runs
    ]
    parts = [
        _refresh_toggle("/runs", query),
        "<form class='filters' method='get' action='runs'>"
        f"<label>session<input name='session' value='{h(session)}'></label>"
        f"<label>status (running, succeeded, failed)<input name='status' value='{h(status)}'></label>"
        f"<label>since (6h, 2d, ISO)<input name='since' value='{h(since)}'></label>"
        "<button>Filter</button></form>",
        table(
            ("run", "session", "status", "attempts", "steps", "started", "ended", "last error"),
            rows,
            cls="runs",
            empty="no run matches",
        ),
    ]
    if session:
        parts.append("<p>" + link("/tree", "this session's runs as a tree", session=session) + "</p>")
    note = runs_note(page)
    if note:
        parts.append(note)
    if page.next_before:
        parts.append(
            "<p>"
            + link("/runs", "older runs", session=session, status=status, since=since, before=page.next_before)
            + "</p>"
        )
    return Markup("".join(str(p) for p in parts))
