"""A real browser for tests: Debian's headless Chromium, driven through its chromedriver with a
tiny W3C WebDriver client (JSON over HTTP to 127.0.0.1; no new dependency).

    with Browser.start() as browser:
        browser.get("http://127.0.0.1:8765/")
        browser.click(browser.find("#submit"))
        browser.wait_for(lambda: "done" in browser.text(browser.find("main")))

The binaries come from ``make chromium`` (apt-get: ``chromium`` and ``chromium-driver``). When
they are missing, :func:`require_browser` fails the test with that instruction — it never skips
silently. General on purpose: any test that needs a page in a real browser can use it.
"""

from __future__ import annotations

import http.client
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

import pytest

from tests.support import processes

CHROMIUM = Path(os.environ.get("AGENTWAKE_CHROMIUM", "/usr/bin/chromium"))
CHROMEDRIVER = Path(os.environ.get("AGENTWAKE_CHROMEDRIVER", "/usr/bin/chromedriver"))
#: the W3C key of an element reference
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"
T = TypeVar("T")


class WebDriverError(AssertionError):
    """The driver answered with an error (no such element, a timeout, ...)."""


def require_browser() -> None:
    """Fail (not skip) when the browser or its driver is missing."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    if missing:
        pytest.fail(
            f"the browser tests need Debian's chromium and chromium-driver: {', '.join(missing)} missing; "
            "install them with `make chromium` (apt-get, as root)",
            pytrace=False,
        )


#: what chromedriver prints once it listens (``--port=0``: on the port it chose)
STARTED = re.compile(rb"ChromeDriver was started successfully on port (\d+)")


def _announced_port(process: subprocess.Popen[bytes], within: float) -> int:
    """The port chromedriver says it listens on (its stdout), read until it says so, exits, or
    ``within`` s pass; its stdout is then drained for as long as it runs, so it never blocks on it."""
    assert process.stdout is not None
    lines: queue.Queue[bytes] = queue.Queue()

    def drain(out: IO[bytes]) -> None:
        with out:  # closed at its end: chromedriver exited
            for line in out:
                lines.put(line)
        lines.put(b"")

    threading.Thread(target=drain, args=(process.stdout,), daemon=True).start()
    deadline = time.monotonic() + within
    said: list[bytes] = []
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            break
        if not line:
            raise WebDriverError(f"chromedriver exited before it listened: {b''.join(said)[-500:]!r}")
        if (found := STARTED.search(line)) and int(found[1]):
            return int(found[1])
        said.append(line)
    raise WebDriverError(f"chromedriver did not say its port within {within:.0f} s: {b''.join(said)[-500:]!r}")


@dataclass
class Browser:
    port: int
    session_id: str = ""
    process: subprocess.Popen[bytes] | None = None
    profile: str = ""
    #: seconds any one WebDriver command may take (a page load, a script)
    command_timeout: float = 300.0
    log: list[str] = field(default_factory=list)

    # --- the protocol ------------------------------------------------------------------------

    def _call(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.command_timeout)
        try:
            body = None if payload is None else json.dumps(payload)
            conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = json.loads(resp.read() or b"{}")
        finally:
            conn.close()
        value = data.get("value")
        if resp.status >= 400 or (isinstance(value, dict) and "error" in value):
            err = value if isinstance(value, dict) else {}
            raise WebDriverError(f"{method} {path}: {err.get('error', resp.status)}: {err.get('message', '')[:500]}")
        return value

    def _session(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        return self._call(method, f"/session/{self.session_id}{path}", payload)

    # --- start and stop ----------------------------------------------------------------------

    @classmethod
    @contextmanager
    def start(cls, *, window: tuple[int, int] = (1400, 1000), ready_within: float = 120.0) -> Iterator[Browser]:
        """chromedriver on a free port of 127.0.0.1 and one headless Chromium session."""
        require_browser()
        # --port=0: chromedriver binds a free port itself and says which; a port picked here and
        # passed to it could be taken by another worker's server before chromedriver bound it
        process = processes.start(
            [str(CHROMEDRIVER), "--port=0", "--allowed-ips=127.0.0.1"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,  # what it says when it cannot start goes into the error below
        )
        profile = tempfile.mkdtemp(prefix="agentwake-chromium-")
        browser = cls(port=0, process=process, profile=profile)
        try:
            browser.port = _announced_port(process, ready_within)
            browser._wait_ready(ready_within)
            capabilities = {
                "browserName": "chrome",
                "goog:chromeOptions": {
                    "binary": str(CHROMIUM),
                    "args": [
                        "--headless=new",
                        "--no-sandbox",
                        "--disable-gpu",
                        "--disable-dev-shm-usage",
                        "--no-first-run",
                        "--disable-extensions",
                        "--disable-background-networking",
                        "--disable-component-update",
                        "--disable-sync",
                        "--metrics-recording-only",
                        f"--user-data-dir={profile}",
                        f"--window-size={window[0]},{window[1]}",
                    ],
                },
            }
            answer = browser._call("POST", "/session", {"capabilities": {"alwaysMatch": capabilities}})
            browser.session_id = answer["sessionId"]
            yield browser
        finally:
            browser.close()

    def _wait_ready(self, within: float) -> None:
        deadline = time.monotonic() + within
        while True:
            try:
                if self._call("GET", "/status").get("ready"):
                    return
            except (OSError, WebDriverError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise WebDriverError(f"chromedriver did not become ready within {within:.0f} s")
            time.sleep(0.2)

    def close(self) -> None:
        if self.session_id:
            try:
                self._session("DELETE", "")
            except (OSError, WebDriverError):
                pass
            self.session_id = ""
        if self.process is not None:
            # chromedriver and the Chromium it started (its process group): SIGTERM, then SIGKILL
            processes.stop(self.process, signal.SIGTERM, 30)
            self.process = None
        if self.profile:
            shutil.rmtree(self.profile, ignore_errors=True)

    # --- pages and elements ------------------------------------------------------------------

    def get(self, url: str) -> None:
        self._session("POST", "/url", {"url": url})

    @property
    def url(self) -> str:
        return str(self._session("GET", "/url"))

    @property
    def title(self) -> str:
        return str(self._session("GET", "/title"))

    @property
    def source(self) -> str:
        return str(self._session("GET", "/source"))

    def find(self, css: str) -> str:
        return str(self._session("POST", "/element", {"using": "css selector", "value": css})[ELEMENT])

    def find_all(self, css: str) -> list[str]:
        found = self._session("POST", "/elements", {"using": "css selector", "value": css})
        return [str(e[ELEMENT]) for e in found]

    def text(self, element: str) -> str:
        return str(self._session("GET", f"/element/{element}/text"))

    def attribute(self, element: str, name: str) -> str | None:
        value = self._session("GET", f"/element/{element}/property/{name}")
        return None if value is None else str(value)

    def click(self, element: str) -> None:
        self._session("POST", f"/element/{element}/click", {})

    def clear(self, element: str) -> None:
        self._session("POST", f"/element/{element}/clear", {})

    def type(self, element: str, text: str) -> None:
        self._session("POST", f"/element/{element}/value", {"text": text})

    def delete_cookies(self) -> None:
        self._session("DELETE", "/cookie")

    def execute(self, script: str, *args: Any) -> Any:
        return self._session("POST", "/execute/sync", {"script": script, "args": list(args)})

    def viewport(self, width: int, height: int) -> None:
        """Emulate a viewport of ``width`` x ``height`` CSS px (a phone's 390 px: headless Chromium
        keeps its window at least 500 px wide), through chromedriver's DevTools endpoint."""
        params = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": True}
        self._session("POST", "/goog/cdp/execute", {"cmd": "Emulation.setDeviceMetricsOverride", "params": params})

    def screenshot(self, path: Path) -> None:
        import base64

        path.write_bytes(base64.b64decode(self._session("GET", "/screenshot")))

    def wait_for(self, condition: Callable[[], T], *, within: float = 120.0, what: str = "the page") -> T:
        """``condition()`` once it is truthy (a missing element counts as not yet), within ``within`` s."""
        deadline = time.monotonic() + within
        last: Exception | None = None
        while True:
            try:
                value = condition()
                if value:
                    return value
            except WebDriverError as exc:
                last = exc
            if time.monotonic() > deadline:
                raise WebDriverError(f"waited {within:.0f} s for {what}; last error: {last}")
            time.sleep(0.2)
