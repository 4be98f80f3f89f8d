"""DLQ commands at scale on the embedded local AWS (a moto server on 127.0.0.1): every message seen
exactly once, or a loud failure (issue 13: a 502-message DLQ once listed as 401).

The DLQ is filled straight through SendMessageBatch (mixed error types and sessions). The default
run uses ``AGENTWAKE_DLQ_SCALE`` = 1,000 messages (200 for the redrive that counts its run reads);
``make dlq-scale`` runs the same tests at 10,000.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from typer.testing import CliRunner

from agentwake.bootstrap import reset_caches
from agentwake.store.queues import ATTR_ERROR_TYPE, ATTR_REASON
from agentwake_local.server import MotoServer, aws_env
from agentwake_ops.cli import app
from agentwake_ops.cli_common import CliState
from agentwake_ops.context import resolve_context
from agentwake_ops.sqs_scan import queue_name
from tests.support.aws import REGION, Resources, create_resources
from tests.support.probes import DynamoCalls

SCALE = int(os.environ.get("AGENTWAKE_DLQ_SCALE", "1000"))
#: the DLQ of runs that ``redrive --id`` picks one from (each message names a run to join)
RUNS_SCALE = int(os.environ.get("AGENTWAKE_DLQ_SCALE", "200"))
ERROR_TYPES = ("UnknownTask", "InvalidMessage", "SessionMismatch")
SESSIONS = tuple(f"s-{i}" for i in range(7))


@pytest.fixture(scope="module")
def server() -> Iterator[MotoServer]:
    with MotoServer() as moto_server:
        yield moto_server


@pytest.fixture
def local(server: MotoServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Resources]:
    server.reset()
    for key, value in aws_env(server.endpoint_url, REGION).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AGENTWAKE_HOME", str(tmp_path / "home"))
    res = create_resources()
    for key, value in res.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AGENTWAKE_SCHEDULER_DLQ_URL", res.scheduler_dlq_url)
    monkeypatch.setenv("AGENTWAKE_CRON_FAILURE_QUEUE_URL", res.cron_failure_url)
    monkeypatch.setenv("COLUMNS", "250")
    reset_caches()
    yield res
    reset_caches()
    # moto's backends are process-global: leave no thousands of messages behind for later modules
    server.reset()


def fill_dlq(res: Resources, count: int) -> Counter[str]:
    """``count`` dead-lettered completion messages, straight into the results DLQ; returns error types."""
    sqs = boto3.client("sqs", region_name=REGION)
    kinds: Counter[str] = Counter()
    for start in range(0, count, 10):
        entries = []
        for i in range(start, min(start + 10, count)):
            error_type = ERROR_TYPES[i % len(ERROR_TYPES)]
            kinds[error_type] += 1
            body = {"task_id": f"task-{i}", "session_id": SESSIONS[i % len(SESSIONS)], "n": i}
            entries.append(
                {
                    "Id": str(i - start),
                    "MessageBody": json.dumps(body),
                    "MessageAttributes": {
                        ATTR_ERROR_TYPE: {"DataType": "String", "StringValue": error_type},
                        ATTR_REASON: {"DataType": "String", "StringValue": f"reason {i}"},
                    },
                }
            )
        resp = sqs.send_message_batch(QueueUrl=res.dlq_url, Entries=entries)
        assert not resp.get("Failed")
    return kinds


def fill_dlq_with_runs(res: Resources, count: int) -> list[str]:
    """``count`` valid completion messages in the results DLQ, as SQS leaves them after
    ``maxReceiveCount`` (no agentwake-* attributes: each names a run); returns their message ids."""
    sqs = boto3.client("sqs", region_name=REGION)
    ids: list[str] = []
    for start in range(0, count, 10):
        entries = []
        for i in range(start, min(start + 10, count)):
            body = {
                "task_id": f"task-{i}",
                "session_id": SESSIONS[i % len(SESSIONS)],
                "tool_name": "web_research",
                "tool_args": {},
                "status": "succeeded",
                "result_text": f"result {i}",
                "note": "",
                "summary_name": "Research",
                "finished_at": "2026-11-30T05:00:00Z",
            }
            entries.append({"Id": str(i - start), "MessageBody": json.dumps(body)})
        resp = sqs.send_message_batch(QueueUrl=res.dlq_url, Entries=entries)
        assert not resp.get("Failed")
        ids += [ok["MessageId"] for ok in sorted(resp["Successful"], key=lambda ok: int(ok["Id"]))]
    return ids


def counts(url: str) -> tuple[int, int]:
    attrs = boto3.client("sqs", region_name=REGION).get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]), int(attrs["ApproximateNumberOfMessagesNotVisible"])


def run(*args: str, obj: CliState | None = None) -> Any:
    return CliRunner().invoke(app, list(args), obj=obj or CliState())


def test_every_message_of_a_large_dlq_is_listed_exported_and_counted_exactly_once(
    local: Resources, tmp_path: Path
) -> None:
    # GIVEN a DLQ of SCALE messages of three error types and seven sessions
    kinds = fill_dlq(local, SCALE)

    # WHEN it is listed as JSON
    started = time.monotonic()
    listed = run("dlq", "list", "--queue", "results", "--json")
    print(f"\ndlq list --json with {SCALE} messages: {time.monotonic() - started:.1f} s")
    # THEN every message is there exactly once, and all are visible again
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.stdout)
    ids = [r["message_id"] for r in rows]
    assert len(ids) == len(set(ids)) == SCALE
    assert Counter(r["error_type"] for r in rows) == kinds
    assert counts(local.dlq_url) == (SCALE, 0)

    # WHEN it is exported
    out = tmp_path / "dlq.jsonl"
    exported = run("dlq", "export", "--out", str(out), "--queue", "results")
    # THEN the file has one line per message, the same ids
    assert exported.exit_code == 0, exported.output
    lines = out.read_text(encoding="utf-8").splitlines()[1:]  # after the header record
    assert len(lines) == SCALE
    assert {json.loads(line)["message_id"] for line in lines} == set(ids)

    # WHEN a dry-run redrive selects one error type
    planned = run("dlq", "redrive", "--error-type", "UnknownTask", "--dry-run", "--queue", "results", "--json")
    # THEN it counts exactly the messages of that type, and nothing moved
    assert planned.exit_code == 0, planned.output
    plan = json.loads(planned.stdout)["planned"]
    assert len(plan) == kinds["UnknownTask"]
    assert len({p["message_id"] for p in plan}) == len(plan)
    assert counts(local.dlq_url) == (SCALE, 0)


class SlowReceives:
    """The real SQS client, but the first ``slow`` receives take longer than the scan's hold."""

    def __init__(self, client: Any, delay: float, slow: int) -> None:
        self._client = client
        self.delay = delay
        self.slow = slow

    def receive_message(self, **kwargs: Any) -> Any:
        if self.slow > 0:
            self.slow -= 1
            time.sleep(self.delay)
        return self._client.receive_message(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def test_a_scan_slower_than_its_hold_sees_every_message_or_says_it_cannot(local: Resources) -> None:
    # GIVEN 35 DLQ messages, and a scan whose holds (2 s) run out during its first receives (2.5 s each)
    fill_dlq(local, 35)
    context = resolve_context()
    context.sqs = SlowReceives(context.sqs, delay=2.5, slow=2)
    context.scan_hold_seconds = 2

    # WHEN the DLQ is listed
    result = run("dlq", "list", "--queue", "results", "--json", obj=CliState(context=context))

    # THEN either every message is listed exactly once, or the command says it cannot be sure and fails
    if result.exit_code == 0:
        ids = [r["message_id"] for r in json.loads(result.stdout)]
        assert len(ids) == len(set(ids)) == 35
    else:
        assert result.exit_code == 1 and "cannot be sure it saw them all" in result.stderr
    # AND nothing was consumed
    assert counts(local.dlq_url) == (35, 0)


class ConcurrentReceives:
    """The real SQS client, recording which threads received; the first two receives wait for each
    other (a barrier, generous timeout), so the scan is shown to receive on two threads at once."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._barrier = threading.Barrier(2, timeout=120)
        self._lock = threading.Lock()
        self.calls = 0
        self.threads: set[str] = set()

    def receive_message(self, **kwargs: Any) -> Any:
        with self._lock:
            self.calls += 1
            first_two = self.calls <= 2
            self.threads.add(threading.current_thread().name)
        if first_two:
            self._barrier.wait()
        return self._client.receive_message(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def test_a_parallel_scan_lists_every_message_once_and_leaves_all_visible(local: Resources) -> None:
    # GIVEN a DLQ of 300 messages, and an SQS client that makes the scan's first two receives meet
    kinds = fill_dlq(local, 300)
    context = resolve_context()
    receives = ConcurrentReceives(context.sqs)
    context.sqs = receives

    # WHEN the DLQ is listed
    listed = run("dlq", "list", "--queue", "results", "--json", obj=CliState(context=context))

    # THEN two receives ran at once, on threads of the scan's own
    assert listed.exit_code == 0, listed.output
    assert len(receives.threads) >= 2 and threading.current_thread().name not in receives.threads
    # AND every message is listed exactly once, with its error type
    rows = json.loads(listed.stdout)
    ids = [r["message_id"] for r in rows]
    assert len(ids) == len(set(ids)) == 300
    assert Counter(r["error_type"] for r in rows) == kinds
    # AND every message is visible again: a second listing sees the same ones
    assert counts(local.dlq_url) == (300, 0)
    again = run("dlq", "list", "--queue", "results", "--json")
    assert again.exit_code == 0, again.output
    assert sorted(r["message_id"] for r in json.loads(again.stdout)) == sorted(ids)
    assert counts(local.dlq_url) == (300, 0)


def test_messages_held_by_another_reader_make_the_scan_fail_loudly(local: Resources, tmp_path: Path) -> None:
    # GIVEN 30 DLQ messages, 10 of which another reader holds
    fill_dlq(local, 30)
    sqs = boto3.client("sqs", region_name=REGION)
    taken = sqs.receive_message(QueueUrl=local.dlq_url, MaxNumberOfMessages=10, VisibilityTimeout=600)["Messages"]
    assert len(taken) == 10

    # WHEN the DLQ is listed, exported with --delete, or redriven
    listed = run("dlq", "list", "--queue", "results", "--json")
    out = tmp_path / "dlq.jsonl"
    exported = run("dlq", "export", "--out", str(out), "--queue", "results", "--delete", "--yes")

    # THEN each says it could not see every message, exits 1, and changes nothing
    for result in (listed, exported):
        assert result.exit_code == 1, result.output
        assert result.stdout == ""
        assert result.stderr == (
            f"error: listing the results DLQ: the scan of {queue_name(local.dlq_url)} saw 20 message(s) but cannot be sure "
            "it saw them all (10 message(s) are in flight but were never received by this scan (another reader or a "
            "redrive in progress holds them)); nothing was changed — run it again\n"
        ).replace("listing the results DLQ", "listing the results DLQ" if result is listed else "export --delete")
    assert not out.exists()
    assert counts(local.dlq_url) == (20, 10)


def test_a_redrive_by_id_reads_the_run_of_the_selected_message_only(local: Resources) -> None:
    # GIVEN a results DLQ of RUNS_SCALE messages, each naming a run (bg:task-N)
    ids = fill_dlq_with_runs(local, RUNS_SCALE)
    target = ids[len(ids) // 2]
    context = resolve_context()
    calls = DynamoCalls(context.store.table.db)

    # WHEN one of them is redriven by id, as a dry run
    planned = run(
        "dlq", "redrive", "--id", target, "--dry-run", "--queue", "results", "--json", obj=CliState(context=context)
    )

    # THEN it plans exactly that message, and read one run for it: one Query, not one per scanned message
    assert planned.exit_code == 0, planned.output
    [plan] = json.loads(planned.stdout)["planned"]
    assert plan["message_id"] == target and plan["run_id"] == f"bg:task-{ids.index(target)}"
    assert calls.calls == ["Query"]
    # AND nothing moved
    assert counts(local.dlq_url) == (RUNS_SCALE, 0)


# --------------------------------------------------------------------------------------------
# the console on the same DLQs (issue 26)


def test_the_console_dlq_page_of_a_large_dlq_counts_every_message_and_shows_one_page(local: Resources) -> None:
    import resource

    from tests.support.console import serving

    # GIVEN a DLQ of SCALE messages of three error types (10,000 with `make dlq-scale`)
    kinds = fill_dlq(local, SCALE)
    with serving(resolve_context()) as (_, client):
        client.timeout = 1800.0  # one complete scan of the whole DLQ
        # WHEN the console's DLQ page is opened (its time, and the process's peak memory: this
        # process also runs the moto server, so the peak is an upper bound of the console's)
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        started = time.monotonic()
        page = client.page("/dlq")
        took = time.monotonic() - started
        rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        f"\nconsole /dlq with {SCALE} messages: {took:.1f} s, peak RSS {rss_after / 1024:.0f} MB "
        f"(+{(rss_after - rss_before) / 1024:.0f} MB during the page), {len(page)} bytes of HTML"
    )

    # THEN its counts by error type are those of every message, the page shows the first 100 only,
    # and nothing was consumed
    for error_type, count in kinds.items():
        # (each label and count links to the page filtered on it)
        cell = r"<td>(?:<a [^>]*>)?{}(?:</a>)?</td>"
        assert re.search(cell.format(re.escape(error_type)) + cell.format(count), page), error_type
    assert f"{SCALE} message(s) in the DLQs, every one seen once" in page
    assert page.count("<tr data-message-id=") == min(100, SCALE)
    assert f"showing 1–{min(100, SCALE)}" in page
    assert counts(local.dlq_url) == (SCALE, 0)


def test_the_console_says_when_its_scan_could_not_see_every_message(local: Resources) -> None:
    from tests.support.console import serving

    # GIVEN 30 DLQ messages, 10 of which another reader holds
    fill_dlq(local, 30)
    sqs = boto3.client("sqs", region_name=REGION)
    sqs.receive_message(QueueUrl=local.dlq_url, MaxNumberOfMessages=10, VisibilityTimeout=600)
    with serving(resolve_context()) as (_, client):
        # WHEN the DLQ page is opened
        page = client.page("/dlq")
    # THEN it says the scan could not be completed and lists nothing (a partial list could hide messages)
    assert "id='incomplete'" in page and "cannot be sure it saw them all" in page
    assert "<tr data-message-id=" not in page
