"""Hostile text never drives the operator's terminal (DESIGN §6 "rendered inert").

ESC/CSI/OSC bytes and the C1 CSI (0x9b) arrive where a producer, a sender to the queue or a model
provider controls the text: a DLQ body, a message attribute, a provider's error message. Every CLI
view of them (`dlq list/show`, `runs list/show`, the transcript, `runs replay`, `history show`;
tables and `--json`) prints them as visible escapes, and the failure record stores them so too.
"""

from __future__ import annotations

import io
import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from werkzeug import Request, Response

from agentwake_ops import terminal
from agentwake_ops.progress import RichProgress
from tests.security.conftest import Cli, Stack, cli_json

#: clear the screen, turn red, fake a verdict; set the window title (OSC ... BEL); a C1 CSI
HOSTILE = "\x1b[2J\x1b[31mFAKE: all runs succeeded\x1b]0;title\x07\x9b31m"
#: any byte a terminal acts on: C0 controls but tab and newline, DEL, C1 controls
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
KEY_ENV = "AGENTWAKE_SECRET_TERMINAL_TEST_KEY"


def flat(text: str) -> str:
    """``text`` without whitespace and box-drawing characters: a cell folded over lines reads whole."""
    return re.sub(r"[\s\u2500-\u257f]+", "", text)


@dataclass
class Hostile:
    session: str
    task_id: str
    run_id: str
    message_ids: list[str]


@pytest.fixture
def hostile(stack: Stack, cli: Cli, httpserver: Any, monkeypatch: pytest.MonkeyPatch) -> Hostile:
    """A DLQ holding: a run whose provider answered every attempt with HOSTILE in its error (its body
    and an attribute carry HOSTILE too), a body the handler dead-lettered at once (a HOSTILE field
    name, so its reason attribute repeats it), and raw poison put in the DLQ with HOSTILE everywhere."""
    monkeypatch.setenv(KEY_ENV, f"k3y{uuid.uuid4().hex}")

    def provider(request: Request) -> Response:
        return Response(
            json.dumps({"error": {"message": f"denied {HOSTILE}"}}), status=401, content_type="application/json"
        )

    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(provider)
    spec = {
        "type": "openai",
        "id": "esc",
        "base_url": httpserver.url_for("/v1"),
        "model": "m",
        "api_key_ref": f"env:{KEY_ENV}",
    }
    session = "s-esc"
    cli("sessions", "put", session, "--provider", json.dumps(spec))
    config = stack.store.records.get_session(session)
    assert config is not None
    stack.store.records.put_session(config.model_copy(update={"retry_max_attempts": 1}))
    registered = cli_json(cli, "tasks", "register", "--session", session, "--tool", "web_research")
    body = {
        "task_id": registered["task_id"],
        "session_id": session,
        "task_token": registered["task_token"],
        "status": "succeeded",
        "result_text": f"result {HOSTILE}",
        "note": HOSTILE,
        "finished_at": "2026-11-30T05:00:00Z",
    }
    attributes = {"origin": {"DataType": "String", "StringValue": HOSTILE}}
    stack.sqs.send_message(
        QueueUrl=stack.res.queue_url, MessageBody=json.dumps(body, ensure_ascii=False), MessageAttributes=attributes
    )
    invalid = {**body, "task_id": "t-invalid", HOSTILE: 1}
    stack.sqs.send_message(QueueUrl=stack.res.queue_url, MessageBody=json.dumps(invalid, ensure_ascii=False))
    stack.poll_until_dead_lettered()
    stack.sqs.send_message(QueueUrl=stack.res.dlq_url, MessageBody=f"not json {HOSTILE}", MessageAttributes=attributes)
    rows = cli_json(cli, "dlq", "list")
    assert len(rows) == 3
    return Hostile(session, registered["task_id"], f"bg:{registered['task_id']}", [r["message_id"] for r in rows])


def views(cli: Cli, h: Hostile) -> dict[str, Any]:
    """Every CLI view of the hostile DLQ and run: the command line -> its result."""
    commands = [
        ("dlq", "list"),
        ("dlq", "list", "--json"),
        ("runs", "list"),
        ("runs", "list", "--json"),
        ("runs", "show", h.run_id),
        ("runs", "show", h.run_id, "--transcript"),
        ("runs", "show", h.run_id, "--json"),
        ("runs", "show", h.run_id, "--transcript", "--json"),
        ("history", "show", h.session),
        ("history", "show", h.session, "--json"),
    ]
    for message_id in h.message_ids:
        commands += [("dlq", "show", message_id[:8]), ("dlq", "show", message_id[:8], "--json")]
    results = {" ".join(c): cli(*c) for c in commands}
    # the replay asks the same provider again (and fails again: exit 1)
    for replay in (("runs", "replay", h.run_id), ("runs", "replay", h.run_id, "--json")):
        results[" ".join(replay)] = cli(*replay, expect=1)
    return results


