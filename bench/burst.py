"""Benchmark: bursts of completions for busy sessions, through the local stack (issue 22).

    make bench
    .venv/bin/python bench/burst.py [--n 50] [--sessions 10] [--per-session 20]

The local stack runs as ``agentwake local up`` runs it: its embedded moto server in this process
(whose SQS sends wake the idle pollers at once), template.yaml with its default parameters, the
local timing, and the "up" mode's background threads (Lambda's SQS poller with the template's
MaximumConcurrency, the async queue, the scheduler). Each
session's scripted model takes two steps, the first a ``send_message_to_user`` delivered to a
webhook on 127.0.0.1 that answers in about a second. The tasks are registered and finished through
the runtime's TasksService before the poller starts, so that every completion is waiting at once.

(a) ``--n`` completions for one session; (b) ``--sessions`` sessions x ``--per-session``
completions. Reported per case: every run succeeded once, each delivery received once, no two runs
of a session overlapping (their journaled steps and deliveries), nothing left on a wait list or in
the DLQ; the session's busy fraction (sum of its run times / first start to last end), its
longest idle gap between two runs, the longest time it was idle while one of its runs had found
it busy and waited (``waiter idle s``: from that run's first busy finding, or the previous run's
end if later, to the next start; the hand-off is to leave none longer than a second), how many of
its runs a release handed the session to, and the longest idle time between such a release and the
handed run's start (``idle_before_s``); for (b) each session's figures and the consumers'
utilisation: the sum of all run times / (min(sessions, concurrency) x the span from the first start
to the last end), since only ``concurrency`` runs can run at once, and the time the consumers spent
in invocations (running, or putting records on wait lists) / (concurrency x the span from the
first invocation's start to the last one's end); and the load average before and after.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ["POWERTOOLS_LOG_LEVEL"] = "ERROR"
os.environ["POWERTOOLS_METRICS_DISABLED"] = "true"
os.environ.pop("AWS_ENDPOINT_URL", None)

import warnings  # noqa: E402

warnings.filterwarnings("ignore")

from agentwake.domain.models import SessionConfig  # noqa: E402
from agentwake.product.tasks import TasksService  # noqa: E402
from agentwake.store.dynamo import DynamoStore  # noqa: E402
from agentwake_local import timing  # noqa: E402
from agentwake_local.stack import LocalStackRuntime  # noqa: E402
from agentwake_ops.runs import Drain, session_drain  # noqa: E402
from agentwake_ops.sqs_scan import queue_counts  # noqa: E402
from tests.e2e.test_busy_sessions import run_spans  # noqa: E402
from tests.support.builders import OK_SCRIPT, local_stack_rules  # noqa: E402
from tests.support.receiver import CountingReceiver  # noqa: E402

#: the webhook answers each delivery after this long
WEBHOOK_S = 1.0
#: the longest a session may stay idle while one of its runs waits for it (issue 37)
READY_IDLE_LIMIT_S = 1.0


class Consumers:
    """The result queue's consumers' time in invocations: each invocation's start and end, timed
    around the poller's call of the function (``with Consumers(poller):`` while a case runs)."""

    def __init__(self, poller: Any) -> None:
        self.poller = poller
        self.spans: list[tuple[float, float]] = []
        self._lock = threading.Lock()
        self._invoke: Callable[[Any], Any] | None = None

    def __enter__(self) -> Consumers:
        self._invoke = invoke = self.poller.invoke

        def timed(event: Any) -> Any:
            started = time.time()
            try:
                return invoke(event)
            finally:
                with self._lock:
                    self.spans.append((started, time.time()))

        self.poller.invoke = timed
        return self

    def __exit__(self, *exc: object) -> None:
        self.poller.invoke = self._invoke

    def utilisation(self) -> tuple[float, float]:
        """(seconds in invocations, their share of concurrency x the first start to the last end)."""
        if not self.spans:
            return 0.0, 0.0
        busy = sum(end - start for start, end in self.spans)
        span = max(end for _, end in self.spans) - min(start for start, _ in self.spans)
        return busy, busy / (self.poller.concurrency * span) if span > 0 else 1.0


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


