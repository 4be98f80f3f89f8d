"""``agentwake local up``'s terminal: one short line per wake, the functions' JSON logs elsewhere.

    12:00:01 BackgroundResultFunction bg:task-ok-1 succeeded 0.4s
    12:00:09 BackgroundResultFunction bg:task-fail-1 failed: AllProvidersFailed: All chat models failed (attempt 1, retried) 0.3s
    12:00:10 BackgroundResultFunction bg:task-late-1 waiting for its session 0.1s
    12:01:00 CronWakeFunction cron:job-nightly:2026-12-01T06:00:00Z succeeded 1.2s
    12:01:05 BackgroundResultFunction - dead-lettered to BackgroundResultDLQ: InvalidMessage: ... 0.1s
    12:01:09 ProductApiFunction POST /sessions/chat/live-turns 409: the session is busy ... 0.2s
    12:02:30 CronWakeFunction cron:job-x:... dead-lettered to CronFailureQueue: RetriesExhausted after 3 attempt(s): ...

The line names the function, the run(s) the event wakes (``bg:{task}``, ``cron:{job}:{time}``) or the
request it answered, what became of them in words and how long the invocation took. A run that
started an attempt says how it ended as its run record tells (a failure: its type and the first line
of its reason, never a traceback: those stay in the log); a record that started none was waiting for
its session, or was dead-lettered (with the reason ``agentwake dlq list`` gives), or the function
failed before any run (its error type and message). An asynchronous invocation whose retries are
spent gets a line of its own (``outcome``, the async invoker's ``on_outcome``). ``quiet_output`` sends everything else the
process prints (the functions' JSON log and EMF lines, the emulator's INFO logs) to a log file;
``agentwake invoke`` and the CLI's in-process runs print the same lines (``function_output``).
"""

from __future__ import annotations

import logging
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from agentwake_local import dead_letters
from agentwake_local.dead_letters import run_ids

#: at most this many run ids on one line
_SHOWN_RUNS = 3
#: at most this many characters of one line's words (a reason is cut, never wrapped)
_SHOWN_CHARS = 300
#: at most this many characters of one run id
_SHOWN_ID_CHARS = 120
#: the run did not exist before the invocation
_NO_RUN = -1
#: the last ``Type: message`` line of a traceback (what Powertools' BatchProcessingError wraps)
_RAISED = re.compile(r"^([A-Za-z_][\w.]*): (.+)$")


def error_words(error: dict[str, Any]) -> str:
    """A function error in one line: its type and the first line of its message. Powertools'
    ``BatchProcessingError`` (every record failed) says so over a traceback: the record's own error,
    the traceback's last line, is what it means."""
    from agentwake_ops.runs import failure_line

    error_type = str(error.get("errorType") or "failure")
    message = str(error.get("errorMessage") or "")
    if error_type == "BatchProcessingError":
        for line in reversed(message.splitlines()):
            raised = _RAISED.match(line.strip())
            if raised:
                return failure_line(raised.group(1).rsplit(".", 1)[-1], raised.group(2))
    return failure_line(error_type, message)


def _is_request(event: Any) -> bool:
    return isinstance(event, dict) and isinstance(event.get("requestContext"), dict) and "routeKey" in event


def request_words(event: dict[str, Any], invocation: Any) -> str:
    """An API request in one line: method, path, the status it was answered with (and the error)."""
    from agentwake_ops.dlq.describe import first_line, safe_json

    http = event["requestContext"].get("http") or {}
    asked = f"{http.get('method') or '?'} {event.get('rawPath') or http.get('path') or '?'}"
    if invocation.error is not None:
        return f"{asked} failed: {error_words(invocation.error)} (answered 500)"
    response = invocation.response
    status = response.get("statusCode", 200) if isinstance(response, dict) else 200
    if not isinstance(status, int) or status < 400:
        return f"{asked} {status}"
    body = safe_json(response.get("body")) if isinstance(response, dict) else None
    said = body.get("error") or body.get("message") if isinstance(body, dict) else None
    return f"{asked} {status}: {first_line(str(said), 160)}" if said else f"{asked} {status}"


