"""How the CLI prints: JSON on stdout, tables and ``show`` blocks for a person (rich, loaded on use).

Every command group renders through this module (and none imports another group's module). Every
text shown passes the redactor (JSON) or is escaped for rich markup (tables and panels), and is
made inert for a terminal: ``agentwake_ops.terminal.inert`` writes C0/C1 control characters (but
newline and tab) out as ``\\xNN``, so ESC/CSI/OSC bytes from a DLQ body, an attribute or a
provider error print as text instead of clearing the screen or faking a line. JSON is written with ASCII escapes
(``"\\u001b"``), so no control byte reaches the terminal there either.

Task tokens are never shown: ``terminal.masked`` replaces every field named in :data:`SECRET_FIELDS`
(in structures and in JSON bodies) and anything shaped like a task token in text; ``dlq show``,
``dlq list``, ``runs list/show`` and transcripts print through it (``dlq export`` does not: its
file is for re-sending, byte-exact, and says so in its header).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import typer

from agentwake.trust.redact import redact
from agentwake_ops.terminal import SECRET_FIELDS, first_line, inert, masked, shown

if TYPE_CHECKING:
    from rich.console import Console
    from rich.panel import Panel

    from agentwake.domain.models import SessionConfig
    from agentwake_ops.dlq.act import DeleteReport, ExportReport, RedriveReport
    from agentwake_ops.dlq.describe import DlqMessage
    from agentwake_ops.replay import Verdict
    from agentwake_ops.runs import RunSummary, TranscriptEntry
    from agentwake_ops.tree import JobLinks, RunLinks, TaskLinks, TreeNode


# --------------------------------------------------------------------------------------------
# primitives


def console() -> Console:
    # created per call: it binds to the sys.stdout of the moment (CliRunner swaps it)
    from rich.console import Console

    return Console(highlight=False, soft_wrap=False)


def err_console() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def escape(text: Any) -> str:
    """Text for rich markup (a table cell, a panel): :func:`shown` (tokens masked, inert), then
    markup escaped."""
    from rich.markup import escape as rich_escape

    return rich_escape(shown(text))


def print_json(data: Any) -> None:
    """JSON on stdout, through the redactor like every CLI output (no bearer token or auth header),
    ASCII-escaped: a control character in a value is ``\\u001b`` text, never a byte a terminal acts on."""
    typer.echo(inert(redact(json.dumps(data, indent=2, sort_keys=True, default=str, ensure_ascii=True))))


def age(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600}h"


def when(iso: str | None) -> str:
    """An ISO time as ``YYYY-MM-DD HH:MM:SS`` (UTC), or ``-``."""
    if not iso:
        return "-"
    try:
        moment = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return iso
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def dash(value: Any) -> str:
    return "-" if value in (None, "") else str(value)


def facts_panel(rows: Iterable[tuple[str, Any]], title: str) -> Panel:
    """A bold-label / value grid in a panel: how `runs show`, `dlq show` and `sessions show` print
    one record. Values are escaped; None shows as a dash."""
    from rich.panel import Panel
    from rich.table import Table

    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    for label, value in rows:
        grid.add_row(label, escape(dash(value)))
    return Panel(grid, title=title, expand=False)


def _table(title: str, columns: Iterable[str], *, fold: bool = True, **options: Any) -> Any:
    """A table whose long cells fold onto more lines (``fold``) rather than end in an ellipsis."""
    from rich.table import Table

    table = Table(title=title, **options)
    for column in columns:
        # a header wraps between its words, never inside one (``fit`` drops columns to keep that)
        shortest = _header_width(column)
        if fold:
            table.add_column(column, overflow="fold", min_width=shortest)
        else:
            table.add_column(column, min_width=shortest)
    return table


def _header_width(header: str) -> int:
    return max((len(word) for word in header.split()), default=1)


#: a column narrower than this many characters (or its header's longest word) is not worth showing
_NARROWEST = 10


def fit(
    table: Any,
    out: Console,
    drop: Iterable[str],
    *,
    whole: Iterable[str] = (),
    minimum: dict[str, int] | None = None,
) -> list[str]:
    """Make ``table`` fit ``out.width``: drop columns in the order ``drop`` names them until each
    column left gets at least its floor, then give the columns fixed widths, sharing what is left
    so that the columns needing least get all they need first. Headers then wrap between words,
    never inside one; long cells fold. Returns the headers dropped, in that order.

    A column's floor is its header's longest word and up to 10 characters of its cells (up to
    ``minimum[header]`` for a text worth reading, e.g. history's content); a column of ``whole``
    (an id a person copies) gets its widest cell and never folds.

    A table is its columns plus 3 characters of border and padding each, and 1 more."""
    keep = set(whole)
    least = minimum or {}

    def floor(column: Any) -> int:
        if column.header in keep:
            return _natural(out, column)
        narrowest = least.get(str(column.header), _NARROWEST)
        return max(_header_width(str(column.header)), min(_natural(out, column), narrowest))

    def needed(widths: Iterable[int]) -> int:
        return sum(w + 3 for w in widths) + 1

    for column in table.columns:
        if column.header in keep:
            column.no_wrap = True
    if natural_width(table, out) <= out.width:
        return []
    dropped: list[str] = []
    for header in drop:
        if needed(floor(c) for c in table.columns) <= out.width:
            break
        for index, column in enumerate(table.columns):
            if column.header == header:
                del table.columns[index]
                dropped.append(header)
                break
    floors = [floor(c) for c in table.columns]
    wants = [max(0, _natural(out, c) - f) for c, f in zip(table.columns, floors, strict=True)]
    room = max(0, out.width - needed(floors))
    # the room left, shared fairly: the columns that want least get all they want first, the
    # widest (a detail, an error text) what remains
    extra = [0] * len(wants)
    order = sorted(range(len(wants)), key=lambda i: wants[i])
    for left, index in enumerate(order):
        extra[index] = min(wants[index], room // (len(order) - left))
        room -= extra[index]
    for column, low, more in zip(table.columns, floors, extra, strict=True):
        column.width = low + more
    return dropped


def _natural(out: Console, column: Any) -> int:
    """A column's width with every cell on one line."""
    from rich.measure import Measurement

    return max(Measurement.get(out, out.options, cell).maximum for cell in [column.header, *column.cells])


def natural_width(table: Any, out: Console) -> int:
    """The width ``table`` takes with no cell folded."""
    return sum(_natural(out, c) + 3 for c in table.columns) + 1


def print_table(
    table: Any,
    drop: Iterable[str] = (),
    *,
    whole: Iterable[str] = (),
    minimum: dict[str, int] | None = None,
    wide: bool = False,
) -> None:
    """Print ``table`` in the console's width (80 in a pipe, unless COLUMNS says otherwise): the
    columns of ``drop`` go first, in that order, and a line says which went and where to see them;
    ids (``whole``) stay on one line. ``wide`` (``--wide``): every column, no cell folded, however
    wide that is."""
    out = console()
    if wide:
        from rich.console import Console

        out = Console(highlight=False, soft_wrap=False, width=max(out.width, natural_width(table, out)))
        out.print(table)
        return
    dropped = fit(table, out, drop, whole=whole, minimum=minimum)
    out.print(table)
    if dropped:
        out.print(
            f"Not shown at {out.width} columns: {', '.join(dropped)} (a wider terminal, --wide or --json shows them)",
            style="dim",
        )


def _first_line(text: str | None, limit: int = 200) -> str:
    from agentwake_ops.dlq.describe import first_line

    return first_line(text, limit)


# --------------------------------------------------------------------------------------------
# runs and history


def runs_table(
    runs: list[Any], next_before: str | None, *, filtered: bool, note: str | None = None, wide: bool = False
) -> None:
    out = console()
    if not runs:
        out.print("No runs" + (" match the filters." if filtered else "."))
        if note:
            out.print(escape(note), style="dim")
        return
    table = _table(
        f"{len(runs)} run(s), newest first",
        ("run id", "session", "status", "attempts", "steps", "started", "ended", "last error"),
    )
    for r in runs:
        table.add_row(
            escape(r.run_id),
            escape(r.session_id),
            escape(r.status),
            str(r.attempts),
            str(r.steps),
            when(r.started_at),
            when(r.ended_at),
            escape(
                f"{r.last_error_type}: {(r.last_error or '').splitlines()[0] if r.last_error else ''}"
                if r.last_error_type
                else "-"
            ),
        )
    print_table(table, drop=("ended", "steps", "attempts", "last error", "session"), whole=("run id",), wide=wide)
    if next_before:
        out.print(f"More: add --before '{escape(next_before)}'", style="dim")
    if note:
        out.print(escape(note), style="dim")
    out.print("Show one: agentwake runs show RUN_ID --transcript", style="dim")


def run_show(
    summary: RunSummary,
    entries: list[TranscriptEntry] | None,
    links: RunLinks | None = None,
    *,
    parked: str | None = None,
) -> None:
    """The run's facts (and its place in the tree: ``links``), what a parked run waits for (``parked``:
    ``approvals_view.waiting_for``), the tasks and wakes it started, then its transcript (``entries``)
    or its failures, steps and deliveries."""
    out = console()
    run = summary.run
    if run is not None:
        rows = (
            ("run id", run.run_id),
            ("kind", run.kind),
            ("session", run.session_id),
            ("status", run.status),
            ("attempts", run.attempts),
            ("steps", run.steps),
            ("tokens", _tokens(run.usage)),
            ("started", when(run.started_at)),
            ("ended", when(run.ended_at)),
            *((("waited", _waited(run.waited_s, run.idle_before_s)),) if run.waited_s is not None else ()),
            ("last error", f"{dash(run.last_error_type)}: {dash(run.last_error)}" if run.last_error else "-"),
            *(run_link_facts(links) if links is not None else ()),
        )
        out.print(facts_panel(rows, "run"))
    if parked:
        from rich.text import Text

        out.print(Text(shown(parked), style="yellow"))
    if links is not None:
        started_tables(links)
    if entries is not None:
        from rich.text import Text

        out.print("transcript", style="bold")
        for entry in entries:
            style = {
                "failure": "red",
                "outcome": "bold",
                "delivery": "green",
                "in-doubt": "yellow",
                "approval": "yellow",
            }.get(entry.kind, "")
            out.print(Text(shown(f"[{when(entry.at)}] {entry.title}"), style=style))
            for line in entry.lines:
                for part in shown(line).splitlines() or [""]:
                    out.print(Text(f"    {part}"))
        return
    summary_tables(summary)


def _waited(waited_s: float | None, idle_s: float | None) -> str:
    """How long a run waited for its busy session, and how it got it."""
    how = "on its own retry" if idle_s is None else f"handed over {idle_s:.2f} s after the release"
    return f"{waited_s or 0:.1f} s for its session; {how}"


def _tokens(usage: dict[str, Any] | None) -> str | None:
    if not usage or not usage.get("model_calls"):
        return None
    text = f"{usage['input_tokens']} in / {usage['output_tokens']} out over {usage['model_calls']} model calls"
    if usage.get("estimated_cost_usd") is not None:
        text += f", estimated ${usage['estimated_cost_usd']:.6f}"
    return text


def summary_tables(summary: RunSummary) -> None:
    """A run's model calls, failed attempts, journaled steps and deliveries (``runs show``, ``dlq show``)."""
    usage_table(summary)
    out = console()
    if summary.failures:
        table = _table(
            f"failed attempts ({len(summary.failures)})",
            ("attempt", "time", "error type", "detail", "provider errors"),
            title_justify="left",
            show_lines=True,
        )
        for f in summary.failures:
            providers = "\n".join(f"{pid}: {err}" for pid, err in f.provider_errors.items()) or "-"
            table.add_row(str(f.attempt), when(f.at), escape(f.error_type), escape(f.detail), escape(providers))
        out.print(table)
    else:
        out.print("No failed attempt is recorded.")
    if summary.steps:
        table = _table(
            f"steps journaled ({len(summary.steps)})", ("step", "attempt", "time", "what"), title_justify="left"
        )
        sent = {d["delivery_id"]: d["text"] for d in summary.deliveries}
        for step in summary.steps:
            table.add_row(
                escape(step["key"]), dash(step_attempt(step)), when(step.get("at")), escape(_step_summary(step, sent))
            )
        out.print(table)
    else:
        out.print("No step is journaled: a redrive starts this run from its first step.")
    final_answer(summary)
    if summary.deliveries:
        table = _table(
            f"deliveries already made ({len(summary.deliveries)}) — a redrive does not send them again",
            ("delivery id", "time", "text", "the user already received"),
            title_justify="left",
        )
        for d in summary.deliveries:
            got = "\n".join(d.get("received") or ()) or "- (no receipt kept)"
            table.add_row(escape(d["delivery_id"]), when(d.get("at")), escape(d["text"]), escape(got))
        out.print(table)
    else:
        out.print("No message was delivered to the user by this run.")
    in_doubt_table(summary)


def final_answer(summary: RunSummary) -> None:
    """A succeeded run's final answer from its note, when its last reply is not journaled."""
    from rich.text import Text

    from agentwake_ops.runs import final_answer_entry

    entry = final_answer_entry(summary)
    if entry is None:
        return
    out = console()
    out.print(Text(shown(entry.title), style="bold"))
    for line in entry.lines:
        for part in shown(line).splitlines() or [""]:
            out.print(Text(f"    {part}"))


def in_doubt_table(summary: RunSummary) -> None:
    """The run's sends in doubt ("sent? unknown"): what went where and when, and what to do."""
    from agentwake_ops.runs import IN_DOUBT_HINT, in_doubt_line

    if not summary.in_doubt:
        return
    table = _table(
        f"sent? unknown ({len(summary.in_doubt)}) — a crash came between the request and its receipt",
        ("delivery id", "sent", "channel", "time", "text (start)"),
        title_justify="left",
        title_style="yellow",
    )
    for i in summary.in_doubt:
        table.add_row(
            escape(i["delivery_id"]),
            "unknown",
            escape(in_doubt_line(i)),
            when(i.get("at")),
            escape(_first_line(i["text"], 100)),
        )
    out = console()
    out.print(table)
    out.print(escape(IN_DOUBT_HINT[0].upper() + IN_DOUBT_HINT[1:] + "."), style="yellow")


def usage_table(summary: RunSummary) -> None:
    """Tokens, latency and estimated cost of the run's model calls, per provider."""
    usage = (summary.run.usage if summary.run is not None else None) or {}
    providers = usage.get("by_provider") or {}
    if not providers:
        return
    table = _table(
        "model calls by provider",
        ("provider", "model", "calls", "input tokens", "output tokens", "latency", "estimated cost"),
        title_justify="left",
    )

    def cost(value: Any) -> str:
        return "-" if value is None else f"${value:.6f}"

    for pid, row in providers.items():
        table.add_row(
            escape(pid),
            escape(dash(row.get("model"))),
            str(row.get("calls", 0)),
            str(row.get("input_tokens", 0)),
            str(row.get("output_tokens", 0)),
            f"{row.get('latency_ms', 0)} ms",
            cost(row.get("estimated_cost_usd")),
        )
    table.add_row(
        "total",
        "",
        str(usage.get("model_calls", 0)),
        str(usage.get("input_tokens", 0)),
        str(usage.get("output_tokens", 0)),
        f"{usage.get('latency_ms', 0)} ms",
        cost(usage.get("estimated_cost_usd")),
    )
    console().print(table)


def step_attempt(step: dict[str, Any]) -> int | None:
    """The run's attempt that journaled ``step`` (None for a step journaled before it was recorded)."""
    from agentwake.domain.steps import STEP_ATTEMPT

    value = step.get(STEP_ATTEMPT)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def sent_texts(step: dict[str, Any], sent: dict[str, str]) -> list[str]:
    """What a step delivered to the user (a tool step's deliveries, or deliver_final's answer),
    each text bounded to one line and redacted."""
    from agentwake.trust.redact import redact

    ids = step.get("deliveries") or ([step["delivery_id"]] if step.get("delivery_id") else [])
    return [
        f'"{_first_line(redact(sent[d]), 100)}" ({d})' if d in sent else f"delivery {d}" for d in (str(x) for x in ids)
    ]


def _step_summary(step: dict[str, Any], sent: dict[str, str]) -> str:
    """One journaled step in a line: a reply's text and calls, or a tool's result (for a step that
    delivered, what was sent), and the model call's tokens."""
    text = _first_line(str(step.get("text") or step.get("content") or ""), 120)
    if step.get("tool"):
        delivered = sent_texts(step, sent)
        why = f"not sent: {step['not_delivered']}" if step.get("not_delivered") else "-"
        parts = [f"tool {step['tool']} -> " + ("sent " + "; ".join(delivered) if delivered else text or why)]
    else:
        parts = [text] if text else []
    calls = step.get("tool_calls") or []
    if calls:
        names = ", ".join(str(c.get("name")) for c in calls if isinstance(c, dict))
        parts.append(f"calls {names}")
    usage = step.get("usage")
    if isinstance(usage, dict):
        parts.append(
            f"[{step.get('provider_id') or '?'}: {usage.get('input_tokens', 0)} in / "
            f"{usage.get('output_tokens', 0)} out tokens, {usage.get('latency_ms', 0)} ms{_provider_try(usage)}]"
        )
    return " ".join(parts) or "-"


def _provider_try(usage: dict[str, Any]) -> str:
    """Which try on the provider answered, when it was not the first (the chain's own retries;
    the run's attempt is the ``attempt`` column)."""
    tried = usage.get("attempt")
    return f", try {tried} on this provider" if isinstance(tried, int) and tried > 1 else ""


def history_table(session: str, entries: list[Any], *, wide: bool = False) -> None:
    out = console()
    if not entries:
        out.print(f"No history for session {escape(session)} yet.")
        return
    table = _table(
        f"last {len(entries)} entries of {escape(session)}",
        ("time", "role", "kind", "run id", "content"),
        show_lines=True,
    )
    for e in entries:
        table.add_row(when(e.created_at), escape(e.role), escape(e.kind), escape(dash(e.run_id)), escape(e.content))
    # the content is what a person reads: at least 40 characters of it a line
    print_table(table, drop=("run id", "kind"), minimum={"content": 40}, wide=wide)


# --------------------------------------------------------------------------------------------
# jobs and sessions


def job_dict(job: Any) -> dict[str, Any]:
    """A job as ``--json`` prints it: the record (whose ``status`` is its last run's), the job's
    status in words (``state``) and its next fire times."""
    from agentwake.jobs.service import next_fire_times
    from agentwake.jobs.views import job_state

    return {
        **job.model_dump(mode="json"),
        "state": job_state(job),
        "next_fire_times": [t.isoformat() for t in next_fire_times(job)],
    }


def fires(job: Any, count: int = 3) -> str:
    """The job's next ``count`` fire times in its time zone, or a dash."""
    from agentwake.jobs.service import next_fire_times

    times = next_fire_times(job, count)
    if not times:
        return "-"
    return ", ".join(t.strftime("%Y-%m-%d %H:%M %Z") for t in times)


def next_fires_line(job: Any) -> str:
    """``Next fire times: 2026-12-02 16:52 UTC, …``: the zone said once (its name too, when the
    times' abbreviation is not it: ``(Europe/Berlin): … 08:00 CET``)."""
    times = fires(job)
    zone = "" if job.timezone == "UTC" else f" ({job.timezone})"
    return f"Next fire times{zone}: {times}"


#: the columns of ``jobs list`` (the console's jobs page adds each job's pause and fire counters)
JOB_COLUMNS = (
    "job id",
    "name",
    "session",
    "schedule",
    "next fire",
    "status",
    "enabled",
    "last run",
    "last error",
    "origin",
    "note",
)


def job_row(job: Any) -> tuple[str, ...]:
    """A job as :data:`JOB_COLUMNS` (plain text; its status says whether it is active or paused and what its last run did)."""
    return (
        job.job_id,
        job.name,
        job.session_id,
        f"{job.schedule_expression} {job.timezone}",
        fires(job, 1),
        job_status(job),
        "yes" if job.enabled else "no",
        when(job.last_run_at),
        (job.last_error or "-").splitlines()[0] if job.last_error else "-",
        job_origin(job),
        _cut(job.note.splitlines()[0], 60) if job.note else "-",
    )


def job_origin(job: Any) -> str:
    """Who created the job: ``operator``, ``api``, or ``agent (call RUN#STEP#CALL)`` for a wake an
    agent scheduled for itself (the call names the run that made it)."""
    if job.origin == "agent":
        return f"agent (call {job.created_by_call or job.created_by_run or '?'})"
    return str(job.origin)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def jobs_table(jobs: list[Any], *, wide: bool = False) -> None:
    out = console()
    if not jobs:
        out.print("No jobs.")
        return
    table = _table(f"{len(jobs)} job(s)", JOB_COLUMNS)
    for j in jobs:
        table.add_row(*(escape(cell) for cell in job_row(j)))
    # whether a job fires, and when next, are what a person acts on: they stay
    print_table(
        table,
        drop=("note", "origin", "last error", "last run", "session", "schedule", "name"),
        whole=("job id",),
        wide=wide,
    )


def job_status(job: Any) -> str:
    """The job's status in words: active / paused (why) / done, and what its last run did."""
    from agentwake.jobs.views import job_state

    return job_state(job)


#: the columns of a job's runs and of its skipped / missed fires (`jobs show`, the console's job page)
JOB_RUN_COLUMNS = ("run id", "status", "started", "duration", "cost", "reason")
JOB_FIRE_COLUMNS = ("scheduled time", "run id", "reason", "outcome")


def job_facts(view: Any) -> list[tuple[str, Any]]:
    """``jobs show``'s facts of a job (plain text, not escaped): config, policies, why and since
    when it is paused and by which run, failures in a row, skipped/missed counts, next fires."""
    from agentwake.jobs.service import next_fire_times

    job = view.job
    rows: list[tuple[str, Any]] = [
        ("job", job.job_id),
        ("name", job.name),
        ("session", job.session_id),
        ("prompt", job.description),
        ("schedule", f"{job.schedule_expression} ({job.timezone})"),
        ("schedule name", job.schedule_name),
        ("status", job_status(job)),
        ("overlap", job.overlap),
        ("catch-up", f"{job.catch_up} within {job.catch_up_window_s}s"),
        ("pause after", f"{job.pause_after_failures} failed runs in a row" if job.pause_after_failures else "never"),
        ("failures in a row", f"{job.consecutive_failures} (last: {dash(job.last_failed_run_id)})"),
        ("skipped fires", job.skipped_fires),
        ("missed fires", job.missed_fires),
        ("origin", job_origin(job)),
    ]
    if job.origin == "agent":
        rows.append(("created by run", job.created_by_run))
    if job.note:
        rows.append(("note", job.note))
    if job.max_fires is not None:
        rows.append(("fires", f"{job.fires} of at most {job.max_fires}"))
    if job.disabled_reason:
        rows.append(("stopped", job.disabled_reason))
    if job.paused_at:
        rows += [("paused at", when(job.paused_at)), ("paused by run", job.pause_run_id)]
    times = next_fire_times(job, len(view.next_fires) or 3)
    rows.append(("next fires", ", ".join(t.strftime("%Y-%m-%d %H:%M %Z") for t in times) or "-"))
    return rows


def job_missing(view: Any) -> str | None:
    """The fire times a paused job has missed so far (plain text), or None."""
    if not view.missing_now:
        return None
    more = f" (the newest {len(view.missing_now)})" if view.missing_total > len(view.missing_now) else ""
    return (
        f"Missing while paused: {'at least ' if view.missing_truncated else ''}{view.missing_total} "
        f"fire time(s){more}; on resume, catch-up "
        f"{view.job.catch_up} decides which run: {', '.join(view.missing_now[-10:])}"
    )


def job_run_row(run: Any) -> tuple[str, ...]:
    """One of a job's runs as :data:`JOB_RUN_COLUMNS` (plain text)."""
    return (
        run.run_id,
        run.status,
        when(run.started_at),
        _duration(run.started_at, run.ended_at),
        _cost((run.usage or {}).get("estimated_cost_usd")),
        (run.last_error or "-").splitlines()[0][:200] if run.last_error else "-",
    )


def job_fire_row(fire: Any) -> tuple[str, ...]:
    """A skipped or missed fire as :data:`JOB_FIRE_COLUMNS` (plain text)."""
    return (fire.scheduled_time, fire.run_id, fire.reason, fire.outcome)


def job_view(view: Any) -> None:
    """``jobs show``: the job's config and policies, next fires, last runs, skipped and missed fires."""
    out = console()
    out.print(facts_panel(job_facts(view), f"job {view.job.job_id}"))
    missing = job_missing(view)
    if missing:
        out.print(escape(missing))
    table = _table(f"last {len(view.runs)} run(s)", JOB_RUN_COLUMNS)
    for run in view.runs:
        table.add_row(*(escape(cell) for cell in job_run_row(run)))
    print_table(table, drop=("cost", "duration", "started"), whole=("run id",))
    for title, fires_ in (("skipped fires", view.skipped), ("missed fires", view.missed)):
        if not fires_:
            continue
        table = _table(f"{title} (newest first)", JOB_FIRE_COLUMNS)
        for fire in fires_:
            table.add_row(*(escape(cell) for cell in job_fire_row(fire)))
        # the run id ends with the scheduled time: it goes first
        print_table(table, drop=("scheduled time",), whole=("run id",))


def dead_lettered_fires(messages: list[Any], note: str | None) -> None:
    """``jobs show``: the job's fires waiting in SchedulerDLQ, each with how to redrive it."""
    out = console()
    if note:
        out.print(escape(note))
    if not messages:
        return
    table = _table(
        f"{len(messages)} fire(s) the Scheduler could not deliver (SchedulerDLQ)",
        ("scheduled time", "run id", "error", "redrive with"),
    )
    for msg in messages:
        table.add_row(*(escape(cell) for cell in dead_lettered_fire_row(msg)))
    out.print(table)


def dead_lettered_fire_row(msg: Any) -> tuple[str, str, str, str]:
    """A job's fire in SchedulerDLQ (plain text): scheduled time, run id, error, how to redrive it."""
    return (
        str((msg.payload or {}).get("scheduled_time", "-")),
        dash(msg.run_id),
        f"{dash(msg.error_type)}: {dash(msg.error_detail)}"[:200],
        f"agentwake dlq redrive --id {msg.short_id}",
    )


def job_view_dict(view: Any) -> dict[str, Any]:
    return {
        "job": job_dict(view.job),
        "next_fire_times": [t.isoformat() for t in view.next_fires],
        "runs": [
            {
                "run_id": r.run_id,
                "status": r.status,
                "started_at": r.started_at,
                "ended_at": r.ended_at,
                "estimated_cost_usd": (r.usage or {}).get("estimated_cost_usd"),
                "last_error": r.last_error,
            }
            for r in view.runs
        ],
        "skipped": [f.model_dump(mode="json") for f in view.skipped],
        "missed": [f.model_dump(mode="json") for f in view.missed],
        "missing_while_paused": view.missing_now,
        "missing_while_paused_total": view.missing_total,
        "missing_while_paused_truncated": view.missing_truncated,
    }


def _duration(start: str | None, end: str | None) -> str:
    try:
        seconds = (datetime.fromisoformat(str(end)) - datetime.fromisoformat(str(start))).total_seconds()
    except ValueError:
        return "-"
    return f"{seconds:.1f}s" if seconds < 60 else age(seconds)


def _cost(value: Any) -> str:
    return "-" if value is None else f"${float(value):.4f}"


def session_panel(config: SessionConfig) -> None:
    rows = [
        ("session", config.session_id),
        ("persona", config.persona),
        *(("primary" if i == 0 else f"fallback {i}", json.dumps(spec)) for i, spec in enumerate(config.providers)),
        ("max steps", config.max_steps),
        ("history window", config.history_window),
        ("delivery", json.dumps(config.delivery)),
        ("role", config.role),
        ("owners", ", ".join(config.owners) or "none: the product API refuses it (--owner ARN)"),
        ("deliver final", config.deliver_final),
        ("repeated calls", f"the model is told at {config.max_repeated_tool_calls} identical calls in a row"),
        ("deliveries", f"{config.max_deliveries_per_run} per run, {dash(config.max_deliveries_per_day)} per day"),
        ("token budget", f"{dash(config.max_tokens_per_run)} per run, {dash(config.max_tokens_per_day)} per day"),
        *((f"price {key}", json.dumps(price.model_dump())) for key, price in config.prices.items()),
        *((f"tool {spec.get('name')}", json.dumps(spec)) for spec in config.tools),
        ("updated", when(config.updated_at)),
    ]
    console().print(facts_panel(rows, "session"))


#: the columns of ``sessions list`` (and the console's sessions page)
SESSION_COLUMNS = ("session", "providers", "tools", "delivery", "role", "updated")


def session_row(config: SessionConfig) -> tuple[str, ...]:
    """A session config as :data:`SESSION_COLUMNS` (plain text: provider ids or types, tool names,
    the delivery type; never a provider's credentials)."""
    return (
        config.session_id,
        ", ".join(str(p.get("id") or p.get("type")) for p in config.providers) or "-",
        ", ".join(str(t.get("name")) for t in config.tools) or "-",
        str(config.delivery.get("type", "-")),
        config.role,
        when(config.updated_at),
    )


def sessions_table(configs: list[SessionConfig], *, wide: bool = False) -> None:
    out = console()
    if not configs:
        out.print("No sessions. Create one: agentwake sessions put SESSION --provider JSON")
        return
    table = _table(f"{len(configs)} session(s)", SESSION_COLUMNS)
    for c in configs:
        table.add_row(*(escape(cell) for cell in session_row(c)))
    print_table(table, drop=("updated", "role", "tools"), whole=("session",), wide=wide)
    out.print("Show one: agentwake sessions show SESSION", style="dim")


def task_dict(task: Any) -> dict[str, Any]:
    """A task as ``--json`` prints it: the record (its token hash, and the work's claim, which is that
    hash, left out) and its run id."""
    data = task.model_dump(mode="json", exclude={"token_sha256", "work_claimed"})
    return masked({**data, "run_id": task.run_id})


def tasks_table(tasks: list[Any], *, filtered: bool, wide: bool = False) -> None:
    out = console()
    if not tasks:
        out.print("No tasks" + (" match the filters." if filtered else "."))
        return
    table = _table(
        f"{len(tasks)} task(s), newest first", ("task id", "session", "tool", "status", "created", "finished")
    )
    for t in tasks:
        table.add_row(
            escape(t.task_id),
            escape(t.session_id),
            escape(t.tool_name),
            escape(t.status),
            when(t.created_at),
            when(t.finished_at),
        )
    print_table(table, drop=("finished", "tool"), whole=("task id",), wide=wide)
    out.print("Show one: agentwake tasks show TASK_ID", style="dim")


def task_panel(links: TaskLinks) -> None:
    """``tasks show``: the task, the run (and tool call) that started it, its subagent's run, the
    wake run of each outcome, its deadline, outcome and why, late completions, cancellation."""
    console().print(facts_panel(task_facts(links), "task"))


def task_facts(links: TaskLinks) -> list[tuple[str, Any]]:
    """A task's facts and links as plain text (``tasks show`` and the console's task page)."""
    task = links.task
    return [
        ("task id", task.task_id),
        ("session", task.session_id),
        ("kind", task.kind),
        ("subagent" if task.subagent else "tool", task.subagent or task.tool_name),
        ("arguments", json.dumps(masked(task.tool_args))),
        ("status", task.status),
        ("outcome", _outcome(task)),
        ("why", first_line(task.outcome_reason) or None),
        ("deadline", when(task.deadline_at) if task.deadline_at else None),
        ("cancelled", when(task.cancelled_at) if task.cancelled_at else None),
        ("late completions", task.late_completions or None),
        ("created", when(task.created_at)),
        ("finished", when(task.finished_at)),
        ("last error", task.last_error),
        ("started by", links.started_by.shown if links.started_by else "the product or an operator (no run)"),
        ("tool call", task.started_by_call),
        ("subagent run", links.sub_run.shown if links.sub_run else None),
        (
            "wake runs",
            ", ".join(_wake_ref(r) for r in links.wake_runs) if not _never_wakes(links) else "none (cancelled)",
        ),
    ]


def _state(links: TaskLinks) -> str:
    """A task's state in a few words: cancelled, running, succeeded (after a redrive), failed."""
    return links.state if links.state == "cancelled" else (_outcome(links.task) or links.state)


def _never_wakes(links: TaskLinks) -> bool:
    return links.state == "cancelled" and not any(r.status for r in links.wake_runs)


def _wake_ref(ref: Any) -> str:
    return f"{ref.run_id} ({ref.status or 'not woken yet'})"


def run_link_facts(links: RunLinks) -> list[tuple[str, Any]]:
    """Where a run sits in its session's tree, as facts: the run that started its task or created
    its job, its task, and (for a ``sub:`` run) the wake its outcome caused."""
    rows: list[tuple[str, Any]] = []
    if links.task is not None:
        t = links.task
        rows.append(("started by", t.started_by.shown if t.started_by else "the product or an operator (no run)"))
        if t.task.started_by_call:
            rows.append(("tool call", t.task.started_by_call))
        rows.append(("task", f"{t.task.task_id}: {t.task.kind} {t.task.subagent or t.task.tool_name}, {t.state}"))
        if links.run_id.startswith("sub:"):
            rows.append(("wake it caused", ", ".join(_wake_ref(r) for r in t.wake_runs)))
    elif links.job is not None:
        j = links.job
        rows.append(("job", f"{j.job_id} ({j.origin})"))
        rows.append(("started by", j.created_by_run or "the product or an operator (no run)"))
        if j.created_by_call:
            rows.append(("tool call", j.created_by_call))
    for a in links.approvals:
        rows.append(("approval", f"{a.approval_id}: {a.tool}, {a.state}"))
    return rows


STARTED_TASK_COLUMNS = ("task id", "kind", "name", "state", "wake runs")
STARTED_JOB_COLUMNS = ("job id", "schedule", "status", "fires", "note")


def started_task_row(links: TaskLinks) -> tuple[str, ...]:
    """A task a run started as :data:`STARTED_TASK_COLUMNS` (plain text)."""
    t = links.task
    runs = [*([links.sub_run] if links.sub_run else []), *links.wake_runs]
    state = _state(links) + (
        f": {first_line(t.outcome_reason, 80)}" if t.outcome == "failed" and t.outcome_reason else ""
    )
    return (
        t.task_id,
        t.kind,
        t.subagent or t.tool_name,
        state,
        "none (cancelled)" if _never_wakes(links) else "\n".join(_wake_ref(r) for r in runs),
    )


def started_job_row(links: JobLinks) -> tuple[str, ...]:
    """A wake (job) a run scheduled as :data:`STARTED_JOB_COLUMNS` (plain text)."""
    j = links.job
    schedule = "once " if j.run_once else ""
    return (
        j.job_id,
        f"{schedule}{j.schedule_expression}",
        job_status(j),
        f"{j.fires}/{j.max_fires}" if j.max_fires else str(j.fires),
        first_line(j.note, 120) or "-",
    )


def started_tables(links: RunLinks) -> None:
    """The tasks and the wakes a run started (``runs show``)."""
    out = console()
    if links.started_tasks:
        table = _table(
            f"tasks this run started ({len(links.started_tasks)})", STARTED_TASK_COLUMNS, title_justify="left"
        )
        for t in links.started_tasks:
            table.add_row(*(escape(c) for c in started_task_row(t)))
        print_table(table, drop=("kind", "name"), whole=("task id",))
    if links.started_jobs:
        table = _table(
            f"wakes this run scheduled ({len(links.started_jobs)})", STARTED_JOB_COLUMNS, title_justify="left"
        )
        for j in links.started_jobs:
            table.add_row(*(escape(c) for c in started_job_row(j)))
        print_table(table, drop=("note", "fires", "schedule"), whole=("job id",))
    if not (links.started_tasks or links.started_jobs):
        out.print("This run started no task and scheduled no wake.")


def tree_label(node: TreeNode) -> str:
    """One line of ``runs list --tree`` (plain text): a run, a task it started or a wake it scheduled."""
    if node.kind == "run":
        run = node.record
        text = f"{node.id}  {node.status or 'not started'}"
        if run is not None:
            text += f"  {when(run.started_at)}"
            if run.status == "failed" and run.last_error_type:
                text += f"  {run.last_error_type}"
        else:
            text += "  (not in this page)"
        if node.started_by:
            text += f"  (started by {node.started_by})"
        return text
    if node.kind == "task":
        links = node.record
        t = links.task
        text = f"task {t.task_id}  {t.kind} {t.subagent or t.tool_name}  {_state(links)}"
        if t.outcome == "failed" and t.outcome_reason:
            text += f": {first_line(t.outcome_reason, 80)}"
        return text
    if node.kind == "approval":
        a = node.record
        return f"approval {a.approval_id}  {a.tool}  {a.state}"
    j = node.record.job
    fired = f"{j.fires}/{j.max_fires}" if j.max_fires else str(j.fires)
    text = f"wake {j.job_id}  {'once ' if j.run_once else ''}{j.schedule_expression}  {j.status}, fired {fired}"
    return text + (f"  note: {first_line(j.note, 60)}" if j.note else "")


def run_tree(session_id: str, roots: list[TreeNode], listed: int) -> None:
    """``runs list --session S --tree``: the runs, the tasks and wakes each started, the runs those
    caused; in the console's width (labels fold under their guide, ids stay whole where they fit)."""
    from rich.text import Text
    from rich.tree import Tree

    out = console()
    if not roots:
        out.print(f"No runs of session {escape(session_id)}.")
        return
    out.print(Text(shown(f"session {session_id}: {listed} run(s), oldest first, each with what it started")))

    def add(parent: Any, node: TreeNode) -> None:
        branch = parent.add(Text(shown(tree_label(node)), overflow="fold"))
        for child in node.children:
            add(branch, child)

    for root in roots:
        tree = Tree(Text(shown(tree_label(root)), overflow="fold"))
        for child in root.children:
            add(tree, child)
        out.print(tree)
    out.print("Show one: agentwake runs show RUN_ID  |  agentwake tasks show TASK_ID", style="dim")


def _outcome(task: Any) -> str | None:
    """The task's one outcome and who claimed it (docs/durability.md, "Task outcomes")."""
    if task.outcome is None:
        return None
    if task.cancelled_at:
        return f"failed: cancelled at {task.cancelled_at} (never wakes the agent)"
    if task.timed_out_at:
        return f"failed: timed out at {task.timed_out_at}"
    return f"{task.outcome} after a redrive" if task.outcomes > 1 else task.outcome


# --------------------------------------------------------------------------------------------
# the DLQ


def dlq_table(messages: list[DlqMessage], *, filtered: bool, wide: bool = False) -> None:
    out = console()
    if not messages:
        out.print("No messages in the dead-letter queues" + (" matching the filters." if filtered else "."))
        return
    table = _table(
        f"{len(messages)} DLQ message(s)",
        ("id", "queue", "run id", "session", "attempts", "in DLQ for", "last error", "detail"),
        show_lines=False,
    )
    for m in messages:
        table.add_row(
            escape(m.short_id),
            escape(m.queue),
            escape(dash(m.run_id)),
            escape(dash(m.session_id)),
            escape(dash(m.attempts)),
            age(m.age_seconds),
            escape(dash(m.error_type)),
            escape(_first_line(m.error_detail) or "-"),
        )
    print_table(table, drop=("detail", "in DLQ for", "attempts", "session"), whole=("id", "run id"), wide=wide)
    out.print("Show one in full: agentwake dlq show ID", style="dim")


def dlq_message(msg: DlqMessage) -> None:
    """``dlq show``: the message's facts, error, body and attributes, then its run's tables."""
    from rich.panel import Panel
    from rich.syntax import Syntax

    from agentwake_ops.dlq.describe import json_safe_attributes, safe_json

    out = console()
    rows = [
        ("message id", msg.message_id),
        ("queue", msg.queue),
        ("kind", msg.kind),
        ("run id", msg.run_id),
        ("run status", msg.run_status),
        ("session", msg.session_id),
        ("task / job", msg.task_id or msg.job_id),
        ("attempts", msg.attempts),
        ("first failure", when(msg.first_failure_at)),
        ("last failure", when(msg.last_failure_at)),
        (
            "in the DLQ since",
            f"{when(msg.in_dlq_since)} ({age(msg.age_seconds)} ago; from {dash(msg.in_dlq_since_source)})"
            if msg.in_dlq_since
            else "unknown",
        ),
        ("sent by the producer", when(msg.sent_at)),
        ("times received", f"{dash(msg.receive_count)} (SQS's count: every listing adds one)"),
        ("last error", f"{dash(msg.error_type)} (from {dash(msg.error_source)})"),
        *((key.replace("_", " "), value) for key, value in msg.trigger.items() if value is not None),
    ]
    out.print(facts_panel(rows, "DLQ message"))
    if msg.error_detail:
        out.print(Panel(escape(msg.error_detail), title="last error detail", expand=False))

    parsed, text = safe_json(msg.body), masked(msg.body)
    try:
        # json.dumps escapes every control character (ASCII): the body's ESC bytes print as \u001b
        body: Any = Syntax(json.dumps(masked(parsed), indent=2), "json", word_wrap=True) if parsed is not None else None
    except (ValueError, RecursionError):
        body = None
    if body is None:
        body = escape(text)
    title = "body" if text == msg.body else f"body ({', '.join(sorted(SECRET_FIELDS))} masked: see dlq export)"
    out.print(Panel(body, title=title, expand=False))
    if msg.attributes or msg.message_attributes:
        grid = _table("attributes", ("attribute", "value"), fold=False, title_justify="left")
        for key, value in sorted(msg.attributes.items()):
            grid.add_row(escape(key), escape(str(value)))
        for key, value in sorted(json_safe_attributes(msg.message_attributes).items()):
            text = value.get("StringValue", value.get("BinaryValueBase64", ""))
            grid.add_row(escape(f"{key} (message attribute)"), escape(str(text)))
        out.print(grid)

    if msg.summary is None:
        out.print("No run in the store for this message (a permanent input error never becomes a run).")
        return
    summary_tables(msg.summary)


def replay_verdicts(verdicts: list[Verdict], *, force: bool, to_stderr: bool) -> None:
    """``dlq redrive --verify``: each replay's verdict (on stderr with --json, so stdout stays JSON)."""
    out = err_console() if to_stderr else console()
    table = _table(
        f"--verify: replayed {len(verdicts)} run(s)", ("id", "run id", "replay", "reason"), title_justify="left"
    )
    for v in verdicts:
        table.add_row(
            v.message_id[:8],
            escape(dash(v.run_id)),
            (v.outcome.state if v.outcome else "DONE") if v.ok else "refused",
            escape(redact(v.reason or "-")),
        )
    out.print(table)
    failing = [v for v in verdicts if not v.ok]
    if failing and force:
        out.print(f"--force: redriving {len(failing)} run(s) whose replay fails.", style="yellow")


def redrive_report(report: RedriveReport) -> None:
    out = console()
    if report.native_fallback:
        out.print(escape(report.native_fallback), style="yellow")
    for settlement in report.settled:
        out.print(escape(f"Dry run: would {settlement.action}." if report.dry_run else f"Settled: {settlement.done}."))
    if report.dry_run:
        if not report.planned:
            out.print("Dry run: no message matches; nothing would move.")
            return
        table = _table(
            f"Dry run: {len(report.planned)} message(s) would be redriven (nothing changed)",
            ("id", "queue", "run id", "action"),
        )
        for item in report.planned:
            table.add_row(
                escape(item.message_id[:8]), escape(item.queue), escape(dash(item.run_id)), escape(item.action)
            )
        out.print(table)
        return
    if report.native_task:
        handle, count = report.native_task
        out.print(
            f"Started StartMessageMoveTask for about {count} message(s) from the results DLQ "
            f"(task handle {escape(handle)}); follow it with `aws sqs list-message-move-tasks`."
        )
    out.print(f"Redrive: moved {len(report.moved)}, failed {len(report.failed)}.")
    if report.failed:
        table = _table("not moved", ("id", "queue", "run id", "reason"), title_style="red")
        for item in report.failed:
            table.add_row(
                escape(item.message_id[:8]), escape(item.queue), escape(dash(item.run_id)), escape(item.reason)
            )
        out.print(table)


def delete_report(report: DeleteReport, as_json: bool) -> None:
    if as_json:
        print_json(
            {
                "deleted": [m.message_id for m in report.deleted],
                "failed": report.failed,
                "missing": report.missing,
            }
        )
        return
    out = console()
    out.print(f"Deleted {len(report.deleted)} message(s) from the DLQ.")
    if report.missing:
        out.print(f"{len(report.missing)} id(s) were not in the DLQ (already redriven or deleted).")
    for mid, why in report.failed.items():
        out.print(f"not deleted, still in the DLQ: {escape(mid)}: {escape(why)}", style="red")


def export_report(report: ExportReport, out: str, as_json: bool) -> None:
    deleted = report.deleted
    if as_json:
        print_json(
            {
                "path": report.path,
                "written": report.written,
                "deleted": None if deleted is None else len(deleted.deleted),
                "not_deleted": None if deleted is None else deleted.failed,
            }
        )
        return
    console().print(f"Wrote {report.written} message(s) to {escape(out)}.")
    console().print(
        "The file holds task tokens in clear (bodies are byte-exact, for re-sending): keep it secret, "
        "delete it when done.",
        style="yellow",
    )
    if deleted is not None:
        console().print(f"Deleted {len(deleted.deleted)} exported message(s) from the DLQ.")
        for mid, why in deleted.failed.items():
            console().print(f"not deleted, still in the DLQ: {escape(mid)}: {escape(why)}", style="red")