def test_hostile_bytes_print_as_visible_escapes_in_every_cli_view(cli: Cli, stack: Stack, hostile: Hostile) -> None:
    # GIVEN a DLQ and a run with ESC/CSI/OSC/C1 bytes in a body, an attribute and a provider error
    # WHEN the operator looks at them every way the CLI offers
    results = views(cli, hostile)
    # THEN no output carries a byte a terminal acts on (stdout and stderr) ...
    raw = {
        name: sorted({f"0x{ord(c):02x}" for c in CONTROL.findall(r.stdout + r.stderr)})
        for name, r in results.items()
        if CONTROL.search(r.stdout + r.stderr)
    }
    assert raw == {}
    # ... while the hostile text is there to read, as visible escapes (the provider's error in the
    # run's failure, in every dlq show and in the replay; the field name in the dead-lettered reason)
    for name in (
        f"runs show {hostile.run_id}",
        f"runs show {hostile.run_id} --transcript",
        f"runs replay {hostile.run_id}",
    ):
        assert flat("\\x1b[2J\\x1b[31mFAKE: all runs succeeded\\x1b]0;title\\x07\\x9b31m") in flat(
            results[name].stdout
        ), name
    shown = flat("".join(r.stdout for name, r in results.items() if name.startswith("dlq show")))
    assert flat("HTTP 401: denied \\x1b[2J\\x1b[31mFAKE") in shown
    listed = [row["error"] for row in json.loads(results["dlq list --json"].stdout)]
    assert sum("FAKE: all runs succeeded" in error for error in listed) == 2, listed
    # AND --json is still JSON whose values say the same (a control character is a \u escape in it)
    detail = json.loads(results[f"runs show {hostile.run_id} --json"].stdout)["failures"][-1]["detail"]
    assert "\\x1b[2J\\x1b[31mFAKE" in detail


def test_on_a_colour_terminal_only_the_clis_own_sequences_are_written(
    cli: Cli, stack: Stack, hostile: Hostile, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN rich writing for a colour terminal (its own ESC sequences for bold, red, dim)
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.delenv("NO_COLOR", raising=False)
    outputs = {
        " ".join(args): cli(*args).stdout
        for args in (
            ("dlq", "list"),
            *(("dlq", "show", m[:8]) for m in hostile.message_ids),
            ("runs", "show", hostile.run_id, "--transcript"),
            ("runs", "show", hostile.run_id),
        )
    }
    assert all("\x1b[" in out for out in outputs.values()), "rich did not write for a terminal"
    # THEN none of the hostile sequences is among them: no clear screen, no title, no C1, no BEL,
    # no colour change right before the fake verdict
    hostile_bytes = ("\x1b[2J", "\x1b]0;", "\x9b", "\x07", "\x1b[31mFAKE")
    assert {
        name: [b for b in hostile_bytes if b in out]
        for name, out in outputs.items()
        if any(b in out for b in hostile_bytes)
    } == {}


def test_the_failure_record_stores_hostile_text_inert(cli: Cli, stack: Stack, hostile: Hostile) -> None:
    # GIVEN the run whose provider error carried HOSTILE
    failures = stack.store.ends.failures(hostile.run_id)
    run = stack.store.records.get_run(hostile.run_id)
    task = stack.store.records.get_task(hostile.task_id)
    assert failures and run is not None and task is not None
    # THEN what the store holds for readers other than this CLI is inert too: the failure's detail
    # and provider errors, the run's and the task's last error
    texts = {
        "detail": failures[-1].detail,
        "provider error": failures[-1].provider_errors["esc"],
        "run last_error": run.last_error or "",
        "task last_error": task.last_error or "",
    }
    assert {k: v for k, v in texts.items() if CONTROL.search(v)} == {}
    assert all("\\x1b[2J\\x1b[31mFAKE: all runs succeeded" in v for v in texts.values()), texts


def test_progress_lines_are_inert() -> None:
    # GIVEN a progress bar on a terminal (it writes its own colours)
    screen = io.StringIO()
    from rich.console import Console

    bar = RichProgress(Console(file=screen, force_terminal=True, width=200))
    # WHEN a phase is named with hostile text
    bar.phase(f"scanning {HOSTILE}", total=2)
    bar.advance()
    bar.close()
    out = screen.getvalue()
    # THEN the hostile sequences print as text, not as the terminal commands they are
    assert "\x1b[2J" not in out and "\x1b]0;" not in out and "\x9b" not in out
    assert "\\x1b[2J\\x1b[31mFAKE" in out


def test_inert_keeps_newlines_and_tabs_and_shows_every_other_control() -> None:
    # GIVEN every C0/C1 control character, DEL, and newline and tab among ordinary text
    text = "a\tb\nc" + "".join(chr(c) for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))) + "é✓"
    # WHEN it is made inert
    out = terminal.inert(text)
    # THEN newline and tab stay, every other control is its \xNN text, the rest is untouched
    assert out.startswith("a\tb\nc\\x00\\x01") and out.endswith("\\x9f\xe9✓")
    assert not CONTROL.search(out.replace("\t", "").replace("\n", ""))
    assert "\\x1b" in out and "\\x7f" in out and "\\x9b" in out and "\\x0d" in out
