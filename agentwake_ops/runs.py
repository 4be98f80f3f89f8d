"""Runs as an operator reads them: one run's summary and transcript, and runs listed newest first.

Built on ``agentwake.store.operator`` (the reads no wake needs). Plain Python (no typer/rich).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from agentwake.domain.run_models import FailureRecord, RunRecord
from agentwake.domain.steps import (
    APPROVAL_KINDS,
    STEP_ATTEMPT,
    is_final_delivery,
    is_last_reply,
    is_model_reply,
    parse_step_key,
)
from agentwake.store.codec import load_item
from agentwake.store.dynamo import DynamoStore
from agentwake.store.keys import (
    DELIVERY_PREFIX,
    FAILURE_PREFIX,
    RUN_SK,
    SENDING_PREFIX,
    STEP_PREFIX,
    after,
)
from agentwake.store.operator import QUIET_DAYS, OperatorStore, RunsPage
from agentwake.trust.redact import redact


@dataclass
class RunSummary:
    """Everything stored about one run: for ``runs show``, ``dlq show`` and the DLQ's joined view."""

    run: RunRecord | None
    failures: list[FailureRecord] = field(default_factory=list)
    #: journaled steps: ``{"key": "000.reply", "at": ..., **value}``
    steps: list[dict[str, Any]] = field(default_factory=list)
    #: deliveries made: ``{"delivery_id", "session_id", "text", "at", "receipts", "received"}``:
    #: ``receipts`` the platforms' (``Receipt.to_dict()``), ``received`` each as a person reads it
    deliveries: list[dict[str, Any]] = field(default_factory=list)
    #: sends in doubt: an intent (``SENDING#``) still ``sending`` and no marker. The request left
    #: or not: only the user's chat can tell (``dlq redrive --delivered ID`` or ``--resend ID``).
    #: ``{"delivery_id", "session_id", "channel", "target", "where", "at", "text", "sent": "unknown"}``
    in_doubt: list[dict[str, Any]] = field(default_factory=list)
    #: a succeeded run whose last reply is not journaled (its commit leaves it out: the note keeps
    #: its text): the note its commit wrote, ``{"text", "at"}``; ``{}`` when it was not found
    note: dict[str, Any] | None = None

    @property
    def last_failure(self) -> FailureRecord | None:
        return self.failures[-1] if self.failures else None

    @property
    def empty(self) -> bool:
        return self.run is None and not (self.failures or self.steps or self.deliveries or self.in_doubt)

    def as_dict(self) -> dict[str, Any]:
        return {
            "run": self.run.model_dump(mode="json") if self.run else None,
            "failures": [f.model_dump(mode="json") for f in self.failures],
            "steps": self.steps,
            "deliveries": self.deliveries,
            "in_doubt": self.in_doubt,
            "note": self.note,
        }


def run_summary(store: DynamoStore, run_id: str, *, with_note: bool = False) -> RunSummary:
    """The run's partition in one Query: run record, failures, journal, deliveries, sends in doubt.
    ``with_note`` (what shows a run's story: ``runs show``, the console's run page): for a succeeded
    run whose last reply is not journaled, also the note that keeps its final answer (one Query of
    its session's history around its end: ``OperatorStore.run_note``); the DLQ's joins, the
    settlements and the replay read no more than the partition."""
    operator = OperatorStore(store)
    summary = summary_of(operator.run_items(run_id))
    run = summary.run
    if (
        with_note
        and run is not None
        and run.status == "succeeded"
        and run.kind != "subagent"  # a subagent's commit writes no note, so it keeps its last reply
        and not any(is_last_reply(s["key"], s) for s in summary.steps)
    ):
        note = operator.run_note(run)
        summary.note = {"text": note.content, "at": note.created_at} if note is not None else {}
    return summary


