"""Every command the README and its two companion docs show is run or checked, never left alone.

The README's "Try it locally" walkthrough runs as a user would: one ``agentwake local up`` process
(a fresh stack, its state in a temporary AGENTWAKE_HOME), then each ``.venv/bin/agentwake`` line of
the section's code blocks, in order, through bash, with its documented outcome checked (``CHECKS``).
Every other command line of a ``sh`` block in README.md, docs/local.md and docs/operations.md cannot
run here (it needs an AWS account, Docker, or a stack with that failure) and is checked without
running it (``STATIC``): a ``make`` target exists, a ``sam`` command names functions, events and
parameters the template has, an ``agentwake`` command and each of its options exist in the CLI. A
command of any other kind, or a walkthrough line without its check, fails the first tests, so the
docs cannot show a command that nobody ran or checked.
"""

from __future__ import annotations

import json
import os
import re
import shlex
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

from tests.support import processes

ROOT = Path(__file__).resolve().parents[2]
AGENTWAKE_BIN = Path(sys.executable).parent / "agentwake"
WAIT_S = 120  # generous bound for every wait on a condition (the DLQ example needs about 35 s)
DOCUMENTS = ("README.md", "docs/local.md", "docs/operations.md")
WALKTHROUGH = "## Try it locally"


def _read(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def _section(text: str, heading: str) -> str:
    """From ``heading`` to the next heading of the same level (``## ``)."""
    section = text[text.index(heading) :]
    end = section.find("\n## ", 1)
    return section if end < 0 else section[:end]


def command_lines(text: str) -> list[str]:
    """The command lines of the text's ``sh`` blocks: continuations joined, comments dropped, spaces collapsed."""
    commands: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line and not line.startswith("#"):
                commands.append(re.sub(r"\s+", " ", line))
    return commands


def readme_commands() -> list[str]:
    """The command lines of the README's walkthrough, in order."""
    return command_lines(_section(_read("README.md"), WALKTHROUGH))


def other_commands() -> list[tuple[str, str]]:
    """(document, command line) of every ``sh`` block outside the walkthrough."""
    found: list[tuple[str, str]] = []
    for name in DOCUMENTS:
        text = _read(name)
        if name == "README.md":
            text = text.replace(_section(text, WALKTHROUGH), "")
        found += [(name, line) for line in command_lines(text)]
    return found


@dataclass
class Running:
    process: subprocess.Popen[str]
    env: dict[str, str]
    output: list[str] = field(default_factory=list)
    task_ids: list[str] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)
    run_ids: list[str] = field(default_factory=list)  # the run each `tasks finish` woke
    message_ids: list[str] = field(default_factory=list)  # DLQ message ids, as `dlq list` shows them
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
    process = processes.start(
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
        # the product API is served, and the banner says it verifies SigV4 as deployed
        assert any(
            "product API on http://127.0.0.1:" in line and "SigV4-signed requests only" in line
            for line in running.output
        )
        assert not [line for line in running.output if "not enforced" in line]
        # a job every minute, created first: it fires while the README's commands run
        ok(run(running, '.venv/bin/agentwake sessions put minutely --provider \'{"type": "scripted"}\''))
        created = ok(
            run(running, ".venv/bin/agentwake jobs create --session minutely --name Minutely --cron 'rate(1 minute)'")
        )
        running.minutely_job = re.search(r"Created job ([\w-]+)", created.stdout).group(1)  # type: ignore[union-attr]
        yield running
    finally:
        processes.stop(process, signal.SIGINT, WAIT_S)  # Ctrl-C, then SIGTERM, SIGKILL to its group


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


#: the README's placeholders -> what a user pastes there: the latest value an earlier command printed
PLACEHOLDERS: dict[str, Callable[[Running], str]] = {
    "TASK_ID": lambda r: r.task_ids[-1],
    "TOKEN": lambda r: r.tokens[-1],
    "RUN_ID": lambda r: r.run_ids[-1],
    "ID": lambda r: r.message_ids[-1],
}


def run(running: Running, command: str) -> Result:
    for placeholder, value in PLACEHOLDERS.items():
        if re.search(rf"\b{placeholder}\b", command):
            command = re.sub(rf"\b{placeholder}\b", value(running), command)
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


# --- the documented outcome of each walkthrough command --------------------------------------------


def check_session_put(running: Running, command: str) -> None:
    assert re.search(r"(Created|Updated) session \w+", ok(run(running, command)).stdout)


def check_register(running: Running, command: str) -> None:
    lines = ok(run(running, command)).stdout.strip().splitlines()
    task_id = lines[0].strip()
    assert re.fullmatch(r"[\w-]+", task_id), task_id  # prints the task id
    token = re.search(r"task token .*: (\S+)$", lines[1])  # and the task token, once
    assert token is not None, lines
    running.task_ids.append(task_id)
    running.tokens.append(token.group(1))


def check_finish(running: Running, command: str) -> None:
    out = ok(run(running, command)).stdout
    assert "Sent the completion of" in out
    woken = re.search(r"it wakes run (\S+?)\.?$", out.strip())  # prints the run id the completion wakes
    assert woken is not None and woken.group(1) == f"bg:{running.task_ids[-1]}", out
    running.run_ids.append(woken.group(1))


def check_history_alice(running: Running, command: str) -> None:
    # a moment later: the marker and the note of the finished task
    result = eventually(running, command, lambda r: "[BackgroundTask]" in r.stdout)
    assert "[BackgroundTask]" in ok(result).stdout and "Output your last task result below." in result.stdout


def _bobs_dlq_entries(running: Running) -> list[dict[str, Any]]:
    return [
        m for m in agentwake_json(running, "dlq", "list", "--queue", "results") if m["run_id"] == running.run_ids[-1]
    ]


def check_dlq_list(running: Running, command: str) -> None:
    # within a minute of the finish (about 35 s: 5 receives, 5 s apart), bob's result is in the DLQ
    task_id = running.task_ids[-1]
    started = time.monotonic()
    result = eventually(running, command, lambda r: task_id in r.stdout)
    assert task_id in ok(result).stdout, result.stdout
    print(f"bob's failing result reached the DLQ {time.monotonic() - started:.0f}s after `dlq list` was first run")
    # with its ID (the prefix the table shows), run id, attempts and last error
    [entry] = _bobs_dlq_entries(running)
    assert entry["attempts"] == 5 and entry["error_type"] == "AllProvidersFailed", entry
    shown_id = entry["message_id"][:8]
    assert shown_id in result.stdout and entry["error_type"] in result.stdout, result.stdout
    running.message_ids.append(shown_id)


def check_dlq_show(running: Running, command: str) -> None:
    out = ok(run(running, command)).stdout
    assert running.run_ids[-1] in out and "failed attempts (5)" in out, out  # every failed attempt
    assert "All chat models failed" in out and "ServerError" in out  # with its reason
    assert "No message was delivered to the user by this run." in out  # and what the user already has


def check_session_bob_fixed(running: Running, command: str) -> None:
    check_session_put(running, command)
    providers = agentwake_json(running, "sessions", "show", "bob")["providers"]
    assert [p["type"] for p in providers] == ["scripted"] and "recovered" in json.dumps(providers)


def check_replay(running: Running, command: str) -> None:
    out = ok(run(running, command)).stdout  # exit 0: the replay reached DONE
    assert "nothing is written or delivered" in out and re.search(r"replay outcome\s+DONE", out), out
    assert "A redrive of this run would succeed" in out
    # AND it wrote and sent nothing: the run is still failed, its message still in the DLQ, no note
    assert agentwake_json(running, "runs", "show", running.run_ids[-1])["run"]["status"] == "failed"
    assert len(_bobs_dlq_entries(running)) == 1
    assert not [e for e in agentwake_json(running, "history", "show", "bob") if e["kind"] in ("note", "delivery")]


def check_redrive(running: Running, command: str) -> None:
    assert "moved 1, failed 0" in ok(run(running, command)).stdout


def check_run_succeeded(running: Running, command: str) -> None:
    # a moment later the redriven run succeeded, after its 5 failed attempts
    result = eventually(running, command, lambda r: re.search(r"status\s+succeeded", r.stdout) is not None)
    assert re.search(r"status\s+succeeded", ok(result).stdout), result.stdout
    run_id = running.run_ids[-1]
    assert agentwake_json(running, "runs", "show", run_id)["run"]["attempts"] == 6
    entries = [e for e in agentwake_json(running, "history", "show", "bob") if e["run_id"] == run_id]
    assert [e["kind"] for e in entries].count("note") == 1  # one note
    assert [e["content"] for e in entries if e["kind"] == "delivery"] == ["recovered"]  # one message to the user
    assert _bobs_dlq_entries(running) == []  # and the DLQ no longer holds it


def started_by_the_fixture(running: Running, command: str) -> None:
    """`local up`: the module's stack already runs (its banner is checked by the test)."""


CHECKS: list[tuple[str, Callable[[Running, str], None]]] = [
    (".venv/bin/agentwake local up", started_by_the_fixture),
    (".venv/bin/agentwake sessions put alice", check_session_put),
    (".venv/bin/agentwake tasks register --session alice", check_register),
    (".venv/bin/agentwake tasks finish TASK_ID", check_finish),
    (".venv/bin/agentwake history show alice", check_history_alice),
    ('.venv/bin/agentwake sessions put bob --provider \'{"type": "scripted", "script": [{"error"', check_session_put),
    (".venv/bin/agentwake tasks register --session bob", check_register),
    (".venv/bin/agentwake tasks finish TASK_ID", check_finish),
    (".venv/bin/agentwake dlq list --queue results", check_dlq_list),
    (".venv/bin/agentwake dlq show ID", check_dlq_show),
    (
        '.venv/bin/agentwake sessions put bob --provider \'{"type": "scripted", "script": [{"text"',
        check_session_bob_fixed,
    ),
    (".venv/bin/agentwake runs replay RUN_ID", check_replay),
    (".venv/bin/agentwake dlq redrive --id ID", check_redrive),
    (".venv/bin/agentwake runs show RUN_ID", check_run_succeeded),
]


# --- the commands that cannot run here, checked without running them --------------------------------


def _template() -> dict[str, Any]:
    from cfnlint.decode.cfn_yaml import loads  # the template has short tags (!Ref, !Sub): cfn-lint reads them

    return loads(_read("template.yaml"))  # type: ignore[no-any-return]


def check_make(line: str) -> None:
    """Each target exists in the Makefile; `make demo` runs the module tests/e2e/test_demo.py runs."""
    makefile = _read("Makefile")
    for target in shlex.split(line)[1:]:
        assert re.search(rf"^{re.escape(target)}:", makefile, re.M), f"no `{target}` target in the Makefile"
    if "demo" in shlex.split(line):
        recipe = makefile[makefile.index("\ndemo:") :].split("\n\n")[0]
        assert "-m agentwake_local.demo" in recipe, recipe


def check_sam(line: str) -> None:
    """Functions, event files and parameters a `sam` command names exist; an `agentwake` inside it is checked too."""
    for inner in re.findall(r"<\((.*?)\)", line):
        check_agentwake(inner)
    template = _template()
    for part in re.sub(r"<\(.*?\)", "ENV_FILE", line).split("&&"):
        words = shlex.split(part)
        assert words[0] == "sam", part
        if words[1:3] == ["local", "invoke"]:
            function = template["Resources"].get(words[3], {})
            assert function.get("Type") == "AWS::Serverless::Function", f"{words[3]} is not a function of the template"
        assert words[1] in ("build", "deploy", "validate", "local"), part
        for flag, value in zip(words, words[1:], strict=False):
            if flag == "-e":
                assert (ROOT / value).is_file(), f"no event file {value}"
            if flag == "--parameter-overrides":
                name = value.split("=", 1)[0]
                assert name in template["Parameters"], f"{name} is not a parameter of template.yaml"


def check_agentwake(line: str) -> None:
    """Each command word names an `agentwake` command, and each option is one that command has."""
    import typer

    from agentwake_ops.cli import app  # the console script's app, with the plugin commands it loads

    words = shlex.split(line)
    assert words[0] in ("agentwake", ".venv/bin/agentwake"), line
    # typer vendors its own click: groups and options are recognized by what they have, not their class
    command: Any = typer.main.get_command(app)
    path = ["agentwake"]
    takes_value = False
    for word in words[1:]:
        if takes_value:
            takes_value = False
        elif word.startswith("-"):
            name = word.split("=", 1)[0]
            options = {o: p for p in command.params for o in (*p.opts, *p.secondary_opts)}
            assert name in options or name == "--help", f"`{' '.join(path)}` has no option {name}"
            param = options.get(name)
            takes_value = (
                "=" not in word and param is not None and param.param_type_name == "option" and not param.is_flag
            )
        elif hasattr(command, "get_command"):
            sub = command.get_command(None, word)
            assert sub is not None, f"`{' '.join(path)}` has no command {word!r}"
            command, path = sub, [*path, word]
    assert not hasattr(command, "get_command"), f"`{' '.join(path)}` is a group, not a command: {line}"


STATIC: dict[str, Callable[[str], None]] = {
    "make": check_make,
    "sam": check_sam,
    "agentwake": check_agentwake,
    ".venv/bin/agentwake": check_agentwake,
}


# --- the tests ---------------------------------------------------------------------------------------


def test_every_readme_command_has_a_check() -> None:
    # GIVEN the README's walkthrough  THEN each command is, in order, one this module runs and checks
    commands = readme_commands()
    assert len(commands) == len(CHECKS), commands
    for command, (prefix, _check) in zip(commands, CHECKS, strict=True):
        assert command.startswith(prefix), (command, prefix)


def test_every_other_command_block_is_checked() -> None:
    # GIVEN every shell block of the README and its companion docs, outside the walkthrough
    for name in DOCUMENTS:
        tags = set(re.findall(r"^```(\w+)", _read(name), flags=re.M))
        assert not tags & {"bash", "shell", "console", "zsh"}, f"{name}: shell blocks are ```sh (so they are checked)"
    commands = other_commands()
    assert {"make demo", "make test"} <= {line for _doc, line in commands}  # the two commands are shown
    # THEN each line is a kind this module checks, and passes its check
    for doc, line in commands:
        check = STATIC.get(line.split()[0])
        assert check is not None, (
            f"{doc}: no check for the command {line!r}: run it in the walkthrough or check it here"
        )
        check(line)


@pytest.mark.parametrize(
    "line",
    [
        "agentwake dlq redrive --id ID --verfiy",
        "agentwake dlq shwo ID",
        "agentwake runs",
        "sam local invoke NoSuchFunction -e events/cron-wake.json",
        "sam local invoke CronWakeFunction -e events/no-such-event.json",
        "sam local invoke CronWakeFunction --parameter-overrides NoSuchParameter=1",
        "make no-such-target",
    ],
)
def test_the_static_checks_fail_on_a_wrong_command(line: str) -> None:
    # GIVEN a command with a typo in it  THEN its check fails
    with pytest.raises(AssertionError):
        STATIC[line.split()[0]](line)


def test_the_parameters_the_readme_names_exist_with_their_defaults() -> None:
    # GIVEN the README's table of deploy parameters  THEN each is a template parameter with that default
    parameters = _template()["Parameters"]
    rows = re.findall(r"^\| (`.+?`) \| (.+?) \|", _section(_read("README.md"), "## Deploy"), flags=re.M)
    assert len(rows) >= 5, rows
    for names, defaults in rows:
        names_ = re.findall(r"`(\w+)`", names)
        given = re.findall(r"`([^`]+)`", defaults) or [""] * len(names_)  # "(none)": the default is empty
        assert len(given) == len(names_), (names, defaults)
        for name, default in zip(names_, given, strict=True):
            assert name in parameters, f"{name} is not a parameter of template.yaml"
            assert str(parameters[name].get("Default", "")) == default, (name, parameters[name].get("Default"))


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


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_links_of_the_readme_and_the_docs_resolve() -> None:
    # GIVEN every relative link of README.md and docs/*.md  THEN its file exists, and its heading when it names one
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):
                continue  # an absolute URL
            path, _, anchor = target.partition("#")
            linked = (doc.parent / path).resolve() if path else doc
            assert linked.exists(), f"{doc.relative_to(ROOT)}: no {path}"
            if anchor:
                headings = re.findall(r"^#+ (.+)$", linked.read_text(encoding="utf-8"), flags=re.M)
                assert anchor in {_anchor(h) for h in headings}, (
                    f"{doc.relative_to(ROOT)}: no heading #{anchor} in {path}"
                )


