"""The console's view of receipts and sends in doubt (issue 34, design §9): the DLQ message page and
the run page list a send in doubt ("sent? unknown"); its two answers (the user has it / does not)
are buttons that post, CSRF-protected, to a confirmation page, then to ``dlq redrive --verify
--delivered|--resend``. Over plain HTTP on moto, as tests/e2e/test_console_http.py."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from agentwake_ops.context import OpsContext, resolve_context
from tests.e2e.conftest import Cli, Stack, cli_json
from tests.e2e.test_ops_dlq import FIXED
from tests.e2e.test_ops_in_doubt import TEXT, dead_lettered_with_a_send_in_doubt, deliveries_in_history, item
from tests.support.console import ConsoleClient, csrf_of, serving, text_of


@pytest.fixture
def console(stack: Stack) -> Iterator[ConsoleClient]:
    ctx: OpsContext = resolve_context(invoke_async=stack.invoke_async)
    with serving(ctx) as (_, client):
        yield client


def test_the_message_and_run_pages_list_the_send_in_doubt_and_its_two_answers(
    cli: Cli, stack: Stack, console: ConsoleClient
) -> None:
    # GIVEN a dead-lettered run whose Telegram send is in doubt
    run_id, delivery_id, message_id = dead_lettered_with_a_send_in_doubt(cli, stack, "s-web-doubt")
    # WHEN its DLQ message page and its run page are opened
    message = console.page(f"/dlq/message?id={message_id}")
    run = console.page(f"/run?id={run_id}")
    # THEN both list it: sent? unknown, where it went, when, the text's start, and what to do
    for page in (message, run):
        text = text_of(page)
        assert "sent? unknown (1)" in text and delivery_id in text and "telegram in 99" in text
        assert TEXT in text and "--delivered DELIVERY_ID" in text
    # AND the message page has both answers, posting to the settle confirmation with the CSRF token
    assert "action='dlq/settle-confirm'" in message and "value='delivered'" in message and "value='resend'" in message
    assert csrf_of(message)
    # AND the run's timeline says it too
    assert f"delivery {delivery_id}: sent? unknown (telegram in 99)" in text_of(run)


def test_mark_delivered_is_confirmed_then_recorded_once_and_redriven(
    cli: Cli, stack: Stack, console: ConsoleClient
) -> None:
    # GIVEN a dead-lettered run with a send in doubt, its provider since fixed
    run_id, delivery_id, message_id = dead_lettered_with_a_send_in_doubt(cli, stack, "s-web-mark")
    cli("sessions", "put", "s-web-mark", "--provider", json.dumps(FIXED))
    page = console.page(f"/dlq/message?id={message_id}")
    form = [("csrf", csrf_of(page)), ("id", message_id), ("delivery", delivery_id), ("how", "delivered")]

    # WHEN "the user has it" is pressed
    confirm = console.post("/dlq/settle-confirm", form)
    # THEN a confirmation page says what happens; nothing is written yet
    assert confirm.status == 200, confirm.text[:2000]
    said = text_of(confirm.text)
    assert f"Record {delivery_id} as delivered by an operator (telegram in 99)" in said and "redrive" in said
    assert item(stack, run_id, f"DELIVERY#{delivery_id}") is None
    # AND a post without the CSRF token does nothing
    assert console.post("/dlq/settle", form[1:]).status == 403
    assert item(stack, run_id, f"DELIVERY#{delivery_id}") is None

    # WHEN it is confirmed
    done = console.post("/dlq/settle", form)
    # THEN the delivery is recorded once (marker with the operator's receipt, one history entry) and redriven
    assert done.status == 200, done.text[:2000]
    assert "Recorded " in text_of(done.text) and "Redrove 1 message(s)." in text_of(done.text)
    assert len(deliveries_in_history(stack, "s-web-mark", delivery_id)) == 1
    assert stack.counts(stack.res.dlq_url) == (0, 0)
    run = cli_json(cli, "runs", "show", run_id)
    assert run["in_doubt"] == [] and run["deliveries"][0]["received"] == [
        "telegram message in 99 (marked delivered by an operator)"
    ]
    # AND the run page shows the receipt
    assert "marked delivered by an operator" in text_of(console.page(f"/run?id={run_id}"))
    # AND the same form again (a second press, a reload) is refused with the reason; nothing written
    again = console.post("/dlq/settle", form)
    assert again.status == 400 and "not in the DLQ (redriven or deleted since): nothing was settled" in text_of(
        again.text
    )
    assert len(deliveries_in_history(stack, "s-web-mark", delivery_id)) == 1


def test_resend_is_confirmed_then_marks_the_send_not_sent(cli: Cli, stack: Stack, console: ConsoleClient) -> None:
    run_id, delivery_id, message_id = dead_lettered_with_a_send_in_doubt(cli, stack, "s-web-resend")
    cli("sessions", "put", "s-web-resend", "--provider", json.dumps(FIXED))
    page = console.page(f"/dlq/message?id={message_id}")
    form = [("csrf", csrf_of(page)), ("id", message_id), ("delivery", delivery_id), ("how", "resend")]
    confirm = console.post("/dlq/settle-confirm", form)
    assert confirm.status == 200 and "the user sees it twice" in text_of(confirm.text)
    done = console.post("/dlq/settle", form)
    assert done.status == 200 and "Marked " in text_of(done.text) and "Redrove 1 message(s)." in text_of(done.text)
    assert item(stack, run_id, f"SENDING#{delivery_id}#telegram")["state"]["S"] == "not_sent"  # type: ignore[index]
    assert item(stack, run_id, f"DELIVERY#{delivery_id}") is None
