"""Cold init of a wake, against a bare Powertools SQS handler, in fresh interpreters.

    .venv/bin/python bench/cold_init.py [--runs 11]       (part of ``make bench``)

Each sample is a new Python process that measures its own CPU time (``time.process_time``) from
just before the first import to just after the last object is built, so interpreter start-up is
left out of both sides:

- **floor**: the bare handler any Powertools SQS function pays for: Logger, Metrics, BatchProcessor
  imported and one DynamoDB client created (the file given with ``--floor``, by default the one in
  this folder, ``floor_powertools_sqs.py``);
- **wake**: what agentwake's first invocation builds before the model call: import the handler
  module, build the adapters (settings, store, DynamoDB client), parse an SQS record's body, load
  the session config, task and a 10-entry history window from DynamoDB-JSON items as the store does,
  build the wake prompt and the runner (scripted provider, ``send_message_to_user`` with its JSON
  schema, the recording channel over the session's log channel). The DynamoDB calls themselves are
  network, not init, and are left out (the floor makes none either).

Samples alternate floor / wake so drift on a shared machine hits both; the ratio is the median of
the per-pair ratios. Run a side alone with ``--child floor|wake`` (add ``-X importtime`` to profile).
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
DEFAULT_FLOOR = Path(__file__).resolve().parent / "floor_powertools_sqs.py"

ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "AGENTWAKE_TABLE": "agentwake-bench",
    "AGENTWAKE_SCHEDULE_GROUP": "agentwake-jobs",
    "POWERTOOLS_SERVICE_NAME": "agentwake",
    "POWERTOOLS_LOG_LEVEL": "WARNING",
    # as template.yaml sets it for the functions (it changes nothing for the floor, which has no model)
    "PYDANTIC_DISABLE_PLUGINS": "__all__",
}

BODY = json.dumps(
    {
        "task_id": "t-1",
        "session_id": "s-1",
        "tool_name": "web_research",
        "tool_args": {"q": "x"},
        "status": "succeeded",
        "result_text": "the result",
        "summary_name": "Research",
        "finished_at": "2026-11-30T05:00:00Z",
    }
)


def _wake() -> None:
    """Everything a first background wake builds before its model call (no network)."""
    import importlib

    # the handler module first, as Lambda imports it (the order matters: Powertools' batch module
    # imports its pydantic parser models when pydantic is already loaded)
    importlib.import_module("agentwake.handlers.background_result")

    from agentwake import bootstrap
    from agentwake.store.models import HistoryEntry, SessionConfig, Task
    from agentwake.wake.agent_factory import build_runner
    from agentwake.wake.attempt import RecordingChannel, channels_for, session_ledger
    from agentwake.wake.messages import BackgroundResultMessage
    from agentwake.wake.prompt import build_wake_messages

    deps = bootstrap.wake_deps()
    store = deps.store
    msg = BackgroundResultMessage.parse_body(BODY)

    def ddb(model: object, pk: str, sk: str) -> dict:
        return store._item(model, pk, sk)  # type: ignore[arg-type]

    script = [{"text": "done"}]
    session_item = ddb(
        SessionConfig(session_id="s-1", providers=[{"type": "scripted", "id": "p", "script": script}]),
        "SESSION#s-1",
        "CONFIG",
    )
    task_item = ddb(Task(task_id="t-1", session_id="s-1", tool_name="web_research"), "TASK#t-1", "TASK")
    history_items = [
        ddb(HistoryEntry(session_id="s-1", role="user", content=f"m{i}"), "SESSION#s-1", f"MSG#{i:020d}")
        for i in range(10)
    ]
    session = store._load(SessionConfig, session_item)
    store._load(Task, task_item)
    history = [store._load(HistoryEntry, i).to_message() for i in history_items]
    messages = build_wake_messages(
        persona=session.persona, kind="background", wake={"task_id": msg.task_id}, history=history
    )
    journal = store.journal(msg.run_id, fresh=True)
    build_runner(
        session=session,
        run_id=msg.run_id,
        messages=messages,
        journal=journal,
        channel=RecordingChannel(channels_for(session, deps), journal),
        ledger=session_ledger(session),
        clock=deps.clock,
        deadline=None,
        settings=deps.settings,
        provider_factory=deps.provider_factory,
    )


def child(kind: str, floor: Path) -> None:
    os.environ.update(ENV)
    sys.path.insert(0, str(ROOT / "functions"))
    t0 = time.process_time()
    if kind == "floor":
        exec(compile(floor.read_text(), str(floor), "exec"), {"__name__": "floor"})
    else:
        _wake()
    print(json.dumps({"cpu_ms": (time.process_time() - t0) * 1000}))


def sample(kind: str, floor: Path) -> float:
    out = subprocess.run(
        [sys.executable, __file__, "--child", kind, "--floor", str(floor)],
        capture_output=True,
        text=True,
        check=True,
        env=_child_env(),
    )
    return float(json.loads(out.stdout.strip().splitlines()[-1])["cpu_ms"])


def _child_env() -> dict[str, str]:
    # bytecode is written (any value of PYTHONDONTWRITEBYTECODE, even "0", turns writing off), so the
    # warm-up samples leave compiled modules and both sides are measured from bytecode caches: a module
    # edited since the last run is not compiled again in every sample of one side
    env = {**os.environ, **ENV}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def measure(runs: int, floor: Path) -> dict[str, float]:
    sample("floor", floor), sample("wake", floor)  # warm the bytecode caches
    floors, wakes, ratios = [], [], []
    for i in range(runs):
        # alternate which side goes first, so neither always runs on a warmer machine
        if i % 2 == 0:
            f, w = sample("floor", floor), sample("wake", floor)
        else:
            w, f = sample("wake", floor), sample("floor", floor)
        floors.append(f)
        wakes.append(w)
        ratios.append(w / f)
    return {
        "floor_ms": statistics.median(floors),
        "wake_ms": statistics.median(wakes),
        "ratio": statistics.median(ratios),
        "runs": runs,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--floor", type=Path, default=DEFAULT_FLOOR)
    parser.add_argument("--child", choices=["floor", "wake"])
    args = parser.parse_args()
    if args.child:
        child(args.child, args.floor)
        return 0
    r = measure(args.runs, args.floor)
    print(
        f"cold init (CPU, median of {r['runs']} alternating pairs): floor {r['floor_ms']:.0f} ms, "
        f"wake {r['wake_ms']:.0f} ms, ratio {r['ratio']:.2f} (budget 1.25)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
