"""Benchmark: what a wake costs, as ratios against budgets and floors measured in the same run.

    make bench        (or: .venv/bin/python bench/bench_wake.py [--runs N] [--long 100000] [--cold-runs 11])

Everything runs on this machine, on moto in-process (no network). It reports:

1. DynamoDB calls per wake, by kind (one-step background, the final answer sent by deliver_final,
   a session with daily limits, two-step background with a delivery, cron, the retry after a
   failure at step 2), counted at the client (botocore ``before-call`` events), each against its
   budget (docs/table-design.md#round-trips), with the dependencies the deployed handler builds
   (``bootstrap.wake_deps``: the result queue included, so each release reads the wait list for
   the hand-off, as ``tests/integration/test_wake_round_trips.py`` counts it); a wake with one delivery through each channel
   (webhook, websocket, slack, telegram, sns; deliver_final via slack), each platform a local
   stand-in (tests/support/channel_platforms.py); and the DynamoDB and Scheduler calls of a wake that
   schedules one follow-up (docs/self-scheduling.md);
2. a wake with a 100,000-entry history against one with 10 entries, in the same table: calls per
   wake and items the window read touched (the window read is bounded); wake times on moto are
   printed for the record only;
3. the bare runner with the same scripted model;
4. cold init against a bare Powertools SQS handler (bench/cold_init.py: fresh interpreters,
   alternating, median of the per-pair ratios), from this tree's bytecode caches and from the bundle
   functions/Makefile builds, without and with its bytecode, as Lambda runs it (no cache written);
   then, per channel, what that init loaded of it (nothing), the modules its first delivery imports
   and the CPU of building the channel and of its first send (``cold_init.py --pair channels``);
5. the zipped size of each function's bundle as ``sam build`` makes it: template.yaml's
   ``BuildMethod: makefile`` has sam build run functions/Makefile, which runs here as it does there
   (Lambda's arm64 wheels, the runtime package, its bytecode by Python 3.13), zipped as ``sam
   package`` zips it. Checked against a real ``sam build`` (aws-sam-cli 1.170.0, in a venv of its
   own: it pins another boto3 than the dev extra) and SAM's own zip (2026-12-03): the same 1,253
   files, 6.69 MB zipped; the .pyc differ only by the build folder's path they embed.

moto runs with the local stack's pinned patches (``agentwake_local.moto_patches``): unpatched, moto
keeps every model object it creates and deep-copies the whole table on every TransactWriteItems,
so a 100,000-entry history grew this process past 15 GB. Absolute wake times are still moto's,
not DynamoDB's.
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import io
import os
import statistics
import sys
import threading
import time
import zipfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

os.environ.update(
    {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "POWERTOOLS_LOG_LEVEL": "CRITICAL",
        # the background tool's server runs on 127.0.0.1 (as on the local stack)
        "AGENTWAKE_OUTBOUND_ALLOW_LOOPBACK": "1",
        "AGENTWAKE_OUTBOUND_ALLOW_HTTP": "1",
    }
)
os.environ.pop("AWS_ENDPOINT_URL", None)

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord  # noqa: E402
from moto import mock_aws  # noqa: E402

from agentwake import bootstrap  # noqa: E402
from agentwake.agent.chain import ProviderChain  # noqa: E402
from agentwake.agent.providers.scripted import ScriptedProvider  # noqa: E402
from agentwake.agent.runner import Runner  # noqa: E402
from agentwake.agent.tools import ToolContext, ToolRegistry  # noqa: E402
from agentwake.agent.tools.send_message import SendMessageToUser  # noqa: E402
from agentwake.delivery.log import LogChannel  # noqa: E402
from agentwake.domain.models import SessionConfig, Task, task_token_hash
from agentwake.domain.run_models import Job  # noqa: E402
from agentwake.errors import RunFailed  # noqa: E402
from agentwake.store import aws  # noqa: E402
from agentwake.store.dynamo import DynamoStore  # noqa: E402
from agentwake.wake.background import wake_for_background_result  # noqa: E402
from agentwake.wake.cron import wake_for_cron_job  # noqa: E402
from agentwake.wake.messages import BackgroundResultMessage, CronWakeInput  # noqa: E402
from agentwake.wake.prompt import build_wake_messages  # noqa: E402
from agentwake.wake.spec import WakeDeps  # noqa: E402
from agentwake.wake.work import on_work_record  # noqa: E402
from bench import cold_init  # noqa: E402
from tests.support.aws import create_resources  # noqa: E402
from tests.support.probes import AwsCalls, DynamoCalls, count_history_reads, seed_history  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = [
    {"tool_calls": [{"name": "send_message_to_user", "arguments": {"text": "done"}}]},
    {"text": "told the user"},
]


def wake_deps_as_deployed(res: Any) -> WakeDeps:
    """The wake's dependencies as the deployed handler builds them (``bootstrap.wake_deps``: the store,
    the result queue a release hands the session on through, the tasks service with the work queue,
    the schedules), from the environment template.yaml gives BackgroundResultFunction, over moto's
    resources. Its AWS clients are the runtime's own (``agentwake.store.aws``), which moto answers."""
    os.environ.update(res.env())
    os.environ.update(
        {
            "AGENTWAKE_SCHEDULER_ROLE_ARN": "arn:aws:iam::123456789012:role/agentwake-SchedulerRole",
            "AGENTWAKE_CRON_FUNCTION_ARN": "arn:aws:lambda:us-east-1:123456789012:function:agentwake-CronWakeFunction:live",
        }
    )
    bootstrap.reset_caches()
    return bootstrap.wake_deps()


