"""What a run has spent and sent: model calls with their tokens, deliveries, and the limits on both.

The runner feeds the ledger from every model reply (journaled replies too, so a retry or a redrive
knows what earlier attempts spent without asking the model again) and from every delivery. The
send tool asks it before sending; the runner asks it before and after each model call. Budgets
and caps are session settings (``SessionConfig``); ``None`` means no limit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentwake.agent.types import Usage


@dataclass(frozen=True)
class Limits:
    """The runaway guards of one run."""

    #: deliveries through ``send_message_to_user`` in one run
    max_deliveries_per_run: int | None = 3
    #: input + output tokens of every model call of the run (every attempt, journaled ones too)
    max_tokens_per_run: int | None = None
    #: input + output tokens of the session today (UTC), all runs together
    max_tokens_per_day: int | None = None
    #: deliveries to the session today (UTC), all runs together, the final answer's included
    max_deliveries_per_day: int | None = None


@dataclass(frozen=True)
class ModelCall:
    step: int
    provider_id: str
    usage: Usage
    #: read back from the journal (billed by an earlier attempt), not made by this attempt
    replayed: bool = False


@dataclass
class RunLedger:
    limits: Limits = field(default_factory=Limits)
    #: the session's counters for today as read when the run started (they include what earlier
    #: attempts of this run already counted, so only this attempt's fresh spending is added)
    tokens_today: int = 0
    deliveries_today: int = 0
    calls: list[ModelCall] = field(default_factory=list)
    #: delivery ids this run made, in order (earlier attempts' too, replayed from the journal)
    deliveries: list[str] = field(default_factory=list)
    fresh_deliveries: int = 0

    # --- tokens -------------------------------------------------------------------------------

    def record_call(self, step: int, provider_id: str, usage: Usage | None, *, replayed: bool) -> None:
        self.calls.append(ModelCall(step, provider_id, usage or Usage(), replayed))

    @property
    def input_tokens(self) -> int:
        return sum(c.usage.input_tokens for c in self.calls)

    @property
    def output_tokens(self) -> int:
        return sum(c.usage.output_tokens for c in self.calls)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def fresh_tokens(self) -> int:
        return sum(c.usage.total_tokens for c in self.calls if not c.replayed)

    def budget_exceeded(self, *, before_call: bool = False) -> str | None:
        """Why the run must stop spending, or None. ``before_call``: a budget exactly used up
        already forbids the next call; after a call, only going over it counts."""

        def over(used: int, limit: int) -> bool:
            return used >= limit if before_call else used > limit

        run_limit = self.limits.max_tokens_per_run
        if run_limit is not None and over(self.total_tokens, run_limit):
            return (
                f"the run used {self.total_tokens} tokens (input {self.input_tokens}, output "
                f"{self.output_tokens}) over {len(self.calls)} model calls; its budget is {run_limit} "
                "tokens per run (session setting max_tokens_per_run)"
            )
        day_limit = self.limits.max_tokens_per_day
        today = self.tokens_today + self.fresh_tokens
        if day_limit is not None and over(today, day_limit):
            return (
                f"the session used {today} tokens today (UTC); its budget is {day_limit} tokens per day "
                "(session setting max_tokens_per_day)"
            )
        return None

    # --- deliveries -----------------------------------------------------------------------------

    def record_delivery(self, delivery_id: str, *, fresh: bool) -> None:
        if delivery_id in self.deliveries:
            return
        self.deliveries.append(delivery_id)
        if fresh:
            self.fresh_deliveries += 1

    @property
    def delivered_today(self) -> int:
        return self.deliveries_today + self.fresh_deliveries

    def remaining_deliveries(self) -> int | None:
        """How many more messages this run may send now (the smaller of both caps), None if uncapped."""
        left = []
        if self.limits.max_deliveries_per_run is not None:
            left.append(self.limits.max_deliveries_per_run - len(self.deliveries))
        if self.limits.max_deliveries_per_day is not None:
            left.append(self.limits.max_deliveries_per_day - self.delivered_today)
        return max(0, min(left)) if left else None

    def delivery_refused(self, *, final: bool = False) -> str | None:
        """Why one more delivery may not be sent, or None. The final answer (deliver_final) is the
        run's result, not a runaway: only the daily cap applies to it."""
        run_cap = self.limits.max_deliveries_per_run
        if not final and run_cap is not None and len(self.deliveries) >= run_cap:
            return (
                f"this run already delivered {len(self.deliveries)} messages, the most a run may send "
                f"(session setting max_deliveries_per_run={run_cap}); the message was not sent"
            )
        day_cap = self.limits.max_deliveries_per_day
        if day_cap is not None and self.delivered_today >= day_cap:
            return (
                f"this session was sent {self.delivered_today} messages today (UTC), the most it may get "
                f"(session setting max_deliveries_per_day={day_cap}); the message was not sent"
            )
        return None

    # --- what it cost ---------------------------------------------------------------------------

    def totals(self, prices: Mapping[str, Mapping[str, float]] | None = None) -> dict[str, Any]:
        """Token totals of the run, per provider and overall, with an estimated cost where the
        price table (keyed by provider id, else by model) names a price. JSON-able."""
        return usage_totals(
            [{"provider_id": c.provider_id, **c.usage.to_dict()} for c in self.calls],
            prices,
        )


def usage_totals(
    calls: list[dict[str, Any]], prices: Mapping[str, Mapping[str, float]] | None = None
) -> dict[str, Any]:
    """Sum per-call usage dicts (``provider_id``, ``model``, ``input_tokens``, ``output_tokens``,
    ``latency_ms``) per provider and overall; price each provider with ``prices``
    (``{"input_per_mtok": USD, "output_per_mtok": USD}`` per million tokens)."""
    prices = prices or {}
    by_provider: dict[str, dict[str, Any]] = {}
    for call in calls:
        pid = str(call.get("provider_id") or "?")
        row = by_provider.setdefault(
            pid,
            {"model": call.get("model") or "", "calls": 0, "input_tokens": 0, "output_tokens": 0, "latency_ms": 0},
        )
        row["calls"] += 1
        row["input_tokens"] += int(call.get("input_tokens") or 0)
        row["output_tokens"] += int(call.get("output_tokens") or 0)
        row["latency_ms"] += int(call.get("latency_ms") or 0)
        row["model"] = row["model"] or call.get("model") or ""
    total_cost: float | None = None
    for pid, row in by_provider.items():
        row["total_tokens"] = row["input_tokens"] + row["output_tokens"]
        price = prices.get(pid) or (prices.get(row["model"]) if row["model"] else None)
        if price is None:
            row["estimated_cost_usd"] = None
            continue
        cost = (
            row["input_tokens"] * float(price.get("input_per_mtok", 0.0))
            + row["output_tokens"] * float(price.get("output_per_mtok", 0.0))
        ) / 1_000_000
        row["estimated_cost_usd"] = round(cost, 10)
        total_cost = (total_cost or 0.0) + cost
    input_tokens = sum(r["input_tokens"] for r in by_provider.values())
    output_tokens = sum(r["output_tokens"] for r in by_provider.values())
    return {
        "model_calls": sum(r["calls"] for r in by_provider.values()),
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "total_tokens": input_tokens + output_tokens,
        "latency_ms": sum(r["latency_ms"] for r in by_provider.values()),
        "estimated_cost_usd": None if total_cost is None else round(total_cost, 10),
        "by_provider": by_provider,
    }
