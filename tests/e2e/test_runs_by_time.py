"""Runs by time without a scan (issue 26): every run the wake starts is on the ``gsi2`` index under
the UTC day of its latest attempt, so ``agentwake runs list`` without ``--session`` is Queries of
day partitions, newest first, reading about one page — never a Scan of every run ever stored.

``AGENTWAKE_RUNS_SCALE=100000`` runs the page-cost test at the issue's 100,000 runs (minutes); the
default suite uses 3,000.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import agentwake.store.runs as wake_begin
from agentwake.domain.run_models import RunRecord
from agentwake.store.dynamo import DynamoStore
from agentwake.store.keys import run_key, runs_by_day_set, runs_gsi_pk, runs_gsi_sk
from agentwake_ops.cli_common import CliState
from agentwake_ops.context import OpsContext, resolve_context
from tests.e2e.conftest import Cli, Stack

SCALE = int(os.environ.get("AGENTWAKE_RUNS_SCALE", "3000"))


class ItemsRead:
    """Every DynamoDB call of a client by operation, and the items each Query/Scan touched
    (``ScannedCount``: what DynamoDB bills, before any filter)."""

    def __init__(self, client: Any) -> None:
        self.calls: Counter[str] = Counter()
        self.scanned = 0
        client.meta.events.register("after-call.dynamodb", self._after)

    def _after(self, http_response: Any, parsed: dict[str, Any], model: Any, **_: Any) -> None:
        self.calls[model.name] += 1
        self.scanned += int(parsed.get("ScannedCount", 0))


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def _runs_list(cli: Cli, *args: str, context: OpsContext | None = None) -> dict[str, Any]:
    result = cli("runs", "list", *args, "--json", obj=CliState(context=context) if context else None)
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def _counted(stack: Stack) -> tuple[OpsContext, ItemsRead]:
    """The CLI's own context, its DynamoDB client counted."""
    context = resolve_context(invoke_async=stack.invoke_async)
    return context, ItemsRead(context.store.table.db)


