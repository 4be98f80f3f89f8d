"""What a newcomer at the terminal meets (issue: rough edges): the lists people look for, what
`tasks finish` says about a task already woken, nonsense refused at the door, and tables that fit
80 columns in a pipe. In-process CLI (CliRunner) on moto, as the other e2e CLI tests."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.conftest import Cli, Stack, cli_json
from tests.support.builders import SCRIPTED_ARGS

ALIAS_ARN = "arn:aws:lambda:us-east-1:123456789012:function:agentwake-CronWakeFunction:live"
ROLE_ARN = "arn:aws:iam::123456789012:role/agentwake-SchedulerRole"


def register(cli: Cli, session: str, tool: str = "web_research") -> dict[str, Any]:
    return cli_json(cli, "tasks", "register", "--session", session, "--tool", tool)  # type: ignore[no-any-return]


def finish(cli: Cli, task: dict[str, Any], *extra: str) -> Any:
    args = ("tasks", "finish", task["task_id"], "--token", task["task_token"], "--status", "succeeded")
    return cli(*args, "--result", "done", *extra)


def test_tasks_list_and_show_and_sessions_list(cli: Cli, stack: Stack) -> None:
    # GIVEN two sessions, and three tasks: one woken, two still running
    cli("sessions", "put", "alpha", *SCRIPTED_ARGS)
    cli("sessions", "put", "beta", *SCRIPTED_ARGS, "--tools", "[]")
    woken = register(cli, "alpha")
    running_alpha = register(cli, "alpha", "summarize")
    running_beta = register(cli, "beta")
    finish(cli, woken)
    ok, _ = stack.poll()
    assert len(ok) == 1

    # WHEN the tasks are listed, all and by session and status
    every = cli_json(cli, "tasks", "list")
    of_alpha = cli_json(cli, "tasks", "list", "--session", "alpha")
    alpha_running = cli_json(cli, "tasks", "list", "--session", "alpha", "--status", "running")
    # THEN each list holds the tasks it says, never a token or its hash
    assert {t["task_id"] for t in every} == {woken["task_id"], running_alpha["task_id"], running_beta["task_id"]}
    assert {t["task_id"] for t in of_alpha} == {woken["task_id"], running_alpha["task_id"]}
    assert [t["task_id"] for t in alpha_running] == [running_alpha["task_id"]]
    listed = cli("tasks", "list").stdout
    assert woken["task_id"] in listed and "woken" in listed and "running" in listed
    assert woken["task_token"] not in json.dumps(every) + listed and "token_sha256" not in json.dumps(every)

    # AND show names the task and the status of the run it woke
    shown = cli_json(cli, "tasks", "show", woken["task_id"])
    assert shown["status"] == "woken" and shown["run_id"] == f"bg:{woken['task_id']}"
    assert shown["run_status"] == "succeeded"
    panel = cli("tasks", "show", running_beta["task_id"]).stdout
    assert "not woken yet" in panel and "web_research" in panel
    assert "no task 'nope'" in cli("tasks", "show", "nope", expect=1).stderr
    assert "--status must be one of running, finished" in cli("tasks", "list", "--status", "done", expect=1).stderr

    # AND sessions list shows both sessions
    assert [s["session_id"] for s in cli_json(cli, "sessions", "list")] == ["alpha", "beta"]
    table = cli("sessions", "list").stdout
    assert "alpha" in table and "beta" in table and "scripted" in table


def test_tasks_finish_on_a_task_already_woken_says_it_wakes_nothing(cli: Cli, stack: Stack) -> None:
    # GIVEN a task whose completion woke its run
    cli("sessions", "put", "gamma", *SCRIPTED_ARGS)
    task = register(cli, "gamma")
    first = finish(cli, task).stdout
    assert f"it wakes run bg:{task['task_id']}" in first
    ok, _ = stack.poll()
    assert len(ok) == 1
    history = cli_json(cli, "history", "show", "gamma")
    # WHEN it is finished again
    again = finish(cli, task).stdout
    # THEN the CLI does not claim it wakes the run: it says the run already succeeded
    assert "it wakes run" not in again
    assert f"run bg:{task['task_id']} already succeeded, so this completion wakes nothing" in " ".join(again.split())
    # AND the wake agrees: the run is still the one success, the history has nothing new
    ok, _ = stack.poll()
    assert len(ok) == 1
    assert cli_json(cli, "runs", "show", f"bg:{task['task_id']}")["run"]["attempts"] == 1
    assert cli_json(cli, "history", "show", "gamma") == history


def test_jobs_create_at_a_past_time_is_refused(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTWAKE_CRON_FUNCTION_ARN", ALIAS_ARN)
    monkeypatch.setenv("AGENTWAKE_SCHEDULER_ROLE_ARN", ROLE_ARN)
    cli("sessions", "put", "delta", *SCRIPTED_ARGS)
    # WHEN a one-time job is created for a time already gone
    result = cli("jobs", "create", "--session", "delta", "--name", "Past", "--at", "2020-01-01T00:00:00", expect=1)
    # THEN one line says it would never fire, and nothing was created
    assert result.stderr.startswith("error: invalid schedule at(2020-01-01T00:00:00) (UTC) is in the past")
    assert "never fire" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert cli_json(cli, "jobs", "list") == []
    # AND a future time is still taken
    job = cli_json(cli, "jobs", "create", "--session", "delta", "--name", "Later", "--at", "2099-01-01T00:00:00")
    assert job["schedule_expression"] == "at(2099-01-01T00:00:00)"


def test_set_with_an_unknown_name_lists_the_settings(cli: Cli) -> None:
    cli("sessions", "put", "eps", *SCRIPTED_ARGS)
    result = cli("sessions", "put", "eps", "--set", "nosuch=1", expect=1)
    assert "'nosuch=1'" in result.stderr
    for name in ("deliver_final", "max_tokens_per_run", "max_deliveries_per_day", "prices", "persona"):
        assert name in result.stderr
    assert "session_id" not in result.stderr.split("the settings:")[1]


# --------------------------------------------------------------------------------------------
# tables at 80 columns


def header_cells(output: str) -> list[str]:
    """The header texts of the first table in ``output``: each column's header rows joined."""
    rows = [line for line in output.splitlines() if line.startswith("┃")]
    assert rows, f"no table header in:\n{output}"
    columns: list[list[str]] = []
    for row in rows:
        cells = row.strip("┃").split("┃")
        columns = columns or [[] for _ in cells]
        for index, cell in enumerate(cells):
            if cell.strip():
                columns[index].append(cell.strip())
    return [" ".join(parts) for parts in columns]


