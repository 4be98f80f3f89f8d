"""A send in doubt settled by the operator (issue 34, design §4 Telegram, §9): a dead-lettered run
whose intent (``SENDING#{delivery_id}#{target}``) has no marker is listed as "sent? unknown" by
``dlq show``, ``runs show`` and ``runs replay``; ``dlq redrive --delivered ID`` records it (marker with
an operator receipt, one history entry) and redrives, never twice; ``--resend ID`` marks it
``not_sent`` and redrives. On moto, with the CLI in-process (tests/e2e/conftest.py). The intent is
written as the agreed format says: the core that writes it is built beside this."""

from __future__ import annotations

import json
from typing import Any

from tests.e2e.conftest import Cli, Stack, cli_json
from tests.e2e.test_ops_dlq import ALWAYS_FAILS, make_failed_background_run

TEXT = "Your flight leaves at 6:40 from gate 12."


def dead_lettered_with_a_send_in_doubt(cli: Cli, stack: Stack, session: str) -> tuple[str, str, str]:
    """A dead-lettered run with a Telegram send in doubt: (run id, delivery id, DLQ message id)."""
    task_id = make_failed_background_run(cli, stack, session, ALWAYS_FAILS)
    stack.poll_until_dead_lettered()
    run_id = f"bg:{task_id}"
    delivery_id = f"{run_id}#0#0"
    put_intent(stack, run_id, delivery_id, session)
    [row] = [r for r in cli_json(cli, "dlq", "list") if r["run_id"] == run_id]
    return run_id, delivery_id, row["message_id"]


def put_intent(stack: Stack, run_id: str, delivery_id: str, session: str, state: str = "sending") -> None:
    stack.store.table.db.put_item(
        TableName=stack.res.table,
        Item={
            "pk": {"S": f"RUN#{run_id}"},
            "sk": {"S": f"SENDING#{delivery_id}#telegram"},
            "session_id": {"S": session},
            "channel": {"S": "telegram"},
            "target": {"S": "telegram"},
            "where": {"S": "99"},
            "text": {"S": TEXT},
            "at": {"S": "2026-12-03T09:00:00Z"},
            "state": {"S": state},
            "expires_at": {"N": "1999999999"},
        },
    )


def item(stack: Stack, run_id: str, sk: str) -> dict[str, Any] | None:
    return stack.store.table.read_item(f"RUN#{run_id}", sk)


def deliveries_in_history(stack: Stack, session: str, delivery_id: str) -> list[Any]:
    return [e for e in stack.store.history.history(session) if e.delivery_id == delivery_id]


def test_delivered_records_the_send_once_and_redrives(cli: Cli, stack: Stack) -> None:
    # GIVEN a dead-lettered run whose Telegram send is in doubt (an intent, no marker)
    run_id, delivery_id, message_id = dead_lettered_with_a_send_in_doubt(cli, stack, "s-doubt")

    # WHEN the operator looks at the message and the run
    shown = cli_json(cli, "dlq", "show", message_id[:8])
    table = cli("dlq", "show", message_id[:8]).stdout
    run = cli_json(cli, "runs", "show", run_id)
    # THEN the send is listed as "sent? unknown", with where it went, when, and its text
    [doubt] = shown["in_doubt"]
    assert (doubt["delivery_id"], doubt["sent"], doubt["channel"], doubt["where"]) == (
        delivery_id,
        "unknown",
        "telegram",
        "99",
    )
    assert doubt["text"] == TEXT and run["in_doubt"] == [doubt]
    assert "sent? unknown (1)" in table and "telegram in 99" in table and TEXT in table

    # WHEN the operator found it in the chat and redrives with --delivered
    out = cli("dlq", "redrive", "--id", message_id[:8], "--delivered", delivery_id).stdout
    # THEN the marker is written with an operator receipt, and one history entry with the intent's text
    assert "Settled: recorded" in out and "moved 1, failed 0" in out
    marker = item(stack, run_id, f"DELIVERY#{delivery_id}")
    assert marker is not None
    assert json.loads(marker["receipts"]["S"]) == [
        {"channel": "telegram", "target": "telegram", "where": "99", "found_by": "operator"}
    ]
    [entry] = deliveries_in_history(stack, "s-doubt", delivery_id)
    assert entry.content == TEXT and entry.kind == "delivery"
    assert item(stack, run_id, f"SENDING#{delivery_id}#telegram")["state"]["S"] == "sent"  # type: ignore[index]
    # AND the message left the DLQ for the results queue; the run shows the receipt, nothing in doubt
    assert stack.counts(stack.res.dlq_url) == (0, 0) and stack.counts(stack.res.queue_url) == (1, 0)
    run = cli_json(cli, "runs", "show", run_id)
    assert run["in_doubt"] == []
    assert [d["received"] for d in run["deliveries"]] == [["telegram message in 99 (marked delivered by an operator)"]]
    assert "marked delivered by an operator" in cli("runs", "show", run_id).stdout

    # WHEN the run fails again, is dead-lettered again, and the operator says --delivered a second time
    stack.poll_until_dead_lettered()
    [again] = [r for r in cli_json(cli, "dlq", "list") if r["run_id"] == run_id]
    refused = cli("dlq", "redrive", "--id", again["message_id"], "--delivered", delivery_id, expect=1)
    # THEN it refuses, saying why; nothing is written and nothing moves
    assert "already delivered" in refused.stderr + refused.stdout
    assert len(deliveries_in_history(stack, "s-doubt", delivery_id)) == 1
    assert stack.counts(stack.res.dlq_url) == (1, 0)


