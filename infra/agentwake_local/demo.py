"""``make demo``: agentwake on the embedded local AWS, end to end, in under a minute.

A moto server on 127.0.0.1 is provisioned from template.yaml; the real handlers run in-process
behind the local SQS poller and async invoker, exactly as they would behind Lambda. The scenario:

1. a session with the scripted model;
2. a cron job fires (the demo invokes CronWakeFunction as EventBridge Scheduler would, with a
   fixed scheduled time) and its note appears in history;
3. a background task finishes and the agent messages the user;
4. a background task whose wake fails (every provider fails) is retried and ends in the DLQ;
5. the DLQ listing shows why; the history shows no success note for it;
6. the operator fixes the session's provider and redrives: the run resumes and succeeds.

``run_demo()`` returns what happened so the test suite can check outcomes, not printed text.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shutil
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"

GOOD_SCRIPT: list[dict[str, Any]] = [
    {"tool_calls": [{"name": "send_message_to_user", "arguments": {"text": "Here is the update you asked for."}}]},
    {"text": "Sent the user the update."},
]
# the agent messages the user, then every provider fails on its next step: the primary with a
# transient 5xx (retried with backoff), the fallback with an auth error (not retried)
BROKEN_PROVIDERS: list[dict[str, Any]] = [
    {"type": "scripted", "id": "primary", "script": [GOOD_SCRIPT[0], {"error": "server"}]},
    {"type": "scripted", "id": "fallback", "script": [{"error": "auth"}]},
]


@dataclass
class DemoResult:
    endpoint_url: str = ""
    cron_note: str | None = None
    job_status: str | None = None
    delivered: list[str] = field(default_factory=list)
    task_note: str | None = None
    failing_receives: int = 0
    dlq_run_ids: list[str] = field(default_factory=list)
    dlq_reason: str = ""
    failing_notes: int = -1
    redrive_moved: int = 0
    after_redrive_notes: int = 0
    after_redrive_deliveries: int = 0
    seconds: float = 0.0


#: a shell word: quoted parts kept whole
_SHELL_WORD = re.compile(r"""(?:'[^']*'|"[^"]*"|[^\s'"])+""")
#: the demo's lines are at most this wide (or the terminal's width, when narrower)
MAX_WIDTH = 80


def wrap_line(line: str, width: int) -> list[str]:
    """``line`` as rows of at most ``width`` columns: broken between words, a continuation indented
    two more than the line, a word longer than a row (an id, a URL) cut across rows."""
    if len(line) <= width:
        return [line]
    indent = line[: len(line) - len(line.lstrip())]
    rows = textwrap.wrap(
        line.strip(),
        width=width,
        initial_indent=indent,
        subsequent_indent=indent + "  ",
        break_long_words=True,
        break_on_hyphens=False,
    )
    return rows or [line[:width]]


class Wrapped(io.TextIOBase):
    """A text stream that writes each whole line to ``out`` wrapped to ``width`` columns: the demo's
    own lines and the runs' transcripts (which the functions print to stdout) alike."""

    def __init__(self, out: TextIO, width: int) -> None:
        self.out = out
        self.width = width
        self._pending = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            self.out.write("".join(row + "\n" for row in wrap_line(line, self.width)))
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self.write("\n")
        self.out.flush()


def demo_width() -> int:
    """The terminal's width, at most ``MAX_WIDTH`` (80 when there is no terminal)."""
    return min(MAX_WIDTH, shutil.get_terminal_size((MAX_WIDTH, 24)).columns)


class Printer:
    def __init__(self, out: Wrapped) -> None:
        self.out = out
        self.n = 0

    def section(self, title: str) -> None:
        self.n += 1
        print(f"\n== {self.n}. {title} ==", file=self.out, flush=True)

    def line(self, text: str = "") -> None:
        print(f"   {text}" if text else "", file=self.out, flush=True)

    def cmd(self, text: str) -> None:
        """A command as a person would type it: a long one continued with ``\\`` between its words."""
        width = self.out.width - len("   $ ") - len(" \\")
        rows = [""]
        for word in _SHELL_WORD.findall(text):  # a quoted argument is one word: never cut inside it
            if rows[-1] and len(rows[-1]) + 1 + len(word) > width:
                rows.append(word)
            else:
                rows[-1] = f"{rows[-1]} {word}" if rows[-1] else word
        print("   $ " + " \\\n       ".join(rows), file=self.out, flush=True)


def run_demo(out: TextIO | None = None, *, transcript: bool = True) -> DemoResult:
    """The demo, printed to ``out`` (stdout) with no line wider than ``demo_width()``."""
    started = time.monotonic()
    wrapped = Wrapped(out or sys.stdout, demo_width())
    with contextlib.redirect_stdout(wrapped):  # the runs' transcripts go through the same wrapping
        try:
            return _run_demo(Printer(wrapped), transcript=transcript, started=started)
        finally:
            wrapped.flush()


