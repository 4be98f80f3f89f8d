"""What an operator reads about a run's deliveries (issue 34, design §9): each marker's receipts as a
person reads them, and each send in doubt ("sent? unknown"), in ``runs show``/``dlq show`` (tables and
``--json``) and the console's pages. Items are written as the agreed formats say (the marker's
``receipts``, the intent ``SENDING#{delivery_id}#{target}``), no table needed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentwake.delivery import Receipt
from agentwake_ops import render
from agentwake_ops.console.pages import _attempts_and_deliveries, in_doubt_section, settle_buttons
from agentwake_ops.runs import RunSummary, summary_of, transcript

RUN = "bg:task-1"
AT = "2026-12-03T09:00:00Z"


def marker(delivery_id: str, text: str, receipts: list[Receipt] | None) -> tuple[str, dict[str, Any]]:
    item: dict[str, Any] = {
        "pk": {"S": f"RUN#{RUN}"},
        "sk": {"S": f"DELIVERY#{delivery_id}"},
        "session_id": {"S": "s1"},
        "text": {"S": text},
        "at": {"S": AT},
    }
    if receipts is not None:
        item["receipts"] = {"S": json.dumps([r.to_dict() for r in receipts])}
    return item["sk"]["S"], item


def intent(delivery_id: str, target: str, *, channel: str, where: str, text: str, state: str = "sending"):
    sk = f"SENDING#{delivery_id}#{target}"
    return sk, {
        "pk": {"S": f"RUN#{RUN}"},
        "sk": {"S": sk},
        "session_id": {"S": "s1"},
        "channel": {"S": channel},
        "target": {"S": target},
        "where": {"S": where},
        "text": {"S": text},
        "at": {"S": AT},
        "state": {"S": state},
        "expires_at": {"N": "1999999999"},
    }


RECEIPTS = {
    f"{RUN}#0#0": [Receipt("slack", "slack", "C0123", ("1718.0100",))],
    f"{RUN}#1#0": [Receipt("telegram", "tg", "99", ("4711",))],
    f"{RUN}#2#0": [Receipt("websocket", "websocket", ids=("c1", "c2"), extra={"gone": 1})],
    f"{RUN}#3#0": [Receipt("websocket", "websocket", extra={"unread": True})],
    f"{RUN}#4#0": [Receipt("webhook", "webhook", extra={"status": 204})],
    f"{RUN}#5#0": [Receipt("slack", "slack", "C0123", ("1718.0200",), found_by="lookup")],
    f"{RUN}#6#0": [Receipt("telegram", "telegram", "99", found_by="operator")],
}
SAID = [
    "slack ts 1718.0100 in C0123",
    "telegram message 4711 in 99",
    "websocket 2 connections, 1 gone",
    "websocket: no open page; kept, unread",
    "webhook 204",
    "slack ts 1718.0200 in C0123 (found by lookup)",
    "telegram message in 99 (marked delivered by an operator)",
]


def the_run() -> RunSummary:
    items = [marker(d, f"message {n}", r) for n, (d, r) in enumerate(RECEIPTS.items())]
    items.append(marker(f"{RUN}#7#0", "from before receipts", None))
    # in doubt: an intent still sending and no marker
    items.append(
        intent(f"{RUN}#8#0", "telegram", channel="telegram", where="99", text="Your flight leaves at 6.\nGate 12.")
    )
    # not in doubt: its marker exists (the send was recorded) / a certain failure / a receipt of its own
    items.append(intent(f"{RUN}#1#0", "tg", channel="telegram", where="99", text="message 1"))
    items.append(intent(f"{RUN}#9#0", "slack", channel="slack", where="C0123", text="x", state="not_sent"))
    items.append(intent(f"{RUN}#10#0", "slack", channel="slack", where="C0123", text="y", state="sent"))
    return summary_of(sorted(items))


def test_each_receipt_reads_as_what_the_user_already_received() -> None:
    # GIVEN markers with each channel's receipt (and one written before receipts existed)
    summary = the_run()
    # WHEN the summary is read
    received = {d["delivery_id"]: d["received"] for d in summary.deliveries}
    # THEN each reads as the design says, and the old marker has none (not a crash)
    assert [received[d] for d in RECEIPTS] == [[s] for s in SAID]
    assert received[f"{RUN}#7#0"] == []


def test_only_an_intent_still_sending_without_a_marker_is_in_doubt() -> None:
    summary = the_run()
    [doubt] = summary.in_doubt
    assert doubt == {
        "delivery_id": f"{RUN}#8#0",
        "session_id": "s1",
        "channel": "telegram",
        "target": "telegram",
        "where": "99",
        "at": AT,
        "state": "sending",
        "sent": "unknown",
        "text": "Your flight leaves at 6.\nGate 12.",
    }


def test_runs_show_and_dlq_show_print_the_receipts_and_the_sends_in_doubt(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    # WHEN the summary tables are printed (runs show, dlq show)
    render.summary_tables(the_run())
    out = capsys.readouterr().out
    # THEN the deliveries table has the receipt column, with each receipt
    assert "the user already received" in out
    for said in SAID:
        assert said in out
    # AND the send in doubt has its own table: sent? unknown, the channel and where, when, the text's start
    assert "sent? unknown (1)" in out
    row = next(line for line in out.splitlines() if f"{RUN}#8#0" in line)
    assert "unknown" in row and "telegram in 99" in row and "2026-12-03 09:00:00" in row
    assert "Your flight leaves at 6." in row and "Gate 12." not in out  # its first line only
    assert "--delivered DELIVERY_ID" in out and "--resend DELIVERY_ID" in out


def test_the_json_carries_receipts_and_sends_in_doubt() -> None:
    data = json.loads(json.dumps(the_run().as_dict()))
    assert data["in_doubt"][0]["sent"] == "unknown"
    by_id = {d["delivery_id"]: d for d in data["deliveries"]}
    assert by_id[f"{RUN}#0#0"]["receipts"] == [
        {"channel": "slack", "target": "slack", "where": "C0123", "ids": ["1718.0100"]}
    ]
    assert by_id[f"{RUN}#0#0"]["received"] == ["slack ts 1718.0100 in C0123"]


def test_the_transcript_says_what_was_received_and_what_is_in_doubt() -> None:
    entries = transcript(the_run())
    first = next(e for e in entries if e.title.startswith(f"delivery {RUN}#0#0 "))
    assert "the user received it: slack ts 1718.0100 in C0123" in first.lines
    [doubt] = [e for e in entries if e.kind == "in-doubt"]
    assert doubt.title == f"delivery {RUN}#8#0: sent? unknown (telegram in 99)"


def test_an_unreadable_receipt_is_said_so_and_a_long_text_is_cut() -> None:
    sk, item = marker(f"{RUN}#0#0", "hi", None)
    item["receipts"] = {"S": "{not json"}
    long_sk, long_intent = intent(f"{RUN}#1#0", "telegram", channel="telegram", where="99", text="x" * 5000)
    summary = summary_of([(sk, item), (long_sk, long_intent)])
    assert summary.deliveries[0]["received"] == ["(receipts unreadable)"]
    assert len(summary.in_doubt[0]["text"]) == 200


def test_a_secret_in_a_text_in_doubt_is_not_shown() -> None:
    token = "xoxb-1234567890-abcdefghijklmnopqrstuvwx"
    sk, item = intent(f"{RUN}#1#0", "slack", channel="slack", where="C1", text=f"key {token}")
    [doubt] = summary_of([(sk, item)]).in_doubt
    assert token not in doubt["text"] and token not in json.dumps(doubt)


def test_the_console_shows_receipts_and_the_settle_buttons_of_a_send_in_doubt() -> None:
    summary = the_run()
    # WHEN the DLQ message page's sections are built
    deliveries = _attempts_and_deliveries(summary)
    section = in_doubt_section(summary.in_doubt, actions=settle_buttons("msg-1", "the-csrf"))
    # THEN the deliveries table has the receipt column and every receipt
    assert "<th>the user already received</th>" in deliveries
    for said in SAID:
        assert said in deliveries
    # AND the send in doubt is listed, with its two answers posting to the settle confirmation, CSRF-protected
    assert "sent? unknown (1)" in section and "telegram in 99" in section
    assert section.count("action='dlq/settle-confirm'") == 1
    assert 'name="csrf" value="the-csrf"' in section and 'name="delivery" value="bg:task-1#8#0"' in section
    assert "value='delivered'" in section and "value='resend'" in section


def test_the_console_escapes_a_text_in_doubt() -> None:
    sk, item = intent(f"{RUN}#1#0", "slack", channel="slack", where="C1", text="<script>alert(1)</script>")
    section = in_doubt_section(summary_of([(sk, item)]).in_doubt)
    assert "<script>" not in section and "&lt;script&gt;" in section
