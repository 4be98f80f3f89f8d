"""Cold init of a wake, against a bare Powertools SQS handler, in fresh interpreters.

    .venv/bin/python bench/cold_init.py [--runs 11]       (part of ``make bench``)

Each sample is a new Python process that measures its own CPU time (``time.process_time``) from
just before the first import to just after the last object is built, so interpreter start-up is
left out of both sides:

- **floor**: the bare handler any Powertools SQS function pays for: Logger, Metrics, BatchProcessor
  imported and one DynamoDB client created (the file given with ``--floor``, by default the one in
  this folder, ``floor_powertools_sqs.py``; ``--floor bench/floor_powertools_sqs_pydantic.py`` adds one
  pydantic model validating a body, so the wake against it is agentwake's share beyond pydantic's);
- **wake**: what agentwake's first invocation builds before the model call: import the handler
  module, build the adapters (settings, store, DynamoDB client), parse an SQS record's body, load
  the session config, task and a 10-entry history window from DynamoDB-JSON items as the store does,
  build the wake prompt and the runner (scripted provider, ``send_message_to_user`` with its JSON
  schema, the recording channel over the session's log channel). The DynamoDB calls themselves are
  network, not init, and are left out (the floor makes none either).

Both sides are measured three ways (``--modes``):

- **cached**: from this tree and this environment, bytecode caches written by a warm-up sample (what a
  developer's machine sees; the figure this bench has always printed);
- **source**: as Lambda runs a bundle that ``sam build``'s python workflow made: the bundle built by
  ``functions/Makefile`` without its bytecode step, ``python -S -B`` (``PYTHONDONTWRITEBYTECODE=1``:
  ``/var/task`` is read-only, nothing can be cached), the bundle first on ``sys.path`` and then only
  what the Lambda runtime provides (boto3 and its imports, from this environment, with their bytecode);
- **shipped**: the same with the bundle's bytecode (``functions/Makefile``'s ``bytecode`` step,
  unchecked-hash), as the deployed functions now run.

The floor is bundled the same way: its file as the handler module beside ``aws-lambda-powertools``
and ``pydantic`` installed by the same Makefile (the versions our bundle gets; pydantic is loaded only
by a floor that imports it), with and without bytecode. Here the
bundles are built and compiled by this interpreter for this machine (the deployed bundle is compiled
by python3.13 for arm64), and the output says so.

``--pair channels`` (``make bench`` prints it after the ratios): per channel (webhook, websocket,
slack, telegram, sns), fresh interpreters that build the wake's init above for a log session, then
make its session's first delivery through that channel as a wake does (``channels_for`` with the
run's journal as the intent log) against a stub on 127.0.0.1 that answers for the platform and for
DynamoDB and SNS: what the init had loaded of the channels (nothing), the modules the first delivery
imported, and the CPU ms of building the channel and of the first send (which makes its client).

Samples alternate floor / wake so drift on a shared machine hits both, and the modes take turns; the
ratio is the median of the per-pair ratios, with their spread and the load average. Run a side alone
with ``--child floor|wake`` (add ``-X importtime`` to profile).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_FLOOR = Path(__file__).resolve().parent / "floor_powertools_sqs.py"
#: ``--pair api``: ProductApiFunction against a bare Powertools HTTP API handler
HTTP_FLOOR = Path(__file__).resolve().parent / "floor_powertools_http.py"

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
    from agentwake.domain.models import HistoryEntry, SessionConfig, Task
    from agentwake.wake.agent_factory import session_agent
    from agentwake.wake.attempt import RecordingChannel, channels_for
    from agentwake.wake.messages import BackgroundResultMessage
    from agentwake.wake.prompt import WakePrompt

    deps = bootstrap.wake_deps()
    store = deps.store
    msg = BackgroundResultMessage.parse_body(BODY)

    def ddb(model: object, pk: str, sk: str) -> dict:
        return store.table.item(model, pk, sk)  # type: ignore[arg-type]

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
    session = store.table.load(SessionConfig, session_item)
    store.table.load(Task, task_item)
    history = [store.table.load(HistoryEntry, i).to_message() for i in history_items]
    prompt = WakePrompt(persona=session.persona, kind="background", wake={"task_id": msg.task_id}, history=history)
    journal = store.journals.journal(msg.run_id, fresh=True)
    session_agent(
        session=session,
        run_id=msg.run_id,
        prompt=prompt,
        journal=journal,
        channel=RecordingChannel(channels_for(session, deps), journal),
        clock=deps.clock,
        deadline=None,
        settings=deps.settings,
        provider_factory=deps.provider_factory,
    ).build()  # the ledger, the prompt's messages, the chain, the tools and the runner: not the run


def _api() -> None:
    """What ProductApiFunction's first request builds: the handler module, the services (settings,
    store, DynamoDB and SQS clients) and one request resolved through validation (a 422, no network)."""
    import importlib

    handler = importlib.import_module("agentwake.handlers.product_api").handler
    from agentwake import bootstrap

    class Context:  # what Logger.inject_lambda_context reads
        function_name, memory_limit_in_mb, aws_request_id = "agentwake-api", 512, "req-1"
        invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:agentwake-api"

    bootstrap.sessions()  # the services of the routes, over one store and the result queue
    bootstrap.tasks()
    event = {
        "version": "2.0",
        "routeKey": "POST /tasks",
        "rawPath": "/tasks",
        "rawQueryString": "",
        "headers": {"content-type": "application/json"},
        "requestContext": {"http": {"method": "POST", "path": "/tasks", "sourceIp": "127.0.0.1"}, "stage": "$default"},
        "body": "{}",
        "isBase64Encoded": False,
    }
    assert handler(event, Context())["statusCode"] == 422


#: what a session's channel loads on its first delivery, and nothing at init (design 34 §12)
CHANNEL_MODULES = (
    "agentwake.delivery.webhook",
    "agentwake.delivery.websocket",
    "agentwake.delivery.slack",
    "agentwake.delivery.telegram",
    "agentwake.delivery.sns",
    "agentwake.delivery.route",
    "agentwake.delivery.intents",
    "agentwake.delivery.retry",
    "agentwake.store.push",
    "agentwake.product.push",
    "agentwake.trust.outbound",
)
#: ``--pair channels``: the session delivery of each line (the stub's URL is put in at run time)
CHANNEL_SPECS: dict[str, dict[str, Any]] = {
    "webhook": {"type": "webhook", "url": "{stub}/hook"},
    "websocket": {"type": "websocket"},
    "slack": {"type": "slack", "channel": "C0BENCH01"},
    "telegram": {"type": "telegram", "chat_id": 4711},
    "sns": {"type": "sns", "topic_arn": "arn:aws:sns:us-east-1:123456789012:agentwake-notify-bench"},
}
SLACK_TOKEN = "xoxb-1111111111-2222222222-BenchSlackBotTokenAbcd"
TELEGRAM_TOKEN = "7000001234:AABenchTelegramBotTokenQwertyUiopAs12"


def channel_env(stub: str) -> dict[str, str]:
    """The stack's channel settings, every platform and AWS endpoint a channel's first delivery
    reaches pointed at the stub on 127.0.0.1 (nothing leaves the machine)."""
    return {
        "AGENTWAKE_SLACK_API_URL": f"{stub}/slack/",
        "AGENTWAKE_SLACK_TOKEN_REF": "env:AGENTWAKE_SECRET_SLACK_BOT",
        "AGENTWAKE_SECRET_SLACK_BOT": SLACK_TOKEN,
        "AGENTWAKE_TELEGRAM_API_URL": f"{stub}/telegram/",
        "AGENTWAKE_TELEGRAM_TOKEN_REF": "env:AGENTWAKE_SECRET_TELEGRAM_BOT",
        "AGENTWAKE_SECRET_TELEGRAM_BOT": TELEGRAM_TOKEN,
        "AGENTWAKE_NOTIFY_TOPIC_PREFIX": "arn:aws:sns:us-east-1:123456789012:agentwake-notify-",
        "AGENTWAKE_PUSH_ENDPOINT": f"{stub}/push",
        "AGENTWAKE_OUTBOUND_ALLOW_LOOPBACK": "1",
        "AGENTWAKE_OUTBOUND_ALLOW_HTTP": "1",
        # the intent's PutItem, the open pages' Query and SNS's Publish reach the stub too
        "AWS_ENDPOINT_URL_DYNAMODB": stub,
        "AWS_ENDPOINT_URL_SNS": stub,
    }


def _channel(name: str, stub: str) -> dict[str, Any]:
    """A first background wake's init (``_wake``, a log session: not timed), then the first delivery
    of a session whose channel is ``name``, as a wake makes it: the channel built by the wake's
    ``channels_for`` (its kit: settings, clock, the store's connections, the run's journal as the
    intent log) and one send through it to the stub. Returns what init loaded of the channels, the
    modules the first delivery imported and its CPU ms (build; send, which makes any client)."""
    import sys

    t_init = time.process_time()
    _wake()
    init_ms = (time.process_time() - t_init) * 1000
    at_init = set(sys.modules)
    from agentwake import bootstrap
    from agentwake.delivery import Delivery
    from agentwake.domain.models import SessionConfig
    from agentwake.wake.deliveries import channels_for

    deps = bootstrap.wake_deps()
    spec = json.loads(json.dumps(CHANNEL_SPECS[name]).replace("{stub}", stub))
    session = SessionConfig(session_id="s-1", providers=[{"type": "scripted", "id": "p"}], delivery=spec)
    journal = deps.store.journals.journal("bg:t-1", fresh=True)
    t0 = time.process_time()
    channel = channels_for(session, deps, intents=journal)("s-1")
    t1 = time.process_time()
    answer = channel.send(Delivery(delivery_id="bg:t-1#0#0", run_id="bg:t-1", session_id="s-1", text="done"))
    t2 = time.process_time()
    if type(answer).__name__ != "Receipt":
        raise RuntimeError(f"{name}: the first delivery answered {answer!r}")
    return {
        "at_init": sorted(m for m in CHANNEL_MODULES if m in at_init),
        "imported": sorted(set(sys.modules) - at_init),
        "init_ms": init_ms,
        "build_ms": (t1 - t0) * 1000,
        "send_ms": (t2 - t1) * 1000,
    }


class _Stub:
    """Answers a first delivery's requests on 127.0.0.1, as each platform would: a webhook's POST,
    Slack's chat.postMessage, Telegram's sendMessage, SNS's Publish, the push API's
    PostToConnection, DynamoDB's Query (one open page) and PutItem (the intent)."""

    def __init__(self) -> None:
        import http.server
        import threading

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 -- http.server's name
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                status, body, kind = _stub_answer(self.path, self.headers.get("X-Amz-Target", ""))
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _stub_answer(path: str, target: str) -> tuple[int, bytes, str]:
    if target.endswith(".Query"):  # the session's open pages
        page = {"connection_id": {"S": "page-1"}, "expires_at": {"N": "9999999999"}}
        return 200, json.dumps({"Items": [page], "Count": 1}).encode(), "application/x-amz-json-1.0"
    if target:  # the intent's PutItem
        return 200, b"{}", "application/x-amz-json-1.0"
    if path.endswith("chat.postMessage"):
        return (
            200,
            json.dumps({"ok": True, "channel": "C0BENCH01", "ts": "1765000000.000100"}).encode(),
            "application/json",
        )
    if path.endswith("/sendMessage"):
        result = {"message_id": 1, "chat": {"id": 4711}, "text": "done"}
        return 200, json.dumps({"ok": True, "result": result}).encode(), "application/json"
    if "/@connections/" in path or path.endswith("/hook"):
        return 200, b"", "application/json"
    published = (
        '<PublishResponse xmlns="http://sns.amazonaws.com/doc/2010-03-31/"><PublishResult>'
        "<MessageId>00000000-0000-0000-0000-000000000001</MessageId></PublishResult>"
        "<ResponseMetadata><RequestId>r-1</RequestId></ResponseMetadata></PublishResponse>"
    )
    return 200, published.encode(), "text/xml"


