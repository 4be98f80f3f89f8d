"""The console's POST actions, each the CLI's own: ``runs replay`` (``agentwake_ops.replay``),
``dlq redrive --verify`` (also with ``--delivered``/``--resend``: ``settle_confirm``, ``settle``) and ``dlq delete`` (``agentwake_ops.dlq.act``, on exact message ids, after a
confirmation page that states the exact count), ``dlq export --out`` (``act.export``), ``tasks cancel``
(``TasksService.cancel_task``, after a confirmation page naming the task; ``cancel_button`` is the task
page's form).

A redrive or delete runs only when the form repeats the count its confirmation page showed and the
ids still number that many: what the operator confirmed is what is attempted.
"""

from __future__ import annotations

import json
from typing import Any

from agentwake.trust.redact import REDACTED
from agentwake_ops.console.html import Markup, facts, h, hidden, link, pretty, table
from agentwake_ops.console.pages import Query, one
from agentwake_ops.context import OpsContext, OpsError
from agentwake_ops.terminal import MASKED

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
                [(v.message_id, v.run_id, _replay_words(v.outcome), v.reason or "-") for v in report.verdicts],
                cls="verdicts",
                empty="",
            )
        )
    )
    parts.append(
        str(
            table(
                ("message id", "queue", "run", "action", "result", "reason"),
                [
                    (i.message_id, i.queue, i.run_id, i.action, "done" if i.ok else "failed", i.reason or "-")
                    for i in report.moved + report.failed
                ],
                cls="moved",
                empty="",  # a refused redrive moved nothing: the line above says so
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


def _replay_words(outcome: Any) -> str:
    """A replay's state in words (the state itself in brackets, as ``runs replay`` prints it)."""
    if outcome is None:
        return "not replayed"
    return f"would succeed ({outcome.state})" if outcome.ok else f"would fail again ({outcome.state})"


def _replay_config(form: Query) -> tuple[str, Any, int | None, str | None]:
    """The run and the config a replay form names: provider chain, max steps, persona (None: the
    session's own). The one parse of that form (replay, and applying it to the session)."""
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
    return run_id, providers, int(max_steps_text) if max_steps_text else None, one(form, "persona") or None


def _config_fields(csrf: str, run_id: str, providers: Any, max_steps: int | None, persona: str | None) -> str:
    """The hidden fields that carry a replay's config from page to page (parsed by _replay_config)."""
    return (
        f"{hidden('csrf', csrf)}{hidden('id', run_id)}"
        + (hidden("providers", json.dumps(providers)) if providers is not None else "")
        + (hidden("max_steps", max_steps) if max_steps is not None else "")
        + (hidden("persona", persona) if persona is not None else "")
    )


def replay(ctx: OpsContext, form: Query, csrf: str) -> Markup:
    """``runs replay`` with the form's provider chain / max steps / persona: the outcome a redrive
    would reach and what it would send; nothing written, nothing delivered. A replay that succeeds
    offers to apply its config to the session (``apply_confirm``)."""
    from agentwake_ops.replay import replay as run_replay

    run_id, providers, max_steps, persona = _replay_config(form)
    outcome = run_replay(ctx.store, run_id, providers=providers, max_steps=max_steps, persona=persona)
    verdict = "would succeed" if outcome.ok else "would fail again"
    parts = [
        f"<p class='{'ok' if outcome.ok else 'error'}' id='replay-outcome'>Replay outcome: "
        f"<strong>{h(outcome.state)}</strong> — a redrive of this run {verdict} with this config. "
        "Nothing was written or delivered.</p>",
    ]
    if outcome.ok and (providers is not None or max_steps is not None or persona is not None):
        parts.append(
            f"<form method='post' action='run/apply-confirm' id='apply-form'>"
            f"{_config_fields(csrf, run_id, providers, max_steps, persona)}"
            "<button id='apply'>Apply this config to the session…</button> "
            "<span class='muted'>shows the exact change first; then redrive the run.</span></form>"
        )
    parts += [
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
                ("delivery id", "text"),
                [(d.delivery_id, d.text) for d in outcome.would_deliver],
                cls="would-deliver",
                empty="nothing new would be delivered",
            )
        ),
        f"<p>{len(outcome.already_delivered)} delivery(ies) already made by the run: a redrive does not resend them.</p>",
    ]
    if outcome.in_doubt:
        from agentwake_ops.console.pages import in_doubt_section

        parts.append(in_doubt_section(outcome.in_doubt, note="this replay sent nothing"))
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
                    (
                        e.step,
                        e.kind,
                        "from the journal" if e.replayed else "new",
                        json.dumps(e.data, default=str, ensure_ascii=False),
                    )
                    for e in outcome.events
                ],
                cls="replay-events",
            )
        )
    )
    return Markup("".join(parts))