def _run_demo(p: Printer, *, transcript: bool, started: float) -> DemoResult:
    from agentwake.domain.models import SessionConfig
    from agentwake_local.server import LOCAL_CALLER_ARN
    from agentwake_local.stack import LocalStackRuntime
    from agentwake_ops import stack_settings
    from agentwake_ops.context import Discovery, build_context
    from agentwake_ops.dlq import act, select

    result = DemoResult()
    quiet = {"POWERTOOLS_METRICS_DISABLED": "true", "AGENTWAKE_TRANSCRIPT": "1" if transcript else ""}
    saved = {k: os.environ.get(k) for k in quiet}
    os.environ.update(quiet)
    # the functions log only at CRITICAL and publish no metrics here, so the demo reads as a story
    runtime = LocalStackRuntime(write_state=False).start(
        TEMPLATE, {"LogLevel": "CRITICAL"}, visibility_timeout_override=0
    )
    try:
        result.endpoint_url = runtime.endpoint_url
        outputs = {k: str(v) for k, v in runtime.outputs.items() if v is not None}
        ctx = build_context(
            Discovery(
                "local",
                "the demo's local stack",
                outputs,
                runtime.region,
                runtime.endpoint_url,
                None,
                # what its functions see (the outbound allowances of the local stack): configs are checked by it
                settings=stack_settings.from_env(runtime.function_env("BackgroundResultFunction")),
            ),
            invoke_async=lambda function, payload: runtime.run_async(function, payload),
        )
        store = ctx.store

        p.section("The embedded local AWS")
        p.line(f"moto server on {runtime.endpoint_url}, provisioned from {TEMPLATE.name}:")
        for lid, res in sorted(runtime.stack.resources.items()):
            if res.provisioned:
                p.line(f"  {res.type:<28} {lid}")
        p.line("functions: " + ", ".join(sorted(runtime.functions)) + " (run in-process, as Lambda would)")

        p.section("A session with the scripted model")
        p.cmd(
            'agentwake sessions put alice --owner arn:aws:sts::123456789012:user/moto --provider \'{"type": "scripted", ...}\''
        )
        store.records.put_session(
            SessionConfig(
                session_id="alice",
                persona="You are Alice's assistant.",
                providers=[{"type": "scripted", "id": "scripted", "script": GOOD_SCRIPT}],
                owners=[LOCAL_CALLER_ARN],  # the product API acts on it for the stack's own credentials
            )
        )
        p.line("session alice: provider chain [scripted], max 8 steps, delivery: log")

        p.section("A cron job fires and its note appears")
        job = ctx.jobs.create(
            session_id="alice", name="Morning digest", cron="0 8 * * ? *", description="summarise overnight sign-ups"
        )
        p.cmd(f"agentwake jobs create --session alice --name 'Morning digest' --cron '0 8 * * ? *'  -> {job.job_id}")
        p.line(
            "the demo fires it itself, as EventBridge Scheduler would at 08:00: it invokes CronWakeFunction "
            "asynchronously with scheduled_time 2026-11-30T08:00:00Z (`agentwake local up` runs a scheduler "
            "that fires the schedules on their own):"
        )
        outcome = runtime.run_async(
            "CronWakeFunction", {"job_id": job.job_id, "scheduled_time": "2026-11-30T08:00:00Z"}
        )
        p.line(f"invocation: {outcome.condition} after {len(outcome.attempts)} attempt(s)")
        from agentwake.jobs.views import job_state

        job_after = store.records.get_job(job.job_id)
        result.job_status = job_after.status if job_after else None
        notes = [e for e in store.history.history("alice") if e.kind == "note"]
        result.cron_note = notes[-1].content if notes else None
        p.line(f"job status: {job_state(job_after) if job_after else '-'}")
        p.line(f"history note: {_one_line(result.cron_note)}")

        p.section("A background task finishes and the agent messages the user")
        registered = ctx.tasks.register_task("alice", "web_research", {"query": "aurora pricing"})
        task_id = registered.task_id
        p.cmd(f"agentwake tasks register --session alice --tool web_research  -> {task_id} + its task token")
        ctx.tasks.finish_task(
            task_id,
            "succeeded",
            "Aurora Serverless v2: $0.12 per ACU-hour.",
            task_token=registered.task_token,
            summary_name="Aurora pricing research",
        )
        p.cmd(f"agentwake tasks finish {task_id} --token <its task token> --status succeeded --result '...'")
        p.line("the local SQS poller hands the message to BackgroundResultFunction:")
        runtime.drain()
        history = store.history.history("alice")
        result.delivered = [e.content for e in history if e.kind == "delivery"]
        task_notes = [e for e in history if e.kind == "note" and e.run_id == f"bg:{task_id}"]
        result.task_note = task_notes[0].content if task_notes else None
        p.line(f"the user received: {result.delivered[-1]!r}" if result.delivered else "nothing was delivered")
        p.line(f"history note: {_one_line(result.task_note)}")

        p.section("A task whose wake fails: every provider fails after a first message")
        store.records.put_session(SessionConfig(session_id="bob", providers=BROKEN_PROVIDERS, retry_base_delay_ms=20))
        p.cmd("agentwake sessions put bob --provider <primary: 5xx> --provider <fallback: auth error>")
        failing_task = ctx.tasks.register_task("bob", "report", {"quarter": "Q3"})
        failing = failing_task.task_id
        ctx.tasks.finish_task(
            failing,
            "succeeded",
            "Q3: compute 41%, storage 22%.",
            task_token=failing_task.task_token,
            summary_name="Q3 cost report",
        )
        max_receive = runtime.stack.resources["BackgroundResultQueue"].properties["RedrivePolicy"]["maxReceiveCount"]
        p.line(
            f"each failed attempt raises, the record is a batch item failure and comes back;"
            f" after {max_receive} receives SQS moves it to the DLQ"
        )
        # the first attempt's transcript only: each later one would print the same steps again
        if transcript:
            p.line("its first attempt:")
        runtime.poll_once()
        os.environ["AGENTWAKE_TRANSCRIPT"] = ""
        runtime.drain()
        os.environ["AGENTWAKE_TRANSCRIPT"] = quiet["AGENTWAKE_TRANSCRIPT"]
        run = store.records.get_run(f"bg:{failing}")
        result.failing_receives = run.attempts if run else 0
        failures = store.ends.failures(f"bg:{failing}")
        kinds = sorted({f.error_type for f in failures})
        p.line(
            f"received {result.failing_receives} times; each attempt ended in ERROR ({', '.join(kinds)}); "
            "step 0's message went to the user on the first one only, the later ones replayed it from the journal"
        )

        p.section("The DLQ listing shows why")
        p.cmd("agentwake dlq list")
        listed = select.list_messages(ctx, "results")
        for m in listed:
            view = m.view()
            p.line(
                f"{view.get('run_id')}  session={view.get('session_id')}  attempts={view.get('attempts')}  "
                f"{view.get('error_type')}: {view.get('error')}"
            )
        result.dlq_run_ids = [str(m.view().get("run_id")) for m in listed]
        result.dlq_reason = str(listed[0].view().get("error")) if listed else ""

        p.section("The history shows no success note for it")
        p.cmd("agentwake history show bob")
        bob = store.history.history("bob")
        result.failing_notes = sum(1 for e in bob if e.kind == "note")
        for e in bob:
            p.line(f"{e.kind:<9} {e.content}")
        p.line(f"{result.failing_notes} notes: a failed run is never recorded as a success;")
        p.line("the message the user already received is in history all the same")

        p.section("The operator fixes the provider and redrives")
        store.records.put_session(
            SessionConfig(session_id="bob", providers=[{"type": "scripted", "script": GOOD_SCRIPT}])
        )
        p.cmd('agentwake sessions put bob --provider \'{"type": "scripted", ...}\'')
        p.cmd("agentwake dlq redrive --session bob")
        report = act.redrive(ctx, select.Selection(session_id="bob"), queue="results")
        result.redrive_moved = len(report.moved)
        runtime.drain()
        bob = store.history.history("bob")
        result.after_redrive_notes = sum(1 for e in bob if e.kind == "note")
        result.after_redrive_deliveries = sum(1 for e in bob if e.kind == "delivery")
        run = store.records.get_run(f"bg:{failing}")
        p.line(
            f"moved {result.redrive_moved}; run {run.run_id if run else '?'} is now {run.status if run else '?'}"
            f" after {run.attempts if run else '?'} attempts (step 0 replayed from the journal)"
        )
        p.line(
            f"bob's history: {result.after_redrive_deliveries} delivery (not sent again), "
            f"{result.after_redrive_notes} note"
        )
    finally:
        p.section("Stopping the local stack")
        runtime.stop()
        p.line("stopped: its data is gone with it")
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        result.seconds = time.monotonic() - started
        print(f"\nThe whole demo took {result.seconds:.1f}s.", file=p.out, flush=True)
    return result


def _one_line(text: str | None) -> str:
    return " / ".join(line for line in (text or "").splitlines() if line.strip())


def check(result: DemoResult) -> list[str]:
    """What must be true after the demo; empty when it all worked."""
    problems = []
    if not result.cron_note or "I finished this job" not in result.cron_note:
        problems.append("the cron job wrote no note")
    if not result.delivered or not result.task_note:
        problems.append("the background task did not message the user or write its note")
    if not result.dlq_run_ids or "All chat models failed" not in result.dlq_reason:
        problems.append("the failing task is not in the DLQ with its reason")
    if result.failing_notes != 0:
        problems.append("a failed run has a note")
    if result.after_redrive_notes != 1:
        problems.append("the redriven run did not end with exactly one note")
    if result.after_redrive_deliveries != 1:
        problems.append("the redriven run sent its message again")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="agentwake on the embedded local AWS: no account, no Docker.")
    parser.add_argument("--no-transcript", action="store_true", help="do not print each run's steps")
    args = parser.parse_args(argv)
    result = run_demo(transcript=not args.no_transcript)
    problems = check(result)
    for problem in problems:
        print(f"demo failed: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
