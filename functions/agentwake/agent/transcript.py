"""Print a run as a readable transcript: each step, tool calls, deliveries, the final state."""

from __future__ import annotations

import sys
from typing import TextIO

from agentwake.agent.runner import RunEvent


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class TranscriptPrinter:
    """``dry``: a replay, where nothing is delivered: a delivery is said as what would be sent."""

    def __init__(self, out: TextIO | None = None, indent: str = "  ", *, dry: bool = False) -> None:
        self.out = out or sys.stdout
        self.indent = indent
        self.dry = dry

    def __call__(self, event: RunEvent) -> None:
        p = self.indent
        tag = " (replayed from journal)" if event.replayed else ""
        if event.kind == "reply":
            via = event.data.get("provider_id") or "?"
            usage = event.data.get("usage") or {}
            cost = (
                f" {usage.get('input_tokens', 0)} in / {usage.get('output_tokens', 0)} out tokens,"
                f" {usage.get('latency_ms', 0)} ms"
                if usage
                else ""
            )
            print(f"{p}step {event.step}: model [{via}]{cost}{tag}", file=self.out)
            if event.data.get("text"):
                print(f"{p}  says: {_short(event.data['text'])}", file=self.out)
            for call in event.data.get("tool_calls", []):
                print(f"{p}  calls {call.get('name')!s}({_short(call.get('arguments', ''), 100)})", file=self.out)
        elif event.kind == "tool":
            name = event.data.get("name")
            dry = " (the tool's answer to the model; this replay sent nothing)" if self.dry and not tag else ""
            dry = dry if name == "send_message_to_user" else ""
            print(f"{p}  -> {name}: {_short(event.data.get('result', ''))}{tag}{dry}", file=self.out)
        elif event.kind == "final_step":
            why = "the same tool call repeated" if event.data.get("reason") == "repeated_calls" else "max steps reached"
            print(f"{p}{why}: tools removed, asking for a direct answer", file=self.out)
        elif event.kind == "final_delivery":
            if event.data.get("delivery_id"):
                sent = "would be delivered to the user (not sent)" if self.dry and not tag else "delivered to the user"
                print(f"{p}final answer {sent} ({event.data['delivery_id']}){tag}", file=self.out)
            else:
                print(f"{p}final answer not delivered: {event.data.get('not_delivered')}{tag}", file=self.out)
        elif event.kind == "done":
            print(f"{p}state: DONE", file=self.out)
        elif event.kind == "error":
            print(
                f"{p}state: ERROR ({event.data.get('error_type')}): {_short(event.data.get('text', ''))}", file=self.out
            )
