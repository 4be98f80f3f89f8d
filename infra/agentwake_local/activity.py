"""``agentwake local up``'s terminal: one short line per wake, the functions' JSON logs elsewhere.

    12:00:01 BackgroundResultFunction bg:task-ok-1 succeeded 0.4s
    12:00:09 BackgroundResultFunction bg:task-fail-1 failed, retried 0.3s
    12:01:00 CronWakeFunction cron:job-nightly:2026-12-01T06:00:00Z succeeded 1.2s
    12:01:05 BackgroundResultFunction - dead-lettered to BackgroundResultDLQ: InvalidMessage: ... 0.1s

The line names the function, the run(s) the event wakes (``bg:{task}``, ``cron:{job}:{time}``),
what became of them (the run's status as the table records it after the invocation; a function
error; a batch item failure SQS retries; a record the function dead-lettered itself) and how long
the invocation took. ``quiet_output`` sends everything else the process prints (the functions'
JSON log and EMF lines, the emulator's INFO logs) to a log file.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from agentwake_local import dead_letters

#: at most this many run ids on one line
_SHOWN_RUNS = 3


def run_ids(event: Any) -> list[str]:
    """The runs an event wakes: a background result per SQS record, or a cron firing."""
    from agentwake.domain.models import background_run_id, cron_run_id

    if not isinstance(event, dict):
        return []
    if isinstance(event.get("Records"), list):
        found = []
        for record in event["Records"]:
            try:
                body = json.loads(record.get("body") or "")
            except (ValueError, AttributeError):
                continue
            if isinstance(body, dict) and isinstance(body.get("task_id"), str):
                found.append(background_run_id(body["task_id"]))
        return found
    if isinstance(event.get("job_id"), str) and isinstance(event.get("scheduled_time"), str):
        return [cron_run_id(event["job_id"], event["scheduled_time"])]
    return []


class WakeLines:
    """``LocalStackRuntime.on_invocation``: writes one line per invocation to ``out``."""

    def __init__(self, runtime: Any, out: IO[str]) -> None:
        self.runtime = runtime
        self.out = out
        self._queues: dict[str, str] | None = None
        self._store: Any = None

    def __call__(self, function: Any, event: Any) -> Callable[[Any], None]:
        queues = self._dead_letter_queues()
        records = isinstance(event, dict) and bool(event.get("Records"))
        before = dead_letters.counts(self.runtime, queues) if records else {}

        def done(invocation: Any) -> None:
            try:
                line = self.line(function.logical_id, event, invocation, queues, before)
            except Exception as exc:  # the line is a courtesy: never fail the invocation for it
                line = f"{function.logical_id} ({type(exc).__name__} while describing it)"
            print(f"{time.strftime('%H:%M:%S')} {line}", file=self.out, flush=True)

        return done

    def line(self, function: str, event: Any, invocation: Any, queues: dict[str, str], before: dict[str, int]) -> str:
        from agentwake_ops.terminal import inert

        runs = run_ids(event)
        shown = ", ".join(runs[:_SHOWN_RUNS]) + (f" (+{len(runs) - _SHOWN_RUNS})" if len(runs) > _SHOWN_RUNS else "")
        seconds = f"{invocation.duration_ms / 1000:.1f}s"
        if invocation.error is not None:
            outcome = f"error {invocation.error.get('errorType')}: {str(invocation.error.get('errorMessage'))[:120]}"
        else:
            outcome = self._outcome(runs, invocation.response, event, queues, before)
        return inert(f"{function} {shown or '-'} {outcome} {seconds}")

    def _outcome(
        self, runs: list[str], response: Any, event: Any, queues: dict[str, str], before: dict[str, int]
    ) -> str:
        failures = response.get("batchItemFailures") if isinstance(response, dict) else None
        parts = []
        statuses = [self._status(run) for run in runs]
        if statuses:
            parts.append(", ".join(sorted({s for s in statuses})))
        if failures:
            parts.append(f"{len(failures)} record(s) failed, retried")
        if before:
            parts += [item.line() for item in dead_letters.arrived(self.runtime, queues, before, event)]
        return "; ".join(parts) or "ok"

    def _status(self, run_id: str) -> str:
        store = self._table()
        if store is None:
            return "done"
        run = store.records.get_run(run_id)
        return "not started" if run is None else run.status

    def _table(self) -> Any:
        if self._store is None:
            table = self.runtime.outputs.get("AgentTableName")
            if not table:
                return None
            from agentwake.store.dynamo import DynamoStore

            self._store = DynamoStore(str(table), client=self.runtime.client("dynamodb"))
        return self._store

    def _dead_letter_queues(self) -> dict[str, str]:
        if self._queues is None:
            self._queues = dead_letters.dead_letter_queues(self.runtime)
        return self._queues


def quiet_output(log_path: Path) -> IO[str]:
    """Send what the process prints (stdout: the functions' JSON logs and EMF) and the emulator's
    INFO logs to ``log_path``; the emulator's warnings still reach the terminal. Returns the
    terminal's stream, for the lines meant for a person."""
    terminal = sys.stdout
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = log_path.open("w", encoding="utf-8", buffering=1)
    sys.stdout = log
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    to_file = logging.StreamHandler(log)
    to_file.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    warnings = logging.StreamHandler(sys.stderr)
    warnings.setLevel(logging.WARNING)
    warnings.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S"))
    root.addHandler(to_file)
    root.addHandler(warnings)
    root.setLevel(logging.INFO)
    logging.getLogger("botocore").setLevel(logging.WARNING)
    return terminal
