"""Benchmark: ``agentwake dlq list`` over a large DLQ — wall time, the CLI's own CPU, the server's.

    make bench-dlq                       (10,000 messages, this tree against main, paired)
    .venv/bin/python bench/bench_dlq_list.py [--messages 10000] [--runs 2] [--vs REF] [--profile FILE]

The embedded moto server runs in a process of its own (``agentwake_local.server.main``), so its CPU
is not the CLI's. Its results DLQ is filled straight through SendMessageBatch with ``--messages``
messages (three error types, seven sessions: messages the handler dead-lettered itself, so the
listing reads each without a store call, as issue 37 measured it).

Each run is ``agentwake dlq list --queue results --json`` as a fresh process; it must print every
message exactly once, and leave every message visible again, or the bench fails. Reported per run:
the wall time, the CLI process's CPU (user + system, from its rusage) and the server's CPU over the
same run (``/proc``).

``--vs REF`` pairs this tree with another commit in the same run, in alternating order, each on
the local stack of its own commit: REF is exported with ``git archive`` to a temporary directory,
and both its moto server (with REF's moto patches) and its CLI run with this venv's Python, its
four packages first on PYTHONPATH (the venv's editable install of this tree comes after
``sys.path``). Both servers hold the same messages and run side by side for the whole bench. ``--profile FILE`` runs this tree's CLI once more
under cProfile and writes the stats to FILE (``python -m pstats FILE``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.pop("AWS_ENDPOINT_URL", None)

from agentwake.store.queues import ATTR_ERROR_TYPE, ATTR_REASON  # noqa: E402

ERROR_TYPES = ("UnknownTask", "InvalidMessage", "SessionMismatch")
SESSIONS = tuple(f"s-{i}" for i in range(7))
#: the venv's console script: its ``from agentwake_ops.cli import main`` follows PYTHONPATH first
CLI = str(Path(sys.executable).parent / "agentwake")
#: the CLI under cProfile, its scan on one receiver (cProfile sees the main thread only)
PROFILED = (
    "import cProfile, sys; import agentwake_ops.sqs_scan as s; s.SCAN_RECEIVERS = 1; "
    "from agentwake_ops.cli import main; sys.argv[1:] = sys.argv[2:]; "
    "cProfile.run('try:\\n    main()\\nexcept SystemExit:\\n    pass', {out!r})"
)
ARGS = ["dlq", "list", "--queue", "results", "--json"]


def start_server(tree: Path = ROOT) -> tuple[subprocess.Popen[str], str]:
    """The embedded moto server of ``tree`` (its moto patches), in a process of its own."""
    env = {**os.environ, "PYTHONPATH": pythonpath(tree)} if tree != ROOT else None
    process = subprocess.Popen(
        [sys.executable, "-c", "from agentwake_local.server import main; raise SystemExit(main())"],
        cwd=tree,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    endpoint = process.stdout.readline().strip()
    if not endpoint.startswith("http://"):
        process.kill()
        raise SystemExit(f"the moto server did not start: {endpoint!r}")
    return process, endpoint


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of a running process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fill(sqs: object, url: str, count: int) -> None:
    for start in range(0, count, 10):
        entries = []
        for i in range(start, min(start + 10, count)):
            body = {"task_id": f"task-{i}", "session_id": SESSIONS[i % len(SESSIONS)], "n": i}
            entries.append(
                {
                    "Id": str(i - start),
                    "MessageBody": json.dumps(body),
                    "MessageAttributes": {
                        ATTR_ERROR_TYPE: {"DataType": "String", "StringValue": ERROR_TYPES[i % 3]},
                        ATTR_REASON: {"DataType": "String", "StringValue": f"reason {i}"},
                    },
                }
            )
        resp = sqs.send_message_batch(QueueUrl=url, Entries=entries)  # type: ignore[attr-defined]
        if resp.get("Failed"):
            raise SystemExit(f"filling the DLQ failed: {resp['Failed'][:1]}")


@contextlib.contextmanager
def checkout(ref: str) -> Iterator[Path]:
    """``ref``'s tree, exported to a temporary directory."""
    with tempfile.TemporaryDirectory(prefix="bench-dlq-") as tmp:
        archive = subprocess.run(["git", "archive", ref], cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        yield Path(tmp)


def pythonpath(tree: Path) -> str:
    return os.pathsep.join(str(tree / sub) for sub in ("functions", ".", "infra"))


def run_cli(env: dict[str, str], prefix: list[str]) -> tuple[float, float, str, str]:
    """(wall s, CPU s of the CLI process, stdout, stderr)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        process = subprocess.Popen([sys.executable, *prefix, CLI, *ARGS], env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if process.returncode != 0:
        raise SystemExit(f"dlq list exited {process.returncode}: {stderr.strip()[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, stdout, stderr


@dataclass
class LocalStack:
    """One variant's moto server, its resources and the environment its CLI runs in."""

    server: subprocess.Popen[str]
    env: dict[str, str]
    sqs: Any
    dlq_url: str


def local_stack(stack: contextlib.ExitStack, name: str, tree: Path, messages: int) -> LocalStack:
    """``tree``'s moto server (stopped with ``stack``), its resources, its results DLQ filled."""
    from agentwake_local.server import aws_env
    from tests.support.aws import REGION, create_resources

    server, endpoint = start_server(tree)

    def stop() -> None:
        server.terminate()
        server.wait(timeout=30)

    stack.callback(stop)
    os.environ.update(aws_env(endpoint, REGION))
    res = create_resources()
    import boto3

    sqs = boto3.client("sqs", region_name=REGION, endpoint_url=endpoint)
    started = time.perf_counter()
    fill(sqs, res.dlq_url, messages)
    print(
        f"filled the results DLQ of {name}'s server with {messages} messages in {time.perf_counter() - started:.1f} s"
    )
    env = {**os.environ, **res.env(), "AGENTWAKE_HOME": str(ROOT / ".bench-home"), "COLUMNS": "200"}
    env.pop("PYTHONPATH", None)
    if tree != ROOT:
        env["PYTHONPATH"] = pythonpath(tree)
    return LocalStack(server, env, sqs, res.dlq_url)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=2, help="runs of each variant (alternating order)")
    parser.add_argument("--vs", metavar="REF", help="pair with this git ref (e.g. main) in the same run")
    parser.add_argument("--profile", metavar="FILE", help="also run this tree's CLI under cProfile into FILE")
    args = parser.parse_args()

    from agentwake_ops.sqs_scan import queue_counts

    with contextlib.ExitStack() as stack:
        variants: dict[str, LocalStack] = {"this tree": local_stack(stack, "this tree", ROOT, args.messages)}
        if args.vs:
            variants[args.vs] = local_stack(stack, args.vs, stack.enter_context(checkout(args.vs)), args.messages)
        figures: dict[str, list[tuple[float, float, float]]] = {name: [] for name in variants}
        for run in range(args.runs):
            order = list(variants.items())
            if run % 2:
                order.reverse()
            for name, variant in order:
                server_cpu = process_cpu(variant.server.pid)
                wall, cpu, stdout, _ = run_cli(variant.env, [])
                server_cpu = process_cpu(variant.server.pid) - server_cpu
                ids = [row["message_id"] for row in json.loads(stdout)]
                if len(ids) != len(set(ids)) or len(ids) != args.messages:
                    raise SystemExit(f"{name}: dlq list printed {len(ids)} rows, {len(set(ids))} distinct")
                counts = queue_counts(variant.sqs, variant.dlq_url)
                if counts != (args.messages, 0, 0):
                    raise SystemExit(f"{name}: the DLQ is not all visible again: {counts}")
                figures[name].append((wall, cpu, server_cpu))
                print(
                    f"  run {run + 1} {name:<12} wall {wall:6.2f} s   CLI CPU {cpu:6.2f} s   "
                    f"server CPU {server_cpu:6.2f} s   ({len(ids)} messages, each once)   "
                    f"load {os.getloadavg()[0]:.2f}",
                    flush=True,
                )
        if args.profile:
            wall, cpu, stdout, _ = run_cli(variants["this tree"].env, ["-c", PROFILED.format(out=args.profile)])
            print(f"  profiled run: wall {wall:.2f} s, CLI CPU {cpu:.2f} s -> {args.profile}")

    load = os.getloadavg()
    print(
        f"dlq list --queue results --json over {args.messages} messages, best of {args.runs} "
        f"(load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {os.cpu_count()} CPUs)"
    )
    for name, values in figures.items():
        wall, cpu, server_cpu = min(values)
        print(f"  {name:<12} wall {wall:6.2f} s   CLI CPU {cpu:6.2f} s   server CPU {server_cpu:6.2f} s")
    if args.vs:
        mine, theirs = min(figures["this tree"]), min(figures[args.vs])
        print(f"  this tree / {args.vs}: wall {mine[0] / theirs[0]:.2f}x, CLI CPU {mine[1] / theirs[1]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
