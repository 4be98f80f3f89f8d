"""`make bench` keeps working: each benchmark script runs end to end at a tiny size.

The figures are not checked here (timing belongs to the benchmarks, not to tests); what is checked
is that every script still runs against today's template, store and CLI and prints its report.
A script that rots (e.g. a table the template no longer has) fails here, not in front of a reader.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.test_wake_round_trips import DAILY_LIMITS_CALLS, FINAL_ANSWER_CALLS, ONE_STEP_CALLS

ROOT = Path(__file__).resolve().parents[2]
#: the maintainer's walk, every runtime file counted: 42 files, 147 re-entries on main at ab6ae9e, 151
#: once the journal's adapter asks domain/steps.py about its step keys (four calls into the key
#: grammar: a re-entry each), 153 (46 files) once the release reads the wait list's places
#: (store/wait_places.py asks keys.py and table.py: two re-entries; issue 32), 154 once a result
#: message names the run of its outcome (``msg.run_id`` asks domain/models.py for ``bg:{task}:{n}``:
#: one re-entry; issue 33), 156 (50 files) once a send answers its receipt (the log channel's
#: ``Receipt`` and wake/deliveries.py turning it into the marker's receipts: two re-entries; issue
#: 34), 157 once a delivery asks the journal for the intents an earlier attempt left under another
#: target (a config edited between a failure and its redrive: one re-entry into store/journal.py),
#: 161 (51 files) once a tool call asks whether its rule needs a person's approval and the journal
#: reads its decision's step key (issue 35: one re-entry each into agent/tools/__init__.py,
#: store/journal.py and domain/steps.py) and the release builds a handed copy in session/copies.py,
#: 162 once a run's start is two plain writes (issue 37: the lease's through store/session_lease.py,
#: then the attempt's from store/runs.py, each one ``table.conditional_write``: one re-entry into
#: store/table.py where the one transaction entered it once).
#: A change that sends the walk back into a file it had left more often fails here
WALK_REENTRIES_CEILING = 162
#: bench_wake.py's rows that tests/integration/test_wake_round_trips.py counts too: the bench builds the
#: wake's dependencies as the deployed handler does (the result queue included), so the same calls
ROUND_TRIP_ROWS = {
    "one-step background": ONE_STEP_CALLS,
    "one-step background, final answer sent (deliver_final)": FINAL_ANSWER_CALLS,
    "session with daily limits (one step)": DAILY_LIMITS_CALLS,
}


def bench_wake_calls(report: str, kind: str) -> list[str]:
    """The calls bench_wake.py printed for one wake kind (``  kind  n / budget  ratio r  Op Op ...``),
    checked against their count."""
    row = re.search(rf"^  {re.escape(kind)} +(\d+) / \d+  ratio [\d.]+  (.*)$", report, re.MULTILINE)
    assert row is not None, f"{kind}: no row in\n{report[-3000:]}"
    calls = row[2].split()
    assert len(calls) == int(row[1]), row[0]
    return calls


@pytest.mark.parametrize(
    ("script", "args", "expected"),
    [
        # the cold init as Lambda runs it (bundles built by functions/Makefile) is cold_init.py's row below
        (
            "bench_wake.py",
            ["--long", "200", "--runs", "1", "--cold-runs", "1", "--cold-modes", "cached"],
            "cold init (CPU",
        ),
        # 10 % of 5 sessions failing: one session, its 2 runs dead-lettered after MaxReceiveCount (5) attempts each
        ("bench_local.py", ["--n", "10", "--sessions", "5"], "attempts per failing run: 5 x2; total 10"),
        ("bench_cli.py", ["--runs", "1", "--messages", "5"], "agentwake dlq list --json"),
        # paired with HEAD (exported by git archive), as `make bench-dlq` pairs with main
        ("bench_dlq_list.py", ["--messages", "15", "--runs", "1", "--vs", "HEAD"], "this tree / HEAD: wall"),
        ("cold_init.py", ["--runs", "1"], "bundle with its bytecode (functions/Makefile, unchecked-hash)"),
        ("cold_init.py", ["--pair", "api", "--runs", "1"], "ProductApiFunction"),
        # each channel's first delivery after a wake's init, which loaded nothing of the channels
        ("cold_init.py", ["--pair", "channels", "--runs", "1"], "slack     at init: nothing of the channels"),
        # the bare-Any parameters of the wake, the figure issue 31 brings to 0
        ("any_params.py", [], "parameters annotated bare Any in functions/agentwake/wake"),
        # the cost table: one warm wake per kind through the deployed handlers
        ("cost.py", ["--wakes", "1"], "Step Functions Standard >= $125/M"),
        ("burst.py", ["--n", "3", "--sessions", "2", "--per-session", "2"], "overall utilisation: "),
    ],
)
def test_each_benchmark_runs_end_to_end_at_a_tiny_size(script: str, args: list[str], expected: str) -> None:
    # GIVEN a benchmark script WHEN it runs at a tiny size
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    # THEN it exits 0 and prints its report
    assert out.returncode == 0, out.stderr[-3000:]
    assert expected in out.stdout, out.stdout[-3000:]
    if script == "bench_wake.py":
        # AND the wakes it counts make the calls the round-trip tests count, in the same order
        for kind, calls in ROUND_TRIP_ROWS.items():
            assert bench_wake_calls(out.stdout, kind) == calls, kind
        # AND the bundle it sizes is the one sam build makes (functions/Makefile, arm64 wheels)
        assert "(what sam build makes: functions/Makefile, arm64 wheels" in out.stdout, out.stdout[-3000:]
    if script == "cost.py":
        # AND a one-step background wake through its handler makes the calls the round-trip tests count
        row = re.search(r"^  one-step background +\d.*\n    calls: (.*)$", out.stdout, re.MULTILINE)
        assert row is not None and row[1].split() == ONE_STEP_CALLS, out.stdout[-3000:]
        # AND a batch of ten sessions writes, per wake, what one wake alone writes (only the billed time is shared)
        wru = dict(
            re.findall(
                r"^  (one-step background(?:, batch of 10 sessions, \d+ at a time)?) +\S+ +(\S+)",
                out.stdout,
                re.MULTILINE,
            )
        )
        assert len(wru) == 2 and len(set(wru.values())) == 1, out.stdout[-3000:]
        # AND its index writes are the run entering gsi3 and gsi4 at its start: the commit's change of
        # the run's and the task's status writes nothing on the keys-only indexes (5 when they were ALL)
        alone = re.search(r"^  one-step background +\d+ +\d+ \((\d+)\+(\d+)\)", out.stdout, re.MULTILINE)
        assert alone is not None and alone[2] == "2", out.stdout[-3000:]


def test_the_walk_of_one_background_record_counts_every_file_and_re_enters_no_more_than_today() -> None:
    # GIVEN the maintainer's walk (bench/walk_background.py), no runtime file left out of it
    # WHEN one background record is walked from its handler to its commit
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "walk_background.py")],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    # THEN it prints how many files it passed and how often it came back into one it had left
    figures = re.search(r"(\d+) files; (\d+) re-entries into a file the walk had left", out.stdout)
    assert figures is not None, out.stdout[-3000:]
    files, reentries = int(figures[1]), int(figures[2])
    assert files > 0
    # AND the helper files an earlier walk dropped are walked like any other
    assert "store/table.py" in out.stdout and "store/keys.py" in out.stdout, out.stdout[-3000:]
    # AND it comes back no more often than it did when the walk was made honest
    assert reentries <= WALK_REENTRIES_CEILING, out.stdout[-3000:]
