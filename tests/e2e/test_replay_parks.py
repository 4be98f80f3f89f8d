"""``runs replay`` of a run that would park (a gated tool call with no decision in its journal) says
so and calls nothing, asks nobody, writes nothing; ``dlq redrive --verify`` counts it as no failure,
with that note (docs/operations.md "Parked runs")."""

from __future__ import annotations

import json
from typing import Any

from tests.e2e.conftest import Cli, Stack, cli_json
from tests.e2e.test_replay import SECOND_TICKET, failed_run_that_opened_a_ticket, item_count


def test_a_replay_that_would_park_says_so_and_calls_nothing(cli: Cli, stack: Stack, httpserver: Any) -> None:
    # GIVEN a run that opened a ticket at step 0, failed on auth until dead-lettered, and a session whose
    # create_ticket now asks before acting when the title is "second"
    httpserver.expect_request("/tickets").respond_with_json({"ticket": "T-1"})
    task_id = failed_run_that_opened_a_ticket(
        cli, stack, httpserver, "s-gate", approval={"when": [{"arg": "title", "eq": "second"}]}
    )
    items = item_count(stack)
    # WHEN it is replayed with a provider that opens a second ticket at step 1
    data = json.loads(cli("runs", "replay", f"bg:{task_id}", "--provider", json.dumps(SECOND_TICKET), "--json").stdout)
    shown = " ".join(cli("runs", "replay", f"bg:{task_id}", "--provider", json.dumps(SECOND_TICKET)).stdout.split())
    # THEN it ends PARKED at that call, naming the tool, its arguments and the rule
    assert data["outcome"] == "PARKED"
    park = data["would_park"]
    assert (park["step"], park["tool"], park["arguments"]) == (1, "create_ticket", {"title": "second"})
    assert "title" in park["rule"] and "second" in park["rule"]
    assert "would park at step 1: create_ticket needs approval" in shown and "nothing called, nobody asked" in shown
    # AND the tool's server saw no new request, nothing was delivered nor written (no approval either)
    assert len(httpserver.log) == 1 and data["would_deliver"] == []
    assert item_count(stack) == items
    assert cli_json(cli, "approvals", "list") == []
    # AND `dlq redrive --verify` counts it as no failure, saying it would park
    cli("sessions", "put", "s-gate", "--provider", json.dumps(SECOND_TICKET))
    [row] = cli_json(cli, "dlq", "list")
    verified = cli("dlq", "redrive", "--id", row["message_id"][:8], "--verify", "--dry-run")
    said = " ".join((verified.stdout + verified.stderr).split())
    assert "PARKED" in said and "would park at step 1" in said and "refused" not in said
