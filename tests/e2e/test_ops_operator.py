"""The operator CLI's promises beyond the DLQ loop (issue 13): exports that cannot lose data, honest
fields, errors a person can act on, AWS's cron rules with the next fire times, runs listed and
transcribed. Each user-facing error is checked as the exact text the operator reads."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from agentwake.domain.run_models import Job
from agentwake.store.queues import ATTR_DEAD_LETTERED_AT
from agentwake_ops.cli_common import CliState
from agentwake_ops.context import resolve_context
from agentwake_ops.dlq import act
from tests.e2e.conftest import Cli, Stack, cli_json
from tests.e2e.test_ops_dlq import DELIVERS_THEN_FAILS, FIXED, dead_letter_unknown_task, make_failed_background_run
from tests.support.builders import SCRIPTED_ARGS


def fill_scheduler_dlq(stack: Stack, count: int, prefix: str = "j") -> None:
    for i in range(count):
        stack.sqs.send_message(
            QueueUrl=stack.res.scheduler_dlq_url,
            MessageBody=json.dumps({"job_id": f"{prefix}{i}", "scheduled_time": "2026-11-30T06:00:00Z"}),
        )


# --------------------------------------------------------------------------------------------
# exports that cannot lose data


class SendsDuringDelete:
    """The real SQS client; a new DLQ message arrives just before the first batch delete."""

    def __init__(self, client: Any, url: str) -> None:
        self._client = client
        self.url = url
        self.sent: str | None = None

    def delete_message_batch(self, **kwargs: Any) -> Any:
        if self.sent is None:
            body = json.dumps({"job_id": "late", "scheduled_time": "2026-11-30T07:00:00Z"})
            self.sent = self._client.send_message(QueueUrl=self.url, MessageBody=body)["MessageId"]
        return self._client.delete_message_batch(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def test_export_delete_deletes_exactly_the_exported_messages(cli: Cli, stack: Stack) -> None:
    # GIVEN 23 scheduler failures and a permanent input error in the results DLQ
    fill_scheduler_dlq(stack, 23)
    dead_letter_unknown_task(stack, "s-exp")
    before = {r["message_id"] for r in cli_json(cli, "dlq", "list")}
    context = resolve_context(invoke_async=stack.invoke_async)
    late = SendsDuringDelete(context.sqs, stack.res.scheduler_dlq_url)
    context.sqs = late
    out = stack.tmp / "dlq.jsonl"

    # WHEN exported with --delete (and a message arrives while the export deletes)
    result = cli("dlq", "export", "--out", str(out), "--delete", "--yes", obj=CliState(context=context))

    # THEN the file holds every message that was there, and exactly those left the DLQ
    exported = [record["message_id"] for record in act.read_export(str(out))]
    assert sorted(exported) == sorted(before) and len(exported) == 24
    wrote, warning, deleted = result.stdout.splitlines()
    assert (wrote, deleted) == (f"Wrote 24 message(s) to {out}.", "Deleted 24 exported message(s) from the DLQ.")
    assert warning.startswith("The file holds task tokens in clear")
    assert stack.counts(stack.res.dlq_url) == (0, 0)
    # AND the message that arrived meanwhile was not exported, so it was not deleted
    assert late.sent is not None and late.sent not in exported
    [left] = cli_json(cli, "dlq", "list")
    assert left["message_id"] == late.sent


def test_an_interrupted_export_deletes_nothing(cli: Cli, stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN 15 DLQ messages, and a disk that fills up after the fifth line of the export
    fill_scheduler_dlq(stack, 15)
    real_lines = act.export_lines

    def lines_then_full_disk(messages: Any) -> Any:
        for index, line in enumerate(real_lines(messages)):
            if index == 5:
                raise OSError(28, "No space left on device")
            yield line

    monkeypatch.setattr(act, "export_lines", lines_then_full_disk)
    out = stack.tmp / "dlq.jsonl"

    # WHEN exported with --delete
    result = cli("dlq", "export", "--out", str(out), "--delete", "--yes", expect=1)

    # THEN it fails in one line, writes no file (not even a partial one), and deletes nothing
    assert result.stderr == "error: No space left on device\n"
    assert not out.exists() and not (stack.tmp / "dlq.jsonl.partial").exists()
    assert stack.counts(stack.res.scheduler_dlq_url) == (15, 0)

    # AND an export stopped by Ctrl-C while writing deletes nothing either
    def lines_then_ctrl_c(messages: Any) -> Any:
        for index, line in enumerate(real_lines(messages)):
            if index == 3:
                raise KeyboardInterrupt
            yield line

    monkeypatch.setattr(act, "export_lines", lines_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        act.export(resolve_context(), str(out), queue="scheduler", delete=True)
    assert not out.exists()
    assert stack.counts(stack.res.scheduler_dlq_url) == (15, 0)


def test_delete_from_an_export_file_deletes_exactly_its_messages(cli: Cli, stack: Stack) -> None:
    # GIVEN an export of 12 messages, after which 3 more arrive and one exported message is deleted
    fill_scheduler_dlq(stack, 12)
    out = stack.tmp / "dlq.jsonl"
    cli("dlq", "export", "--out", str(out), "--queue", "scheduler")
    exported = [record["message_id"] for record in act.read_export(str(out))]
    fill_scheduler_dlq(stack, 3, prefix="later")
    cli("dlq", "delete", exported[0], "--yes")

    # WHEN the export file's messages are deleted
    refused = cli("dlq", "delete", "--from", str(out), expect=1)
    result = cli_json(cli, "dlq", "delete", "--from", str(out), "--yes")

    # THEN without --yes nothing happens; with it, exactly the 11 still there go, one is reported missing
    assert (
        refused.stderr
        == "error: refusing to delete DLQ messages without confirmation: pass --yes (stdin is not a terminal)\n"
    )
    assert sorted(result["deleted"]) == sorted(exported[1:]) and result["missing"] == [exported[0]]
    left = cli_json(cli, "dlq", "list")
    assert len(left) == 3 and not {r["message_id"] for r in left} & set(exported)


def test_purge_shows_the_count_it_will_delete(cli: Cli, stack: Stack) -> None:
    # GIVEN 4 scheduler failures
    fill_scheduler_dlq(stack, 4)
    # WHEN purged without confirmation, then with it
    refused = cli("dlq", "purge", "scheduler", expect=1)
    done = cli("dlq", "purge", "scheduler", "--yes")
    # THEN the refusal says why, and the purge says how many it deleted
    assert refused.stderr == (
        "error: refusing to purge the scheduler DLQ without confirmation: pass --yes (stdin is not a terminal)\n"
    )
    assert done.stdout == "Purged the scheduler DLQ (4 message(s)).\n"
    assert stack.counts(stack.res.scheduler_dlq_url) == (0, 0)


# --------------------------------------------------------------------------------------------
# honest fields


def test_listing_shows_when_a_message_reached_the_dlq_and_does_not_inflate_attempts(cli: Cli, stack: Stack) -> None:
    # GIVEN a permanent input error agentwake dead-lettered, with a long reason
    dead_letter_unknown_task(stack, "s-honest")
    # WHEN it is listed three times
    rows = [cli_json(cli, "dlq", "list")[0] for _ in range(3)]
    # THEN "in the DLQ since" is agentwake's own stamp, attempts stay what the handler saw
    row = rows[-1]
    assert row["in_dlq_since_source"] == ATTR_DEAD_LETTERED_AT
    stamped = datetime.fromisoformat(row["in_dlq_since"].replace("Z", "+00:00"))
    assert abs(stamped - datetime.now(UTC)) < timedelta(minutes=10)
    assert [r["attempts"] for r in rows] == [1, 1, 1]
    # AND the receive count each listing raises is shown apart, and the whole reason is in --json
    assert rows[0]["receive_count"] < rows[2]["receive_count"]
    assert row["error"] == "no task is registered with id 'task-nobody-registered'"


def test_a_message_moved_by_sqs_is_in_the_dlq_since_its_last_failed_attempt(cli: Cli, stack: Stack) -> None:
    # GIVEN a run that failed until SQS moved its message to the DLQ
    make_failed_background_run(cli, stack, "s-moved", DELIVERS_THEN_FAILS)
    stack.poll_until_dead_lettered()
    # WHEN listed
    [row] = cli_json(cli, "dlq", "list")
    # THEN "in the DLQ since" is the last failure (SQS keeps the producer's SentTimestamp), and says so
    assert row["in_dlq_since"] == row["last_failure_at"]
    # (compared as times: the two texts may differ in precision, and a fast failure lands within
    # the same second as the producer's send)
    assert _when(row["in_dlq_since"]) >= _when(row["sent_at"])
    assert row["in_dlq_since_source"].startswith("the run's last failed attempt")
    assert row["attempts"] == 2


# --------------------------------------------------------------------------------------------
# errors a person can act on


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["history", "show", "nobody"], "error: no session 'nobody' (create it with: agentwake sessions put nobody)\n"),
        (
            ["sessions", "show", "nobody"],
            "error: no session 'nobody' (create it with: agentwake sessions put nobody)\n",
        ),
        (
            ["runs", "show", "bg:task-none"],
            "error: no run 'bg:task-none' in the store (run ids look like bg:TASK_ID, sub:TASK_ID or cron:JOB_ID:SCHEDULED_TIME; "
            "find them with: agentwake runs list --session SESSION)\n",
        ),
        (
            ["jobs", "delete", "job-none", "--yes"],
            "error: no job 'job-none' (list the jobs with: agentwake jobs list)\n",
        ),
        (["jobs", "run-now", "job-none"], "error: no job 'job-none' (list the jobs with: agentwake jobs list)\n"),
        (
            ["tasks", "finish", "task-none", "--token", "awt_x", "--status", "succeeded", "--result", "r"],
            "error: no task 'task-none' (register one with: agentwake tasks register --session SESSION --tool TOOL)\n",
        ),
        (
            ["tasks", "register", "--session", "nobody", "--tool", "t"],
            "error: no session 'nobody' (create it with: agentwake sessions put nobody)\n",
        ),
        (
            ["sessions", "put", "SESSION#victim"],
            "error: invalid session id 'SESSION#victim': a session id is 1-128 characters: letters, digits and "
            "_ . : @ -, starting with a letter or digit\n",
        ),
        (
            ["tasks", "register", "--session", "s#1", "--tool", "t"],
            "error: invalid session id 's#1': a session id is 1-128 characters: letters, digits and "
            "_ . : @ -, starting with a letter or digit\n",
        ),
        (
            ["sessions", "put", "s1", "--provider", '{"type": "gpt4"}'],
            "error: --provider: unknown provider type 'gpt4': the allowed types are scripted, openai, bedrock\n",
        ),
        (
            ["sessions", "put", "s1", "--provider", '{"type": "openai", "model": "m"}'],
            "error: --provider: invalid openai provider spec: base_url: Field required\n",
        ),
        (
            ["jobs", "create", "--session", "s1", "--name", "n", "--cron", "0 8 * * * *"],
            "error: invalid schedule cron(0 8 * * * *): cron(...): exactly one of day-of-month and day-of-week "
            "must be '?'\n",
        ),
        (
            ["jobs", "create", "--session", "s1", "--name", "n", "--cron", "0 8 * * ?"],
            "error: a cron expression needs six fields (minutes hours day-of-month month day-of-week year), "
            "got '0 8 * * ?'\n",
        ),
        (
            ["jobs", "create", "--session", "s1", "--name", "n", "--cron", "0 25 * * ? *"],
            "error: invalid schedule cron(0 25 * * ? *): hours: '25' is not in 0-23\n",
        ),
    ],
)
def test_each_error_is_one_line_that_says_what_to_do(cli: Cli, args: list[str], expected: str) -> None:
    # GIVEN an empty stack WHEN the command names something wrong or missing
    result = cli(*args, expect=1)
    # THEN exit 1 with exactly this one line, and nothing on stdout
    assert result.stderr == expected
    assert result.stdout == ""


@pytest.mark.parametrize(
    "command",
    [
        ["sessions", "put"],
        ["dlq", "redrive"],
        ["dlq", "export"],
        ["jobs", "create"],
        ["runs", "list"],
        ["tasks", "register"],
    ],
)
def test_help_shows_plain_metavars(cli: Cli, command: list[str]) -> None:
    text = cli(*command, "--help").stdout
    assert "<bool>" not in text and "<str>" not in text and "<list[str]>" not in text and "<int>" not in text
    assert any(plain in text for plain in ("TEXT", "FILE", "INTEGER", "NUMBER"))


def test_sessions_delete_refuses_while_jobs_or_tasks_use_the_session(cli: Cli, stack: Stack) -> None:
    # GIVEN a session with history, one job and one unfinished task
    cli("sessions", "put", "s-del", *SCRIPTED_ARGS)
    stack.store.records.put_job(
        Job(job_id="job-del", session_id="s-del", name="n", schedule_expression="cron(0 6 * * ? *)")
    )
    task_id = cli_json(cli, "tasks", "register", "--session", "s-del", "--tool", "t")["task_id"]

    # WHEN it is deleted without --force
    refused = cli("sessions", "delete", "s-del", "--yes", expect=1)
    # THEN it refuses, naming what uses it
    assert refused.stderr == (
        f"error: session 's-del' is still used by 1 job(s) (job-del) and 1 unfinished task(s) ({task_id}): "
        "delete those first (agentwake jobs delete JOB_ID), or pass --force\n"
    )
    assert stack.store.records.get_session("s-del") is not None

    # WHEN forced
    done = cli("sessions", "delete", "s-del", "--yes", "--force")
    # THEN the session is gone, and the output says what it left behind
    assert stack.store.records.get_session("s-del") is None
    assert "Deleted session s-del" in done.stdout and "Left in place: 1 job(s) and 1 task(s)" in done.stdout
    assert cli("sessions", "show", "s-del", expect=1).stderr.startswith("error: no session 's-del'")
    # AND deleting it again is an error naming it
    assert cli("sessions", "delete", "s-del", "--yes", expect=1).stderr.startswith("error: no session 's-del'")


# --------------------------------------------------------------------------------------------
# cron expressions as AWS reads them


def test_a_valid_cron_job_shows_its_next_three_fire_times_in_its_time_zone(
    cli: Cli, stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a session and the stack's scheduler targets
    monkeypatch.setenv("AGENTWAKE_CRON_FUNCTION_ARN", "arn:aws:lambda:us-east-1:123456789012:function:cron:live")
    monkeypatch.setenv("AGENTWAKE_SCHEDULER_ROLE_ARN", "arn:aws:iam::123456789012:role/scheduler")
    cli("sessions", "put", "s-cron", *SCRIPTED_ARGS)
    # WHEN a job is created for 08:00 Berlin time every day
    job = cli_json(
        cli,
        "jobs",
        "create",
        "--session",
        "s-cron",
        "--name",
        "Morning",
        "--cron",
        "0 8 * * ? *",
        "--timezone",
        "Europe/Berlin",
    )
    # THEN its next three fire times are 08:00 Berlin on three consecutive days, all in the future
    fires = [datetime.fromisoformat(t) for t in job["next_fire_times"]]
    assert len(fires) == 3
    berlin = ZoneInfo("Europe/Berlin")
    assert all(f.astimezone(berlin).hour == 8 and f.minute == 0 for f in fires)
    assert [(b - a) for a, b in zip(fires, fires[1:], strict=False)] == [timedelta(days=1)] * 2 or all(
        (b.astimezone(berlin).date() - a.astimezone(berlin).date()).days == 1
        for a, b in zip(fires, fires[1:], strict=False)
    )
    assert fires[0] > datetime.now(UTC)
    # AND the table of `jobs create` and `jobs list` shows them
    listed = cli("jobs", "list").stdout
    assert fires[0].astimezone(berlin).strftime("%Y-%m-%d 08:00") in listed


# --------------------------------------------------------------------------------------------
# runs for operators


def test_runs_show_transcript_of_a_run_that_delivered_failed_and_was_redriven(cli: Cli, stack: Stack) -> None:
    # GIVEN a run that told the user something, then failed on every attempt until it was dead-lettered
    task_id = make_failed_background_run(cli, stack, "s-tr", DELIVERS_THEN_FAILS)
    stack.poll_until_dead_lettered()
    # AND the operator fixed the provider and redrove it, and it succeeded
    cli("sessions", "put", "s-tr", "--provider", json.dumps(FIXED))
    cli("dlq", "redrive", "--all")
    ok, failed = stack.poll()
    assert len(ok) == 1 and failed == []
    run_id = f"bg:{task_id}"

    # WHEN the run's transcript is shown
    text = cli("runs", "show", run_id, "--transcript").stdout
    data = cli_json(cli, "runs", "show", run_id, "--transcript")

    # THEN it shows each failed attempt, the final successful one, and the single delivery with its id
    titles = [e["title"] for e in data["transcript"]]
    assert [t for t in titles if t.startswith("attempt")] == [
        "attempt 1 failed: AllProvidersFailed",
        "attempt 2 failed: AllProvidersFailed",
        "attempt 3 succeeded: the run is done after 3 attempt(s)",
    ]
    [delivery] = [e for e in data["transcript"] if e["kind"] == "delivery"]
    delivery_id = delivery["title"].split()[1]
    # the delivery and its receipt (this session delivers to the log)
    assert delivery["lines"] == ["Working on your research.", "the user received it: log"]
    # AND the tool call with its arguments, its result naming the same delivery, and the model's replies
    assert 'calls send_message_to_user({"text": "Working on your research."})' in text
    assert f"delivered (delivery_id={delivery_id}" in text and f"deliveries made: {delivery_id}" in text
    # (the last reply of the run, which succeeded, is read from its note: its commit does not journal it)
    assert "last reply: the final answer as the run's note keeps it" in text and "All done." in text
    assert "provider p: AccessDenied: invalid credentials (scripted)" in text
    assert text.count(f"delivery {delivery_id}") == 1


def test_runs_show_labels_each_step_with_the_attempt_that_journaled_it_and_says_what_was_sent(
    cli: Cli, stack: Stack
) -> None:
    # GIVEN a run that sent the user a message in attempt 1, failed in attempts 1 and 2 (dead-lettered),
    # and succeeded when redriven after the provider was fixed
    task_id = make_failed_background_run(cli, stack, "s-att", DELIVERS_THEN_FAILS)
    stack.poll_until_dead_lettered()
    cli("sessions", "put", "s-att", "--provider", json.dumps(FIXED))
    cli("dlq", "redrive", "--all")
    assert stack.poll()[1] == []
    run_id = f"bg:{task_id}"

    # WHEN the run is shown
    data = cli_json(cli, "runs", "show", run_id)
    text = cli("runs", "show", run_id).stdout

    # THEN each step carries the attempt that journaled it, as the records tell: the message and its
    # tool result by attempt 1 (before its failure); the last reply of attempt 3, which succeeded, is
    # not journaled (its commit leaves it out): its note keeps the final answer, shown after the steps
    assert [f["attempt"] for f in data["failures"]] == [1, 2] and data["run"]["attempts"] == 3
    assert {s["key"]: s["attempt"] for s in data["steps"]} == {"000.reply": 1, "000.tool.00": 1}
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in text.splitlines() if "│ 00" in line}
    assert rows == {"000.reply": "1", "000.tool.00": "1"}, text
    assert "All done." in data["note"]["text"] and "last reply: the final answer as the run's note keeps it" in text
    # AND the send step says what was sent to the user, not an empty arrow
    assert 'tool send_message_to_user -> sent "Working on your research."' in text
    # AND the transcript names the attempt of each step
    titles = [e["title"] for e in cli_json(cli, "runs", "show", run_id, "--transcript")["transcript"]]
    assert "step 0 (attempt 1): tool send_message_to_user returned" in titles
    assert any(t.startswith("last reply: the final answer as the run's note keeps it") for t in titles)


def test_runs_list_is_newest_first_filtered_and_paginated(cli: Cli, stack: Stack) -> None:
    # GIVEN three runs of one session (one failed) and one of another
    for session, providers in (("s-l1", DELIVERS_THEN_FAILS), ("s-l1", FIXED_CHAIN), ("s-l1", FIXED_CHAIN)):
        make_failed_background_run(cli, stack, session, providers)
        stack.poll_until_dead_lettered()
    make_failed_background_run(cli, stack, "s-l2", FIXED_CHAIN)
    stack.poll_until_dead_lettered()

    # WHEN the runs are listed
    everything = cli_json(cli, "runs", "list")["runs"]
    mine = cli_json(cli, "runs", "list", "--session", "s-l1")["runs"]
    failed = cli_json(cli, "runs", "list", "--session", "s-l1", "--status", "failed")["runs"]
    first = cli_json(cli, "runs", "list", "--session", "s-l1", "--limit", "2")
    rest = cli_json(cli, "runs", "list", "--session", "s-l1", "--limit", "2", "--before", first["next_before"])
    recent = cli_json(cli, "runs", "list", "--since", "1h")["runs"]
    future = cli_json(cli, "runs", "list", "--since", "2099-01-01T00:00:00Z")["runs"]

    # THEN newest first, by session, by status, a page at a time without overlap, and by time
    assert len(everything) == 4 and everything[0]["session_id"] == "s-l2"
    starts = [r["started_at"] for r in everything]
    assert starts == sorted(starts, reverse=True)
    assert [r["run_id"] for r in mine] == [r["run_id"] for r in everything if r["session_id"] == "s-l1"]
    assert [r["status"] for r in failed] == ["failed"]
    assert [r["run_id"] for r in first["runs"] + rest["runs"]] == [r["run_id"] for r in mine]
    assert rest["next_before"] is None
    assert len(recent) == 4 and future == []


def test_the_runs_list_footer_says_what_it_searched_and_agrees_with_its_rows(cli: Cli, stack: Stack) -> None:
    # GIVEN two runs of today, and none in the month before
    for session in ("s-f1", "s-f2"):
        make_failed_background_run(cli, stack, session, FIXED_CHAIN)
        stack.poll_until_dead_lettered()
    # WHEN every run is listed (the by-day index, walked back until a quiet month)
    listed = cli_json(cli, "runs", "list")
    text = " ".join(cli("runs", "list").stdout.split())
    # THEN the footer says where the search stopped and that the two rows are all there is from then on
    assert len(listed["runs"]) == 2
    note = listed["note"]
    assert "these 2 run(s) are all there is" in note, note
    assert note in text and "found no run" not in text
    # AND a list with no row says there is none, the same way
    empty = cli_json(cli, "runs", "list", "--status", "running")
    assert empty["runs"] == [] and "no run is there" in empty["note"]


FIXED_CHAIN = [FIXED]


# --------------------------------------------------------------------------------------------
# a fast CLI (the latency itself is measured in `make bench`, never asserted on time)


def test_the_cli_starts_without_boto3_pydantic_rich_or_the_local_stack() -> None:
    # GIVEN a fresh interpreter
    import subprocess
    import sys

    code = (
        "import sys, agentwake_ops.cli\n"
        "heavy = ('boto3', 'botocore', 'pydantic', 'rich', 'agentwake.settings', 'agentwake_local', "
        "'agentwake_ops.context')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    # WHEN the CLI module is imported (what every command and --help pays first)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # THEN none of the heavy packages came with it: each command imports what it uses
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_a_command_that_finds_no_stack_imports_neither_the_settings_nor_the_store() -> None:
    # GIVEN a fresh interpreter
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from agentwake_ops.cli import main\n"
        "code = main(['dlq', 'list', '--help'])\n"
        "heavy = ('agentwake.settings', 'agentwake.store.dynamo', 'agentwake.jobs.service', 'agentwake.product.tasks')\n"
        "print('loaded:', sorted(m for m in heavy if m in sys.modules), code)\n"
    )
    # WHEN a command that needs no stack runs (a subcommand's --help: the root options are parsed,
    # so agentwake_ops.context is imported)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # THEN it printed its help, and the runtime settings and the store stayed unloaded: only a
    # command that discovers the stack (AGENTWAKE_* variables, stack outputs) imports them
    assert "Usage: agentwake dlq list" in out.stdout, out.stdout + out.stderr
    assert out.stdout.strip().splitlines()[-1] == "loaded: [] 0", out.stdout + out.stderr


def _when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