MODES = {
    "cached": "bytecode cached (this tree, caches written)",
    "source": "bundle without bytecode (as sam build's python workflow ships it)",
    "shipped": "bundle with its bytecode (functions/Makefile, unchecked-hash)",
}
FLOOR_MODULE = "floor_handler"


def child(kind: str, floor: Path, bundle: str | None, runtime: str | None, stub: str | None = None) -> None:
    os.environ.update(ENV)
    if kind.startswith("channel:"):
        os.environ.update(channel_env(str(stub)))
        sys.path.insert(0, str(ROOT / "functions"))
        print(json.dumps(_channel(kind.partition(":")[2], str(stub))))
        return
    if bundle:
        # as Lambda: the bundle (/var/task) first, then what the runtime provides; not this folder
        sys.path[0:1] = [bundle, runtime or bundle]
    else:
        sys.path.insert(0, str(ROOT / "functions"))
    t0 = time.process_time()
    if kind == "api":
        _api()
    elif kind == "floor" and bundle:
        import importlib

        importlib.import_module(FLOOR_MODULE)
    elif kind == "floor":
        exec(compile(floor.read_text(), str(floor), "exec"), {"__name__": "floor"})
    else:
        _wake()
    print(json.dumps({"cpu_ms": (time.process_time() - t0) * 1000}))


