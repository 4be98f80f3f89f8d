"""Build 6 (poison cannot jam anything), as a fuzz test: any body (deep nesting, huge integers,
control characters, NUL, lone surrogates, invalid UTF-8, mutated messages, forged tokens) is either
a valid message or a permanent input error dead-lettered at once with a reason SQS accepts. Zero
batch-level exceptions, zero lost records, zero writes to another session; then every DLQ command
reads the resulting DLQ.

Bounded in `make test` (AGENTWAKE_FUZZ_BODIES, default 100); `make fuzz` runs 10,000 bodies."""

from __future__ import annotations

import json
import os
import re
import uuid
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentwake import bootstrap
from agentwake.domain.models import Task, task_token_hash
from agentwake.store.queues import ATTR_ERROR_TYPE, ATTR_ORIGINAL_ID, ATTR_REASON
from tests.security.conftest import Cli, Stack, cli_json
from tests.security.wake import handle
from tests.support.builders import SCRIPTED_ARGS

FUZZ_BODIES = int(os.environ.get("AGENTWAKE_FUZZ_BODIES", "100"))
BATCH = 10
#: what SQS accepts in a body or an attribute value
SQS_TEXT = re.compile("^[\\t\\n\\r\\x20-\\ud7ff\\ue000-\\ufffd\\U00010000-\\U0010ffff]*$")
SQS_LIMIT = 256 * 1024

TOKEN_A, TOKEN_B = "awt_fuzz-token-a", "awt_fuzz-token-b"
GENUINE = {
    "task_id": "t-a",
    "session_id": "s-a",
    "task_token": TOKEN_A,
    "status": "succeeded",
    "result_text": "the result",
    "finished_at": "2026-11-30T05:00:00Z",
}

json_leaves = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30)
any_json = st.recursive(
    json_leaves, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4)
)
nasty_text = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=60)


def mutated(draw: Any) -> str:
    body: dict[str, Any] = dict(GENUINE)
    kind = draw(st.integers(0, 9))
    if kind == 0:
        body.pop(draw(st.sampled_from(sorted(body))))
    elif kind == 1:
        body[draw(st.sampled_from(sorted(body)))] = draw(any_json)
    elif kind == 2:
        body[draw(nasty_text)] = draw(any_json)
    elif kind == 3:
        body["task_token"] = draw(st.sampled_from([TOKEN_B, "", "awt_" + "x" * 43, None]))
    elif kind == 4:
        body["session_id"] = "s-b"  # the right token, another session
    elif kind == 5:
        body["task_id"] = "t-b"  # another session's task, with t-a's token
    elif kind == 6:
        body["result_text"] = draw(nasty_text)
    elif kind == 7:
        body["tool_args"] = {"deep": json.loads("[" * 40 + "]" * 40)}
    elif kind == 8:
        body["result_text"] = "x" * draw(st.integers(199_990, 200_010))
    text = json.dumps(body, ensure_ascii=draw(st.booleans()))
    if kind == 9:
        text = text.replace('"the result"', '"\\ud800 lone"')
    return text


@st.composite
def bodies(draw: Any) -> str:
    kind = draw(st.integers(0, 8))
    if kind == 0:
        n = draw(st.integers(100, 3000))
        return "[" * n + "]" * n
    if kind == 1:
        n = draw(st.integers(33, 1500))
        return '{"task_id":' * n + "1" + "}" * n
    if kind == 2:
        digits = "7" * draw(st.integers(4301, 20_000))  # over int_max_str_digits
        return json.dumps(dict(GENUINE, tool_args={"n": 0})).replace('"n": 0', f'"n": {digits}')
    if kind == 3:
        return draw(st.text(alphabet=st.characters(max_codepoint=0x20) | st.sampled_from('{}[]":,\\u'), max_size=200))
    if kind == 4:
        return draw(st.binary(max_size=200)).decode("utf-8", errors="surrogateescape")
    if kind == 5:
        return json.dumps(draw(any_json))
    if kind == 6:
        return json.dumps(GENUINE)
    return mutated(draw)


def is_genuine(body: str) -> bool:
    """Independently of the handler: is this a completion of t-a, by its token, for s-a?"""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return False
    if not isinstance(data, dict) or set(data) != set(GENUINE) | (set(data) & {"note", "summary_name"}):
        return False
    return (
        all(data.get(k) == v for k, v in GENUINE.items() if k != "result_text")
        and isinstance(data.get("result_text"), str)
        and len(data["result_text"]) <= 200_000
        and re.search("[\\ud800-\\udfff]", data["result_text"]) is None
    )


