"""The operator CLI's other commands, its help and JSON output, and how it finds its resources."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from typer.testing import CliRunner

from agentwake_ops.cli import app
from agentwake_ops.cli_common import CliState
from agentwake_ops.context import OpsError, OpsOptions, build_context, discover
from tests.e2e.conftest import Cli, Stack, cli_json
from tests.support.aws import REGION
from tests.support.builders import SCRIPTED_ARGS

ALIAS_ARN = "arn:aws:lambda:us-east-1:123456789012:function:agentwake-CronWakeFunction:live"
ROLE_ARN = "arn:aws:iam::123456789012:role/agentwake-SchedulerRole"

#: every command, with options its --help must mention
COMMANDS: list[tuple[list[str], list[str]]] = [
    ([], ["--stack-name", "--region", "--profile", "dlq", "sessions"]),
    (["dlq", "list"], ["--queue", "--error-type", "--session", "--json"]),
    (["dlq", "show"], ["ID", "--queue", "--json"]),
    (["dlq", "redrive"], ["--id", "--error-type", "--session", "--all", "--dry-run", "--rate", "--queue"]),
    (["dlq", "delete"], ["ID", "--queue", "--yes"]),
    (["dlq", "purge"], ["QUEUE", "--yes"]),
    (["dlq", "export"], ["--out", "--queue"]),
    (["runs", "show"], ["RUN_ID", "--json"]),
    (["history", "show"], ["SESSION", "--last", "--json"]),
    (
        ["jobs", "create"],
        [
            "--session",
            "--name",
            "--cron",
            "--at",
            "--timezone",
            "--description",
            "--overlap",
            "--catch-up",
            "--catch-up-window",
            "--pause-after-failures",
        ],
    ),
    (["jobs", "list"], ["--json"]),
    (["jobs", "show"], ["JOB_ID", "--runs", "--json"]),
    (
        ["jobs", "update"],
        ["JOB_ID", "--cron", "--at", "--timezone", "--name", "--description", "--session", "--overlap", "--catch-up"],
    ),
    (["jobs", "pause"], ["JOB_ID"]),
    (["jobs", "resume"], ["JOB_ID"]),
    (["jobs", "backfill"], ["JOB_ID", "--from", "--to", "--max", "--yes"]),
    (["jobs", "trigger"], ["JOB_ID", "--time"]),
    (["jobs"], ["skip", "queue", "buffer_one", "(default queue)", "(default latest)", "(default 3; 0 = never)"]),
    (["jobs", "delete"], ["JOB_ID", "--yes"]),
    (["jobs", "run-now"], ["JOB_ID"]),
    (
        ["sessions", "put"],
        ["--persona", "--provider", "--providers-file", "--max-steps", "--history-window", "--delivery", "--role"],
    ),
    (["sessions", "show"], ["SESSION", "--json"]),
    (["tasks", "register"], ["--session", "--tool", "--args"]),
    (["tasks", "finish"], ["TASK_ID", "--token", "--status", "--result", "--summary"]),
    (["approvals", "list"], ["--session", "--state", "--json", "--wide"]),
    (["approvals", "show"], ["APPROVAL_ID", "--json"]),
    (["approvals", "approve"], ["APPROVAL_ID", "--reason", "--as", "--yes"]),
    (["approvals", "reject"], ["APPROVAL_ID", "--reason", "--as", "--yes"]),
]


@pytest.mark.parametrize(("command", "options"), COMMANDS, ids=[" ".join(c) or "agentwake" for c, _ in COMMANDS])
def test_help_exits_0_and_names_the_options_and_an_example(command: list[str], options: list[str]) -> None:
    # GIVEN no AWS at all: help must not need it
    # WHEN --help is asked for
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    # THEN it exits 0, names every option, and (for a command) shows an example
    assert result.exit_code == 0, result.output
    for option in options:
        assert option in result.stdout, f"{option} missing from `agentwake {' '.join(command)} --help`"
    if len(command) == 2:
        assert "Example" in result.stdout


def every_command() -> list[list[str]]:
    """Every command path of ``agentwake``, the plugin commands (``local …``, ``invoke``) too."""
    from typer.main import get_command

    def walk(command: Any, path: list[str]) -> list[list[str]]:
        found = [path]
        if hasattr(command, "list_commands"):
            ctx = command.context_class(command)
            for name in command.list_commands(ctx):
                found += walk(command.get_command(ctx, name), [*path, name])
        return found

    return walk(get_command(app), [])


def test_no_help_line_at_80_columns_cuts_an_option_name() -> None:
    import re

    option = re.compile(r"--[a-z][a-z0-9-]*")
    commands = every_command()
    assert ["local", "up"] in commands and len(commands) > 40
    for command in commands:
        # GIVEN the option names a command has (its help in a terminal wide enough for anything)
        wide = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "300"}).stdout
        names = set(option.findall(wide))
        # WHEN its help is shown 80 columns wide
        narrow = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "80"}).stdout
        # THEN no line is wider, and every option-like word in it is a whole option name (no
        # "--visibility-timeout-ov…")
        where = f"agentwake {' '.join(command)} --help"
        assert max(len(line) for line in narrow.splitlines()) <= 80, where
        cut = [word for word in option.findall(narrow) if word not in names]
        assert cut == [], f"{where} cuts {cut}:\n{narrow}"


def test_sessions_put_updates_only_what_is_given(cli: Cli) -> None:
    # GIVEN a session created with a persona, two providers and a webhook delivery
    created = cli_json(
        cli,
        "sessions",
        "put",
        "s1",
        "--persona",
        "You are terse.",
        "--provider",
        '{"type": "scripted", "id": "a"}',
        "--provider",
        '{"type": "scripted", "id": "b"}',
        "--delivery",
        '{"type": "webhook", "url": "https://example.invalid/hook"}',
        "--max-steps",
        "4",
    )
    assert [p["id"] for p in created["providers"]] == ["a", "b"]
    # WHEN only the history window and role are changed
    cli("sessions", "put", "s1", "--history-window", "5", "--role", "admin")
    shown = cli_json(cli, "sessions", "show", "s1")
    # THEN everything else is as it was
    assert shown["persona"] == "You are terse." and shown["max_steps"] == 4
    assert [p["id"] for p in shown["providers"]] == ["a", "b"]
    assert shown["delivery"]["url"] == "https://example.invalid/hook"
    assert shown["history_window"] == 5 and shown["role"] == "admin"
    assert "You are terse." in cli("sessions", "show", "s1").stdout


def test_sessions_put_names_the_owners_the_product_api_acts_for(cli: Cli) -> None:
    # GIVEN a session an operator created without owners
    created = cli_json(cli, "sessions", "put", "s3", "--provider", '{"type": "scripted", "id": "a"}')
    assert created["owners"] == []
    assert "refuses" in cli("sessions", "show", "s3").stdout
    # WHEN the operator names a role (by a role session's ARN) and a user with a path
    owners = ("arn:aws:sts::111122223333:assumed-role/product/i-1", "arn:aws:iam::111122223333:user/ops/bot")
    cli("sessions", "put", "s3", "--owner", owners[0], "--owner", owners[1])
    # THEN they are stored in their normal form, and the rest of the config is kept
    shown = cli_json(cli, "sessions", "show", "s3")
    assert shown["owners"] == ["arn:aws:iam::111122223333:role/product", "arn:aws:iam::111122223333:user/bot"]
    assert shown["providers"][0]["id"] == "a"
    # an owner that is not a principal ARN is refused, saying what one looks like
    refused = cli("sessions", "put", "s3", "--owner", "bob", expect=1)
    assert "IAM principal ARN" in refused.stdout + refused.stderr


def test_sessions_put_reads_a_providers_file_and_refuses_bad_specs(cli: Cli, stack: Stack) -> None:
    path = stack.tmp / "providers.json"
    path.write_text(json.dumps([{"type": "scripted", "id": "from-file"}]))
    assert cli_json(cli, "sessions", "put", "s2", "--providers-file", str(path))["providers"][0]["id"] == "from-file"
    # a provider type nobody knows, bad JSON, an out-of-range limit: one line each, nothing written
    for args, needle in (
        (["--provider", '{"type": "nope"}'], "unknown provider type 'nope'"),
        (["--provider", "{not json"], "--provider is not valid JSON"),
        (["--max-steps", "500"], "max_steps"),
        (["--delivery", '{"type": "webhook"}'], "invalid delivery spec"),
    ):
        result = cli("sessions", "put", "s2", *args, expect=1)
        assert result.stderr.startswith("error: ") and needle in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
        assert "Traceback" not in result.output
    assert cli_json(cli, "sessions", "show", "s2")["max_steps"] == 8


def test_tasks_history_and_runs(cli: Cli, stack: Stack) -> None:
    # GIVEN a healthy session and a task registered and finished through the CLI
    cli("sessions", "put", "s3", *SCRIPTED_ARGS)
    registered = cli_json(cli, "tasks", "register", "--session", "s3", "--tool", "web_research", "--args", '{"q": 1}')
    task_id = registered["task_id"]
    assert registered["task_token"].startswith("awt_")
    finished = cli_json(
        cli,
        "tasks",
        "finish",
        task_id,
        "--token",
        registered["task_token"],
        "--status",
        "succeeded",
        "--result",
        "done",
        "--summary",
        "R",
    )
    assert finished["run_id"] == f"bg:{task_id}" and finished["message_id"]
    # WHEN the agent is woken by it
    ok, _ = stack.poll()
    assert len(ok) == 1
    # THEN history and the run are readable, as tables and as JSON
    entries = cli_json(cli, "history", "show", "s3", "--last", "1")
    assert [e["kind"] for e in entries] == ["note"] and entries[0]["run_id"] == f"bg:{task_id}"
    assert "[BackgroundTask] R" in cli("history", "show", "s3").stdout
    run = cli_json(cli, "runs", "show", f"bg:{task_id}")
    assert run["run"]["status"] == "succeeded" and run["failures"] == []
    assert "succeeded" in cli("runs", "show", f"bg:{task_id}").stdout
    # AND the user errors are one line
    assert (
        "unknown-task"
        in cli(
            "tasks", "finish", "unknown-task", "--token", "awt_x", "--status", "succeeded", "--result", "x", expect=1
        ).stderr
    )
    assert "no session 'nobody'" in cli("tasks", "register", "--session", "nobody", "--tool", "t", expect=1).stderr
    assert "no run" in cli("runs", "show", "bg:nothing", expect=1).stderr


def test_jobs_create_list_run_now_delete(cli: Cli, stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the schedule targets in the environment and a session
    monkeypatch.setenv("AGENTWAKE_CRON_FUNCTION_ARN", ALIAS_ARN)
    monkeypatch.setenv("AGENTWAKE_SCHEDULER_ROLE_ARN", ROLE_ARN)
    cli("sessions", "put", "s4", *SCRIPTED_ARGS)
    # WHEN a job is created, listed, run now and deleted
    job = cli_json(cli, "jobs", "create", "--session", "s4", "--name", "Nightly", "--cron", "0 6 * * ? *")
    assert job["schedule_expression"] == "cron(0 6 * * ? *)"
    assert [j["job_id"] for j in cli_json(cli, "jobs", "list")] == [job["job_id"]]
    assert "Nightly" in cli("jobs", "list").stdout
    cli("jobs", "run-now", job["job_id"])
    # THEN run-now invoked the cron function asynchronously with a manual scheduled time
    [(function, payload)] = stack.invocations
    assert function == "CronWakeFunction" and payload["job_id"] == job["job_id"]
    assert payload["scheduled_time"].startswith("manual-")
    # AND delete refuses without confirmation, then removes the job and its schedule
    assert "refusing" in cli("jobs", "delete", job["job_id"], expect=1).stderr
    cli("jobs", "delete", job["job_id"], "--yes")
    assert cli_json(cli, "jobs", "list") == []
    assert (
        boto3.client("scheduler", region_name=REGION).list_schedules(GroupName=stack.res.schedule_group)["Schedules"]
        == []
    )
    # AND bad input is a one-line error
    assert "exactly one" in cli("jobs", "create", "--session", "s4", "--name", "x", expect=1).stderr


def test_jobs_create_without_targets_says_what_is_missing(cli: Cli) -> None:
    cli("sessions", "put", "s5", *SCRIPTED_ARGS)
    result = cli("jobs", "create", "--session", "s5", "--name", "x", "--cron", "rate(1 day)", expect=1)
    assert "stack outputs not found" in result.stderr


# --------------------------------------------------------------------------------------------
# finding the resources


def test_nothing_found_says_what_to_do(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN no AGENTWAKE_* variables, no local stack, and no CloudFormation stack
    for key in stack.env():
        monkeypatch.delenv(key)
    # WHEN any command needs the resources
    result = CliRunner().invoke(app, ["dlq", "list"], obj=CliState())
    # THEN one line says what to do, without a traceback
    assert result.exit_code == 1
    assert result.stderr.startswith("error: no local stack is running (start one with `agentwake local up`)")
    assert "no stack outputs were found for stack 'agentwake' in region us-east-1" in result.stderr
    assert "set AWS_PROFILE/--region or the AGENTWAKE_* variables" in result.stderr


def test_cloudformation_outputs_are_used_when_no_environment_is_set(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a CloudFormation stack whose outputs name the resources, and no AGENTWAKE_* variables
    outputs = {
        "AgentTableName": stack.res.table,
        "BackgroundResultQueueUrl": stack.res.queue_url,
        "BackgroundResultDLQUrl": stack.res.dlq_url,
        "CronFailureQueueUrl": stack.res.cron_failure_url,
        "SchedulerDLQUrl": stack.res.scheduler_dlq_url,
        "CronWakeFunctionAliasArn": ALIAS_ARN,
    }
    template = {
        "Resources": {"Placeholder": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": "placeholder"}}},
        "Outputs": {k: {"Value": v} for k, v in outputs.items()},
    }
    boto3.client("cloudformation", region_name=REGION).create_stack(
        StackName="prod-agentwake", TemplateBody=json.dumps(template)
    )
    for key in stack.env():
        monkeypatch.delenv(key)
    stack.sqs.send_message(
        QueueUrl=stack.res.scheduler_dlq_url, MessageBody=json.dumps({"job_id": "j", "scheduled_time": "t"})
    )
    # WHEN the CLI is pointed at the stack by name
    result = CliRunner().invoke(app, ["--stack-name", "prod-agentwake", "--region", REGION, "dlq", "list", "--json"])
    # THEN it found the queues through the outputs
    assert result.exit_code == 0, result.output
    assert [r["run_id"] for r in json.loads(result.stdout)] == ["cron:j:t"]
    # AND invoke_async defaults to lambda:Invoke (Event) on the alias from the outputs
    context = build_context(discover(OpsOptions(stack_name="prod-agentwake", region=REGION)))
    assert context.invoke_async.target("CronWakeFunction") == ALIAS_ARN  # type: ignore[attr-defined]
    assert context.queue_url("results-dlq") == stack.res.dlq_url


def test_a_running_local_stack_is_found_from_its_state() -> None:
    # GIVEN no AGENTWAKE_* variables and a local stack's state (as agentwake_local records it)
    state: dict[str, Any] = {
        "endpoint_url": "http://127.0.0.1:4566",
        "region": "us-east-1",
        "stack_name": "agentwake-local",
        "outputs": {"AgentTableName": "agentwake-local-AgentTable", "BackgroundResultDLQUrl": "http://dlq"},
    }
    # WHEN the resources are discovered with and without an explicit stack name
    local = discover(OpsOptions(), {}, read_local_state=lambda: state)
    # THEN the local stack is used, unless a real stack is named
    assert local.source == "local" and local.endpoint_url == "http://127.0.0.1:4566"
    assert local.outputs["AgentTableName"] == "agentwake-local-AgentTable"
    with pytest.raises(OpsError, match="stack 'prod'"):
        discover(
            OpsOptions(stack_name="prod", region="us-east-1"),
            {},
            read_local_state=lambda: state,
            session_factory=lambda *_: _NoStacks(),
        )
    # AND explicit AGENTWAKE_* variables win over both
    env = discover(OpsOptions(), {"AGENTWAKE_TABLE": "t", "AWS_REGION": "eu-west-1"}, read_local_state=lambda: state)
    assert env.source == "env" and env.outputs == {"AgentTableName": "t"} and env.region == "eu-west-1"


class _NoStacks:
    region_name = "us-east-1"

    def client(self, *_: Any, **__: Any) -> Any:
        return self

    def describe_stacks(self, **_: Any) -> Any:
        raise RuntimeError("Stack with id prod does not exist")


def test_the_lambda_handlers_never_import_the_cli_libraries() -> None:
    # GIVEN a fresh interpreter
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import agentwake.handlers.background_result, agentwake.handlers.cron_wake\n"
        "import agentwake_ops.context, agentwake_ops.dlq.act\n"
        "print(sorted(m for m in ('typer', 'rich', 'click') if m in sys.modules))\n"
    )
    # WHEN both handlers (and the CLI's plain-Python modules) are imported
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=_env())
    # THEN neither typer nor rich came with them
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "AGENTWAKE_TABLE": "t", "POWERTOOLS_SERVICE_NAME": "agentwake", "AWS_DEFAULT_REGION": REGION}


def _cli_imports() -> dict[str, set[str]]:
    """Every agentwake_ops module -> the agentwake_ops modules it imports (also lazily, in a function)."""
    import ast
    from pathlib import Path

    import agentwake_ops

    root = Path(agentwake_ops.__file__).parent
    names = {
        ".".join(["agentwake_ops", *[p for p in path.relative_to(root).with_suffix("").parts if p != "__init__"]]): path
        for path in root.rglob("*.py")
    }
    graph: dict[str, set[str]] = {}
    for module, path in names.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                candidates = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                candidates = [a.name for a in node.names]
            else:
                continue
            found |= {c for c in candidates if c in names and c != module}
        graph[module] = found
    return graph


def test_no_command_group_imports_another_and_the_dlq_steps_import_one_way() -> None:
    # GIVEN every import inside the CLI package
    graph = _cli_imports()
    groups = {m for m in graph if m.startswith("agentwake_ops.commands.")}
    # THEN a command group imports no other group (what they share is render and cli_common)
    assert groups >= {f"agentwake_ops.commands.{g}" for g in ("runs", "history", "jobs", "sessions", "tasks", "dlq")}
    assert {m: graph[m] & groups for m in groups if graph[m] & groups} == {}
    # AND each step of the DLQ pipeline imports none of the steps after it
    steps = [
        "agentwake_ops.sqs_scan",
        "agentwake_ops.dlq.scan",
        "agentwake_ops.dlq.describe",
        "agentwake_ops.dlq.select",
        "agentwake_ops.dlq.claim",
        "agentwake_ops.dlq.act",
    ]
    backwards = {step: graph[step] & set(steps[i + 1 :]) for i, step in enumerate(steps)}
    assert {step: later for step, later in backwards.items() if later} == {}
    # AND the DLQ command calls the pipeline and holds no message itself (no claim of its own)
    assert {"agentwake_ops.dlq.select", "agentwake_ops.dlq.act"} <= graph["agentwake_ops.commands.dlq"]
    assert "agentwake_ops.dlq.claim" not in graph["agentwake_ops.commands.dlq"]
