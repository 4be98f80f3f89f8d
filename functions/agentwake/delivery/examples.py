"""One example of each channel and route, in plain data (no pydantic): ``agentwake sessions put
--help`` prints them without loading the specs, the product API's OpenAPI document shows them, and
docs/channels.md uses the same ones (a test parses each with ``factory.parse_spec``)."""

from __future__ import annotations

from typing import Any

CHANNEL_EXAMPLES: dict[str, dict[str, Any]] = {
    "log": {"type": "log"},
    "webhook": {"type": "webhook", "url": "https://example.com/agentwake", "secret_ref": "ssm:/agentwake/hook"},
    "websocket": {"type": "websocket"},
    "slack": {"type": "slack", "channel": "C0123ABCD", "thread_ts": "1733140000.000100"},
    "telegram": {"type": "telegram", "chat_id": 123456789},
    "sns": {"type": "sns", "topic_arn": "arn:aws:sns:us-east-1:123456789012:agentwake-notify-alerts"},
    "first": {"type": "first", "channels": [{"type": "websocket"}, {"type": "slack", "channel": "C0123ABCD"}]},
    "each": {"type": "each", "channels": [{"type": "websocket"}, {"type": "telegram", "chat_id": 123456789}]},
}
