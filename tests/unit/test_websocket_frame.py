"""The WebSocket frame of an approval request (issue 35): the page gets what it needs for Approve and
Reject buttons (id, tool, arguments, expiry), never the decision token; other frames are unchanged."""

from __future__ import annotations

import json

from agentwake.delivery import Delivery
from agentwake.delivery.websocket import frame

SENT_AT = "2026-12-03T09:30:00+00:00"


def test_an_approval_requests_frame_carries_the_request_without_its_token() -> None:
    delivery = Delivery(
        delivery_id="bg:t1#2#0#approval",
        run_id="bg:t1",
        session_id="s1",
        text="Approval needed: ... (approval apr-1)",
        approval={
            "approval_id": "apr-1",
            "tool": "file_ticket",
            "arguments": {"title": "x"},
            "expiry_at": "2026-12-04T09:30:00+00:00",
            "on_expiry": "reject",
            "token": "secret-token",
            "token_gen": 1,
            "decide_path": "/approvals/apr-1/decision",
        },
    )
    raw = frame(delivery, SENT_AT)
    body = json.loads(raw)
    assert body["approval"] == {
        "approval_id": "apr-1",
        "tool": "file_ticket",
        "arguments": {"title": "x"},
        "expiry_at": "2026-12-04T09:30:00+00:00",
        "on_expiry": "reject",
        "token_gen": 1,
        "decide_path": "/approvals/apr-1/decision",
    }
    assert b"secret-token" not in raw


def test_any_other_frame_is_the_agreed_format() -> None:
    body = json.loads(frame(Delivery(delivery_id="bg:t1#0#0", run_id="bg:t1", session_id="s1", text="hi"), SENT_AT))
    assert set(body) == {"type", "delivery_id", "run_id", "session_id", "text", "sent_at"}
