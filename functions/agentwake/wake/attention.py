"""What a run owes the user's attention and what it cost, around ``execute_run``.

- the run's ledger: its session's caps and budgets, today's counters when the session has daily
  limits (one read), and the deliveries earlier attempts already made (from the journal);
- the note's last line: whether the final answer reached the user;
- the run's usage totals (tokens, latency, estimated cost per provider) for the run record;
- EMF metrics InputTokens / OutputTokens with a ``provider`` dimension, one single-metric blob per
  provider so the dimension never leaks onto the handler's other metrics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentwake.agent.journal import StepJournal
from agentwake.agent.ledger import RunLedger
from agentwake.observability import logger, metrics
from agentwake.wake.agent_factory import has_daily_limits, session_ledger


@dataclass
class RunBooks:
    journal: StepJournal
    ledger: RunLedger
    #: agentwake.store.daily.DailyCounters when the session has daily limits, else None
    counters: Any = None


def open_books(store: Any, session: Any, run_id: str, *, fresh: bool = False, usage: Any = None) -> RunBooks:
    """The run's journal and ledger. ``fresh``: a first attempt, whose journal is empty and is not
    read. ``usage``: today's counters of a session with daily limits as the wake's batch read found
    them (agentwake.store.dynamo.DailyUsage); without them, they cost one read here."""
    journal: Any = store.journal(run_id, fresh=fresh)
    counters = None
    tokens_today = deliveries_today = 0
    if has_daily_limits(session):
        from agentwake.store.daily import CountingJournal, DailyCounters

        if usage is not None and usage.session_id == session.session_id:
            # counted on the day they were read: the run's limits and its updates use one counter
            counters = DailyCounters(store, session.session_id, day=usage.day)
            tokens_today, deliveries_today = usage.tokens, usage.deliveries
        else:
            counters = DailyCounters(store, session.session_id)
            tokens_today, deliveries_today = counters.read()
        if session.max_tokens_per_day is not None:
            journal = CountingJournal(journal, counters)
    ledger = session_ledger(session, tokens_today=tokens_today, deliveries_today=deliveries_today)
    for delivery_id in journaled_deliveries(journal):
        ledger.record_delivery(delivery_id, fresh=False)
    return RunBooks(journal=journal, ledger=ledger, counters=counters)


def journaled_deliveries(journal: Any) -> list[str]:
    """Delivery ids that send_message_to_user calls of earlier attempts made (journal order)."""
    entries: dict[str, dict[str, Any]] = getattr(journal, "entries", {}) or {}
    out: list[str] = []
    for key in sorted(entries):
        if ".tool." in key:
            out += [str(d) for d in entries[key].get("deliveries") or ()]
    return out


def note_with_final(note: str, runner: Any) -> str:
    """The history note, saying whether the final answer was delivered to the user."""
    if runner.final_delivery_id:
        return f"{note}\n\n[final answer delivered to the user: delivery_id={runner.final_delivery_id}]"
    reason = runner.final_not_delivered or "not sent"
    return f"{note}\n\n[final answer not delivered to the user: {reason}]"


def run_usage(runner: Any, session: Any, settings: Any) -> dict[str, Any] | None:
    """Usage totals of the run with the estimated cost (session prices over the stack's)."""
    if runner is None:
        return None
    prices: dict[str, Any] = dict(getattr(settings, "prices", None) or {})
    for key, price in (getattr(session, "prices", None) or {}).items():
        prices[key] = price.model_dump() if hasattr(price, "model_dump") else dict(price)
    return runner.ledger.totals(prices)


def emit_usage_metrics(runner: Any) -> None:
    """InputTokens / OutputTokens of this attempt's model calls, by provider (replayed calls were
    counted by the attempt that made them)."""
    from aws_lambda_powertools.metrics import MetricUnit, single_metric
    from aws_lambda_powertools.metrics.functions import is_metrics_disabled

    if is_metrics_disabled():  # single_metric prints even then; Metrics.flush_metrics does not
        return
    fresh: dict[str, list[int]] = {}
    for call in runner.ledger.calls:
        if call.replayed:
            continue
        row = fresh.setdefault(call.provider_id or "?", [0, 0])
        row[0] += call.usage.input_tokens
        row[1] += call.usage.output_tokens
    dimensions = dict(metrics.default_dimensions or {})
    if getattr(metrics, "service", None):
        dimensions.setdefault("service", str(metrics.service))
    for provider_id, (input_tokens, output_tokens) in fresh.items():
        for name, value in (("InputTokens", input_tokens), ("OutputTokens", output_tokens)):
            try:
                with single_metric(
                    name=name,
                    unit=MetricUnit.Count,
                    value=value,
                    namespace=metrics.namespace,
                    default_dimensions=dimensions,
                ) as metric:
                    metric.add_dimension(name="provider", value=provider_id[:250])
            except Exception:  # a metric must never fail a run
                logger.exception("could not emit token metrics")