def test_no_body_jams_a_batch_loses_a_record_or_writes_elsewhere(stack: Stack, cli: Cli, tmp_path: Path) -> None:
    # (moto runs with the local stack's patches, tests/conftest.py: unpatched, each SQS receive walks
    # the whole queue, so one scan of the 10,000-body DLQ below costs n² and took hours)
    # GIVEN two sessions, each with a registered task
    cli("sessions", "put", "s-a", *SCRIPTED_ARGS)
    cli("sessions", "put", "s-b", *SCRIPTED_ARGS)
    stack.store.records.put_task(
        Task(task_id="t-a", session_id="s-a", tool_name="research", token_sha256=task_token_hash(TOKEN_A))
    )
    stack.store.records.put_task(
        Task(task_id="t-b", session_id="s-b", tool_name="report", token_sha256=task_token_hash(TOKEN_B))
    )
    sent: list[dict[str, Any]] = []  # every SendMessage the handler makes to the DLQ
    bootstrap.dead_letters().client.meta.events.register(
        "provide-client-params.sqs.SendMessage", lambda params, **_: sent.append(dict(params))
    )
    seen = {"bodies": 0, "genuine": 0}
    # AND poison that reached the DLQ earlier without a reason (by maxReceiveCount, from older code)
    for raw in ("[" * 5000 + "]" * 5000, '{"n": ' + "9" * 50_000 + "}", '{"task_id": "\\ud800"}', "\x01\x02 not json"):
        stack.sqs.send_message(QueueUrl=stack.res.dlq_url, MessageBody=raw)

    @settings(
        max_examples=max(1, FUZZ_BODIES // BATCH),
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.lists(bodies(), min_size=BATCH, max_size=BATCH))
    def one_batch(batch: list[str]) -> None:
        ids = [str(uuid.uuid4()) for _ in batch]
        before = len(sent)
        # WHEN a batch of them reaches the handler
        response = handle(batch, ids=ids)
        # THEN no batch-level exception, no record left to retry
        assert "all_failed" not in response
        assert response["batchItemFailures"] == []
        # AND every record is either the genuine completion (processed) or dead-lettered, once
        dead = {m["body_id"]: m for m in (_describe(p) for p in sent[before:])}
        for record_id, body in zip(ids, batch, strict=True):
            if is_genuine(body):
                seen["genuine"] += 1
                assert record_id not in dead
            else:
                assert record_id in dead, f"neither processed nor dead-lettered: {body[:300]!r}"
        assert len(sent) - before == len(dead)
        seen["bodies"] += len(batch)

    one_batch()

    # THEN every dead-lettered message is one SQS would accept, with a reason
    assert seen["bodies"] >= FUZZ_BODIES
    for params in sent:
        text = [params["MessageBody"]] + [v["StringValue"] for v in params["MessageAttributes"].values()]
        assert all(SQS_TEXT.match(t) for t in text)
        size = len(params["MessageBody"].encode()) + sum(
            len(k.encode()) + len(v["DataType"]) + len(v["StringValue"].encode())
            for k, v in params["MessageAttributes"].items()
        )
        assert size <= SQS_LIMIT
        assert params["MessageAttributes"][ATTR_ERROR_TYPE]["StringValue"] in {
            "InvalidMessage", "UnknownTask", "ForgedCompletion", "SessionMismatch",
        }  # fmt: skip
        assert params["MessageAttributes"][ATTR_REASON]["StringValue"].strip("-")
    # AND nothing was written to another session: s-b has no history, t-b is untouched
    items = stack.store.table.db.scan(TableName=stack.res.table)["Items"]
    history_pks = {i["pk"]["S"] for i in items if i["sk"]["S"].startswith("MSG#")}
    assert history_pks <= {"SESSION#s-a"}
    assert stack.store.records.get_task("t-b").status == "running"  # type: ignore[union-attr]
    assert {i["pk"]["S"] for i in items if i["pk"]["S"].startswith("RUN#")} <= {"RUN#bg:t-a"}
    if seen["genuine"]:
        assert stack.store.records.get_run("bg:t-a").status == "succeeded"  # type: ignore[union-attr]
        assert len([e for e in stack.store.history.history("s-a") if e.kind == "note"]) == 1

    # WHEN an operator lists, shows and exports the DLQ THEN every command exits 0
    rows = cli_json(cli, "dlq", "list")
    assert len(rows) == len(sent) + 4, "`dlq list` shows every message of the DLQ, however many"
    cli("dlq", "list")
    # (each `dlq show` reads the whole DLQ to find its message: a few are shown, of each origin)
    poison = [r for r in rows if r["error_source"] == "body"]  # the injected ones: no reason attached
    assert len(poison) == 4, "the injected poison is listed"
    for row in [*poison, rows[0]] if FUZZ_BODIES <= 1000 else poison[:2]:
        cli_json(cli, "dlq", "show", row["message_id"])
        cli("dlq", "show", row["message_id"])
    out = tmp_path / "dlq.jsonl"
    cli("dlq", "export", "--out", str(out))
    exported = out.read_text().splitlines()
    assert exported and all(json.loads(line) for line in exported)


def _describe(params: dict[str, Any]) -> dict[str, Any]:
    return {"body_id": params["MessageAttributes"][ATTR_ORIGINAL_ID]["StringValue"], **params}
