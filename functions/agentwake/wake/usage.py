"""What a run tells once it ended: its metrics, and for a DONE run the note the history keeps.

``settle`` is the one call after the run (``agent.woken.RunResult``, a plain value: its usage is
priced by the agent's ledger):

- ``emit_metrics``: EMF metrics ``Steps``, ``ProviderFailover``, and ``InputTokens`` /
  ``OutputTokens`` with a ``provider`` dimension, on the invocation's own line of that provider so
  the dimension never leaks onto the handler's other metrics. Metrics never decide an outcome;
- ``history_note``: the note of a DONE run, ending with what reached the user, in plain words.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentwake.agent.runner import ALREADY_SENT, AgentState
from agentwake.observability import add_metric, add_provider_metrics, logger
from agentwake.trust.redact import redact

if TYPE_CHECKING:
    from agentwake.agent.woken import RunResult
    from agentwake.wake.spec import RunSpec


def settle(spec: RunSpec, result: RunResult) -> str | None:
    """The run's metrics emitted; the history note of a DONE run (None for ERROR)."""
    emit_metrics(result)
    return history_note(spec, result) if result.state is AgentState.DONE else None


#: the note keeps at most this much of a task's result and of the final answer (UTF-8 bytes), each
#: cut with a visible marker: a note is written by its run's commit (2 WRU a KB, in a transaction)
#: and read by every later window of the session, so a 20,000-character result made the commit pay
#: about 40 WRU for the note alone. The run itself saw the whole result in its prompt (the wake's
#: 20,000 characters); a delivered answer is whole in its own history entry (kind ``delivery``).
#: A note item stays under 9 KB: at most 18 WRU, whatever the result or the answer (issue 37)
NOTE_RESULT_BYTES = 4_000
NOTE_FINAL_BYTES = 4_000


def note_cut(text: str, max_bytes: int) -> str:
    """``text`` as a note keeps it: redacted, then at most ``max_bytes`` UTF-8 bytes, the cut said in
    it (redacted first: a secret the cut splits would no longer match, and its head would be kept)."""
    from agentwake.store.itemsize import cut_text

    return cut_text(redact(text), max_bytes, why=f"of it: a note keeps the first {max_bytes:,}")


def history_note(spec: RunSpec, result: RunResult) -> str:
    """The note of a DONE run: what woke it, the final answer (at most ``NOTE_FINAL_BYTES``), whether
    that reached the user."""
    final = note_cut(result.completion_text, NOTE_FINAL_BYTES)
    note = f"{spec.note_head}{spec.note_sep}{final}" if final else spec.note_head
    # the head quotes what woke the run (a producer's result text): it passes the redactor too
    return note_with_final(redact(note), result)


def note_with_final(note: str, result: RunResult) -> str:
    """The history note, ending with what reached the user, in plain words: the messages the run
    sent, and whether this final answer was sent too (and why not). The woken agent reads it later."""
    return f"{note}\n\n[{what_the_user_got(result)}]"


def what_the_user_got(result: RunResult) -> str:
    """What a DONE run sent the user: ``the user was sent 1 message from this run; this final
    answer was not sent to them`` (docs/woken-agent.md, "deliver_final")."""
    sent = result.messages_sent
    messages = f"{sent} message{'' if sent == 1 else 's'}"
    if result.final_delivery_id:
        also = f"{messages} from this run and " if sent else ""
        return f"the user was sent {also}this final answer (delivery_id={result.final_delivery_id})"
    why = result.final_not_delivered or "not sent"
    if not sent:
        return f"nothing from this run reached the user: this final answer was not sent to them ({why})"
    because = "" if why == ALREADY_SENT else f" ({why})"
    return f"the user was sent {messages} from this run; this final answer was not sent to them{because}"


def emit_metrics(result: RunResult) -> None:
    """The run's metrics. They never decide an outcome: this runs between a final answer's send and
    the commit that records it, so a metrics error is logged, not raised."""
    try:
        emit_run_metrics(result)
        emit_usage_metrics(result)
    except Exception:
        logger.exception("could not emit the run's metrics; the run's outcome is unaffected")


def emit_run_metrics(result: RunResult) -> None:
    add_metric(name="Steps", unit="Count", value=result.steps_done)
    if result.failovers:
        add_metric(name="ProviderFailover", unit="Count", value=result.failovers)


def emit_usage_metrics(result: RunResult) -> None:
    """InputTokens / OutputTokens of this attempt's model calls, by provider (replayed calls were
    counted by the attempt that made them): a value each on the invocation's line of that provider
    (``observability.add_provider_metrics``: one EMF line a provider per invocation carrying both,
    printed with the invocation's other metrics; CloudWatch Logs bills the line)."""
    from aws_lambda_powertools.metrics.functions import is_metrics_disabled

    if is_metrics_disabled():
        return
    fresh: dict[str, list[int]] = {}
    for call in result.calls:
        if call.replayed:
            continue
        row = fresh.setdefault(call.provider_id or "?", [0, 0])
        row[0] += call.usage.input_tokens
        row[1] += call.usage.output_tokens
    for provider_id, (input_tokens, output_tokens) in fresh.items():
        try:
            add_provider_metrics(provider_id, {"InputTokens": input_tokens, "OutputTokens": output_tokens})
        except Exception:  # a metric must never fail a run
            logger.exception("could not emit token metrics")
