"""A succeeded run's commit does not write its last reply (issue 37: 2 WRU a wake): the note keeps
its text and the run item its tokens, and nothing retries a run that succeeded. ``runs show`` of
such a run reads the final answer from the note; a failed attempt still journals the reply (its
retry asks no model again), and a subagent's run, which writes no note, keeps it."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from typer.testing import CliRunner

from agentwake.settings import Settings
from agentwake.store.dynamo import DynamoStore
from agentwake.store.keys import HISTORY_PREFIX, STEP_PREFIX, session_pk
from agentwake.wake.background import wake_for_background_result
from agentwake.wake.spec import WakeDeps
from agentwake_ops.cli import app
from agentwake_ops.runs import run_summary, transcript
from tests.support.aws import REGION, Resources
from tests.support.builders import message, seed_session, seed_task
from tests.support.faults import FaultyStore

ANSWER = "The report is ready: 3 findings."


def _deps(store: DynamoStore) -> WakeDeps:
    return WakeDeps(store=store, settings=Settings.from_env())


def _commit_items(store: DynamoStore) -> list[list[dict[str, Any]]]:
    """The items of every TransactWriteItems the store's client sends from now on."""
    sent: list[list[dict[str, Any]]] = []

    def keep(model: Any, params: dict[str, Any], **_: Any) -> None:
        if model.name == "TransactWriteItems":
            sent.append(json.loads(params["body"])["TransactItems"])

    store.table.db.meta.events.register("before-call.dynamodb", keep)
    return sent


def _sks(items: list[dict[str, Any]]) -> list[str]:
    out = []
    for entry in items:
        ((_, spec),) = entry.items()
        out.append((spec.get("Key") or spec["Item"])["sk"]["S"])
    return out


def _steps(store: DynamoStore, run_id: str) -> list[str]:
    return [i["sk"]["S"] for i in store.table.query(f"RUN#{run_id}", STEP_PREFIX)]


def test_the_success_commit_leaves_the_last_reply_out_and_runs_show_reads_the_answer_in_the_note(
    store: DynamoStore, resources: Resources, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AGENTWAKE_HOME", str(tmp_path))  # never a developer's local stack
    monkeypatch.setenv("COLUMNS", "250")
    # GIVEN a one-step agent whose session counts tokens a day (the counter rides with the reply)
    seed_session(
        store,
        "s1",
        providers=[{"type": "scripted", "id": "p", "script": [{"text": ANSWER}]}],
        deliver_final="never",
        max_tokens_per_day=100_000,
    )
    seed_task(store, "t1", "s1")
    sent = _commit_items(store)
    # WHEN its task's result wakes it
    outcome = wake_for_background_result(message("t1", "s1"), _deps(store))
    # THEN the commit wrote the note, the run, the task, the day's counter and the lease's release,
    # and no journal step: the run's partition holds no reply
    assert outcome.status == "succeeded"
    commit = _sks(sent[-1])
    assert not [sk for sk in commit if sk.startswith(STEP_PREFIX)], commit
    assert _steps(store, "bg:t1") == []
    from agentwake.store.daily import DailyCounters

    assert DailyCounters(store.table, "s1").read()[0] == store.records.get_run("bg:t1").usage["total_tokens"] > 0  # type: ignore[union-attr]
    # AND the summary that shows the run's story carries the note that keeps the final answer (the
    # DLQ's joins read the run's partition only)
    summary = run_summary(store, "bg:t1", with_note=True)
    assert summary.note is not None and ANSWER in summary.note["text"]
    assert run_summary(store, "bg:t1").note is None
    # AND the transcript shows that answer as the last reply, with the run's tokens, before the outcome
    entries = transcript(summary)
    assert [e.kind for e in entries] == ["reply", "outcome"]
    assert entries[0].title.startswith("last reply: the final answer as the run's note keeps it")
    assert any(ANSWER in line for line in entries[0].lines)
    assert any(line.startswith("tokens of the run: ") and "over 1 model call(s)" in line for line in entries[0].lines)
    # AND `agentwake runs show` prints it, with and without --transcript, and in its JSON
    runner = CliRunner()
    for args in (["runs", "show", "bg:t1"], ["runs", "show", "bg:t1", "--transcript"]):
        shown = runner.invoke(app, args)
        assert shown.exit_code == 0, shown.stdout
        assert ANSWER in shown.stdout and "last reply: the final answer as the run's note keeps it" in shown.stdout
    data = json.loads(runner.invoke(app, ["runs", "show", "bg:t1", "--json"]).stdout)
    assert data["steps"] == [] and ANSWER in data["note"]["text"]


def test_a_run_whose_note_is_gone_says_so(store: DynamoStore) -> None:
    # GIVEN a succeeded run whose session's history was deleted after it
    seed_session(
        store, "s1", providers=[{"type": "scripted", "id": "p", "script": [{"text": ANSWER}]}], deliver_final="never"
    )
    seed_task(store, "t1", "s1")
    wake_for_background_result(message("t1", "s1"), _deps(store))
    [item] = store.table.query(session_pk("s1"), HISTORY_PREFIX)
    store.table.db.delete_item(TableName=store.table.name, Key={"pk": item["pk"], "sk": item["sk"]})
    # WHEN its transcript is built THEN it says the reply is not journaled and the note was not found
    [reply, _] = transcript(run_summary(store, "bg:t1", with_note=True))
    assert "not journaled" in reply.title and "no note of bg:t1 was found" in reply.lines[0]


def test_a_failed_commit_journals_the_last_reply_and_the_retry_asks_no_model_again(
    resources: Resources, model_calls: Counter[str]
) -> None:
    # GIVEN a one-step agent whose first commit the service fails
    faulty = FaultyStore(resources.table, client=boto3.client("dynamodb", region_name=REGION))
    seed_session(
        faulty, "s1", providers=[{"type": "scripted", "id": "p", "script": [{"text": ANSWER}]}], deliver_final="never"
    )
    seed_task(faulty, "t1", "s1")
    faulty.arm("inside_commit_not_landed")
    with pytest.raises(ClientError, match="injected"):
        wake_for_background_result(message("t1", "s1"), _deps(faulty))
    # THEN the failure record wrote the reply (a failure keeps what its retry needs)
    assert _steps(faulty, "bg:t1") == [f"{STEP_PREFIX}000.reply"]
    # WHEN it is retried THEN it succeeds from the journal without a second model call
    assert wake_for_background_result(message("t1", "s1"), _deps(faulty)).status == "succeeded"
    assert model_calls["p"] == 1
    # AND runs show reads that journaled reply (the note is not needed)
    summary = run_summary(faulty, "bg:t1", with_note=True)
    assert summary.note is None
    assert any(line == f"says: {ANSWER}" for e in transcript(summary) for line in e.lines)
