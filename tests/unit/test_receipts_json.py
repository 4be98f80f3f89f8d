"""The marker's ``receipts`` attribute stays valid JSON within its byte bound (store/history.py)."""

from __future__ import annotations

import json

from agentwake.store.history import _MAX_RECEIPTS_BYTES, receipts_json


def test_many_connection_ids_and_a_long_non_ascii_where_stay_valid_json_within_the_bytes() -> None:
    # GIVEN a page reached on many connections and a chat whose name is long and not ASCII
    receipts = [
        {"channel": "websocket", "target": "page", "ids": [f"conn-{i:04d}=" for i in range(400)]},
        {"channel": "slack", "target": "slack", "where": "Überprüfung ✓ " * 300, "ids": ["1.2"]},
        *({"channel": "sns", "target": f"sns{i}", "where": "ärger", "ids": [f"m{i}"]} for i in range(40)),
    ]
    # WHEN the marker's receipts are written
    out = receipts_json(receipts)
    # THEN they are JSON a reader parses, within the bound in UTF-8 bytes
    assert len(out.encode()) <= _MAX_RECEIPTS_BYTES
    kept = json.loads(out)
    # AND the first receipt is kept, its ids cut with their count
    assert kept[0]["channel"] == "websocket" and kept[0]["extra"]["ids_total"] == 400


def test_receipts_within_the_bound_are_kept_whole() -> None:
    receipts = [{"channel": "telegram", "target": "telegram", "where": "chat Ärger", "ids": ["7"]}]
    assert json.loads(receipts_json(receipts)) == receipts