class Case:
    """One burst: ``sessions`` x ``per_session`` completions, all finished before the poller starts."""

    def __init__(self, name: str, sessions: int, per_session: int) -> None:
        self.name, self.sessions, self.per_session = name, sessions, per_session
        self.run_ids: dict[str, list[str]] = {}
        self.problems: list[str] = []
        self.drains: dict[str, Drain] = {}
        #: per session: runs handed the session by a release, and their longest idle_before_s
        self.handed: dict[str, tuple[int, float]] = {}
        self.overall: Drain | None = None
        self.consumers: tuple[float, float] = (0.0, 0.0)
        self.elapsed_s = 0.0
        self.load_before = self.load_after = ""

    def prepare(self, runtime: LocalStackRuntime, store: DynamoStore, receiver: CountingReceiver) -> None:
        tasks = TasksService(store, runtime.outputs["BackgroundResultQueueUrl"], sqs=runtime.client("sqs"))
        run_id = uuid.uuid4().hex[:6]
        for s in range(self.sessions):
            session = f"burst-{self.name}-{run_id}-s{s}"
            store.records.put_session(
                SessionConfig(
                    session_id=session,
                    providers=[{"type": "scripted", "id": "scripted", "script": OK_SCRIPT}],
                    delivery={"type": "webhook", "url": receiver.url, "timeout": 90},
                    retry_base_delay_ms=0,
                ),
                local_stack_rules(),
            )
            registered = [tasks.register_task(session, "web_research", {"q": i}) for i in range(self.per_session)]
            for r in registered:
                tasks.finish_task(r.task_id, "succeeded", f"result of {r.task_id}", task_token=r.task_token)
            self.run_ids[session] = [f"bg:{r.task_id}" for r in registered]

    def all_ids(self) -> list[str]:
        return [r for ids in self.run_ids.values() for r in ids]

    def done(self, store: DynamoStore) -> bool:
        return all((run := store.records.get_run(r)) is not None and run.status == "succeeded" for r in self.all_ids())

    def check(self, runtime: LocalStackRuntime, store: DynamoStore, receiver: CountingReceiver) -> None:
        ids = self.all_ids()
        attempts = {r: store.records.get_run(r).attempts for r in ids}  # type: ignore[union-attr]
        if any(n != 1 for n in attempts.values()):
            self.problems.append(f"runs with more than one attempt: {[r for r, n in attempts.items() if n != 1]}")
        received = receiver.by_delivery_id()
        mine = {d: n for d, n in received.items() if d.split("#")[0] in attempts}
        if mine != {f"{r}#0#0": 1 for r in ids}:
            self.problems.append(
                f"deliveries: {len(mine)} ids, {sum(mine.values())} received, expected {len(ids)} once each"
            )
        for session, run_ids in self.run_ids.items():
            spans = run_spans(store, run_ids)
            for (_, last, before), (first, _, after) in zip(spans, spans[1:], strict=False):
                if first <= last:
                    self.problems.append(f"{before} (until {last}) overlaps {after} (from {first})")
            notes = [e.run_id for e in store.history.history(session) if e.kind == "note" and e.run_id]
            if sorted(notes) != sorted(run_ids):
                self.problems.append(f"{session}: {len(notes)} notes for {len(run_ids)} runs")
            if store.leases.waiters(session):
                self.problems.append(f"{session}: {len(store.leases.waiters(session))} left waiting on the wait list")
            self.drains[session] = session_drain(store, run_ids)
            idle = [i for r in run_ids if (i := store.records.get_run(r).idle_before_s) is not None]  # type: ignore[union-attr]
            self.handed[session] = (len(idle), max(idle, default=0.0))
        self.overall = session_drain(store, ids)
        dead = sum(queue_counts(runtime.client("sqs"), runtime.outputs["BackgroundResultDLQUrl"]))
        if dead:
            self.problems.append(f"the DLQ holds {dead} messages")

    def report(self, concurrency: int) -> None:
        total = self.sessions * self.per_session
        print(
            f"\n({self.name}) {self.sessions} session(s) x {self.per_session} completions = {total} runs, "
            f"drained in {self.elapsed_s:.1f} s; load average {self.load_before} before, {self.load_after} after"
        )
        ok = "yes" if not self.problems else "NO"
        print(f"  all succeeded once, deliveries once each, no overlap, nothing waiting or dead-lettered: {ok}")
        print(
            f"  {'session':<32} {'runs':>5} {'busy s':>8} {'span s':>8} {'busy':>6} {'longest gap s':>14} "
            f"{'waiter idle s':>14} {'handed':>7} {'longest handed idle s':>22}"
        )
        for session, d in self.drains.items():
            handed, idle = self.handed[session]
            print(
                f"  {session:<32} {d.runs:>5} {d.busy_s:>8.1f} {d.span_s:>8.1f} "
                f"{100 * d.busy_fraction:>5.0f}% {d.longest_gap_s:>14.2f} {d.longest_ready_idle_s:>14.2f} "
                f"{handed:>7} {idle:>22.2f}"
            )
        if self.drains:
            worst = max(d.longest_ready_idle_s for d in self.drains.values())
            ok = "yes" if worst <= READY_IDLE_LIMIT_S else "NO"
            print(
                f"  no session idle longer than {READY_IDLE_LIMIT_S:.0f} s while a run waited for it: {ok} "
                f"(longest {worst:.2f} s)"
            )
        if self.sessions > 1 and self.overall is not None:
            slots = min(self.sessions, concurrency)
            utilisation = self.overall.busy_s / (slots * self.overall.span_s) if self.overall.span_s else 1.0
            print(
                f"  overall utilisation: {self.overall.busy_s:.1f} s of runs / ({slots} x {self.overall.span_s:.1f} s) "
                f"= {100 * utilisation:.0f}% (at most {concurrency} runs at once)"
            )
            in_invocations, share = self.consumers
            print(
                f"  the {concurrency} consumers' time in invocations: {in_invocations:.1f} s = {100 * share:.0f}% "
                f"of their time from the first invocation's start to the last one's end"
            )
        for problem in self.problems:
            print(f"  PROBLEM: {problem}")