def summary_of(items: list[tuple[str, dict[str, Any]]]) -> RunSummary:
    """A run's summary from its partition's items (sort key, raw item), in key order."""
    summary = RunSummary(run=None)
    intents: list[dict[str, Any]] = []
    for sk, item in items:
        if sk == RUN_SK:
            summary.run = load_item(RunRecord, item)
        elif sk.startswith(FAILURE_PREFIX):
            summary.failures.append(load_item(FailureRecord, item))
        elif sk.startswith(STEP_PREFIX):
            step = json.loads(item["value"]["S"])
            summary.steps.append({"key": after(STEP_PREFIX, sk), "at": item.get("at", {}).get("S"), **step})
        elif sk.startswith(DELIVERY_PREFIX):
            receipts = receipts_of_marker(item)
            summary.deliveries.append(
                {
                    "delivery_id": after(DELIVERY_PREFIX, sk),
                    "session_id": item["session_id"]["S"],
                    "text": item["text"]["S"],
                    "at": item["at"]["S"],
                    "receipts": receipts,
                    "received": [received(r) for r in receipts],
                }
            )
        elif sk.startswith(SENDING_PREFIX):
            intents.append(intent_view(sk, item))
    delivered = {d["delivery_id"] for d in summary.deliveries}
    summary.in_doubt = [i for i in intents if i["state"] == "sending" and i["delivery_id"] not in delivered]
    return summary


def _s(item: dict[str, Any], name: str) -> str:
    value = item.get(name) or {}
    return str(value.get("S", value.get("N", "")))


def receipts_of_marker(item: dict[str, Any]) -> list[dict[str, Any]]:
    """The marker's ``receipts`` (a JSON list of ``Receipt.to_dict()``); none on a marker written
    before receipts (or one that cannot be read: shown as such, never a crash of ``runs show``)."""
    raw = _s(item, "receipts")
    if not raw:
        return []
    try:
        parsed = json.loads(raw)
    except ValueError:
        return [{"channel": "?", "target": "?", "extra": {"unreadable": True}}]
    return [r for r in parsed if isinstance(r, dict)] if isinstance(parsed, list) else []


def received(raw: dict[str, Any]) -> str:
    """One receipt as a person reads it ("slack ts 1718.0100 in C0123"), bounded."""
    from agentwake.delivery import Receipt
    from agentwake_ops.terminal import first_line

    if (raw.get("extra") or {}).get("unreadable"):
        return "(receipts unreadable)"
    try:
        return first_line(redact(Receipt.from_dict(raw).describe()), 200)
    except (TypeError, ValueError, AttributeError):
        return "(receipt unreadable)"


#: how much of an intent's text a summary shows (the whole text is on the intent, bounded there)
INTENT_TEXT_CHARS = 200


def intent_view(sk: str, item: dict[str, Any]) -> dict[str, Any]:
    """An intent (``SENDING#{delivery}#{target}``) as ``runs show`` and ``dlq show`` list it, read
    by the one reader the wake's guard uses (``store.journal.intent_of``)."""
    from agentwake.store.journal import intent_of

    intent = intent_of(item)
    return {
        "delivery_id": intent.delivery_id,
        "session_id": intent.session_id,
        "channel": intent.channel,
        "target": intent.target,
        "where": intent.where,
        "at": intent.at or None,
        "state": intent.state,
        "sent": "unknown" if intent.state == "sending" else ("yes" if intent.state == "sent" else "no"),
        "text": redact(intent.text)[:INTENT_TEXT_CHARS],
    }


def in_doubt_line(intent: dict[str, Any]) -> str:
    """Where an in-doubt send went, as a person reads it: "telegram telegram in 99"."""
    where = f" in {intent['where']}" if intent.get("where") else ""
    named = f" ({intent['target']})" if intent.get("target") and intent["target"] != intent.get("channel") else ""
    return f"{intent.get('channel') or '?'}{named}{where}"