def _changes(ctx: OpsContext, form: Query) -> tuple[str, Any, dict[str, Any]]:
    """The run's session, its config now, and the settings the replay form would change in it."""
    run_id, providers, max_steps, persona = _replay_config(form)
    record = ctx.store.records.get_run(run_id)
    if record is None:
        raise OpsError(f"no run {run_id!r} in the store")
    config = ctx.store.records.get_session(record.session_id)
    now = config.model_dump() if config is not None else {}
    wanted = {"providers": providers, "max_steps": max_steps, "persona": persona}
    if any(marker in json.dumps(wanted) for marker in (REDACTED, MASKED)):
        # a page never shows a secret, so a config copied from one holds the placeholder, not the secret
        raise OpsError(
            f"the config holds a hidden secret ({REDACTED} or {MASKED}): the console cannot write it back; "
            "name the secret by reference (api_key_ref) or use agentwake sessions put. Nothing was written"
        )
    changes = {k: v for k, v in wanted.items() if v is not None and now.get(k) != v}
    return record.session_id, now, changes


def _shown_setting(value: Any) -> Markup:
    return pretty(value) if isinstance(value, (list, dict)) else h(value)


def apply_confirm(ctx: OpsContext, form: Query, csrf: str) -> Markup:
    """The exact change a proven replay's config makes to its session, and the form that writes it."""
    session_id, now, changes = _changes(ctx, form)
    run_id, providers, max_steps, persona = _replay_config(form)
    if not changes:
        return Markup(
            f"<p class='note' id='apply-change'>Session {h(session_id)} already has this config: nothing to "
            "change. Redrive the run from the DLQ.</p><p>" + link("/run", "back to the run", id=run_id) + "</p>"
        )
    rows = [(name.replace("_", " "), _shown_setting(now.get(name)), _shown_setting(v)) for name, v in changes.items()]
    return Markup(
        f"<p class='note' id='apply-change'>Change {len(changes)} setting(s) of session {h(session_id)}?</p>"
        + table(("setting", "now", "after"), rows, cls="apply-change")
        + "<p class='muted'>Written as <code>agentwake sessions put</code> writes it (the stack's rules "
        "checked); the other settings stay as they are.</p>"
        f"<form method='post' action='run/apply'>{_config_fields(csrf, run_id, providers, max_steps, persona)}"
        f"<button id='apply-confirmed'>Apply to session {h(session_id)}</button></form><p>"
        + link("/run", "cancel: back to the run", id=run_id)
        + "</p>"
    )


def apply(ctx: OpsContext, form: Query, csrf: str) -> Markup:
    """Write the confirmed change (``sessions put``'s write), then offer the run's redrive."""
    from agentwake_ops.commands.sessions import save_session
    from agentwake_ops.dlq.select import list_messages

    session_id, _, changes = _changes(ctx, form)
    run_id = one(form, "id")
    if changes:
        save_session(ctx, session_id, changes)
    names = ", ".join(name.replace("_", " ") for name in changes) or "nothing (it already had this config)"
    parts = [f"<p class='ok' id='apply-result'>Session {h(session_id)} updated: {h(names)}.</p>"]
    waiting = [m for m in list_messages(ctx, "all") if m.run_id == run_id]
    if waiting:
        parts.append(
            f"<form method='post' action='dlq/confirm'>{hidden('csrf', csrf)}{hidden('action', 'redrive')}"
            + "".join(hidden("id", m.message_id) for m in waiting)
            + f"<button id='redrive-run'>Redrive this run's {len(waiting)} DLQ message(s)…</button></form>"
        )
    else:
        parts.append("<p class='muted'>This run has no message in the DLQs: nothing to redrive.</p>")
    parts.append("<p>" + link("/run", "back to the run", id=run_id) + "</p>")
    return Markup("".join(parts))


# --------------------------------------------------------------------------------------------
# a send in doubt: dlq redrive --delivered / --resend


SETTLE_WORDS = {
    "delivered": (
        "You found this message in the user's chat: it is recorded as delivered by an operator (its marker "
        "and its history entry), never sent again, and the run is redriven (dlq redrive --delivered)."
    ),
    "resend": (
        "The message is not in the user's chat: it is marked not sent and the redriven run sends it again "
        "(dlq redrive --resend). If it was there after all, the user sees it twice."
    ),
}


def _settle_form(form: Query) -> tuple[str, str, str]:
    message_id, delivery_id, how = one(form, "id"), one(form, "delivery"), one(form, "how")
    if how not in SETTLE_WORDS:
        raise OpsError(f"unknown answer {how!r}: delivered or resend")
    if not message_id or not delivery_id:
        raise OpsError("say which message and which delivery")
    return message_id, delivery_id, how