#: every table command, with the headers it has at full width
TABLES: dict[str, tuple[list[str], tuple[str, ...]]] = {
    "jobs list": (
        ["jobs", "list"],
        (
            "job id",
            "name",
            "session",
            "schedule",
            "next fire",
            "status",
            "enabled",
            "last run",
            "last error",
            "origin",
            "note",
        ),
    ),
    "runs list": (
        ["runs", "list"],
        ("run id", "session", "status", "attempts", "steps", "started", "ended", "last error"),
    ),
    "dlq list": (
        ["dlq", "list"],
        ("id", "queue", "run id", "session", "attempts", "in DLQ for", "last error", "detail"),
    ),
    "tasks list": (["tasks", "list"], ("task id", "session", "tool", "status", "created", "finished")),
    "sessions list": (["sessions", "list"], ("session", "providers", "tools", "delivery", "role", "updated")),
    "history show": (["history", "show", "zeta"], ("time", "role", "kind", "run id", "content")),
}


@pytest.fixture
def everything_listed(cli: Cli, stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    """A row in every table: a session, a job, a woken task (run, history), a dead-lettered record."""
    monkeypatch.setenv("AGENTWAKE_CRON_FUNCTION_ARN", ALIAS_ARN)
    monkeypatch.setenv("AGENTWAKE_SCHEDULER_ROLE_ARN", ROLE_ARN)
    cli("sessions", "put", "zeta", *SCRIPTED_ARGS)
    cli("jobs", "create", "--session", "zeta", "--name", "Nightly report", "--cron", "0 6 * * ? *")
    finish(cli, register(cli, "zeta"))
    stack.sqs.send_message(QueueUrl=stack.res.queue_url, MessageBody='{"task_id": 42')  # malformed: dead-lettered
    stack.poll()
    stack.poll()


@pytest.mark.parametrize("name", list(TABLES))
def test_every_table_fits_80_columns_in_a_pipe_without_splitting_a_header(
    name: str, cli: Cli, everything_listed: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    args, full = TABLES[name]
    # WHEN the table is printed into a pipe 80 columns wide (what `agentwake jobs list | cat` gets)
    monkeypatch.setenv("COLUMNS", "80")
    output = cli(*args).stdout
    # THEN no line is wider than 80, every header shown is whole (no "sessio/n"), in order
    assert max(len(line) for line in output.splitlines()) <= 80, output
    shown = header_cells(output)
    assert all(header in full for header in shown), f"{name}: a header split inside a word: {shown}\n{output}"
    assert shown == [h for h in full if h in shown]
    # AND a column left out is named, with where to see it
    missing = [h for h in full if h not in shown]
    if missing:
        note = " ".join(output.split()).split("Not shown at 80 columns: ")[1].split(" (a wider terminal, --wide or")[0]
        assert sorted(note.split(", ")) == sorted(missing)
    # AND at full width every column is there
    monkeypatch.setenv("COLUMNS", "250")
    assert header_cells(cli(*args).stdout) == list(full)


def test_at_80_columns_each_table_keeps_what_a_person_acts_on_and_wide_shows_all(
    cli: Cli, stack: Stack, everything_listed: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    # WHEN `jobs list` is printed 80 columns wide
    jobs = cli("jobs", "list").stdout
    # THEN it keeps whether the job fires and when next, and the job id on one line
    assert {"enabled", "next fire", "status", "job id"} <= set(header_cells(jobs)), jobs
    job_id = cli_json(cli, "jobs", "list")[0]["job_id"]
    assert any(f"│ {job_id} " in line for line in jobs.splitlines()), jobs
    # AND run ids and task ids stay whole on one line (a person copies them into `runs show`)
    [run] = cli_json(cli, "runs", "list")["runs"]
    assert any(f"│ {run['run_id']} " in line for line in cli("runs", "list").stdout.splitlines())
    [task] = cli_json(cli, "tasks", "list")
    assert any(f"│ {task['task_id']} " in line for line in cli("tasks", "list").stdout.splitlines())
    # AND history gives the content at least 40 characters a line
    history = cli("history", "show", "zeta").stdout
    assert "│ Output your last task result below." in history, history
    # AND --wide prints every column, nothing folded
    for args, full in TABLES.values():
        wide = cli(*args, "--wide").stdout
        assert header_cells(wide) == list(full), wide


def test_a_python_tool_on_a_stack_whose_bundle_the_cli_cannot_see_is_said_unchecked(cli: Cli) -> None:
    # GIVEN a stack found through the AGENTWAKE_* variables (its functions run elsewhere)
    # WHEN a session names a Python tool  THEN it is written, and stderr says it was not checked here
    tools = '[{"type": "python", "name": "business_days_between"}]'
    result = cli("sessions", "put", "theta", *SCRIPTED_ARGS, "--tools", tools)
    assert "note: Python tool(s) business_days_between not checked" in result.stderr
    assert "functions/requirements.txt" in result.stderr
    assert cli_json(cli, "sessions", "show", "theta")["tools"] == json.loads(tools)
