"""``agentwake_local.function_output``: what a function prints goes to a log, a person's lines to the
terminal (``make chat``'s launcher, ``agentwake invoke``, the CLI's in-process runs)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: a function that logs as Powertools does (a handler bound to the stdout it found at import), prints
#: an EMF-like line and warns as Powertools' empty metrics do
HANDLER = """
import json, logging, sys, warnings

early = logging.getLogger("function-log")
handler = logging.StreamHandler(sys.stdout)
early.addHandler(handler)
early.setLevel(logging.INFO)

def handler_fn(event, context):
    early.info(json.dumps({"level": "INFO", "message": "run succeeded"}))
    print(json.dumps({"_aws": {"CloudWatchMetrics": []}}))
    warnings.warn("No application metrics to publish.", UserWarning)
    return {"ok": True}
"""

APP = """
import logging, sys, threading
sys.path.insert(0, {code!r})
import fn  # imported by the app before any invocation
from agentwake_local.functions import FunctionSpec
from agentwake_local import lambda_runtime

spec = FunctionSpec(logical_id="Fn", name="fn", arn="arn:aws:lambda:us-east-1:123456789012:function:fn",
                    handler="fn.handler_fn", code_uri={code_path})
print("chat app on http://127.0.0.1:1/", flush=True)
result = []
worker = threading.Thread(target=lambda: result.append(lambda_runtime.invoke(spec, {{}}, on_env_change=None)))
worker.start(); worker.join()
print("the app's own line after the wake:", result[0].response, flush=True)
"""


def test_the_launcher_keeps_a_functions_logs_and_warnings_out_of_the_terminal(tmp_path: Path) -> None:
    # GIVEN an app that runs a function in-process (as the chat app's local stack does)
    code = tmp_path / "code"
    code.mkdir()
    (code / "fn.py").write_text(textwrap.dedent(HANDLER))
    app = tmp_path / "app.py"
    app.write_text(APP.format(code=str(code), code_path=f"__import__('pathlib').Path({str(code)!r})"))
    log = tmp_path / "chat.log"
    # WHEN it runs under the launcher `make chat` uses
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTWAKE_")}
    result = subprocess.run(
        [sys.executable, "-m", "agentwake_local.function_output", str(log), str(app)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=ROOT,
    )
    # THEN the terminal shows the app's lines and where the logs are, and none of the function's output
    assert result.returncode == 0, result.stderr
    terminal = result.stdout + result.stderr
    assert "chat app on http://127.0.0.1:1/" in result.stdout
    assert "the app's own line after the wake: {'ok': True}" in result.stdout
    assert f"the functions' JSON logs: {log}" in result.stdout
    assert "run succeeded" not in terminal and "CloudWatchMetrics" not in terminal
    assert "UserWarning" not in terminal and "No application metrics" not in terminal
    # AND the log file holds all three
    logged = log.read_text()
    assert "run succeeded" in logged and "CloudWatchMetrics" in logged and "No application metrics" in logged


def test_make_chat_runs_the_app_under_the_launcher_unless_asked() -> None:
    # GIVEN the Makefile  WHEN `make chat` is spelled out (with and without CHAT_VERBOSE)
    env = {k: v for k, v in os.environ.items() if k not in ("CHAT_VERBOSE", "CHAT_LOG")}
    quiet = subprocess.run(["make", "-n", "chat"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=60)
    loud = subprocess.run(
        ["make", "-n", "chat"], capture_output=True, text=True, cwd=ROOT, env={**env, "CHAT_VERBOSE": "1"}, timeout=60
    )
    # THEN the app runs under the launcher by default, and directly when asked for the logs
    [run] = [line for line in quiet.stdout.splitlines() if "examples/chat-app/app.py" in line]
    assert "-m agentwake_local.function_output " in run and "chat.log" in run
    [run] = [line for line in loud.stdout.splitlines() if "examples/chat-app/app.py" in line]
    assert "function_output" not in run
