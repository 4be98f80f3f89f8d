"""An operator sees the wakes an agent scheduled for itself: `jobs list` and `jobs show` print the
origin (agent, with the run and the tool call) and the note; the console's Jobs page shows the same;
`jobs delete` removes one like any job (docs/self-scheduling.md)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from agentwake_ops.context import OpsContext, resolve_context
from tests.e2e.conftest import Cli, Stack, cli_json
from tests.support.builders import SCRIPTED_ARGS, seed_job
from tests.support.console import ConsoleClient, serving, text_of

NOTE = "check the <b>deploy</b> of build 42"
CALL = "bg:t-deploy#0#0"


@pytest.fixture
def ctx(stack: Stack) -> OpsContext:
    return resolve_context(invoke_async=stack.invoke_async)


@pytest.fixture
def console(ctx: OpsContext) -> Iterator[ConsoleClient]:
    with serving(ctx) as (_, client):
        yield client


@pytest.fixture
def wake(cli: Cli, stack: Stack) -> str:
    """An agent's recurring wake (as schedule_wake writes it) that fired 3 of its 5 times."""
    cli("sessions", "put", "s-self", *SCRIPTED_ARGS)
    seed_job(
        stack.store,
        "wake-0123456789abcdef",
        "s-self",
        origin="agent",
        created_by_run="bg:t-deploy",
        created_by_call=CALL,
        note=NOTE,
        max_fires=5,
        fires=3,
    )
    return "wake-0123456789abcdef"


def test_jobs_list_and_show_print_the_origin_and_the_note(cli: Cli, wake: str) -> None:
    # WHEN an operator lists the jobs (wide) and shows the wake
    listed = " ".join(cli("jobs", "list", "--wide").stdout.split())
    shown = " ".join(cli("jobs", "show", wake).stdout.split())
    as_json = cli_json(cli, "jobs", "show", wake)
    # THEN both say an agent made it, by which call, and what its note is
    assert f"agent (call {CALL})" in listed and NOTE in listed
    assert f"agent (call {CALL})" in shown and "bg:t-deploy" in shown and NOTE in shown
    assert "3 of at most 5" in shown
    assert (as_json["job"]["origin"], as_json["job"]["note"]) == ("agent", NOTE)


def test_the_jobs_page_shows_the_origin_and_the_note_as_text(console: ConsoleClient, wake: str) -> None:
    # WHEN the console's jobs page and the wake's page are opened
    listing = console.page("/jobs")
    page = console.page(f"/jobs?id={wake}")
    # THEN the list row and the facts carry the origin and the note, the note as text (never markup)
    headers = re.findall(r"<th>(.*?)</th>", listing)
    assert "origin" in headers and "note" in headers
    row_text = " ".join(text_of(listing).split())
    assert f"agent (call {CALL})" in row_text and NOTE in row_text
    facts = " ".join(text_of(page).split())
    assert f"origin agent (call {CALL})" in facts and f"note {NOTE}" in facts
    assert "<b>deploy</b>" not in listing and "<b>deploy</b>" not in page


def test_an_operator_deletes_a_wake_like_any_job(cli: Cli, stack: Stack, wake: str) -> None:
    # WHEN the operator deletes it  THEN it is gone (its schedule with it: jobs delete)
    cli("jobs", "delete", wake, "--yes")
    assert stack.store.records.get_job(wake) is None
