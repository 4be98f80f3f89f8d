"""The console's POST actions, each the CLI's own: ``runs replay`` (``agentwake_ops.replay``),
``dlq redrive --verify`` and ``dlq delete`` (``agentwake_ops.dlq.act``, on exact message ids, after a
confirmation page that states the exact count), ``dlq export --out`` (``act.export``).

A redrive or delete runs only when the form repeats the count its confirmation page showed and the
ids still number that many: what the operator confirmed is what is attempted.
"""

from __future__ import annotations

import json
from typing import Any

from agentwake_ops.console.html import Markup, facts, h, hidden, link, table
from agentwake_ops.console.pages import Query, one
from agentwake_ops.context import OpsContext, OpsError

ACTIONS = ("redrive", "delete")


def _ids(form: Query) -> list[str]:
    ids = list(dict.fromkeys(i.strip() for i in form.get("id", []) if i.strip()))
    if not ids:
        raise OpsError("no message selected: tick the messages to act on")
    return ids


def confirm(ctx: OpsContext, form: Query, csrf: str) -> Markup:
    """The confirmation page: the exact messages and their count, and the form that acts on them."""
    from agentwake_ops.dlq.select import Selection, list_messages

    action = one(form, "action")
    if action not in ACTIONS:
        raise OpsError(f"unknown action {action!r}: redrive or delete")
    ids = _ids(form)
    present = {m.message_id: m for m in list_messages(ctx, "all", Selection(ids=tuple(ids), exact=True))}
    rows = [
        (i, present[i].queue, present[i].run_id, present[i].error_type) if i in present else (i, "gone", "-", "-")
        for i in ids
    ]
    count = len(ids)
    what = (
        "Each run is replayed first with the session's config as stored (dlq redrive --verify): if any replay "
        "still fails, nothing moves. Background results go back to the results queue, cron failures re-invoke "
        "the cron function; each is then deleted from its DLQ."
        if action == "redrive"
        else "The messages are deleted from their DLQ for good (dlq delete)."
    )
    gone = count - len(present)
    parts = [
        f"<p class='note' id='confirm-count'>{h(action.capitalize())} exactly {count} message(s)?</p>",
        f"<p>{h(what)}</p>",
    ]
    if gone:
        parts.append(f"<p class='note'>{gone} of them are no longer in the DLQs (redriven or deleted since).</p>")
    parts.append(str(table(("message id", "queue", "run", "error type"), rows, cls="confirm")))
    parts.append(
        f"<form method='post' action='dlq/{action}'>{hidden('csrf', csrf)}{hidden('count', count)}"
        + "".join(hidden("id", i) for i in ids)
        + f"<button id='confirm'>{h(action.capitalize())} {count} message(s)</button></form>"
        + "<p>"
        + link("/dlq", "cancel: back to the DLQ")
        + "</p>"
    )
    return Markup("".join(parts))


def _confirmed_ids(form: Query) -> list[str]:
    ids = _ids(form)
    count = one(form, "count")
    if not count.isdigit() or int(count) != len(ids):
        raise OpsError(
            f"the confirmation was for {count or '?'} message(s) but {len(ids)} were sent: nothing was done; "
            "select them again"
        )
    return ids


def redrive(ctx: OpsContext, form: Query, csrf: str) -> Markup:
    from agentwake_ops.dlq.act import redrive as run_redrive
    from agentwake_ops.dlq.select import Selection

    ids = _confirmed_ids(form)
    report = run_redrive(ctx, Selection(ids=tuple(ids), exact=True), verify=True)
    parts: list[str] = []
    if report.refused:
        parts.append(
            "<p class='error' id='redrive-result'>Nothing was redriven: a replay still fails (dlq redrive --verify). "
            "Fix the cause, replay the run from its page, then redrive again.</p>"
        )
    else:
        parts.append(
            f"<p class='ok' id='redrive-result'>Redrove {len(report.moved)} message(s)"
            + (f"; {len(report.failed)} failed" if report.failed else "")
            + ".</p>"
        )
    parts.append(
        str(
            table(
                ("message id", "run", "replay", "why"),
                [
                    (v.message_id, v.run_id, v.outcome.state if v.outcome else "-", v.reason or "-")
                    for v in report.verdicts
                ],
                cls="verdicts",
            )
        )
    )
    parts.append(
        str(
            table(
                ("message id", "queue", "run", "action", "ok", "reason"),
                [
                    (i.message_id, i.queue, i.run_id, i.action, i.ok, i.reason or "-")
                    for i in report.moved + report.failed
                ],
                cls="moved",
            )
        )
    )
    parts.append("<p>" + link("/dlq", "back to the DLQ") + "</p>")
    return Markup("".join(parts))