@dataclass(frozen=True)
class Drain:
    """How busy a session was while runs waited for it: the sum of the runs' times (first start
    to end) over the drain (first start to last end), the longest idle gap between two runs, and
    the longest time the session was idle while a run that had found it busy waited for it."""

    runs: int
    busy_s: float
    span_s: float
    longest_gap_s: float
    #: the longest stretch with no run of the session going while one of its later runs had
    #: already found it busy (its first busy finding: its start less its ``waited_s``) and waited
    longest_ready_idle_s: float = 0.0

    @property
    def busy_fraction(self) -> float:
        return self.busy_s / self.span_s if self.span_s > 0 else 1.0

    def __str__(self) -> str:
        return (
            f"{self.runs} runs, busy {self.busy_s:.1f} s of {self.span_s:.1f} s "
            f"({100 * self.busy_fraction:.0f} %), longest idle gap {self.longest_gap_s:.2f} s, "
            f"{self.longest_ready_idle_s:.2f} s of it with a run waiting"
        )


def session_drain(store: DynamoStore, run_ids: list[str]) -> Drain:
    """The drain of ``run_ids`` (ended runs) from their run records."""
    from datetime import datetime

    spans = []
    for run_id in run_ids:
        run = store.records.get_run(run_id)
        if run is None or not run.started_at or not run.ended_at:
            raise ValueError(f"{run_id} has not ended")
        start, end = (
            datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp() for t in (run.started_at, run.ended_at)
        )
        # when it first found the session busy (None: it never waited)
        ready = start - run.waited_s if run.waited_s is not None else None
        spans.append((start, end, ready))
    spans.sort(key=lambda s: s[0])
    gaps = [max(0.0, b[0] - a[1]) for a, b in zip(spans, spans[1:], strict=False)]
    ready_idle = 0.0
    for i in range(1, len(spans)):
        idle_from, idle_to = max(end for _, end, _ in spans[:i]), spans[i][0]
        waiting = [ready for _, _, ready in spans[i:] if ready is not None]
        if waiting and min(waiting) < idle_to:
            ready_idle = max(ready_idle, idle_to - max(idle_from, min(waiting)))
    return Drain(
        runs=len(spans),
        busy_s=sum(end - start for start, end, _ in spans),
        span_s=max(end for _, end, _ in spans) - spans[0][0] if spans else 0.0,
        longest_gap_s=max(gaps, default=0.0),
        longest_ready_idle_s=ready_idle,
    )


def list_runs(
    store: DynamoStore,
    *,
    session_id: str | None = None,
    status: str | None = None,
    since: str | None = None,
    before: str | None = None,
    limit: int = 20,
    scan: bool = False,
) -> RunsPage:
    return OperatorStore(store).runs(
        session_id=session_id, status=status, since=since, before=before, limit=limit, scan=scan
    )


def failure_line(error_type: str | None, reason: str | None, limit: int = 200) -> str:
    """A failure as a person reads it, in one line: ``ErrorType: the first line of its reason``
    (``local up``'s wake lines, ``agentwake invoke``, the CLI's in-process runs)."""
    from agentwake_ops.terminal import first_line

    said = first_line(reason, limit)
    return f"{error_type or 'failure'}: {said}" if said else (error_type or "failure")


def runs_page_note(page: RunsPage) -> str | None:
    """What a runs page searched, in words consistent with its rows (the CLI and the console print
    the same): the by-day walk went back until ``QUIET_DAYS`` days in a row had no run to list; an
    index the table does not have yet (an upgrade half done), whose runs are missing from the page."""
    notes = []
    if page.missing_indexes:
        names = " and ".join(page.missing_indexes)
        meanwhile = {
            "by-day": "--session and --scan list them",
            "session": "--scan lists them",
        }.get(page.method, "runs show RUN_ID reads each")
        notes.append(
            f"The table does not have the index {names} yet, or it is still filling: the runs this version "
            "of agentwake started are listed from it, and are missing here. Finish the upgrade (README, "
            f'"Upgrading a stack": deploy with UpgradeStep=all) and wait for the index to be ACTIVE; meanwhile {meanwhile}.'
        )
    if page.looked_back_to is not None:
        day = page.looked_back_to
        found = f"these {len(page.runs)} run(s) are all there is" if page.runs else "no run is there"
        notes.append(
            f"Searched the by-day index back to {day}, where it stopped after {QUIET_DAYS} days in a row "
            f"with no run to list: {found} from {day} on. Older runs: --since WHEN; "
            "runs written before the by-day index: --scan or --session."
        )
    return " ".join(notes) or None


