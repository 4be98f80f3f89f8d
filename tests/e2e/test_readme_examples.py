"""Every command the README's "Running it locally" section shows, run as a user would.

One ``agentwake local up`` process (a fresh stack, its state in a temporary AGENTWAKE_HOME), then
each ``.venv/bin/agentwake`` line of the section's code blocks, in order, through bash, with its
documented outcome checked. A command added to the README without a check here fails the first
test, so the README cannot promise what nobody ran.
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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
AGENTWAKE_BIN = Path(sys.executable).parent / "agentwake"
WAIT_S = 120  # generous bound for every wait on a condition (the DLQ example needs about 35 s)
SECTION = "## Running it locally"


def readme_commands() -> list[str]:
    """The ``.venv/bin/agentwake`` command lines of the section's ``sh`` blocks (continuations joined)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index(SECTION) :]
    section = section[: section.index("\n## ", 1)]
    commands: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", section, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip()
            if line.startswith(".venv/bin/agentwake"):
                commands.append(re.sub(r"\s+#.*$", "", line).strip())
    return [re.sub(r"\s+", " ", c) for c in commands]


@dataclass
class Running:
    process: subprocess.Popen[str]
    env: dict[str, str]
    output: list[str] = field(default_factory=list)
    task_ids: list[str] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)
    minutely_job: str = ""

    def wait_for_output(self, text: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            if any(text in line for line in self.output):
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        pytest.fail(f"`agentwake local up` never printed {text!r}:\n" + "".join(self.output))


@pytest.fixture(scope="module")
def local_up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    home = tmp_path_factory.mktemp("agentwake-home")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTWAKE_", "AWS_"))}
    env.update({"AGENTWAKE_HOME": str(home), "COLUMNS": "250", "PYTHONUNBUFFERED": "1"})
    process = subprocess.Popen(
        [str(AGENTWAKE_BIN), "local", "up"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    running = Running(process, env)
    reader = threading.Thread(target=lambda: running.output.extend(iter(process.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        running.wait_for_output("Ctrl-C to stop")
        # a job every minute, created first: it fires while the README's commands run
        ok(run(running, '.venv/bin/agentwake sessions put minutely --provider \'{"type": "scripted"}\''))
        created = ok(
            run(running, ".venv/bin/agentwake jobs create --session minutely --name Minutely --cron 'rate(1 minute)'")
        )
        running.minutely_job = re.search(r"Created job ([\w-]+)", created.stdout).group(1)  # type: ignore[union-attr]
        yield running
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            process.kill()


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def run(running: Running, command: str) -> Result:
    if "TASK_ID" in command:
        command = command.replace("TASK_ID", running.task_ids[-1])
    if "TOKEN" in command:
        command = command.replace("TOKEN", running.tokens[-1])
    command = command.replace(".venv/bin/agentwake", str(AGENTWAKE_BIN), 1)
    proc = subprocess.run(
        ["bash", "-c", command], cwd=ROOT, env=running.env, capture_output=True, text=True, timeout=WAIT_S
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def eventually(running: Running, command: str, condition: Callable[[Result], bool]) -> Result:
    """Run ``command`` until ``condition`` holds (the stack works in the background)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        result = run(running, command)
        if condition(result) or time.monotonic() > deadline:
            return result
        time.sleep(1.0)


def agentwake_json(running: Running, *args: str) -> Any:
    result = run(running, " ".join([".venv/bin/agentwake", *args, "--json"]))
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def ok(result: Result) -> Result:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    return result


# --- the documented outcome of each command --------------------------------------------------------


def check_session_put(running: Running, command: str) -> None:
    assert re.search(r"(Created|Updated) session \w+", ok(run(running, command)).stdout)


def check_register(running: Running, command: str) -> None:
    lines = ok(run(running, command)).stdout.strip().splitlines()
    task_id, token = lines[0].strip(), lines[-1].rsplit(":", 1)[-1].strip()
    assert re.fullmatch(r"[\w-]+", task_id), lines  # prints the task id, then its token
    running.task_ids.append(task_id)
    running.tokens.append(token)


def check_finish(running: Running, command: str) -> None:
    assert "Sent the completion of" in ok(run(running, command)).stdout


def check_history_alice(running: Running, command: str) -> None:
    # a moment later: the marker and the note of the finished task
    result = eventually(running, command, lambda r: "[BackgroundTask]" in r.stdout)
    assert "[BackgroundTask]" in ok(result).stdout and "Output your last task result below." in result.stdout


def check_invoke_cron(running: Running, command: str) -> None:
    response = json.loads(ok(run(running, command)).stdout)  # only the response on stdout
    assert response["run_id"] == "cron:job-nightly:2026-11-30T06:00:00Z" and response["status"] == "succeeded"
    notes = [e for e in agentwake_json(running, "history", "show", "session-demo") if e["kind"] == "note"]
    assert any(n["run_id"] == response["run_id"] and n["content"].startswith("[CronJob] Nightly report") for n in notes)


def check_invoke_background(running: Running, command: str) -> None:
    assert json.loads(ok(run(running, command)).stdout) == {"batchItemFailures": []}
    notes = [e for e in agentwake_json(running, "history", "show", "session-demo") if e["kind"] == "note"]
    assert any(n["run_id"] == "bg:task-ok-1" for n in notes)


def check_job_at(running: Running, command: str) -> None:
    created = ok(run(running, command)).stdout
    job_id = re.search(r"Created job ([\w-]+)", created).group(1)  # type: ignore[union-attr]
    # about 20 seconds later the scheduler of `local up` fires it: a note in alice's history
    result = eventually(running, ".venv/bin/agentwake history show alice", lambda r: "[CronJob] Soon" in r.stdout)
    assert "[CronJob] Soon" in result.stdout, result.stdout
    [job] = [j for j in agentwake_json(running, "jobs", "list") if j["job_id"] == job_id]
    assert job["status"] == "completed" and job["enabled"] is False  # a one-time job, done


def check_job_rate(running: Running, command: str) -> None:
    assert "Created job" in ok(run(running, command)).stdout
    jobs = agentwake_json(running, "jobs", "list")
    assert any(j["name"] == "Hourly" and j["schedule_expression"] == "rate(1 hour)" for j in jobs)


def check_dlq_list(running: Running, command: str) -> None:
    # within a minute of the finish (about 35 s: 5 receives, 5 s apart), bob's result is in the DLQ
    task_id = running.task_ids[-1]
    started = time.monotonic()
    result = eventually(running, command, lambda r: task_id in r.stdout)
    assert task_id in ok(result).stdout, result.stdout
    print(f"bob's failing result reached the DLQ {time.monotonic() - started:.0f}s after `dlq list` was first run")


def check_session_carol(running: Running, command: str) -> None:
    check_session_put(running, command)
    providers = agentwake_json(running, "sessions", "show", "carol")["providers"]
    assert [p["type"] for p in providers] == ["openai", "scripted"]
    assert providers[0]["base_url"] == "http://127.0.0.1:11434/v1"


def started_by_the_fixture(running: Running, command: str) -> None:
    """`local up` (and its Docker variant): the module's stack already runs."""


CHECKS: list[tuple[str, Callable[[Running, str], None]]] = [
    (".venv/bin/agentwake local up", started_by_the_fixture),
    (".venv/bin/agentwake sessions put alice", check_session_put),
    (".venv/bin/agentwake tasks register --session alice", check_register),
    (".venv/bin/agentwake tasks finish TASK_ID", check_finish),
    (".venv/bin/agentwake history show alice", check_history_alice),
    (".venv/bin/agentwake invoke CronWakeFunction -e events/cron-wake.json", check_invoke_cron),
    (
        ".venv/bin/agentwake invoke BackgroundResultFunction -e events/background-result-success.json",
        check_invoke_background,
    ),
    (".venv/bin/agentwake jobs create --session alice --name Soon --at", check_job_at),
    (".venv/bin/agentwake jobs create --session alice --name Hourly", check_job_rate),
    (".venv/bin/agentwake sessions put bob", check_session_put),
    (".venv/bin/agentwake tasks register --session bob", check_register),
    (".venv/bin/agentwake tasks finish TASK_ID", check_finish),
    (".venv/bin/agentwake dlq list --queue results", check_dlq_list),
    (".venv/bin/agentwake sessions put carol", check_session_carol),
    (".venv/bin/agentwake local up --host 0.0.0.0", started_by_the_fixture),
]


def test_every_readme_command_has_a_check() -> None:
    # GIVEN the README's commands  THEN each is, in order, one this module runs and checks
    commands = readme_commands()
    assert len(commands) == len(CHECKS), commands
    for command, (prefix, _check) in zip(commands, CHECKS, strict=True):
        assert command.startswith(prefix), (command, prefix)


def test_the_readme_examples_do_what_the_readme_says(local_up: Running) -> None:
    # GIVEN `agentwake local up` on a fresh stack: its banner states its timing and what it seeded
    banner = "".join(local_up.output)
    assert "timing: local" in banner and "--faithful" in banner
    assert "seeded what events/ names" in banner and "job:job-nightly" in banner
    # WHEN each README command runs in turn  THEN each does what the README says
    for command, (_prefix, check) in zip(readme_commands(), CHECKS, strict=True):
        check(local_up, command)


def test_a_rate_job_fires_under_local_up(local_up: Running) -> None:
    # GIVEN a `rate(1 minute)` job created when `local up` started (see the fixture)
    # WHEN a minute has passed  THEN the scheduler of `local up` fired it: a note, its run succeeded
    result = eventually(
        local_up, ".venv/bin/agentwake history show minutely", lambda r: "[CronJob] Minutely" in r.stdout
    )
    assert "[CronJob] Minutely" in result.stdout, result.stdout
    [job] = [j for j in agentwake_json(local_up, "jobs", "list") if j["job_id"] == local_up.minutely_job]
    assert job["last_run_at"] and job["enabled"] is True  # recurring: still enabled
