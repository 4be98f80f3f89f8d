"""A task token is never shown (DESIGN §6; docs/security.md §7): `dlq list/show`, `runs show` and
transcripts mask it; `dlq export` keeps it, byte-exact, in a file whose header says so."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from agentwake_ops import terminal
from agentwake_ops.dlq import act
from tests.security.conftest import Cli, Stack, cli_json


def flat(text: str) -> str:
    """``text`` without whitespace and box-drawing characters: a cell folded over lines reads whole."""
    return re.sub(r"[\s\u2500-\u257f]+", "", text)


def failed_run_that_repeats_its_token(cli: Cli, stack: Stack) -> tuple[str, str, str]:
    """A background run dead-lettered after its model delivered a text quoting the task's token
    (the worst case: the token inside what the run itself stored). Returns (task id, token, body)."""
    session = "s-token"
    cli(
        "sessions", "put", session, "--provider", json.dumps({"type": "scripted", "id": "p", "script": [{"text": "-"}]})
    )
    registered = cli_json(cli, "tasks", "register", "--session", session, "--tool", "web_research")
    task_id, token = registered["task_id"], registered["task_token"]
    quoting = {
        "type": "scripted",
        "id": "p",
        "script": [
            {"tool_calls": [{"name": "send_message_to_user", "arguments": {"text": f"my token is {token}"}}]},
            {"error": "auth"},
        ],
    }
    cli("sessions", "put", session, "--provider", json.dumps(quoting))
    cli("tasks", "finish", task_id, "--token", token, "--status", "succeeded", "--result", "done")
    stack.poll_until_dead_lettered()
    [raw] = stack.sqs.receive_message(QueueUrl=stack.res.dlq_url, VisibilityTimeout=0)["Messages"]
    assert token in raw["Body"]
    return task_id, token, raw["Body"]


def test_dlq_and_runs_views_mask_the_task_token(cli: Cli, stack: Stack) -> None:
    # GIVEN a dead-lettered completion whose body carries its task token (and a delivery quoting it)
    task_id, token, _ = failed_run_that_repeats_its_token(cli, stack)
    [row] = cli_json(cli, "dlq", "list")
    short = row["message_id"][:8]
    run_id = f"bg:{task_id}"
    # WHEN the operator looks at the message and its run every way the CLI offers
    outputs = {
        " ".join(args): cli(*args).stdout
        for args in (
            ("dlq", "list"),
            ("dlq", "list", "--json"),
            ("dlq", "show", short),
            ("dlq", "show", short, "--json"),
            ("runs", "show", run_id),
            ("runs", "show", run_id, "--json"),
            ("runs", "show", run_id, "--transcript"),
            ("runs", "show", run_id, "--transcript", "--json"),
        )
    }
    outputs["runs replay"] = cli("runs", "replay", run_id, expect=1).stdout
    outputs["runs replay --json"] = cli("runs", "replay", run_id, "--json", expect=1).stdout
    # THEN the token (or any long piece of it) is in none of them
    assert [name for name, text in outputs.items() if token[4:20] in flat(text)] == []
    # AND they say it was masked, where it was: the body, and the delivered text
    shown = json.loads(outputs[f"dlq show {short} --json"])
    assert shown["body_json"]["task_token"] == terminal.MASKED
    assert json.loads(shown["body"])["task_token"] == terminal.MASKED
    assert json.loads(shown["body"])["task_id"] == task_id  # the rest of the body is still there
    assert shown["payload"]["task_token"] == terminal.MASKED
    assert flat("(task_token masked") in flat(outputs[f"dlq show {short}"])
    # (the delivered text: redacted where the function wrote it, since the runtime's redactor knows
    # the token's shape; masked by the terminal had it not been)
    for name in (f"runs show {run_id}", f"runs show {run_id} --transcript"):
        assert any(flat(f"my token is {mark}") in flat(outputs[name]) for mark in (terminal.MASKED, "[REDACTED]")), name


def test_export_keeps_the_body_byte_exact_and_says_the_file_holds_tokens(cli: Cli, stack: Stack) -> None:
    # GIVEN the same dead-lettered message, its body as SQS holds it
    _, token, body = failed_run_that_repeats_its_token(cli, stack)
    # WHEN the DLQ is exported
    out = stack.tmp / "dlq.jsonl"
    printed = cli("dlq", "export", "--out", str(out)).stdout
    lines = out.read_text(encoding="utf-8").splitlines()
    # THEN the first line is a header record that says the file holds task tokens
    header = json.loads(lines[0])
    assert header[act.EXPORT_HEADER] == 1 and header["holds_task_tokens"] is True
    assert "task tokens" in header["warning"] and header["messages"] == 1
    assert "holds task tokens in clear" in " ".join(printed.split())
    # AND the message line keeps the body exactly as SQS holds it, token included (for re-sending)
    [record] = act.read_export(str(out))
    assert record["body"] == body and token in record["body"]
    # AND the command's help says so before anyone runs it
    assert flat("holds the messages' task tokens in clear") in flat(cli("dlq", "export", "--help").stdout)
    # AND `dlq delete --from` reads the file past its header: exactly the exported message goes
    deleted = cli_json(cli, "dlq", "delete", "--from", str(out), "--yes")
    assert deleted["deleted"] == [record["message_id"]] and deleted["missing"] == []


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            {"task_token": "awt_x", "a": {"task_token": "t2"}},
            {"task_token": "[MASKED]", "a": {"task_token": "[MASKED]"}},
        ),
        ({"task_token": None, "b": ""}, {"task_token": None, "b": ""}),
        ({"body": '{"task_token": "forged", "n": 1}'}, {"body": '{"task_token": "[MASKED]", "n": 1}'}),
        (["see awt_" + "A" * 43 + " here"], ["see [MASKED] here"]),
        ({"body": "not json, task_token awt_" + "b" * 43}, {"body": "not json, task_token [MASKED]"}),
    ],
)
def test_masked_hides_secret_fields_and_token_shapes(data: Any, expected: Any) -> None:
    # GIVEN data a view prints  WHEN masked  THEN every secret field and token-shaped text is hidden
    assert terminal.masked(data) == expected