#: what an operator does about a send in doubt (runs show, dlq show, the console, runs replay)
IN_DOUBT_HINT = (
    "the request left before a crash, or not: check the user's chat, then "
    "`agentwake dlq redrive --id MESSAGE --delivered DELIVERY_ID` (they have it: recorded, not sent again) "
    "or `--resend DELIVERY_ID` (they do not: sent again)"
)


# --------------------------------------------------------------------------------------------
# the transcript


@dataclass
class TranscriptEntry:
    """One line of a run's story. ``kind``: reply | tool | delivery | failure | outcome."""

    kind: str
    at: str | None
    title: str
    lines: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "at": self.at, "title": self.title, "lines": self.lines}


def _arguments(raw: Any) -> str:
    if isinstance(raw, str):
        try:
            return json.dumps(json.loads(raw), ensure_ascii=False, sort_keys=True)
        except (ValueError, RecursionError):  # not JSON, or a model's arguments nested too deep to parse
            return raw
    return json.dumps(raw, ensure_ascii=False, sort_keys=True)


def transcript(summary: RunSummary) -> list[TranscriptEntry]:
    """Every journaled step, delivery and failed attempt in time order, then the run's outcome.

    Nothing is shortened: replies, tool arguments and results appear whole. A step journaled by
    one attempt and replayed by the next appears once (where it happened).
    """
    entries: list[TranscriptEntry] = []
    for step in summary.steps:
        key = step["key"]
        parsed = parse_step_key(key)
        number = parsed.step if parsed is not None and parsed.step is not None else -1
        by = step.get(STEP_ATTEMPT)
        of = f" (attempt {by})" if isinstance(by, int) else ""
        if is_model_reply(key):
            via = step.get("provider_id") or "?"
            entry = TranscriptEntry("reply", step.get("at"), f"step {number}{of}: model reply via {via}")
            if step.get("text"):
                entry.lines.append(f"says: {step['text']}")
            if step.get("truncated"):
                entry.lines.append("(the reply was cut by the model's token limit)")
            if step.get("malformed"):  # the verdict journaled instead of a reply beyond the bounds
                entry.lines.append(f"refused, not journaled: {step['malformed']}")
            for call in step.get("tool_calls") or []:
                entry.lines.append(
                    f"calls {call.get('name')}({_arguments(call.get('arguments', '{}'))}) [id {call.get('id')}]"
                )
            if not entry.lines:
                entry.lines.append("(an empty reply)")
            usage = step.get("usage")
            if isinstance(usage, dict):
                entry.lines.append(
                    f"tokens: {usage.get('input_tokens', 0)} in / {usage.get('output_tokens', 0)} out, "
                    f"{usage.get('latency_ms', 0)} ms"
                )
        elif parsed is not None and parsed.kind in APPROVAL_KINDS:
            entry = _approval_entry(parsed.kind, step, number, of)
        elif is_final_delivery(key):
            delivered = step.get("delivery_id")
            title = f"final answer delivered as {delivered}{of}" if delivered else f"final answer not delivered{of}"
            entry = TranscriptEntry("final", step.get("at"), title)
            if step.get("not_delivered"):
                entry.lines.append(f"why: {step['not_delivered']}")
        else:
            tool = step.get("tool") or "?"
            entry = TranscriptEntry("tool", step.get("at"), f"step {number}{of}: tool {tool} returned")
            entry.lines.append(str(step.get("content", "")))
            if step.get("deliveries"):
                entry.lines.append(f"deliveries made: {', '.join(str(d) for d in step['deliveries'])}")
        entries.append(entry)
    answer = final_answer_entry(summary)
    if answer is not None:
        entries.append(answer)
    for d in summary.deliveries:
        lines = [d["text"], *(f"the user received it: {r}" for r in d.get("received") or ())]
        entries.append(
            TranscriptEntry("delivery", d.get("at"), f"delivery {d['delivery_id']} to session {d['session_id']}", lines)
        )
    for i in summary.in_doubt:
        entries.append(
            TranscriptEntry(
                "in-doubt",
                i.get("at"),
                f"delivery {i['delivery_id']}: sent? unknown ({in_doubt_line(i)})",
                [i["text"], IN_DOUBT_HINT],
            )
        )
    for f in summary.failures:
        entry = TranscriptEntry("failure", f.at, f"attempt {f.attempt} failed: {f.error_type}", [f.detail])
        entry.lines += [f"provider {pid}: {err}" for pid, err in f.provider_errors.items()]
        entry.lines.append(f"steps done before it failed: {f.steps_done}")
        entries.append(entry)
    entries.sort(key=lambda e: e.at or "")
    run = summary.run
    if run is not None:
        if run.status == "succeeded":
            title = f"attempt {run.attempts} succeeded: the run is done after {run.attempts} attempt(s)"
        elif run.status == "failed":
            title = f"the run is failed after {run.attempts} attempt(s) (a redrive resumes it)"
        elif run.status == "parked":
            waiting = getattr(run, "waiting_for", None)
            title = (
                f"attempt {run.attempts} parked: waiting for approval {waiting} (no failure, no retry spent; "
                "the decision resumes it)"
            )
        else:
            title = f"attempt {run.attempts} is running (or stopped without recording an outcome)"
        entries.append(TranscriptEntry("outcome", run.ended_at, title))
    return entries