def settle_confirm(ctx: OpsContext, form: Query, csrf: str) -> Markup:
    """The confirmation page of a settle: the send in doubt, what the answer does, and its form."""
    from agentwake_ops.dlq.select import find_message
    from agentwake_ops.dlq.settle import plan

    message_id, delivery_id, how = _settle_form(form)
    msg = find_message(ctx, message_id)
    [settlement] = plan(
        ctx,
        [msg],
        delivered=[delivery_id] if how == "delivered" else [],
        resend=[delivery_id] if how == "resend" else [],
    )
    label = "Mark delivered and redrive" if how == "delivered" else "Resend: redrive"
    return Markup(
        f"<p class='note' id='confirm-settle'>{h(settlement.action[0].upper() + settlement.action[1:])}, then "
        f"redrive message {h(msg.short_id)} (run {h(settlement.run_id)})?</p>"
        f"<p>{h(SETTLE_WORDS[how])} The redrive replays the run first (dlq redrive --verify).</p>"
        f"<form method='post' action='dlq/settle'>{hidden('csrf', csrf)}{hidden('id', msg.message_id)}"
        f"{hidden('delivery', delivery_id)}{hidden('how', how)}"
        f"<button id='confirm'>{h(label)}</button></form><p>"
        + link("/dlq/message", "cancel: back to the message", id=msg.message_id)
        + "</p>"
    )


def settle(ctx: OpsContext, form: Query, csrf: str) -> Markup:
    """``dlq redrive --id ID --verify --delivered|--resend DELIVERY_ID``, confirmed on the page before."""
    from agentwake_ops.dlq.act import redrive as run_redrive
    from agentwake_ops.dlq.select import Selection

    message_id, delivery_id, how = _settle_form(form)
    report = run_redrive(
        ctx,
        Selection(ids=(message_id,), exact=True),
        verify=True,
        delivered=[delivery_id] if how == "delivered" else [],
        resend=[delivery_id] if how == "resend" else [],
    )
    parts = [f"<p class='ok' id='settle-result'>{h(s.done[0].upper() + s.done[1:])}.</p>" for s in report.settled]
    if report.refused:
        parts.append(
            "<p class='error' id='redrive-result'>Not redriven: a replay still fails (dlq redrive --verify). "
            "Fix the cause, then redrive the message from the DLQ (the send stays settled).</p>"
        )
    else:
        parts.append(
            f"<p class='ok' id='redrive-result'>Redrove {len(report.moved)} message(s)"
            + (f"; {len(report.failed)} failed: {h(report.failed[0].reason)}" if report.failed else "")
            + ".</p>"
        )
    parts.append("<p>" + link("/dlq", "back to the DLQ") + "</p>")
    return Markup("".join(parts))


# --------------------------------------------------------------------------------------------
# tasks cancel


def _task(ctx: OpsContext, form: Query) -> Any:
    task_id = one(form, "id")
    task = ctx.store.records.get_task(task_id) if task_id else None
    if task is None:
        raise OpsError(f"no task {task_id!r} (list them with: agentwake tasks list)")
    return task


def cancel_confirm(ctx: OpsContext, form: Query, csrf: str) -> Markup:
    """The confirmation page of a cancel: which task, and what a cancel means (tasks cancel)."""
    task = _task(ctx, form)
    return Markup(
        f"<p class='note' id='confirm-cancel'>Cancel task {h(task.task_id)} ({h(task.tool_name)}, session "
        f"{h(task.session_id)})?</p>"
        "<p>Its outcome becomes failed (cancelled) and the agent is never woken for it; a completion that "
        "arrives later is refused and counted as late. There is no undo.</p>"
        f"<form method='post' action='task/cancel'>{hidden('csrf', csrf)}{hidden('id', task.task_id)}"
        f"<button id='confirm'>Cancel task {h(task.task_id)}</button></form>"
        "<p>" + link("/task", "back: leave it running", id=task.task_id) + "</p>"
    )


def cancel(ctx: OpsContext, form: Query, csrf: str) -> Markup:
    """``agentwake tasks cancel ID --yes``, confirmed on the page before."""
    task = _task(ctx, form)
    cancelled = ctx.tasks.cancel_task(task.task_id, by="an operator (console)")
    return Markup(
        f"<p class='ok' id='cancel-result'>Cancelled {h(cancelled.task_id)} at {h(cancelled.cancelled_at)}: it will "
        "not wake the agent.</p><p>" + link("/task", "back to the task", id=cancelled.task_id) + "</p>"
    )