class WakeLines:
    """``LocalStackRuntime.on_invocation``: writes one line per invocation to ``out``."""

    def __init__(self, runtime: Any, out: IO[str]) -> None:
        self.runtime = runtime
        self.out = out
        self._queues: dict[str, str] | None = None
        self._limits: dict[str, tuple[int, str]] | None = None
        self._store: Any = None
        #: what the last line found dead-lettered (``agentwake invoke`` exits 1 on it); None: unknown
        self.dead_lettered: list[dead_letters.DeadLettered] | None = None

    def __call__(self, function: Any, event: Any) -> Callable[[Any], None]:
        try:
            before = self.before(event)
        except Exception:  # the line is a courtesy: never fail the invocation for it
            before = None

        def done(invocation: Any) -> None:
            self.dead_lettered = None
            try:
                line = self.line(function.logical_id, event, invocation, before)
            except Exception as exc:  # the line is a courtesy: never fail the invocation for it
                line = f"{function.logical_id} ({type(exc).__name__} while describing it)"
            print(f"{time.strftime('%H:%M:%S')} {line}", file=self.out, flush=True)

        return done

    def outcome(self, outcome: Any) -> None:
        """``AsyncInvoker.on_outcome``: an asynchronous invocation whose retries are spent gets a
        line of its own (each attempt had one): where its event went, after how many attempts."""
        if outcome.ok:
            return
        from agentwake_ops.runs import failure_line
        from agentwake_ops.terminal import shown

        woken = run_ids(outcome.event)
        runs = _listed(woken)
        why = f"{outcome.condition} after {outcome.approximate_invoke_count} attempt(s)"
        store = self._table()
        run = store.records.get_run(woken[0]) if store is not None and woken else None
        if run is not None and run.status == "failed" and run.last_error_type:  # the run's own words
            why += f": {failure_line(run.last_error_type, run.last_error)}"
        elif outcome.error is not None:
            why += f": {error_words(outcome.error)}"
        destination = outcome.destination
        where = (
            f"dead-lettered to {destination.logical_id or destination.arn}"
            if destination is not None
            else "dropped (no on-failure destination)"
        )
        line = shown(f"{outcome.function} {runs} {_cut(f'{where}: {why}')}")
        print(f"{time.strftime('%H:%M:%S')} {line}", file=self.out, flush=True)

    def before(self, event: Any) -> tuple[dead_letters.Watch | None, dict[str, int]]:
        """What the line compares with: the dead-letter queues' counts, each run's attempts."""
        if _is_request(event):
            return None, {}
        store = self._table()
        attempts = {}
        for run_id in run_ids(event):
            run = store.records.get_run(run_id) if store is not None else None
            attempts[run_id] = _NO_RUN if run is None else run.attempts
        return dead_letters.watch(self.runtime, self._dead_letter_queues()), attempts

    def line(self, function: str, event: Any, invocation: Any, before: Any = None) -> str:
        from agentwake_ops.terminal import shown

        seconds = f"{invocation.duration_ms / 1000:.1f}s"
        if _is_request(event):
            return shown(f"{function} {_cut(request_words(event, invocation))} {seconds}")
        watch, attempts = before if before is not None else (None, {})
        runs = run_ids(event)
        lost = dead_letters.arrived(self.runtime, watch, event, store=self._table()) if watch is not None else []
        self.dead_lettered = lost
        words = [self._run_words(run, attempts.get(run, _NO_RUN), event, invocation, lost) for run in runs]
        words += [item.line() for item in lost if item.run_id not in runs]
        if not words:
            words = [f"failed: {error_words(invocation.error)}" if invocation.error is not None else "succeeded"]
        outcome = "; ".join(dict.fromkeys(words))  # each outcome once, in the runs' order
        return shown(f"{function} {_listed(runs)} {_cut(outcome)} {seconds}")

    def _run_words(
        self, run_id: str, attempts_before: int, event: Any, invocation: Any, lost: list[dead_letters.DeadLettered]
    ) -> str:
        """What became of one run in this invocation, in words."""
        from agentwake_ops.runs import failure_line

        for item in lost:
            if item.run_id == run_id:
                return item.line()
        store = self._table()
        run = store.records.get_run(run_id) if store is not None else None
        if run is not None and run.attempts != attempts_before:  # this invocation ran an attempt
            if run.status == "succeeded":
                return "succeeded"
            if run.status == "failed":
                return f"failed: {failure_line(run.last_error_type, run.last_error)} ({self._next(run, event)})"
            return f"{run.status} (attempt {run.attempts})"
        if invocation.error is not None:
            return f"failed: {error_words(invocation.error)}"
        if _record_failed(run_id, event, invocation.response):
            return "failed (retried)"
        status = invocation.response.get("status") if isinstance(invocation.response, dict) else None
        if run is not None and run.status == "succeeded":
            return "already succeeded"
        if status in (None, "waiting"):
            return "waiting for its session"
        return str(status).replace("_", " ")

    def _next(self, run: Any, event: Any) -> str:
        """What follows a failed attempt: SQS's retry, or the dead-letter queue once it is spent."""
        records = event.get("Records") if isinstance(event, dict) else None
        if not records:
            return f"attempt {run.attempts}"
        from agentwake_ops.dlq.describe import safe_json

        for record in records:
            body = safe_json(record.get("body"))
            if isinstance(body, dict) and run.run_id.endswith(f":{body.get('task_id')}"):
                limit = self._redrive_limits().get(str(record.get("eventSourceARN")))
                received = int((record.get("attributes") or {}).get("ApproximateReceiveCount") or 0)
                if limit is not None and received >= limit[0]:
                    return f"attempt {run.attempts}, the last: SQS moves it to {limit[1]}"
        return f"attempt {run.attempts}, retried"

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

    def _redrive_limits(self) -> dict[str, tuple[int, str]]:
        if self._limits is None:
            self._limits = dead_letters.redrive_limits(self.runtime)
        return self._limits


def _record_failed(run_id: str, event: Any, response: Any) -> bool:
    """The record of ``run_id`` is a batch item failure (SQS gives it again)."""
    failures = response.get("batchItemFailures") if isinstance(response, dict) else None
    if not failures or not isinstance(event, dict):
        return False
    failed = {f.get("itemIdentifier") for f in failures if isinstance(f, dict)}
    return any(
        record.get("messageId") in failed and run_ids({"Records": [record]}) == [run_id]
        for record in event.get("Records") or []
        if isinstance(record, dict)
    )


def _listed(runs: list[str]) -> str:
    """The runs of a line: at most ``_SHOWN_RUNS``, each cut (a body may name a task id of any length)."""
    shown = ", ".join(_cut(run, _SHOWN_ID_CHARS) for run in runs[:_SHOWN_RUNS])
    return (shown + (f" (+{len(runs) - _SHOWN_RUNS})" if len(runs) > _SHOWN_RUNS else "")) or "-"


def _cut(text: str, limit: int = 0) -> str:
    limit = limit or _SHOWN_CHARS
    text = " ".join(text.split())  # one line, whatever the reason held
    return text if len(text) <= limit else text[: limit - 1] + "…"


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