def test_resend_marks_the_send_not_sent_and_redrives(cli: Cli, stack: Stack) -> None:
    # GIVEN a dead-lettered run whose Telegram send is in doubt
    run_id, delivery_id, message_id = dead_lettered_with_a_send_in_doubt(cli, stack, "s-resend")
    # WHEN the operator did not find it in the chat and redrives with --resend
    report = cli_json(cli, "dlq", "redrive", "--id", message_id, "--resend", delivery_id)
    # THEN the intent is not_sent (the next attempt sends it), no marker, no history entry; the message moved
    assert report["settled"] == [
        {"delivery_id": delivery_id, "run_id": run_id, "how": "resend", "targets": ["telegram in 99"]}
    ]
    assert item(stack, run_id, f"SENDING#{delivery_id}#telegram")["state"]["S"] == "not_sent"  # type: ignore[index]
    assert item(stack, run_id, f"DELIVERY#{delivery_id}") is None
    assert deliveries_in_history(stack, "s-resend", delivery_id) == []
    assert [m["message_id"] for m in report["moved"]] == [message_id]
    # AND it is no longer in doubt
    assert cli_json(cli, "runs", "show", run_id)["in_doubt"] == []


def test_an_id_that_names_no_send_in_doubt_is_refused_and_nothing_moves(cli: Cli, stack: Stack) -> None:
    # GIVEN a dead-lettered run with one send in doubt
    run_id, delivery_id, message_id = dead_lettered_with_a_send_in_doubt(cli, stack, "s-wrong")
    # WHEN the operator names another delivery, or forgets --id, or names it both ways
    wrong = cli("dlq", "redrive", "--id", message_id, "--delivered", f"{run_id}#7#0", expect=1)
    no_id = cli("dlq", "redrive", "--all", "--resend", delivery_id, expect=1)
    both = cli("dlq", "redrive", "--id", message_id, "--delivered", delivery_id, "--resend", delivery_id, expect=1)
    # THEN each is refused with the reason, and nothing is written or moved
    assert f"names no send in doubt of run {run_id}" in wrong.stderr and delivery_id in wrong.stderr
    assert "select that message with --id" in no_id.stderr
    assert "not both" in both.stderr
    assert item(stack, run_id, f"DELIVERY#{delivery_id}") is None
    assert item(stack, run_id, f"SENDING#{delivery_id}#telegram")["state"]["S"] == "sending"  # type: ignore[index]
    assert stack.counts(stack.res.dlq_url) == (1, 0)


def test_a_dry_run_says_what_it_would_settle_and_writes_nothing(cli: Cli, stack: Stack) -> None:
    run_id, delivery_id, message_id = dead_lettered_with_a_send_in_doubt(cli, stack, "s-dry")
    out = cli("dlq", "redrive", "--id", message_id, "--delivered", delivery_id, "--dry-run").stdout
    assert f"would record {delivery_id} as delivered by an operator (telegram in 99)" in " ".join(out.split())
    assert item(stack, run_id, f"DELIVERY#{delivery_id}") is None
    assert stack.counts(stack.res.dlq_url) == (1, 0)


def test_runs_replay_lists_the_send_in_doubt_and_sends_nothing(cli: Cli, stack: Stack) -> None:
    run_id, delivery_id, _ = dead_lettered_with_a_send_in_doubt(cli, stack, "s-replay")
    out = cli("runs", "replay", run_id, expect=1).stdout  # the provider still fails: exit 1
    data = json.loads(cli("runs", "replay", run_id, "--json", expect=1).stdout)
    assert [i["delivery_id"] for i in data["in_doubt"]] == [delivery_id]
    said = " ".join(out.split())
    assert "sent? unknown" in said and "a replay never sends (nor settles) them" in said and "telegram in 99" in said
    assert item(stack, run_id, f"DELIVERY#{delivery_id}") is None


def test_delivered_keeps_the_receipt_another_target_of_the_route_already_has(cli: Cli, stack: Stack) -> None:
    # GIVEN an `each` route's delivery: Slack answered (its receipt on its intent), Telegram in doubt
    run_id, delivery_id, message_id = dead_lettered_with_a_send_in_doubt(cli, stack, "s-each")
    slack = {"channel": "slack", "target": "slack", "where": "C0123", "ids": ["1718.0100"]}
    stack.store.table.db.put_item(
        TableName=stack.res.table,
        Item={
            "pk": {"S": f"RUN#{run_id}"},
            "sk": {"S": f"SENDING#{delivery_id}#slack"},
            "session_id": {"S": "s-each"},
            "channel": {"S": "slack"},
            "target": {"S": "slack"},
            "where": {"S": "C0123"},
            "text": {"S": TEXT},
            "at": {"S": "2026-12-03T09:00:00Z"},
            "state": {"S": "sent"},
            "receipt": {"S": json.dumps(slack)},
            "expires_at": {"N": "1999999999"},
        },
    )
    # WHEN the operator found the Telegram message too
    cli("dlq", "redrive", "--id", message_id, "--delivered", delivery_id)
    # THEN the marker keeps both receipts, and the delivery shows both
    [shown] = cli_json(cli, "runs", "show", run_id)["deliveries"]
    assert shown["received"] == [
        "slack ts 1718.0100 in C0123",
        "telegram message in 99 (marked delivered by an operator)",
    ]
    assert len(deliveries_in_history(stack, "s-each", delivery_id)) == 1