def time_wakes(store: DynamoStore, deps: WakeDeps, session: str, runs: int) -> tuple[list[float], float]:
    out = []
    calls = DynamoCalls(store.table.db)
    made = 0
    for i in range(runs):
        task_id = f"{session}-t{i}"
        store.records.put_task(
            Task(task_id=task_id, session_id=session, tool_name="bench", token_sha256=task_token_hash(task_id))
        )
        t0 = time.perf_counter()
        made += len(calls.during(lambda: wake_for_background_result(_message(task_id, session), deps)))  # noqa: B023
        out.append(time.perf_counter() - t0)
    return out, made / runs


def time_bare_runner(runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        Runner(
            model=ProviderChain([ScriptedProvider("p", SCRIPT)]),
            tools=ToolRegistry([SendMessageToUser(LogChannel())]),
            messages=build_wake_messages(persona="p", kind="background", wake={}, history=[]),
            context=ToolContext(run_id="bg:x", session_id="s"),
        ).run()
        out.append(time.perf_counter() - t0)
    return out


def _message(task_id: str, session: str) -> BackgroundResultMessage:
    return BackgroundResultMessage(
        task_id=task_id,
        session_id=session,
        task_token=task_id,  # the bench's tasks use their id as token
        tool_name="bench",
        status="succeeded",
        result_text="r",
        summary_name="Bench",
        finished_at="2026-11-30T05:00:00Z",
    )


def calls_by_kind(store: DynamoStore, deps: WakeDeps) -> list[tuple[str, list[str], int]]:
    """(kind, calls, budget) for each wake kind of docs/table-design.md#round-trips."""
    calls = DynamoCalls(store.table.db)
    one_step = [{"type": "scripted", "id": "p", "script": [{"text": "nothing to tell"}]}]
    two_step = [{"type": "scripted", "id": "p", "script": SCRIPT}]
    broken = [{"type": "scripted", "id": "p", "script": [SCRIPT[0], {"error": "auth"}]}]
    fixed = [{"type": "scripted", "id": "p", "script": [{"text": "replayed"}, {"text": "done"}]}]
    out = []
    for session, providers, final in (
        ("k1", one_step, "never"),
        ("k2", two_step, "if_nothing_sent"),
        ("k3", broken, "if_nothing_sent"),
        ("k4", one_step, "never"),
        ("k5", one_step, "if_nothing_sent"),
        ("k6", one_step, "never"),
        ("k7", one_step, "if_nothing_sent"),
    ):
        # k6, k7: a session with daily limits (a daily token budget and a daily delivery cap)
        limits = {"max_tokens_per_day": 1_000_000, "max_deliveries_per_day": 50} if session in ("k6", "k7") else {}
        store.records.put_session(
            SessionConfig(session_id=session, providers=providers, retry_base_delay_ms=0, deliver_final=final, **limits)
        )
        store.records.put_task(
            Task(
                task_id=f"{session}-t",
                session_id=session,
                tool_name="bench",
                token_sha256=task_token_hash(f"{session}-t"),
            )
        )
    for kind, session, budget in (
        ("one-step background", "k1", 7),
        ("one-step background, final answer sent (deliver_final)", "k5", 7 + 1),
        ("session with daily limits (one step)", "k6", 7 + 1),  # its counters, read under the lease
        ("session with daily limits, final answer sent", "k7", 7 + 1 + 1),
        ("two-step background with a delivery", "k2", 7 + 1 + 1),
    ):
        message = _message(f"{session}-t", session)
        out.append((kind, calls.during(lambda: wake_for_background_result(message, deps)), budget))  # noqa: B023

    def fail() -> None:
        try:
            wake_for_background_result(_message("k3-t", "k3"), deps)
        except RunFailed:
            return
        raise AssertionError("the broken provider did not fail the run")

    out.append(("failing attempt (error at step 2, after a delivery)", calls.during(fail), 7 + 1 + 1))
    store.records.put_session(SessionConfig(session_id="k3", providers=fixed, retry_base_delay_ms=0))
    out.append(
        (
            "retry after the failure at step 2",
            calls.during(lambda: wake_for_background_result(_message("k3-t", "k3"), deps)),
            7 + 1,
        )
    )
    store.records.put_job(Job(job_id="j1", session_id="k4", name="Nightly", schedule_expression="cron(0 6 * * ? *)"))
    wake = CronWakeInput(job_id="j1", scheduled_time="2026-11-30T06:00:00Z", session_id="k4")
    out.append(("cron (one step)", calls.during(lambda: wake_for_cron_job(wake, deps)), 7))
    return out + calls_by_channel(store, deps)


#: the delivery rows of ``calls_by_channel``: (label, channel, open pages, budget). A wake whose agent
#: messages the user once (send_message_to_user, then an answer: two model steps) costs 7 + 1 + 1
#: through a webhook; a websocket reads the session's open pages (+1 Query; none open: +1 PutItem,
#: the unread mark); Slack and Telegram write the intent just before the request (+1 PutItem); SNS,
#: like the webhook, is deduplicated by its receivers (+0). deliver_final's answer through Slack: the
#: intent rides on the write that journals the reply before it is sent (+0 on that row's 7 + 1).
CHANNEL_ROWS = (
    ("background with a delivery by webhook (baseline)", "webhook", 0, 7 + 1 + 1),
    ("background with a delivery by websocket (a page open)", "websocket", 1, 7 + 1 + 1 + 1),
    ("  websocket, no page open (the session marked unread)", "websocket", 0, 7 + 1 + 1 + 2),
    ("background with a delivery by slack", "slack", 0, 7 + 1 + 1 + 1),
    ("background with a delivery by telegram", "telegram", 0, 7 + 1 + 1 + 1),
    ("background with a delivery by sns", "sns", 0, 7 + 1 + 1),
    ("one-step, final answer sent by deliver_final via slack", "slack", -1, 7 + 1),
)


def calls_by_channel(store: DynamoStore, deps: WakeDeps) -> list[tuple[str, list[str], int]]:
    """(kind, calls, budget) of a background wake with one delivery through each channel, each
    against a local stand-in for its platform (tests/support/channel_platforms.py: a receiver and
    fake Slack and Telegram servers on 127.0.0.1, moto's SNS and API Gateway management API). Each
    platform must have received its delivery exactly once, or the bench stops."""
    from dataclasses import replace

    from tests.support.channel_platforms import channel_platforms

    calls = DynamoCalls(store.table.db)
    out = []
    with channel_platforms(store.table.name) as platforms:
        channel_deps = replace(deps, settings=platforms.settings(deps.settings))
        for n, (kind, channel, pages, budget) in enumerate(CHANNEL_ROWS):
            session = f"c{n}"
            final = pages < 0  # deliver_final's row: the agent answers, the answer is sent
            store.records.put_session(
                SessionConfig(
                    session_id=session,
                    providers=[{"type": "scripted", "id": "p", "script": [{"text": "done"}] if final else SCRIPT}],
                    retry_base_delay_ms=0,
                    deliver_final="if_nothing_sent" if final else "never",
                    delivery=platforms.spec(channel),
                )
            )
            store.records.put_task(
                Task(
                    task_id=f"{session}-t",
                    session_id=session,
                    tool_name="bench",
                    token_sha256=task_token_hash(f"{session}-t"),
                )
            )
            page = f"page-{session}"
            if pages > 0:
                platforms.open_page(store, session, page)
            before = 0 if channel == "sns" else len(platforms.received(channel, page))  # sns: drained each time
            message = _message(f"{session}-t", session)
            made = calls.during(lambda: wake_for_background_result(message, channel_deps))  # noqa: B023
            delivery_id = f"bg:{session}-t#final" if final else f"bg:{session}-t#0#0"
            if channel == "websocket" and pages == 0:  # kept unread, for the page to read when it opens
                unread = store.connections.unread(session)
                got = [unread["delivery_id"]] if unread else []
            else:
                got = platforms.received(channel, page)[before:]
            want = ["done"] if channel == "telegram" else [delivery_id]  # Telegram keeps no delivery id
            if got != want:
                raise AssertionError(f"{kind}: the platform got {got}, not {want}")
            out.append((kind, made, budget))
    return out


def calls_of_a_wake_that_schedules_a_follow_up(store: DynamoStore, deps: WakeDeps) -> tuple[int, int, str]:
    """(DynamoDB calls, Scheduler calls, their operations) of a background wake whose model calls
    ``schedule_wake`` once ("in 2h", with a note) and then answers (docs/self-scheduling.md)."""
    from agentwake.domain.models import SelfWakePolicy
    from agentwake.store import aws

    sched = AwsCalls(aws.client("scheduler"), "scheduler")  # the client deps.schedules makes on first use
    script = [
        {"tool_calls": [{"name": "schedule_wake", "arguments": {"in": "2h", "note": "check the deploy"}}]},
        {"text": "scheduled a follow-up"},
    ]
    store.records.put_session(
        SessionConfig(
            session_id="k8",
            providers=[{"type": "scripted", "id": "p", "script": script}],
            retry_base_delay_ms=0,
            deliver_final="never",
            self_wakes=SelfWakePolicy(),
        )
    )
    store.records.put_task(
        Task(task_id="k8-t", session_id="k8", tool_name="bench", token_sha256=task_token_hash("k8-t"))
    )
    calls, start = DynamoCalls(store.table.db), len(sched.calls)
    made = calls.during(lambda: wake_for_background_result(_message("k8-t", "k8"), deps))
    scheduled = sched.calls[start:]
    return len(made), len(scheduled), " ".join(made + scheduled)


class _Answers(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 -- http.server's name
        body = b'{"value": 42}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def background_task_calls(store: DynamoStore, deps: WakeDeps, work_queue_url: str) -> list[str]:
    """The AWS calls of a one-step wake whose agent starts one background tool (lines of the report),
    and of BackgroundWorkFunction running it and completing its task."""
    # the runtime's SQS client, which the tasks service and the work queue make on their first send
    # (channel_platforms made the runtime's clients again when it closed: taken here, after it)
    sqs = aws.client("sqs")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        tool = {
            "type": "http",
            "name": "lookup",
            "description": "Look a key up.",
            "url": f"http://127.0.0.1:{server.server_address[1]}/lookup",
            "method": "GET",
            "background": True,
        }
        script = [{"tool_calls": [{"name": "lookup", "arguments": {"key": "k"}}]}, {"text": "started it"}]
        store.records.put_session(
            SessionConfig(
                session_id="k9",
                providers=[{"type": "scripted", "id": "p", "script": script}],
                retry_base_delay_ms=0,
                tools=[tool],
            )
        )
        store.records.put_task(
            Task(task_id="k9-t", session_id="k9", tool_name="bench", token_sha256=task_token_hash("k9-t"))
        )
        dynamo, queue = DynamoCalls(store.table.db), AwsCalls(sqs, "sqs")
        wake = dynamo.during(lambda: queue.during(lambda: wake_for_background_result(_message("k9-t", "k9"), deps)))
        sent_by_wake = list(queue.calls)
        (message,) = sqs.receive_message(QueueUrl=work_queue_url, AttributeNames=["All"])["Messages"]
        record = SQSRecord(
            {
                "messageId": message["MessageId"],
                "body": message["Body"],
                "attributes": {"ApproximateReceiveCount": "1"},
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:BackgroundWorkQueue",
            }
        )
        queue.calls.clear()
        work = dynamo.during(lambda: on_work_record(record, deps, remaining_ms=120_000))
        sent_by_work = list(queue.calls)
        assert deps.tasks is not None and deps.tasks.sqs is sqs, "the tasks service sent through another client"
    finally:
        server.shutdown()
    return [
        f"  {'wake that starts one background tool':55s} DynamoDB {len(wake):2d} ({', '.join(wake)}); "
        f"SQS {len(sent_by_wake)} ({', '.join(sent_by_wake)})",
        f"  {'  BackgroundWorkFunction: the tool run, its completion':55s} DynamoDB {len(work):2d} ({', '.join(work)}); "
        f"SQS {len(sent_by_work)} ({', '.join(sent_by_work)})",
    ]


def code_uris() -> dict[str, tuple[Path, str | None]]:
    """Each function of template.yaml, its CodeUri and its build method (``Metadata.BuildMethod``)."""
    from agentwake_local.template import load_template

    template = load_template(ROOT / "template.yaml")
    default = template.body["Globals"]["Function"].get("CodeUri")
    return {
        name: (
            ROOT / ((spec.get("Properties") or {}).get("CodeUri") or default),
            (spec.get("Metadata") or {}).get("BuildMethod"),
        )
        for name, spec in sorted(template.resources.items())
        if spec.get("Type") == "AWS::Serverless::Function"
    }


def zipped_bytes(folder: Path) -> tuple[int, int, int]:
    """(zipped, unzipped, files) of a folder zipped as ``sam package`` zips a function's build
    (samcli.lib.package.utils.make_zip: every file under it, links followed, ZIP_DEFLATED)."""
    buf = io.BytesIO()
    raw = files = 0
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for root, _, names in os.walk(folder, followlinks=True):
            for name in sorted(names):
                path = Path(root) / name
                raw += path.stat().st_size
                files += 1
                z.write(path, str(path.relative_to(folder)))
    return len(buf.getvalue()), raw, files


def bundle_lines() -> list[str]:
    """The zipped size of what ``sam build`` makes for each function: template.yaml builds every
    function with ``BuildMethod: makefile``, for which sam build runs functions/Makefile's target into
    the function's build folder and nothing else. That Makefile runs here (tests/support/lambda_bundle,
    the bundle test's and cold_init.py's build): Lambda's arm64 wheels (manylinux2014_aarch64, Python
    3.13), the runtime package, and its bytecode compiled by Python 3.13, then zipped as sam package
    does. Functions with the same CodeUri and method share one build."""
    import tempfile

    from tests.support import lambda_bundle

    version = "3.13"  # template.yaml's Runtime: python3.13
    python = lambda_bundle.build_python(version)
    note = f"bytecode by Python {version}"
    if python is None:  # no python3.13 here: the Makefile's steps with this interpreter, said so
        python, version = sys.executable, lambda_bundle.current_version()
        note = f"no Python 3.13 here: bytecode by this Python {version}, not the runtime's"
    by_build: dict[tuple[Path, str | None], list[str]] = {}
    for fn, build in code_uris().items():
        by_build.setdefault(build, []).append(fn)
    out = []
    with tempfile.TemporaryDirectory(prefix="agentwake-bundle-") as tmp:
        for n, ((code, method), fns) in enumerate(by_build.items()):
            if method != "makefile" or code != ROOT / "functions":
                raise RuntimeError(f"{', '.join(fns)}: built by {method} from {code}, not functions/Makefile")
            dest = lambda_bundle.build(
                Path(tmp) / str(n), python=python, version=version, platform="manylinux2014_aarch64"
            )
            zipped, raw, files = zipped_bytes(dest)
            out.append(
                f"bundle of {', '.join(fns)} (what sam build makes: functions/Makefile, arm64 wheels, {note}; "
                f"zipped as sam package zips it): {zipped / 1e6:.2f} MB ({raw / 1e6:.1f} MB unzipped, {files:,} files)"
            )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed wakes per history length")
    parser.add_argument("--long", type=int, default=100_000, help="entries in the long history")
    parser.add_argument("--cold-runs", type=int, default=11, help="alternating cold-init pairs (>= 11)")
    parser.add_argument(
        "--cold-modes", default=",".join(cold_init.MODES), help=f"cold-init modes, of {', '.join(cold_init.MODES)}"
    )
    args = parser.parse_args()
    # the wakes print their EMF metrics to stdout; the report is what this script prints after
    from agentwake_local import moto_patches

    moto_patches.apply()  # bounded memory and per-item transactions, as the local stack runs moto
    with mock_aws(), contextlib.redirect_stdout(io.StringIO()):
        res = create_resources()
        deps = wake_deps_as_deployed(res)
        store = deps.store
        assert isinstance(store, DynamoStore)
        kinds = calls_by_kind(store, deps)
        follow_up = calls_of_a_wake_that_schedules_a_follow_up(store, deps)
        background = background_task_calls(store, deps, res.work_queue_url)
        for session, n in (("short", 10), ("long", args.long)):
            store.records.put_session(
                SessionConfig(session_id=session, providers=[{"type": "scripted", "id": "p", "script": SCRIPT}])
            )
            seed_history(store, session, n, padding=200)
        reads_short = count_history_reads(store, "short", 20)
        reads_long = count_history_reads(store, "long", 20)
        short_times, short_calls = time_wakes(store, deps, "short", args.runs)
        long_times, long_calls = time_wakes(store, deps, "long", args.runs)
        short, long = statistics.median(short_times), statistics.median(long_times)
        bare = statistics.median(time_bare_runner(args.runs))
    print("DynamoDB calls per wake (counted at the client), against the budget:")
    for kind, made, budget in kinds:
        print(f"  {kind:55s} {len(made):2d} / {budget}  ratio {len(made) / budget:.2f}  {' '.join(made)}")
    print("  (the channel rows: each platform, a receiver or fake Slack/Telegram on 127.0.0.1 or moto's SNS and")
    print("   API Gateway management API, got the delivery once, checked; a page with none open: the unread mark)")
    dynamo, sched, ops = follow_up
    print("a wake that schedules one follow-up (schedule_wake, then an answer: docs/self-scheduling.md):")
    print(f"  {dynamo} DynamoDB + {sched} Scheduler calls: {ops}")
    print("  (a two-step wake's 7 DynamoDB calls, plus the creation's 5: GetItem, Query, GetItem, GetItem, PutItem;")
    print("   and 1 CreateSchedule. A wake that schedules nothing makes no call more: the budgets above)")
    print("AWS calls of a wake that starts one background task, and of its work (no budget: for the record):")
    print("\n".join(background))
    print(f"history 10 vs {args.long:,} entries (two-step wake with a delivery):")
    print(f"  calls per wake: {short_calls:.1f} vs {long_calls:.1f}  ratio {long_calls / short_calls:.2f}")
    print(f"  items the window read touched: {reads_short} vs {reads_long}")
    print(f"  wake time median on moto: {short * 1000:.0f} ms vs {long * 1000:.0f} ms (not a DynamoDB figure: moto,")
    print("   with the local stack's patches; the calls and the items read above are what DynamoDB would bill)")
    print(f"  bare runner, no store: median {bare * 1000:.2f} ms")
    # cached bytecode (this tree), and the bundle as Lambda runs it, without and with its bytecode
    print("\n".join(cold_init.report(args.cold_runs, modes=tuple(args.cold_modes.split(",")))))
    # each channel's first delivery after that init: nothing of the channels loads before it
    print("\n".join(cold_init.report_channels(min(args.cold_runs, 5))))
    print("\n".join(bundle_lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
