"""The console cancels a task as ``agentwake tasks cancel`` does: a button on the task page, a
confirmation page naming the task, then the cancel (CSRF-checked POSTs, like the DLQ's actions)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentwake_ops.console.links import cancel_button
from agentwake_ops.context import OpsContext, resolve_context
from tests.e2e.conftest import Cli, Stack, cli_json
from tests.support.builders import SCRIPTED_ARGS
from tests.support.console import ConsoleClient, csrf_of, serving, text_of


@pytest.fixture
def ctx(stack: Stack) -> OpsContext:
    return resolve_context(invoke_async=stack.invoke_async)


@pytest.fixture
def console(ctx: OpsContext) -> Iterator[ConsoleClient]:
    with serving(ctx) as (_, client):
        yield client


def test_a_task_is_cancelled_from_the_console_after_a_confirmation(
    cli: Cli, stack: Stack, ctx: OpsContext, console: ConsoleClient
) -> None:
    # GIVEN a running task, and the console's CSRF token (from any page with a form)
    cli("sessions", "put", "s1", *SCRIPTED_ARGS)
    task_id = cli_json(cli, "tasks", "register", "--session", "s1", "--tool", "web_research")["task_id"]
    csrf = csrf_of(console.page("/dlq"))
    running = ctx.store.records.get_task(task_id)
    assert running is not None and "cancel-task" in cancel_button(running, csrf)
    # WHEN a form without the CSRF token asks THEN it is refused, nothing changed
    assert console.post("/task/cancel", [("id", task_id)]).status == 403
    # WHEN the button is pressed THEN a confirmation names the task, and nothing changed yet
    confirm = console.post("/task/cancel-confirm", [("csrf", csrf), ("id", task_id)])
    assert confirm.status == 200 and f"Cancel task {task_id} (web_research, session s1)?" in text_of(confirm.text)
    assert cli_json(cli, "tasks", "show", task_id)["status"] == "running"
    # WHEN it is confirmed
    done = console.post("/task/cancel", [("csrf", csrf), ("id", task_id)])
    # THEN the task is cancelled as by the CLI, and its page offers the button no more
    assert done.status == 200 and "will not wake the agent" in text_of(done.text)
    shown = cli_json(cli, "tasks", "show", task_id)
    assert (shown["status"], shown["outcome_reason"]) == ("cancelled", "cancelled by an operator (console)")
    cancelled = ctx.store.records.get_task(task_id)
    assert cancelled is not None and cancel_button(cancelled, csrf) == ""
    # AND an unknown task is a one-line error
    unknown = console.post("/task/cancel", [("csrf", csrf), ("id", "nope")])
    assert unknown.status == 400 and "no task 'nope'" in text_of(unknown.text)