def delete(ctx: OpsContext, form: Query, csrf: str) -> Markup:
    from agentwake_ops.dlq.act import delete_messages
    from agentwake_ops.dlq.select import Selection

    ids = _confirmed_ids(form)
    report = delete_messages(ctx, Selection(ids=tuple(ids), exact=True))
    parts = [f"<p class='ok' id='delete-result'>Deleted {len(report.deleted)} message(s).</p>"]
    if report.missing:
        parts.append(f"<p class='note'>Not in the DLQs any more: {h(', '.join(report.missing))}</p>")
    if report.failed:
        parts.append(str(table(("message id", "why it stays"), list(report.failed.items()))))
    parts.append("<p>" + link("/dlq", "back to the DLQ") + "</p>")
    return Markup("".join(parts))


def export(ctx: OpsContext, form: Query, csrf: str) -> Markup:
    from agentwake_ops.dlq.act import export as run_export

    out = one(form, "out")
    if not out:
        raise OpsError("say where to write the export: a path on this machine")
    report = run_export(ctx, out)
    return Markup(
        f"<p class='ok' id='export-result'>Wrote {report.written} message(s) to {h(report.path)}.</p>"
        "<p class='note'>The file holds task tokens in clear (it is what a redrive from a file needs): keep it "
        "private.</p>" + link("/dlq", "back to the DLQ")
    )


def replay(ctx: OpsContext, form: Query, csrf: str) -> Markup:
    """``runs replay`` with the form's provider chain / max steps / persona: the outcome a redrive
    would reach and what it would send; nothing written, nothing delivered."""
    from agentwake_ops.replay import replay as run_replay

    run_id = one(form, "id")
    if not run_id:
        raise OpsError("say which run to replay")
    providers: Any = None
    raw = one(form, "providers")
    if raw:
        try:
            providers = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise OpsError(f"the provider chain is not valid JSON ({exc.msg} at position {exc.pos})") from None
        if isinstance(providers, dict):
            providers = [providers]
        if not isinstance(providers, list) or not providers or not all(isinstance(p, dict) for p in providers):
            raise OpsError('the provider chain must be a non-empty JSON list of objects like {"type": "scripted"}')
    max_steps_text = one(form, "max_steps")
    if max_steps_text and not max_steps_text.isdigit():
        raise OpsError(f"max steps must be a number, got {max_steps_text!r}")
    outcome = run_replay(
        ctx.store,
        run_id,
        providers=providers,
        max_steps=int(max_steps_text) if max_steps_text else None,
        persona=one(form, "persona") or None,
    )
    verdict = "would succeed" if outcome.ok else "would fail again"
    parts = [
        f"<p class='{'ok' if outcome.ok else 'error'}' id='replay-outcome'>Replay outcome: "
        f"<strong>{h(outcome.state)}</strong> — a redrive of this run {verdict} with this config. "
        "Nothing was written or delivered.</p>",
        str(
            facts(
                [
                    ("run", link("/run", outcome.run_id, id=outcome.run_id)),
                    ("was", f"{outcome.original_status}: {outcome.original_error}"),
                    ("error type", outcome.error_type),
                    ("steps", f"{outcome.steps} ({outcome.replayed_steps} reused from the journal)"),
                    ("final text", outcome.final_text),
                    *((f"provider {pid}", err) for pid, err in outcome.provider_errors.items()),
                ]
            )
        ),
        "<h2>would be delivered (not sent)</h2>",
        str(
            table(
                ("delivery id", "text"), [(d.delivery_id, d.text) for d in outcome.would_deliver], cls="would-deliver"
            )
        ),
        f"<p>{len(outcome.already_delivered)} delivery(ies) already made by the run: a redrive does not resend them.</p>",
    ]
    if outcome.not_called:
        parts.append(
            str(
                table(
                    ("step", "side-effecting tool not called", "arguments"),
                    [(c["step"], c["tool"], json.dumps(c.get("arguments"), default=str)) for c in outcome.not_called],
                )
            )
        )
    parts.append("<h2>replay transcript</h2>")
    parts.append(
        str(
            table(
                ("step", "kind", "reused", "data"),
                [
                    (e.step, e.kind, e.replayed, json.dumps(e.data, default=str, ensure_ascii=False))
                    for e in outcome.events
                ],
                cls="replay-events",
            )
        )
    )
    return Markup("".join(parts))
