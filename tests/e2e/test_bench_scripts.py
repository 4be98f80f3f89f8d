"""`make bench` keeps working: each benchmark script runs end to end at a tiny size.

The figures are not checked here (timing belongs to the benchmarks, not to tests); what is checked
is that every script still runs against today's template, store and CLI and prints its report.
A script that rots (e.g. a table the template no longer has) fails here, not in front of a reader.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("script", "args", "expected"),
    [
        # the cold init as Lambda runs it (bundles built by functions/Makefile) is cold_init.py's row below
        (
            "bench_wake.py",
            ["--long", "200", "--runs", "1", "--cold-runs", "1", "--cold-modes", "cached"],
            "cold init (CPU",
        ),
        ("bench_local.py", ["--n", "10", "--sessions", "5"], "accounted for: "),
        ("bench_cli.py", ["--runs", "1", "--messages", "5"], "agentwake dlq list --json"),
        ("cold_init.py", ["--runs", "1"], "bundle with its bytecode (functions/Makefile, unchecked-hash)"),
        ("cold_init.py", ["--pair", "api", "--runs", "1"], "ProductApiFunction"),
        # the maintainer's walk goes one way: a record to its commit, never back into a file it left
        ("walk_background.py", [], "; 0 re-entries into a file the walk had left"),
        # the bare-Any parameters of the wake, the figure issue 31 brings to 0
        ("any_params.py", [], "parameters annotated bare Any in functions/agentwake/wake"),
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