class Bundles:
    """The wake's and the floor's bundles, each without and with bytecode, built by functions/Makefile."""

    def __init__(self, floor: Path, workdir: Path, python: str | None = None) -> None:
        sys.path.insert(0, str(ROOT))
        from tests.support import lambda_bundle

        python = python or sys.executable
        version = subprocess.run(
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        self.python, self.python_version = python, version
        self.runtime = lambda_bundle.runtime_provided(workdir / "runtime", python=python, version=version)
        self.dirs: dict[tuple[str, str], Path] = {}
        wake = lambda_bundle.build(workdir / "wake-source", python=python, version=version, bytecode=False)
        powertools, pydantic = (
            next(wake.glob(f"{name}-*.dist-info")).name.removesuffix(".dist-info").split("-")[1]
            for name in ("aws_lambda_powertools", "pydantic")
        )
        floor_req = workdir / "floor-requirements.txt"
        # pydantic is installed, not imported (Powertools' batch module checks sys.modules): only a
        # floor that imports it (floor_powertools_sqs_pydantic.py) loads it
        floor_req.write_text(f"aws-lambda-powertools=={powertools}\npydantic=={pydantic}\n")
        floor_src = lambda_bundle.build(
            workdir / "floor-source",
            python=python,
            version=version,
            bytecode=False,
            requirements=floor_req,
            packages="",
        )
        (floor_src / f"{FLOOR_MODULE}.py").write_bytes(floor.read_bytes())
        for kind, src in (("wake", wake), ("floor", floor_src)):
            shipped = workdir / f"{kind}-shipped"
            shutil.copytree(src, shipped, symlinks=True)
            lambda_bundle.compile_bytecode(shipped, python=python, version=version)
            self.dirs[(kind, "source")], self.dirs[(kind, "shipped")] = src, shipped

    def bytecode_count(self) -> int:
        """.pyc files in the bundles without bytecode (0 unless a sample managed to write a cache)."""
        return sum(len(list(self.dirs[(k, "source")].rglob("*.pyc"))) for k in ("wake", "floor"))


def sample(kind: str, floor: Path, mode: str = "cached", bundles: Bundles | None = None) -> float:
    """One fresh interpreter measuring ``kind`` (floor, wake or api); the api pair runs cached only."""
    cmd = [sys.executable, __file__, "--child", kind, "--floor", str(floor)]
    env = _child_env()
    if mode != "cached":
        assert bundles is not None
        cmd[0] = bundles.python
        cmd[1:1] = ["-S", "-B"]  # no site-packages, no bytecode written: as Lambda runs /var/task
        cmd += ["--bundle", str(bundles.dirs[(kind, mode)]), "--runtime", str(bundles.runtime)]
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
    return float(json.loads(out.stdout.strip().splitlines()[-1])["cpu_ms"])


def _child_env() -> dict[str, str]:
    # cached mode writes bytecode (any value of PYTHONDONTWRITEBYTECODE, even "0", turns writing off), so
    # the warm-up samples leave compiled modules and both sides are measured from bytecode caches: a module
    # edited since the last run is not compiled again in every sample of one side
    env = {**os.environ, **ENV}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def measure(
    runs: int, floor: Path, modes: tuple[str, ...] = ("cached",), python: str | None = None, side: str = "wake"
) -> dict[str, dict[str, Any]]:
    """Per mode: medians of floor and wake (CPU ms), the median per-pair ratio and its spread.

    ``python``: the interpreter that builds and runs the bundles (default: this one)."""
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="agentwake-cold-") as tmp:
        bundles = Bundles(floor, Path(tmp), python) if set(modes) - {"cached"} else None
        for mode in modes:
            sample("floor", floor, mode, bundles), sample(side, floor, mode, bundles)  # warm caches
        floors: dict[str, list[float]] = {m: [] for m in modes}
        wakes: dict[str, list[float]] = {m: [] for m in modes}
        ratios: dict[str, list[float]] = {m: [] for m in modes}
        for i in range(runs):
            for mode in modes:  # the modes take turns, so drift hits each
                # alternate which side goes first, so neither always runs on a warmer machine
                if i % 2 == 0:
                    f, w = sample("floor", floor, mode, bundles), sample(side, floor, mode, bundles)
                else:
                    w, f = sample(side, floor, mode, bundles), sample("floor", floor, mode, bundles)
                floors[mode].append(f)
                wakes[mode].append(w)
                ratios[mode].append(w / f)
        if bundles is not None and bundles.bytecode_count():
            raise RuntimeError("a sample wrote bytecode into a bundle measured without it: the figures are void")
    load_after = os.getloadavg()[0]
    out = {}
    for mode in modes:
        r = sorted(ratios[mode])
        q = statistics.quantiles(r, n=4) if len(r) > 1 else [r[0]] * 3
        out[mode] = {
            "floor_ms": statistics.median(floors[mode]),
            "wake_ms": statistics.median(wakes[mode]),
            "ratio": statistics.median(r),
            "q1": q[0],
            "q3": q[2],
            "min": r[0],
            "max": r[-1],
            "runs": runs,
            "load_before": load_before,
            "load_after": load_after,
            "python_version": bundles.python_version if bundles else "",
        }
    return out


