"""Benchmark: how long the operator CLI makes a person wait, against ``python -c "import boto3"``.

    make bench        (or: .venv/bin/python bench/bench_cli.py [--runs N] [--messages N])

A moto server on 127.0.0.1 holds the stack's table and a results DLQ of ``--messages`` (100)
messages. Three commands run as fresh processes, in alternating order, ``--runs`` times each:

- the floor: ``python -c "import boto3"`` (what any boto3 tool pays before doing anything);
- ``agentwake --help``;
- ``agentwake dlq list --queue results --json`` against the DLQ (a complete scan: every message
  received, held, released, and joined with the store).

The report gives each median in seconds and as a ratio to the floor measured in the same run, so
a busy machine does not mislead. Each ``dlq list`` must print every message, or the bench fails.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
    return elapsed, done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--messages", type=int, default=100)
    args = parser.parse_args()

    from agentwake_local.server import MotoServer, aws_env
    from tests.support.aws import REGION, create_resources

    agentwake = str(Path(sys.executable).parent / "agentwake")
    with MotoServer() as server:
        env = {**os.environ, **aws_env(server.endpoint_url, REGION)}
        os.environ.update(aws_env(server.endpoint_url, REGION))
        res = create_resources()
        env.update(res.env())
        env["AGENTWAKE_HOME"] = str(ROOT / ".bench-home")  # never a developer's running local stack
        import boto3

        sqs = boto3.client("sqs", region_name=REGION)
        for start in range(0, args.messages, 10):
            entries = [
                {
                    "Id": str(i),
                    "MessageBody": json.dumps({"task_id": f"t{start + i}", "session_id": "s"}),
                    "MessageAttributes": {"agentwake-error-type": {"DataType": "String", "StringValue": "UnknownTask"}},
                }
                for i in range(min(10, args.messages - start))
            ]
            sqs.send_message_batch(QueueUrl=res.dlq_url, Entries=entries)

        commands = {
            'python -c "import boto3"': [sys.executable, "-c", "import boto3"],
            "agentwake --help": [agentwake, "--help"],
            f"agentwake dlq list --json ({args.messages} messages)": [
                agentwake,
                "dlq",
                "list",
                "--queue",
                "results",
                "--json",
            ],
        }
        times: dict[str, list[float]] = {name: [] for name in commands}
        for run in range(args.runs):
            order = list(commands.items())
            if run % 2:
                order.reverse()
            for name, argv in order:
                elapsed, out = timed(argv, env)
                if name.startswith("agentwake dlq list"):
                    seen = {row["message_id"] for row in json.loads(out)}
                    if len(seen) != args.messages:
                        raise SystemExit(f"dlq list printed {len(seen)} of {args.messages} messages")
                times[name].append(elapsed)

    floor = statistics.median(times['python -c "import boto3"'])
    print(f'CLI latency, median of {args.runs} alternating runs (floor: python -c "import boto3")')
    for name, values in times.items():
        median = statistics.median(values)
        print(f"  {name:<45} {median:6.3f} s   {median / floor:5.2f}x floor")
    return 0


if __name__ == "__main__":
    sys.exit(main())
