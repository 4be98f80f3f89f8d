"""``make demo``: one wake with the scripted provider, printed as a transcript.

Runs entirely in-process with no AWS: the point is to see the runner's steps, tool calls,
deliveries and final state.
"""

from __future__ import annotations

import sys

from agentwake.agent.chain import ProviderChain
from agentwake.agent.providers import ScriptedSpec, build_provider
from agentwake.agent.runner import AgentState, Runner
from agentwake.agent.tools import ToolContext, ToolRegistry
from agentwake.agent.tools.send_message import SendMessageToUser
from agentwake.delivery.log import LogChannel
from agentwake.wake.prompt import build_wake_messages

DEMO_SCRIPT = [
    {
        "tool_calls": [
            {"name": "send_message_to_user", "arguments": {"text": "Your nightly report is ready: 3 new sign-ups."}}
        ]
    },
    {"text": "Told the user about the nightly report."},
]


def main() -> int:
    print("== agentwake demo: one cron wake with the scripted model ==")
    channel = LogChannel(stream=None)
    provider = build_provider(ScriptedSpec(id="scripted", script=DEMO_SCRIPT))
    runner = Runner(
        model=ProviderChain([provider]),
        tools=ToolRegistry([SendMessageToUser(channel)]),
        messages=build_wake_messages(
            persona="You are a helpful assistant.",
            kind="cron",
            wake={"job_id": "nightly-report", "name": "Nightly report", "scheduled_time": "2026-11-30T06:00:00Z"},
            history=[],
        ),
        context=ToolContext(run_id="cron:nightly-report:2026-11-30T06:00:00Z", session_id="demo-session"),
        max_steps=4,
        on_event=_print_event,
    )
    state = runner.run()
    for d in channel.sent:
        print(f"  delivered to {d.session_id}: {d.text!r} (delivery_id={d.delivery_id})")
    print(f"final state: {state.value}; completion: {runner.completion_text!r}")
    return 0 if state is AgentState.DONE else 1


def _print_event(event):  # type: ignore[no-untyped-def]
    from agentwake.ops.transcript import TranscriptPrinter

    TranscriptPrinter()(event)


if __name__ == "__main__":
    sys.exit(main())
