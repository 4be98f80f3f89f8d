"""`agentwake jobs show|update|pause|resume|backfill|trigger` as an operator runs them: what they
print, the fires the Scheduler dead-lettered, and one `error:` line for bad input (nothing changed)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentwake_ops.cli_common import CliState
from tests.e2e.conftest import Cli, Stack, cli_json
from tests.support.builders import SCRIPTED_ARGS

ALIAS_ARN = "arn:aws:lambda:us-east-1:123456789012:function:agentwake-CronWakeFunction:live"
ROLE_ARN = "arn:aws:iam::123456789012:role/agentwake-SchedulerRole"


@pytest.fixture
def job_id(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("AGENTWAKE_CRON_FUNCTION_ARN", ALIAS_ARN)
    monkeypatch.setenv("AGENTWAKE_SCHEDULER_ROLE_ARN", ROLE_ARN)
    cli("sessions", "put", "s-ops", *SCRIPTED_ARGS)
    return str(
        cli_json(cli, "jobs", "create", "--session", "s-ops", "--name", "Nightly", "--cron", "0 6 * * ? *")["job_id"]
    )


def test_jobs_show_lists_the_fires_the_scheduler_dead_lettered_for_this_job(
    cli: Cli, stack: Stack, job_id: str
) -> None:
    # GIVEN two fires of this job and one of another job that the Scheduler could not deliver
    for job, when in (
        (job_id, "2026-11-28T06:00:00Z"),
        (job_id, "2026-11-29T06:00:00Z"),
        ("job-other", "2026-11-29T06:00:00Z"),
    ):
        stack.sqs.send_message(
            QueueUrl=stack.res.scheduler_dlq_url,
            MessageBody=json.dumps({"job_id": job, "scheduled_time": when}),
            MessageAttributes={
                "ERROR_CODE": {"DataType": "String", "StringValue": "AWS.Lambda.TooManyRequestsException"},
                "ERROR_MESSAGE": {"DataType": "String", "StringValue": "Rate exceeded"},
            },
        )
    # WHEN the job is shown
    shown = cli_json(cli, "jobs", "show", job_id)
    text = cli("jobs", "show", job_id).stdout
    # THEN its two missed fires are listed with their run ids and why, and how to redrive them
    assert sorted(m["run_id"] for m in shown["dead_lettered"]) == [
        f"cron:{job_id}:2026-11-28T06:00:00Z",
        f"cron:{job_id}:2026-11-29T06:00:00Z",
    ]
    assert "2 fire(s) the Scheduler could not deliver" in text and "Rate exceeded" in text
    assert "agentwake dlq redrive --id" in text
    # AND they are still in the queue (listed, not consumed)
    assert stack.counts(stack.res.scheduler_dlq_url)[0] + stack.counts(stack.res.scheduler_dlq_url)[1] == 3


def test_pause_shows_why_and_resume_enables_the_schedule_again(cli: Cli, stack: Stack, job_id: str) -> None:
    cli("jobs", "pause", job_id)
    shown = cli("jobs", "show", job_id).stdout
    assert "paused: paused by an operator" in shown
    assert "paused: paused by an operator" in cli("jobs", "list").stdout
    assert cli_json(cli, "jobs", "show", job_id)["job"]["next_fire_times"] == []
    resumed = cli_json(cli, "jobs", "resume", job_id)
    assert resumed["job"]["paused_at"] is None and resumed["job"]["next_fire_times"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("update", "{job}", "--overlap", "parallel"), "error: overlap must be one of skip, queue, buffer_one"),
        (("update", "{job}", "--catch-up", "some"), "error: catch-up must be one of none, latest, all"),
        (("update", "{job}", "--pause-after-failures", "-1"), "error: pause-after-failures must be 0 (never) or more"),
        (("update", "{job}"), "error: nothing to change"),
        (("resume", "{job}"), "is not paused"),
        (("backfill", "{job}", "--from", "yesterday", "--to", "2026-11-05T00:00:00Z"), "error: --from and --to"),
        (
            ("backfill", "{job}", "--from", "2026-10-01T00:00:00Z", "--to", "2026-12-01T00:00:00Z", "--yes"),
            "more than the cap of 50",
        ),
        (("trigger", "{job}", "--time", "soon"), "error: the scheduled time must be ISO-8601"),
        (("show", "job-nope"), "error: no job 'job-nope'"),
    ],
)
def test_bad_input_is_one_error_line_and_changes_nothing(
    cli: Cli, stack: Stack, job_id: str, args: tuple[str, ...], message: str
) -> None:
    before = cli_json(cli, "jobs", "show", job_id)["job"]
    result = cli("jobs", *(a.format(job=job_id) for a in args), expect=1)
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert cli_json(cli, "jobs", "show", job_id)["job"] == before
    assert stack.invocations == []


def test_show_lists_what_a_paused_job_misses_and_resume_catches_up_the_latest(
    cli: Cli, stack: Stack, job_id: str
) -> None:
    from datetime import UTC, datetime, timedelta

    # GIVEN a job every minute, paused just after the minute five minutes ago, and the CLI's clock
    # stopped in the middle of a minute: the fire times it counts cannot change while the test runs
    # (on a busy machine the commands below once took long enough to cross a minute boundary)
    cli("jobs", "update", job_id, "--cron", "* * * * ? *")
    cli("jobs", "pause", job_id)
    now = datetime.now(UTC).replace(second=30, microsecond=0) - timedelta(minutes=1)
    then = now.replace(second=1) - timedelta(minutes=5)
    stack.store.jobs.update_job(job_id, paused_at=then.isoformat().replace("+00:00", "Z"))
    state = CliState(invoke_async=stack.invoke_async)
    state.ops().jobs.clock = lambda: now

    def run(*args: str) -> Any:
        return cli(*args, obj=state)

    # WHEN it is shown  THEN it lists the 5 fire times it has missed so far
    shown = json.loads(run("jobs", "show", job_id, "--json").stdout)
    assert len(shown["missing_while_paused"]) == 5
    assert "Missing while paused: 5 fire time(s)" in run("jobs", "show", job_id).stdout
    # WHEN it is resumed (catch-up latest, the default)
    resumed = json.loads(run("jobs", "resume", job_id, "--json").stdout)
    # THEN the latest missed time runs, with its own fire's run id; every missed time is listed
    latest = shown["missing_while_paused"][-1]
    assert resumed["caught_up"] == [f"cron:{job_id}:{latest}"]
    assert stack.invocations == [
        ("CronWakeFunction", {"job_id": job_id, "scheduled_time": latest, "session_id": "s-ops"})
    ]
    text = run("jobs", "show", job_id).stdout
    assert "missed fires (newest first)" in text and "caught up" in text
    assert text.count("not caught up (catch-up latest runs only the latest)") == 4
    assert json.loads(run("jobs", "show", job_id, "--json").stdout)["job"]["missed_fires"] == 5


def test_resume_catches_up_the_fires_the_scheduler_could_not_deliver(cli: Cli, stack: Stack, job_id: str) -> None:
    from datetime import UTC, datetime, timedelta

    # GIVEN two recent fires of the job that reached SchedulerDLQ (the target was throttled)
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    times = [f"{hour - timedelta(hours=h):%Y-%m-%dT%H:%M:%SZ}" for h in (2, 1)]
    for when in times:
        stack.sqs.send_message(
            QueueUrl=stack.res.scheduler_dlq_url,
            MessageBody=json.dumps({"job_id": job_id, "scheduled_time": when, "session_id": "s-ops"}),
        )
    # WHEN the job is resumed (it is not paused: only those fires are missed)
    resumed = cli_json(cli, "jobs", "resume", job_id)
    # THEN both are recorded as missed, the latest runs with its own fire's run id (catch-up latest),
    # and SchedulerDLQ no longer holds them
    assert resumed["missed"] == times and resumed["caught_up"] == [f"cron:{job_id}:{times[1]}"]
    assert resumed["scheduler_dlq_deleted"] == 2
    assert stack.invocations == [
        ("CronWakeFunction", {"job_id": job_id, "scheduled_time": times[1], "session_id": "s-ops"})
    ]
    assert stack.counts(stack.res.scheduler_dlq_url) == (0, 0)
    missed = {f["scheduled_time"]: f for f in cli_json(cli, "jobs", "show", job_id)["missed"]}
    assert sorted(missed) == times
    assert all("SchedulerDLQ" in f["reason"] for f in missed.values())
    assert missed[times[1]]["outcome"] == "caught up" and missed[times[0]]["outcome"].startswith("not caught up")
    # AND with nothing missed, resuming a running job is refused
    assert "is not paused" in cli("jobs", "resume", job_id, expect=1).stderr


def test_an_active_recurring_job_whose_run_succeeded_is_active_not_completed(cli: Cli, job_id: str) -> None:
    from agentwake.handlers import cron_wake
    from tests.support.aws import FakeLambdaContext

    # GIVEN an hourly job whose last run succeeded (the cron function ran one fire)
    cli("jobs", "update", job_id, "--cron", "0 * * * ? *")
    out = cron_wake.handler(
        {"job_id": job_id, "scheduled_time": "2026-11-30T06:00:00Z", "session_id": "s-ops"}, FakeLambdaContext()
    )
    assert out["status"] == "succeeded"
    # WHEN the operator reads it in `jobs show`, `jobs list` and their JSON
    shown = cli("jobs", "show", job_id).stdout
    listed = cli("jobs", "list").stdout
    [as_json] = cli_json(cli, "jobs", "list")
    # THEN its status says it is active and what its last run did, never that the job is "completed"
    for text in (shown, listed):
        assert "active; last run succeeded" in text and "completed" not in text, text
    assert as_json["state"] == "active; last run succeeded"
    # AND once paused, the same words say paused, why, and what the last run did
    cli("jobs", "pause", job_id)
    assert "paused: paused by an operator; last run succeeded" in cli("jobs", "list").stdout


def test_resume_and_update_say_what_happened_in_words(cli: Cli, job_id: str) -> None:
    # GIVEN a daily job paused a moment ago (it has missed no fire)
    cli("jobs", "pause", job_id)
    # WHEN it is resumed
    resumed = " ".join(cli("jobs", "resume", job_id).stdout.split())
    # THEN it says nothing was missed, not "catch-up latest ran 0: -."
    assert f"Resumed job {job_id}: it missed no fire, so there is nothing to catch up." in resumed
    assert "ran 0" not in resumed and ": -." not in resumed
    # AND its next fire times name the zone once
    assert "Next fire times: " in resumed and resumed.count("UTC") == 3, resumed
    # AND a job in another zone names the zone and the times' abbreviation
    updated = " ".join(cli("jobs", "update", job_id, "--timezone", "Europe/Berlin").stdout.split())
    assert "Next fire times (Europe/Berlin): " in updated and ("CET" in updated or "CEST" in updated)


def test_runs_show_says_what_the_final_answer_sent_to_the_user(cli: Cli, job_id: str) -> None:
    from agentwake.handlers import cron_wake
    from tests.support.aws import FakeLambdaContext

    # GIVEN a run of the job whose model answered in plain text, sent to the user by deliver_final
    at = "2026-11-30T06:00:00Z"
    cron_wake.handler({"job_id": job_id, "scheduled_time": at, "session_id": "s-ops"}, FakeLambdaContext())
    run_id = f"cron:{job_id}:{at}"
    [delivery] = cli_json(cli, "runs", "show", run_id)["deliveries"]
    # WHEN the run is shown
    text = " ".join(cli("runs", "show", run_id).stdout.split())
    # THEN the final step says what was sent, and under which delivery id (not an empty arrow)
    assert f'tool send_message_to_user -> sent "{delivery["text"]}" ({run_id}#final)' in text, text