def test_runs_started_over_several_days_are_listed_newest_first_by_queries(
    cli: Cli, stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = stack.store
    # GIVEN 12 runs of 3 sessions started by the wake's own start transaction over 4 days (today
    # back to three days ago), one of them failed
    now = datetime.now(UTC).replace(microsecond=0)
    started: list[tuple[str, str]] = []
    for i in range(12):
        moment = now - timedelta(days=i // 3, minutes=i)
        run_id = f"bg:t{i:02d}"
        with monkeypatch.context() as clock:
            clock.setattr(wake_begin, "utcnow_iso", lambda m=moment: _iso(m))
            lease = store.runs.begin_run(
                run_id=run_id, kind="background", session_id=f"s{i % 3}", seconds=60, previous=None
            )
        store.leases.release(lease.session_id, lease.token)
        started.append((_iso(moment), run_id))
    store.table.db.update_item(
        TableName=store.table.name,
        Key={"pk": {"S": run_key("bg:t04")[0]}, "sk": {"S": run_key("bg:t04")[1]}},
        UpdateExpression="SET #s = :f",
        ExpressionAttributeNames={"#s": "status"},
        ExpressionAttributeValues={":f": {"S": "failed"}},
    )
    newest_first = [r for _, r in sorted(started, reverse=True)]
    context, calls = _counted(stack)

    # WHEN `runs list` pages through them 5 at a time, and lists the failed ones
    first = _runs_list(cli, "--limit", "5", context=context)
    second = _runs_list(cli, "--limit", "5", "--before", first["next_before"], context=context)
    third = _runs_list(cli, "--limit", "5", "--before", second["next_before"], context=context)
    failed = _runs_list(cli, "--status", "failed", context=context)

    # THEN all 12 come newest first across the day boundaries, without overlap, from Queries only
    listed = [r["run_id"] for page in (first, second, third) for r in page["runs"]]
    assert listed == newest_first
    assert third["next_before"] is None and first["method"] == "by-day"
    assert [r["run_id"] for r in failed["runs"]] == ["bg:t04"]
    assert calls.calls["Scan"] == 0 and calls.calls["Query"] > 0
    # AND a page that found no more runs says how far back it looked
    assert third["note"] is not None and "--since" in third["note"] and "--scan" in third["note"]


def test_a_run_written_before_the_index_is_found_with_scan(cli: Cli, stack: Stack) -> None:
    store = stack.store
    # GIVEN a run record written before gsi2 existed (gsi1 keys only)
    started = _iso(datetime.now(UTC) - timedelta(days=3))
    pk, sk = run_key("bg:old")
    store.table.db.put_item(
        TableName=store.table.name,
        Item={
            **{"pk": {"S": pk}, "sk": {"S": sk}},
            "run_id": {"S": "bg:old"},
            "kind": {"S": "background"},
            "session_id": {"S": "s-old"},
            "status": {"S": "failed"},
            "attempts": {"N": "1"},
            "started_at": {"S": started},
            "gsi1pk": {"S": runs_gsi_pk("s-old")},
            "gsi1sk": {"S": runs_gsi_sk(started, "bg:old")},
        },
    )
    # WHEN runs are listed by day, with --scan, and by its session
    by_day = _runs_list(cli)
    scanned = _runs_list(cli, "--scan")
    by_session = _runs_list(cli, "--session", "s-old")
    # THEN the by-day index does not know it (and says where older runs are); --scan and --session do
    assert by_day["runs"] == [] and "--scan" in by_day["note"]
    assert [r["run_id"] for r in scanned["runs"]] == ["bg:old"] and scanned["method"] == "scan"
    assert [r["run_id"] for r in by_session["runs"]] == ["bg:old"]


def _seed(store: DynamoStore, count: int, days: int) -> None:
    """``count`` run records spread over ``days`` days back from now, with the keys the wake writes."""
    now = datetime.now(UTC)
    requests: list[dict[str, Any]] = []
    for i in range(count):
        started = _iso(now - timedelta(seconds=i * days * 86400 / count))
        run_id = f"bg:scale-{i:06d}"
        run = RunRecord(
            run_id=run_id, kind="background", session_id=f"s{i % 50}", status="succeeded", started_at=started
        )
        pk, sk = run_key(run_id)
        _, values = runs_by_day_set(started, run_id)
        item = store.table.item(
            run,
            pk,
            sk,
            gsi3pk=runs_gsi_pk(run.session_id),
            gsi3sk=runs_gsi_sk(started, run_id),
            gsi4pk=values[":g4pk"]["S"],
            gsi4sk=values[":g4sk"]["S"],
        )
        requests.append({"PutRequest": {"Item": item}})
    for start in range(0, len(requests), 25):
        pending: dict[str, Any] = {store.table.name: requests[start : start + 25]}
        while pending:
            pending = store.table.db.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}


def test_runs_list_reads_only_about_the_page_it_shows(cli: Cli, stack: Stack) -> None:
    store = stack.store
    # GIVEN SCALE runs (3,000; 100,000 with AGENTWAKE_RUNS_SCALE) over 10 days
    _seed(store, SCALE, days=10)
    context, calls = _counted(stack)

    # WHEN the newest 20 are listed, then the next page
    first = _runs_list(cli, "--limit", "20", context=context)
    touched_first = calls.scanned
    second = _runs_list(cli, "--limit", "20", "--before", first["next_before"], context=context)

    # THEN each page touched at most a page and one item per day partition it looked at (it asks
    # for limit + 1 to know whether there is more), with Queries only: two a day partition (the
    # keys-only gsi4, and gsi2 for runs written before it) and one BatchGetItem of the page's items
    assert [r["run_id"] for r in first["runs"]] == [f"bg:scale-{i:06d}" for i in range(20)]
    assert [r["run_id"] for r in second["runs"]] == [f"bg:scale-{i:06d}" for i in range(20, 40)]
    assert touched_first <= 21 and calls.scanned - touched_first <= 21
    assert calls.calls["Scan"] == 0 and calls.calls["Query"] <= 2 * (2 + 1)
    assert calls.calls["BatchGetItem"] == 2


def test_a_run_begun_again_moves_to_the_day_of_its_latest_attempt(
    cli: Cli, stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = stack.store
    # GIVEN a run first attempted two days ago and attempted again now (a redrive)
    old = _iso(datetime.now(UTC) - timedelta(days=2))
    with monkeypatch.context() as clock:
        clock.setattr(wake_begin, "utcnow_iso", lambda: old)
        lease = store.runs.begin_run(run_id="bg:again", kind="background", session_id="s", seconds=60, previous=None)
    store.leases.release(lease.session_id, lease.token)
    previous = store.records.get_run("bg:again")
    assert previous is not None
    store.runs.begin_run(run_id="bg:again", kind="background", session_id="s", seconds=60, previous=previous)
    # WHEN runs since yesterday are listed
    recent = _runs_list(cli, "--since", "1d")
    # THEN the run is there once, by its latest attempt
    assert [(r["run_id"], r["attempts"]) for r in recent["runs"]] == [("bg:again", 2)]


def test_a_run_that_gave_up_waiting_before_it_began_is_listed_by_time(cli: Cli, stack: Stack) -> None:
    # GIVEN a wake that gave up waiting for its busy session: its failure creates the run record
    from agentwake.domain.run_models import FailureRecord

    failure = FailureRecord(run_id="bg:busy", session_id="s-busy", attempt=0, error_type="SessionBusy", detail="busy")
    stack.store.ends.record_failure(failure, kind="background")
    # WHEN runs are listed by time and by its session
    by_day = _runs_list(cli)
    by_session = _runs_list(cli, "--session", "s-busy")
    # THEN both find it, with the same cursor key
    assert [(r["run_id"], r["status"]) for r in by_day["runs"]] == [("bg:busy", "failed")]
    assert [r["run_id"] for r in by_session["runs"]] == ["bg:busy"]
    item = stack.store.table.read_item(*run_key("bg:busy"))
    assert item is not None and item["gsi3sk"] == item["gsi4sk"]


def _legacy_run(store: DynamoStore, run_id: str, session_id: str, started: str, status: str) -> None:
    """A run record as written before gsi3/gsi4 existed: on gsi1 by session and gsi2 by day (ALL)."""
    run = RunRecord(
        run_id=run_id, kind="background", session_id=session_id, status=status, attempts=1, started_at=started
    )  # type: ignore[arg-type]
    sort_key = runs_gsi_sk(started, run_id)
    store.table.db.put_item(
        TableName=store.table.name,
        Item=store.table.item(
            run,
            *run_key(run_id),
            gsi1pk=runs_gsi_pk(session_id),
            gsi1sk=sort_key,
            gsi2pk=f"RUNDAY#{started[:10]}",
            gsi2sk=sort_key,
        ),
    )


def test_runs_written_before_the_keys_only_indexes_are_listed_once_among_the_new(
    cli: Cli, stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = stack.store
    now = datetime.now(UTC).replace(microsecond=0)
    # GIVEN two runs written before gsi3/gsi4 existed (one failed), and two the wake's start wrote since
    _legacy_run(store, "bg:old-1", "s", _iso(now - timedelta(minutes=30)), "failed")
    _legacy_run(store, "bg:old-2", "s", _iso(now - timedelta(minutes=10)), "succeeded")
    for run_id, minutes in (("bg:new-1", 20), ("bg:new-2", 5)):
        with monkeypatch.context() as clock:
            clock.setattr(wake_begin, "utcnow_iso", lambda m=minutes: _iso(now - timedelta(minutes=m)))
            lease = store.runs.begin_run(run_id=run_id, kind="background", session_id="s", seconds=60, previous=None)
        store.leases.release(lease.session_id, lease.token)
    newest_first = ["bg:new-2", "bg:old-2", "bg:new-1", "bg:old-1"]

    # WHEN they are listed by day, by session, a page of two at a time, and the failed ones
    by_day = _runs_list(cli)
    by_session = _runs_list(cli, "--session", "s")
    first = _runs_list(cli, "--session", "s", "--limit", "2")
    second = _runs_list(cli, "--session", "s", "--limit", "2", "--before", first["next_before"])
    failed = _runs_list(cli, "--status", "failed")
    running = _runs_list(cli, "--session", "s", "--status", "running")

    # THEN every listing has each run once, newest first, old and new merged; the filters apply to both
    assert [r["run_id"] for r in by_day["runs"]] == newest_first
    assert [r["run_id"] for r in by_session["runs"]] == newest_first
    assert [r["run_id"] for r in first["runs"] + second["runs"]] == newest_first
    assert second["next_before"] is None
    assert [r["run_id"] for r in failed["runs"]] == ["bg:old-1"]
    assert [r["run_id"] for r in running["runs"]] == ["bg:new-2", "bg:new-1"]

    # WHEN the oldest is attempted again (a redrive)
    previous = store.records.get_run("bg:old-1")
    assert previous is not None
    lease = store.runs.begin_run(run_id="bg:old-1", kind="background", session_id="s", seconds=60, previous=previous)
    store.leases.release(lease.session_id, lease.token)
    # THEN it has left gsi1 and gsi2 for gsi3 and gsi4 (its next change writes on no ALL index) and
    # is listed once, first, by its latest attempt
    item = store.table.read_item(*run_key("bg:old-1"))
    assert item is not None and not {"gsi1pk", "gsi1sk", "gsi2pk", "gsi2sk"} & set(item)
    assert item["gsi3pk"] == {"S": runs_gsi_pk("s")} and item["gsi3sk"] == item["gsi4sk"]
    assert [r["run_id"] for r in _runs_list(cli)["runs"]] == ["bg:old-1", *newest_first[:3]]
    assert [r["run_id"] for r in _runs_list(cli, "--session", "s")["runs"]] == ["bg:old-1", *newest_first[:3]]
    assert [r["run_id"] for r in _runs_list(cli, "--scan")["runs"]] == ["bg:old-1", *newest_first[:3]]
    # AND --scan with --session is the session's list (the scan is for runs without one), as before
    _legacy_run(store, "bg:elsewhere", "s-other", _iso(now - timedelta(minutes=1)), "succeeded")
    with_session = _runs_list(cli, "--scan", "--session", "s")
    assert [r["run_id"] for r in with_session["runs"]] == ["bg:old-1", *newest_first[:3]]
    assert with_session["method"] == "session"


def test_a_run_written_before_the_keys_only_indexes_that_gives_up_waiting_is_listed_once(
    cli: Cli, stack: Stack
) -> None:
    from agentwake.domain.run_models import FailureRecord

    store = stack.store
    # GIVEN a run written before gsi3/gsi4 existed, two days ago, and a run of today
    _legacy_run(store, "bg:old-wait", "s-w", _iso(datetime.now(UTC) - timedelta(days=2)), "running")
    lease = store.runs.begin_run(run_id="bg:today", kind="background", session_id="s-w", seconds=60, previous=None)
    store.leases.release(lease.session_id, lease.token)
    # WHEN its redelivered record gives up waiting for its busy session (its failure names its kind)
    failure = FailureRecord(run_id="bg:old-wait", session_id="s-w", attempt=0, error_type="SessionBusy", detail="busy")
    store.ends.record_failure(failure, kind="background")
    # THEN it has left gsi1/gsi2 and is listed once by day, by session and one at a time
    item = store.table.read_item(*run_key("bg:old-wait"))
    assert item is not None and not {"gsi1pk", "gsi1sk", "gsi2pk", "gsi2sk"} & set(item)
    assert sorted(r["run_id"] for r in _runs_list(cli)["runs"]) == ["bg:old-wait", "bg:today"]
    assert sorted(r["run_id"] for r in _runs_list(cli, "--session", "s-w")["runs"]) == ["bg:old-wait", "bg:today"]
    one_by_one, cursor = [], None
    for _ in range(4):
        page = _runs_list(cli, "--session", "s-w", "--limit", "1", *(("--before", cursor) if cursor else ()))
        one_by_one += [r["run_id"] for r in page["runs"]]
        if (cursor := page["next_before"]) is None:
            break
    assert sorted(one_by_one) == ["bg:old-wait", "bg:today"]