def report(
    runs: int, floor: Path = DEFAULT_FLOOR, modes: tuple[str, ...] = tuple(MODES), python: str | None = None
) -> list[str]:
    """The cold-init lines of ``make bench`` (bench/bench_wake.py prints them too)."""
    results = measure(runs, floor, modes, python)
    first = next(iter(results.values()))
    here = str(first.get("python_version", ""))
    lines = [
        f"cold init (CPU, fresh interpreters, median of {runs} alternating pairs per mode; "
        f"load average {first['load_before']:.2f} before, {first['load_after']:.2f} after; budget 1.25):"
    ]
    for mode, r in results.items():
        lines.append(
            f"  {MODES[mode]:66s} floor {r['floor_ms']:4.0f} ms, wake {r['wake_ms']:4.0f} ms, "
            f"ratio {r['ratio']:.2f} (quartiles {r['q1']:.2f}-{r['q3']:.2f}, range {r['min']:.2f}-{r['max']:.2f})"
        )
    if set(modes) - {"cached"}:
        lines.append(
            f"  bundles built by functions/Makefile here, compiled by Python {here} for this machine (deployed: "
            "python3.13, arm64); run with -S -B, boto3 from this environment (with its bytecode) as the runtime's"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--floor", type=Path, default=DEFAULT_FLOOR)
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    parser.add_argument("--python", help="interpreter that builds and runs the bundles (default: this one)")
    parser.add_argument("--child", choices=["floor", "wake", "api", *(f"channel:{c}" for c in CHANNEL_SPECS)])
    parser.add_argument(
        "--pair",
        choices=["wake", "api", "channels"],
        default="wake",
        help="api: ProductApiFunction's first request against floor_powertools_http.py (cached mode); "
        "channels: each channel's first delivery after a wake's init (what it imports, its CPU ms)",
    )
    parser.add_argument("--bundle", help=argparse.SUPPRESS)
    parser.add_argument("--runtime", help=argparse.SUPPRESS)
    parser.add_argument("--stub", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.floor, args.bundle, args.runtime, args.stub)
        return 0
    modes = tuple(m for m in args.modes.split(",") if m)
    unknown = set(modes) - set(MODES)
    if unknown:
        parser.error(f"unknown modes {sorted(unknown)}")
    if args.pair == "api":
        print("\n".join(report_api(args.runs)))
        return 0
    if args.pair == "channels":
        print("\n".join(report_channels(min(args.runs, 5))))
        return 0
    print("\n".join(report(args.runs, args.floor, modes, args.python)))
    return 0


def report_api(runs: int) -> list[str]:
    """ProductApiFunction's cold init against a bare Powertools HTTP API handler (``make bench``)."""
    r = measure(runs, HTTP_FLOOR, ("cached",), side="api")["cached"]
    return [
        f"product API cold init (CPU, fresh interpreters, median of {runs} alternating pairs, bytecode cached; "
        f"load average {r['load_before']:.2f} before, {r['load_after']:.2f} after):",
        f"  floor (Powertools HTTP API resolver with validation) {r['floor_ms']:4.0f} ms, "
        f"ProductApiFunction {r['wake_ms']:4.0f} ms, ratio {r['ratio']:.2f} "
        f"(quartiles {r['q1']:.2f}-{r['q3']:.2f}, range {r['min']:.2f}-{r['max']:.2f})",
    ]


def _spread(ms: list[float]) -> str:
    return f"{statistics.median(ms):5.1f} ms ({min(ms):.1f}-{max(ms):.1f})"


def report_channels(runs: int = 5) -> list[str]:
    """One line per channel: what a wake's init loaded of it (nothing, or the report says so), the
    modules its first delivery imports, and the CPU ms of building the channel and of the first send
    (which makes its client: the stdlib HTTP exchange, or a botocore client); medians of ``runs``
    fresh interpreters per channel, bytecode cached, every request answered by a stub on 127.0.0.1."""
    load_before = os.getloadavg()[0]
    stub = _Stub()
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in CHANNEL_SPECS}
    try:
        for i in range(runs + 1):  # the first round writes the bytecode caches and is not counted
            for name in CHANNEL_SPECS:  # the channels take turns, so drift hits each
                cmd = [sys.executable, __file__, "--child", f"channel:{name}", "--stub", stub.url]
                out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=_child_env())
                if i:
                    samples[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    finally:
        stub.close()
    lines = [
        f"channels: a first background wake's init, then its session's first delivery (CPU, fresh interpreters, "
        f"median of {runs} per channel, bytecode cached; load average {load_before:.2f} before, "
        f"{os.getloadavg()[0]:.2f} after):"
    ]
    for name, got in samples.items():
        at_init = sorted({m for s in got for m in s["at_init"]})
        imported = got[-1]["imported"]
        ours = [m.removeprefix("agentwake.") for m in imported if m.startswith("agentwake.")]
        lines.append(
            f"  {name:9s} at init: {', '.join(at_init) or 'nothing of the channels'}; first delivery imports "
            f"{len(imported):3d} modules ({len(ours)} of agentwake: {', '.join(ours) or '-'}); "
            f"build {_spread([s['build_ms'] for s in got])}, first send {_spread([s['send_ms'] for s in got])}"
        )
    init = statistics.median(s["init_ms"] for got in samples.values() for s in got)
    lines.append(
        f"  (the wake's init before them: median {init:.0f} ms; a first send makes the channel's client: "
        "the stdlib HTTP exchange, or a botocore client for sns and websocket, and Slack's and Telegram's intent)"
    )
    return lines


if __name__ == "__main__":
    sys.exit(main())