def test_the_curl_and_aws_cli_producer_recipe_wakes_the_agent(local_up: Running) -> None:
    # GIVEN curl (SigV4) and the AWS CLI: a producer without Python, and without table access
    import shutil

    if shutil.which("aws", path=local_up.env.get("PATH")) is None or run(local_up, "aws --version").returncode:
        pytest.skip("the aws CLI is not installed here: docs/producers.md's AWS CLI recipe was not run")
    # WHEN docs/producers.md's recipe runs as written (one shell: its variables carry over)
    [block] = re.findall(
        r"## From a shell: curl \(SigV4\) and the AWS CLI\n.*?```sh\n(.*?)```", _read("docs/producers.md"), flags=re.S
    )
    # (run as is, not through `run`: its names TASK_ID and TOKEN are the recipe's own variables here)
    proc = subprocess.run(
        ["bash", "-c", "set -e\n" + block], cwd=ROOT, env=local_up.env, capture_output=True, text=True, timeout=WAIT_S
    )
    sent = ok(Result(proc.returncode, proc.stdout, proc.stderr))
    found = re.search(r"sent the completion of (task-\w+) in session (web-\d+)", sent.stdout)
    assert found, sent.stdout
    task_id, session = found.groups()
    # THEN the agent woke for its run, which succeeded, with the registered tool's note
    done = eventually(
        local_up,
        f".venv/bin/agentwake runs show bg:{task_id} --json",
        lambda r: r.returncode == 0 and json.loads(r.stdout)["run"]["status"] == "succeeded",
    )
    assert json.loads(ok(done).stdout)["run"]["status"] == "succeeded"
    history = agentwake_json(local_up, "history", "show", session)
    assert any(e["run_id"] == f"bg:{task_id}" and "web_research" in e["content"] for e in history)
