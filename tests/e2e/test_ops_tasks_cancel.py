"""``agentwake tasks cancel``: an operator cancels a task; the agent is never woken for it, and its
work's later completion is refused as late (docs/operations.md)."""

from __future__ import annotations

from tests.e2e.conftest import Cli, Stack, cli_json
from tests.support.builders import SCRIPTED_ARGS


def test_an_operator_cancels_a_task_and_its_later_completion_wakes_nothing(cli: Cli, stack: Stack) -> None:
    # GIVEN a running task
    cli("sessions", "put", "s1", *SCRIPTED_ARGS)
    registered = cli_json(cli, "tasks", "register", "--session", "s1", "--tool", "web_research")
    task_id, token = registered["task_id"], registered["task_token"]
    # WHEN an operator cancels it without --yes and no terminal to ask THEN it is refused, nothing changed
    refused = cli("tasks", "cancel", task_id, expect=1)
    assert "pass --yes" in refused.stderr
    assert cli_json(cli, "tasks", "show", task_id)["status"] == "running"
    # WHEN they cancel it with --yes
    said = cli("tasks", "cancel", task_id, "--yes").stdout
    assert "will not wake the agent" in said
    shown = cli_json(cli, "tasks", "show", task_id)
    assert (shown["status"], shown["outcome"], shown["outcome_reason"]) == (
        "cancelled",
        "failed",
        "cancelled by an operator (agentwake tasks cancel)",
    )
    # AND its work then completes
    late = cli("tasks", "finish", task_id, "--token", token, "--status", "succeeded", "--result", "x", expect=1)
    # THEN the completion is refused in one line, nothing reaches the result queue, no run exists
    assert "was cancelled" in late.stderr and "nothing was sent" in late.stderr and token not in late.stderr
    assert stack.counts(stack.res.queue_url) == (0, 0)
    assert "none (cancelled)" in cli("tasks", "show", task_id).stdout  # its wake runs: it never wakes
    assert cli_json(cli, "tasks", "show", task_id)["late_completions"] == 1
    # AND the table shows it cancelled; a second cancel says it already is, without asking twice
    assert "cancelled" in cli("tasks", "list", "--status", "cancelled").stdout
    assert cli_json(cli, "tasks", "cancel", task_id, "--yes")["status"] == "cancelled"