def final_answer_entry(summary: RunSummary) -> TranscriptEntry | None:
    """A succeeded run's final answer as its note keeps it, when its last reply is not journaled (the
    commit of a run that writes a note leaves the reply out: issue 37), with the run's tokens from
    its record. None when the reply is journaled (a failed attempt wrote it, or deliver_final sent it)."""
    if summary.note is None or summary.run is None:
        return None
    run = summary.run
    if not summary.note:
        return TranscriptEntry(
            "reply",
            run.ended_at,
            "last reply: not journaled (a succeeded run's note keeps its final answer)",
            [f"no note of {run.run_id} was found in session {run.session_id}'s history (deleted?)"],
        )
    entry = TranscriptEntry(
        "reply",
        summary.note.get("at"),
        "last reply: the final answer as the run's note keeps it (redacted, at most its first 4,000 bytes; "
        "a succeeded run's last reply is not journaled)",
        [f"note: {summary.note.get('text', '')}"],
    )
    usage = run.usage or {}
    if usage.get("model_calls"):
        entry.lines.append(
            f"tokens of the run: {usage.get('input_tokens', 0)} in / {usage.get('output_tokens', 0)} out over "
            f"{usage['model_calls']} model call(s), {usage.get('latency_ms', 0)} ms"
            + "".join(f"; {pid}: {row.get('model') or '?'}" for pid, row in (usage.get("by_provider") or {}).items())
        )
    return entry


def _approval_entry(kind: str, step: dict[str, Any], number: int, of: str) -> TranscriptEntry:
    """A gated call's journal entries: the request as asked, its delivery, the decision (never a token)."""
    approval = step.get("approval_id") or "?"
    if kind == "approval":
        entry = TranscriptEntry(
            "approval",
            step.get("at"),
            f"step {number}{of}: {step.get('tool') or '?'} needs approval ({step.get('rule') or '?'}): asked as {approval}",
        )
        entry.lines.append(
            f"arguments as shown: {json.dumps(step.get('arguments'), ensure_ascii=False, sort_keys=True)}"
        )
        then = "approved" if step.get("on_expiry") == "approve" else "rejected"
        entry.lines.append(f"expires {step.get('expiry_at') or '?'} (then {then})")
        return entry
    if kind == "asked":
        return TranscriptEntry(
            "approval", step.get("at"), f"step {number}{of}: request {approval} delivered as {step.get('delivery_id')}"
        )
    expired = " (nobody decided in time)" if step.get("expired") else ""
    entry = TranscriptEntry(
        "approval",
        step.get("at"),
        f"step {number}: {approval} {step.get('decision') or '?'} by {step.get('by') or '?'} via {step.get('via') or '?'}{expired}",
    )
    if step.get("reason"):
        entry.lines.append(f"why: {step['reason']}")
    return entry