def run_case(case: Case, runtime: LocalStackRuntime, store: DynamoStore, receiver: CountingReceiver) -> None:
    case.prepare(runtime, store, receiver)
    case.load_before = load()
    started = time.monotonic()
    consumers = Consumers(runtime.poller("BackgroundResultFunction"))
    with consumers:
        runtime.start_background()
        try:
            _drain(case, store, started)
        finally:
            runtime.stop_background()
    case.consumers = consumers.utilisation()
    case.load_after = load()
    if not case.problems:
        case.check(runtime, store, receiver)


def _drain(case: Case, store: DynamoStore, started: float) -> None:
    """Wait until every run of ``case`` succeeded (at most a generous bound)."""
    bound = 60 + 10 * case.sessions * case.per_session
    while not case.done(store):
        if time.monotonic() - started > bound:
            case.problems.append(f"not every run succeeded within {bound} s")
            break
        time.sleep(0.5)
    case.elapsed_s = time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50, help="completions for one session (case a)")
    parser.add_argument("--sessions", type=int, default=10, help="sessions of case b")
    parser.add_argument("--per-session", type=int, default=20, help="completions per session of case b")
    args = parser.parse_args()
    if min(args.n, args.sessions, args.per_session) < 1:
        print("error: --n, --sessions and --per-session must be at least 1", file=sys.stderr)
        return 1
    cases = [Case("a", 1, args.n), Case("b", args.sessions, args.per_session)]
    home = Path(tempfile.mkdtemp(prefix="agentwake-burst-"))
    os.environ["AGENTWAKE_HOME"] = str(home)  # never a developer's own local stack
    # as `agentwake local up` starts it, its background threads started by each case
    runtime = LocalStackRuntime(home=home, timing=timing.local()).start(ROOT / "template.yaml", {})
    # the functions' logs and metrics go to stdout, as on Lambda: not this report's business (for
    # the whole run: the loggers keep the stream they were made with)
    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
        try:
            store = DynamoStore(runtime.outputs["AgentTableName"], client=runtime.client("dynamodb"))
            concurrency = next(
                p.concurrency for p in runtime.pollers if p.function.logical_id == "BackgroundResultFunction"
            )
            with CountingReceiver() as receiver:
                receiver.slow_next, receiver.slow_seconds = 10**9, WEBHOOK_S  # every delivery takes a second
                for case in cases:
                    run_case(case, runtime, store, receiver)
        finally:
            runtime.stop()
    print(
        f"bursts through the local stack (template defaults: {concurrency} concurrent result consumers), "
        f"webhook answering in {WEBHOOK_S:.0f} s, two model steps and one delivery per run"
    )
    for case in cases:
        case.report(concurrency)
    return 1 if any(c.problems for c in cases) else 0


if __name__ == "__main__":
    sys.exit(main())
