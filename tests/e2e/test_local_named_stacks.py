"""`agentwake local up` as a newcomer runs it, in real processes: named stacks that do not step on
each other, a quiet terminal (one line per wake), `invoke --throwaway` that always means a fresh,
seeded stack, a dead-lettered record that makes `invoke` fail with its reason, and a Python tool
that is not installed refused when the session is written (the local stack's functions run in
this very environment)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support import processes

ROOT = Path(__file__).resolve().parents[2]
AGENTWAKE = str(Path(sys.executable).parent / "agentwake")
EVENT = str(ROOT / "events" / "background-result-success.json")
#: generous: a busy 2-core machine starts a stack in a few seconds
WAIT_S = 120.0


@dataclass
class Up:
    process: subprocess.Popen[str]
    output: list[str] = field(default_factory=list)

    def wait_for(self, text: str, after: int = 0) -> int:
        """Index of the first line (from ``after``) holding ``text``."""
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            for index, line in enumerate(self.output[after:], after):
                if text in line:
                    return index
            if self.process.poll() is not None and not any(text in line for line in self.output[after:]):
                break
            time.sleep(0.2)
        pytest.fail(f"`agentwake local up` never printed {text!r}:\n" + "".join(self.output))

    def stop(self) -> None:
        """Ctrl-C, then SIGTERM, SIGKILL to its process group (tests/support/processes.py)."""
        processes.stop(self.process, signal.SIGINT, WAIT_S)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTWAKE_", "AWS_"))}
    return {**clean, "AGENTWAKE_HOME": str(tmp_path / "home"), "COLUMNS": "200", "PYTHONUNBUFFERED": "1"}


@pytest.fixture
def start(env: dict[str, str]) -> Iterator[object]:
    started: list[Up] = []

    def up(*args: str, wait: bool = True) -> Up:
        process = processes.start(
            [AGENTWAKE, "local", "up", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        running = Up(process)
        threading.Thread(target=lambda: running.output.extend(iter(process.stdout.readline, "")), daemon=True).start()  # type: ignore[union-attr]
        started.append(running)
        if wait:
            running.wait_for("Ctrl-C to stop")
        return running

    try:
        yield up
    finally:
        for running in started:
            running.stop()


def agentwake(env: dict[str, str], *args: str, local: str | None = None) -> subprocess.CompletedProcess[str]:
    chosen = {**env, "AGENTWAKE_LOCAL": local} if local else env
    return subprocess.run([AGENTWAKE, *args], cwd=ROOT, env=chosen, capture_output=True, text=True, timeout=WAIT_S)


def test_two_named_stacks_run_side_by_side_and_stopping_one_leaves_the_other(start, env: dict[str, str]) -> None:  # type: ignore[no-untyped-def]
    # GIVEN `local up` (the default name) and `local up --name second`
    first = start()
    second = start("--name", "second")
    assert any("export AGENTWAKE_LOCAL=second" in line for line in second.output)
    first_url = agentwake(env, "local", "status", "--json", "--name", "default").stdout
    second_url = agentwake(env, "local", "status", "--json", "--name", "second").stdout
    assert json.loads(first_url)["endpoint_url"] != json.loads(second_url)["endpoint_url"]

    # WHEN a third `local up` asks for a name that runs
    again = start(wait=False)
    assert again.process.wait(timeout=WAIT_S) == 1
    # THEN it refuses, naming the running one's address and how to start beside it
    refused = "".join(again.output)
    assert f"a local stack named 'default' already runs at {json.loads(first_url)['endpoint_url']}" in refused
    assert "agentwake local up --name" in refused

    # AND with two running, a command that names none refuses to guess and says how to choose
    ambiguous = agentwake(env, "sessions", "list")
    assert ambiguous.returncode == 1
    assert ambiguous.stderr.startswith("error: 2 local stacks are running: default at http://")
    assert "AGENTWAKE_LOCAL=NAME" in ambiguous.stderr
    # AND each is reachable by name, with its own data
    put = agentwake(env, "sessions", "put", "only-second", "--provider", '{"type":"scripted"}', local="second")
    assert put.returncode == 0, put.stderr
    assert "only-second" in agentwake(env, "sessions", "list", local="second").stdout
    assert "only-second" not in agentwake(env, "sessions", "list", local="default").stdout

    # WHEN the second stops
    second.stop()
    # THEN the first is still found, by name and without one (the stale file is not in the way)
    status = agentwake(env, "local", "status", "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["endpoint_url"] == json.loads(first_url)["endpoint_url"]
    assert agentwake(env, "sessions", "list").returncode == 0
    gone = agentwake(env, "local", "status", "--name", "second")
    assert gone.returncode == 1 and "no local stack named 'second' is running" in gone.stderr
    assert "(running: default)" in gone.stderr
    first.stop()


def test_local_up_prints_one_short_line_per_wake(start, env: dict[str, str]) -> None:  # type: ignore[no-untyped-def]
    # GIVEN a quiet `local up` (the default)
    up = start()
    banner = up.wait_for("Ctrl-C to stop")
    assert any("its data lives only as long as this process" in line for line in up.output[:banner])
    assert any("--verbose shows them here" in line for line in up.output[:banner])
    # WHEN a task finishes and wakes its agent
    assert agentwake(env, "sessions", "put", "quiet", "--provider", '{"type":"scripted"}').returncode == 0
    task = json.loads(agentwake(env, "tasks", "register", "--session", "quiet", "--tool", "t", "--json").stdout)
    finished = agentwake(
        env, "tasks", "finish", task["task_id"], "--token", task["task_token"], "--status", "succeeded", "--result", "x"
    )
    assert finished.returncode == 0, finished.stderr
    # THEN the terminal shows exactly one short line for it: function, run, outcome, duration
    at = up.wait_for(f"bg:{task['task_id']}", after=banner)
    time.sleep(2)  # anything else the wake printed would be there by now
    after = [line.rstrip("\n") for line in up.output[banner + 1 :]]
    [line] = [text for text in after if task["task_id"] in text]
    assert line == up.output[at].rstrip("\n")
    assert f"BackgroundResultFunction bg:{task['task_id']} succeeded " in line and len(line) < 120
    # (no JSON log or metric line: anything else would be another wake's own line, e.g. a cron firing)
    assert not any(text.lstrip().startswith("{") for text in after), after
    assert all(" bg:" in text or " cron:" in text for text in after), after
    # AND the functions' JSON logs are in the log file it named
    log = Path(env["AGENTWAKE_HOME"]) / "local.log"
    assert '"message":"run succeeded"' in log.read_text()


def test_invoke_throwaway_uses_a_fresh_seeded_stack_even_with_one_running(start, env: dict[str, str]) -> None:  # type: ignore[no-untyped-def]
    # GIVEN a running local stack, seeded with what events/ names
    start()
    # WHEN the sample event is invoked with --throwaway
    result = agentwake(env, "invoke", "BackgroundResultFunction", "-e", EVENT, "--throwaway")
    # THEN it ran on a fresh stack (seeded: the task is known, the agent woke), not the running one
    assert result.returncode == 0, result.stderr
    assert "on a throwaway local stack at http://" in result.stderr and "seeded with" in result.stderr
    assert json.loads(result.stdout) == {"batchItemFailures": []}
    assert "dead-lettered" not in result.stderr
    assert agentwake(env, "runs", "show", "bg:task-ok-1").returncode == 1  # the running stack saw nothing


def test_invoke_reports_a_record_the_function_dead_lettered_and_exits_1(env: dict[str, str]) -> None:
    # GIVEN no stack running; a throwaway stack without the seed data the event names
    # WHEN the sample event is invoked there
    result = agentwake(env, "invoke", "BackgroundResultFunction", "-e", EVENT, "--throwaway", "--no-seed")
    # THEN the response is still the function's, but the command says the record was dead-lettered, and why
    assert json.loads(result.stdout) == {"batchItemFailures": []}
    assert result.returncode == 1
    assert "error: dead-lettered to BackgroundResultDLQ: " in result.stderr
    assert "task-ok-1" in result.stderr.split("dead-lettered to BackgroundResultDLQ: ")[1]


def test_a_python_tool_that_is_not_installed_is_refused_at_sessions_put(start, env: dict[str, str]) -> None:  # type: ignore[no-untyped-def]
    # GIVEN a local stack, and no package installing the example tool in this environment
    from importlib.metadata import entry_points

    if "business_days_between" in {ep.name for ep in entry_points(group="agentwake.tools")}:
        pytest.skip("the example tools package is installed in this environment")
    start()
    # WHEN a session names it
    tools = '[{"type":"python","name":"business_days_between"}]'
    result = agentwake(env, "sessions", "put", "tooly", "--provider", '{"type":"scripted"}', "--tools", tools)
    # THEN it is refused in one line that says what to do for the local stack and for sam build
    assert result.returncode == 1
    assert result.stderr.startswith("error: session tooly names Python tool 'business_days_between'")
    assert "install the package into the environment that runs `agentwake local up`" in result.stderr
    assert "restart it" in result.stderr and "functions/requirements.txt" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    # AND nothing was written
    assert agentwake(env, "sessions", "show", "tooly").returncode == 1


def test_the_local_producer_policy_output_is_an_arn() -> None:
    # GIVEN template.yaml on the local stack  WHEN its ProducerPolicyArn output is read
    # THEN it is an IAM policy ARN, as CloudFormation's Ref of a managed policy gives (docs/producers.md attaches it)
    import re

    from agentwake_local.stack import LocalStackRuntime

    with LocalStackRuntime(write_state=False).start(ROOT / "template.yaml") as runtime:
        arn = str(runtime.outputs["ProducerPolicyArn"])
    assert re.fullmatch(r"arn:aws:iam::\d{12}:policy/agentwake-local-ProducerPolicy", arn), arn
