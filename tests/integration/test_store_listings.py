"""The listings read from the keys-only indexes (store/listings.py), on a table made as template.yaml
makes it: fresh, and between the two deploys of an upgrade (``UpgradeStep=gsi3-only``: no gsi4)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from agentwake.domain.run_models import RunRecord
from agentwake.store.keys import run_key, runs_by_day_pk, runs_gsi_pk, runs_gsi_sk
from agentwake.store.listings import BY_DAY, BY_SESSION, newest_first, scan_all
from agentwake.store.table import Table
from agentwake_local.template import Resolver, load_template
from tests.support.aws import REGION, TEMPLATE_PATH

DAY = "2026-12-04"


def _table(upgrade_step: str) -> Table:
    template = load_template(TEMPLATE_PATH, {"UpgradeStep": upgrade_step})
    props = Resolver(template, None).resolve(template.resources["AgentTable"]["Properties"])
    db = boto3.client("dynamodb", region_name=REGION)
    db.create_table(
        TableName="listings",
        BillingMode="PAY_PER_REQUEST",
        **{k: props[k] for k in ("KeySchema", "AttributeDefinitions", "GlobalSecondaryIndexes")},
    )
    return Table("listings", client=db)


@pytest.fixture
def aws() -> Iterator[None]:
    with mock_aws():
        yield


def _put_run(table: Table, run_id: str, minute: int, *, legacy: bool, status: str = "succeeded") -> None:
    started = f"{DAY}T10:{minute:02d}:00.000000Z"
    run = RunRecord(run_id=run_id, kind="background", session_id="s", status=status, attempts=1, started_at=started)  # type: ignore[arg-type]
    n = (1, 2) if legacy else (3, 4)
    sort_key = runs_gsi_sk(started, run_id)
    keys = {
        f"gsi{n[0]}pk": runs_gsi_pk("s"),
        f"gsi{n[0]}sk": sort_key,
        f"gsi{n[1]}pk": runs_by_day_pk(DAY),
        f"gsi{n[1]}sk": sort_key,
    }
    table.db.put_item(TableName=table.name, Item=table.item(run, *run_key(run_id), **keys))


def _ids(pairs: Any) -> list[str]:
    return [item["run_id"]["S"] for _, item in pairs]


def test_a_fresh_table_lists_old_and_new_runs_merged_newest_first(aws: None) -> None:
    # GIVEN a fresh stack's table, two runs written before gsi3/gsi4 and two since
    table = _table("all")
    for run_id, minute, legacy in (("bg:a", 1, True), ("bg:b", 2, False), ("bg:c", 3, True), ("bg:d", 4, False)):
        _put_run(table, run_id, minute, legacy=legacy)
    # WHEN a session's runs and a day's runs are read, whole and below a cursor, and all scanned
    by_session = list(newest_first(table, BY_SESSION, runs_gsi_pk("s")))
    by_day = list(newest_first(table, BY_DAY, runs_by_day_pk(DAY), page_size=1))
    below = list(newest_first(table, BY_SESSION, runs_gsi_pk("s"), before=by_session[1][0]))
    # THEN each run once, newest first, with the items whole (read from the table, not the keys-only index)
    assert _ids(by_session) == _ids(by_day) == ["bg:d", "bg:c", "bg:b", "bg:a"]
    assert _ids(below) == ["bg:b", "bg:a"]
    assert all(item["status"] == {"S": "succeeded"} for _, item in by_day)
    assert _ids(scan_all(table, BY_SESSION, "RUNS#")) == ["bg:d", "bg:c", "bg:b", "bg:a"]


def test_between_the_two_deploys_of_an_upgrade_runs_by_day_are_read_from_gsi2_alone(aws: None) -> None:
    # GIVEN the table after an upgrade's first deploy (gsi3 added, gsi4 not yet), an old run and a new one
    table = _table("gsi3-only")
    indexes = {g["IndexName"] for g in table.db.describe_table(TableName=table.name)["Table"]["GlobalSecondaryIndexes"]}
    assert indexes == {"gsi1", "gsi2", "gsi3"}
    _put_run(table, "bg:old", 1, legacy=True)
    _put_run(table, "bg:new", 2, legacy=False)
    # WHEN a day's runs and the session's runs are read
    missing: set[str] = set()
    by_day = list(newest_first(table, BY_DAY, runs_by_day_pk(DAY), missing=missing))
    by_session = list(newest_first(table, BY_SESSION, runs_gsi_pk("s"), missing=missing))
    # THEN the day lists what gsi2 holds, without an error, and says which index it could not read;
    # the session lists both
    assert _ids(by_day) == ["bg:old"] and missing == {"gsi4"}
    assert _ids(by_session) == ["bg:new", "bg:old"]
    # AND the runs page says so in words, with what to do
    from agentwake.store.operator import RunsPage
    from agentwake_ops.runs import runs_page_note

    note = runs_page_note(RunsPage(runs=[], next_before=None, method="by-day", missing_indexes=("gsi4",)))
    assert note is not None and "gsi4" in note and "UpgradeStep=all" in note and "--session" in note
    # (a session's page, already by session, points to --scan only)
    by_session_note = runs_page_note(RunsPage(runs=[], next_before=None, method="session", missing_indexes=("gsi3",)))
    assert by_session_note is not None and "gsi3" in by_session_note
    assert "--scan" in by_session_note and "--session" not in by_session_note
    # (and a scan, which read the missing index itself, to runs show)
    scan_note = runs_page_note(RunsPage(runs=[], next_before=None, method="scan", missing_indexes=("gsi3",)))
    assert scan_note is not None and "runs show RUN_ID" in scan_note and "--scan" not in scan_note


def test_a_run_on_an_old_day_partition_and_a_new_one_is_listed_once_by_day(aws: None) -> None:
    # GIVEN a run on gsi2 under yesterday (written by the code before) that the code since put on
    # gsi4 under today as well (the two versions side by side while Lambda rolls the new one out)
    table = _table("all")
    _put_run(table, "bg:both", 1, legacy=False)
    item = table.read_item(*run_key("bg:both"))
    assert item is not None
    table.db.update_item(
        TableName=table.name,
        Key={"pk": item["pk"], "sk": item["sk"]},
        UpdateExpression="SET gsi2pk = :d, gsi2sk = :k",
        ExpressionAttributeValues={
            ":d": {"S": runs_by_day_pk("2026-12-03")},
            ":k": {"S": "2026-12-03T09:00:00Z#bg:both"},
        },
    )
    # WHEN the two days are walked with one set of what was listed
    seen: set[str] = set()
    today = list(newest_first(table, BY_DAY, runs_by_day_pk(DAY), seen=seen))
    yesterday = list(newest_first(table, BY_DAY, runs_by_day_pk("2026-12-03"), seen=seen))
    # THEN it is listed once, on the newer day
    assert (_ids(today), _ids(yesterday)) == (["bg:both"], [])


def test_any_other_refusal_of_an_index_read_is_raised(aws: None) -> None:
    # GIVEN a table with no table of that name (not a missing index)
    table = _table("all")
    table.name = "no-such-table"
    # WHEN a listing reads it THEN DynamoDB's refusal is raised, not read as an empty list
    with pytest.raises(ClientError):
        list(newest_first(table, BY_DAY, runs_by_day_pk(DAY)))
