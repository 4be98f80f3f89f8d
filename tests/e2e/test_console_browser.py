"""``agentwake console`` in a real browser (issue 26): Debian's headless Chromium (``make chromium``)
driven through chromedriver (tests/support/browser.py), against the console the real command
serves (``agentwake console --port 0`` in a subprocess) on a running local stack whose DLQ holds a
run that failed on every attempt.

The operator's 3 a.m. loop, as a person clicks it: the DLQ page lists the message with its reason
and counts → the run's timeline → a replay with the fixed provider from the page (DONE, nothing
written) → the session fixed → redrive of the ticked message, confirmed with its exact count → the
run succeeds. Then a body holding ``<script>`` and ESC sequences renders as text (the script never
runs), and a browser without the token is refused. Without the browser the test fails and says how to install it (it never skips); the
same pages over plain HTTP: tests/e2e/test_console_http.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentwake.store.dynamo import DynamoStore
from agentwake_local.stack import LocalStackRuntime
from agentwake_ops.cli import app
from agentwake_ops.cli_common import CliState
from tests.e2e.test_ops_dlq import DELIVERS_THEN_FAILS, FIXED
from tests.support.browser import Browser, require_browser

ROOT = Path(__file__).resolve().parents[2]
AGENTWAKE_BIN = Path(sys.executable).parent / "agentwake"
SESSION = "s-browser"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("agentwake-home")


@pytest.fixture(scope="module")
def local(home: Path) -> Iterator[LocalStackRuntime]:
    require_browser()  # first: without the browser nothing else is worth starting
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AGENTWAKE_HOME", str(home))
        for name in [
            k
            for k in os.environ
            if k.startswith("AGENTWAKE_") and k not in ("AGENTWAKE_HOME", "AGENTWAKE_CONSOLE_SCREENSHOTS")
        ]:
            mp.delenv(name)
        runtime = LocalStackRuntime(async_retry_delays=0, home=home)
        runtime.start(ROOT / "template.yaml", visibility_timeout_override=0, background=True)
        try:
            yield runtime
        finally:
            runtime.stop()


def agentwake(*args: str) -> Any:
    """``agentwake ARGS --json`` in-process, on the local stack the state file names."""
    result = CliRunner().invoke(app, [*args, "--json"], obj=CliState())
    assert result.exit_code == 0, f"agentwake {' '.join(args)}: {result.stdout}\n{result.stderr}"
    return json.loads(result.stdout)


def wait_for(condition: Any, what: str, within: float = 180.0) -> Any:
    deadline = time.monotonic() + within
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {within:.0f} s for {what}")
        time.sleep(0.3)


@pytest.fixture(scope="module")
def console_url(local: LocalStackRuntime, home: Path) -> Iterator[str]:
    """The real command, found the local stack as every command does; the URL it printed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTWAKE_")}
    env.update(AGENTWAKE_HOME=str(home), PYTHONUNBUFFERED="1", COLUMNS="200")
    process = subprocess.Popen(
        [str(AGENTWAKE_BIN), "console", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = None
        deadline = time.monotonic() + 120
        while url is None and time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            found = re.search(r"open: (http://127\.0\.0\.1:\d+/\S*\?token=\S+)", line)
            url = found.group(1) if found else None
        assert url, "agentwake console printed no URL"
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def test_the_3am_loop_in_a_browser(local: LocalStackRuntime, console_url: str, tmp_path: Path) -> None:
    store = DynamoStore(local.outputs["AgentTableName"], client=local.client("dynamodb"))
    sqs = local.client("sqs")
    dlq_url = local.outputs["BackgroundResultDLQUrl"]

    def dlq_depth() -> int:
        attrs = sqs.get_queue_attributes(
            QueueUrl=dlq_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"])

    # GIVEN a run that told the user something, then failed on every attempt until the local stack
    # dead-lettered it
    agentwake("sessions", "put", SESSION, *[a for p in DELIVERS_THEN_FAILS for a in ("--provider", json.dumps(p))])
    task = agentwake("tasks", "register", "--session", SESSION, "--tool", "web_research")
    agentwake(
        "tasks", "finish", task["task_id"], "--token", task["task_token"], "--status", "succeeded",
        "--result", "3 offers found", "--summary", "Research",
    )  # fmt: skip
    run_id = f"bg:{task['task_id']}"
    wait_for(lambda: dlq_depth() == 1, "the run to be dead-lettered")
    wait_for(lambda: (r := store.records.get_run(run_id)) is not None and r.status == "failed", "the run to be failed")
    [listed] = agentwake("dlq", "list")

    with Browser.start() as browser:
        try:
            _loop(browser, console_url, store, run_id, listed, dlq_depth)
            _hostile_body_and_no_token(browser, sqs, dlq_url)
        except AssertionError as exc:
            browser.screenshot(tmp_path / "console-failure.png")
            raise AssertionError(f"{exc}\n--- the page at {browser.url}:\n{browser.source[:3000]}") from exc


def _loop(
    browser: Browser, console_url: str, store: DynamoStore, run_id: str, listed: dict[str, Any], dlq_depth: Any
) -> None:
    # WHEN the operator opens the URL the console printed
    browser.get(console_url)

    # THEN the token went into a cookie and out of the address bar, and the DLQ page lists the message
    # with its run, its reason, and the counts by error type `dlq list` gives
    browser.wait_for(lambda: browser.find("#dlq-messages"), what="the DLQ table")
    assert "token=" not in browser.url and browser.url.endswith("/dlq")
    row = browser.find(f"tr[data-message-id='{listed['message_id']}']")
    row_text = browser.text(row)
    assert run_id in row_text and "AllProvidersFailed" in row_text
    assert listed["error"].splitlines()[0][:40] in row_text
    counts = browser.text(browser.find("table.by-error-type"))
    assert f"{listed['error_type']} 1" in counts
    _keep_screenshot(browser, "dlq")

    # WHEN the run is opened from its row
    browser.click(browser.find(f"tr[data-message-id='{listed['message_id']}'] a[href^='/run']"))

    # THEN its timeline shows the step, the delivery and every failed attempt in order
    timeline = browser.wait_for(lambda: browser.find("table.timeline"), what="the timeline")
    kinds = [browser.text(k) for k in browser.find_all("table.timeline tbody tr td:nth-child(3)")]
    assert kinds.index("reply") < kinds.index("delivery") < kinds.index("failure")
    assert kinds.count("failure") == listed["attempts"] >= 2
    assert "Working on your research." in browser.text(timeline)
    _keep_screenshot(browser, "run")

    # WHEN a replay with the fixed provider is run from the page
    items_before = _items(store)
    providers = browser.find("#replay-form textarea[name='providers']")
    browser.clear(providers)
    browser.type(providers, json.dumps([FIXED]))
    browser.click(browser.find("#replay"))

    # THEN it reaches DONE, and nothing was written or delivered
    outcome = browser.wait_for(lambda: browser.find("#replay-outcome"), what="the replay outcome")
    assert "DONE" in browser.text(outcome)
    assert browser.find_all("table.would-deliver tbody tr") == []
    assert _items(store) == items_before

    # WHEN the session is fixed, and the message is ticked on the DLQ page and redriven
    agentwake("sessions", "put", SESSION, "--provider", json.dumps(FIXED))
    browser.click(browser.find("header a[href='/dlq']"))
    box = browser.wait_for(lambda: browser.find(f"input.pick[value='{listed['message_id']}']"), what="the checkbox")
    browser.click(box)
    assert browser.text(browser.find("#redrive-selected")) == "Redrive selected (1)…"
    browser.click(browser.find("#redrive-selected"))

    # THEN the confirmation states the exact count before anything moves
    confirm = browser.wait_for(lambda: browser.find("#confirm-count"), what="the confirmation")
    assert browser.text(confirm) == "Redrive exactly 1 message(s)?"
    assert dlq_depth() == 1

    # WHEN it is confirmed
    browser.click(browser.find("#confirm"))

    # THEN exactly that message left the DLQ, and the run succeeds
    result = browser.wait_for(lambda: browser.find("#redrive-result"), what="the redrive result")
    assert browser.text(result) == "Redrove 1 message(s)."
    wait_for(lambda: (r := store.records.get_run(run_id)) is not None and r.status == "succeeded", "the run to succeed")
    assert dlq_depth() == 0


def _hostile_body_and_no_token(browser: Browser, sqs: Any, dlq_url: str) -> None:
    # GIVEN a DLQ message whose body holds a script element and ESC sequences
    body = '{"task_id": "<script>window.pwned = 1</script>", "note": "\x1b[2J\x1b]0;owned\x07"}'
    sqs.send_message(QueueUrl=dlq_url, MessageBody=body)
    [hostile] = agentwake("dlq", "list")

    # WHEN its message page is opened
    browser.click(browser.find("header a[href='/dlq']"))
    browser.click(
        browser.wait_for(lambda: browser.find(f"tr[data-message-id='{hostile['message_id']}'] a"), what="the row")
    )
    browser.wait_for(lambda: browser.find("main pre"), what="the body")

    # THEN the script is shown as text and never ran, and the ESC bytes are written out
    shown = browser.text(browser.find("main"))
    assert "<script>window.pwned = 1</script>" in shown and "\\x1b[2J" in shown
    assert browser.execute("return typeof window.pwned") == "undefined"
    assert browser.execute("return document.querySelectorAll('main script').length") == 0

    # WHEN the browser has no token any more (its cookie gone) and asks for a page
    browser.delete_cookies()
    browser.get(browser.url)
    # THEN it is refused
    assert "refused: this console needs its token" in browser.text(browser.find("body"))


def _keep_screenshot(browser: Browser, name: str) -> None:
    """With AGENTWAKE_CONSOLE_SCREENSHOTS=DIR, the page as a PNG (what the README describes)."""
    folder = os.environ.get("AGENTWAKE_CONSOLE_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        browser.screenshot(Path(folder) / f"console-{name}.png")


def _items(store: DynamoStore) -> int:
    return int(store.table.db.scan(TableName=store.table.name, Select="COUNT")["Count"])
