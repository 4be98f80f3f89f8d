"""Schedules that exist in the local stack fire (DESIGN §3: a cron job comes due).

The REAL template.yaml and handlers on the embedded local AWS; jobs are created with
``agentwake jobs create`` as a user would, and the local scheduler is ticked with an injected
clock (a one-time ``at`` and a ``rate(5 minutes)`` fire without waiting five minutes).
The same scheduler runs on a thread under ``agentwake local up`` (tests/e2e/test_local_up.py).
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from agentwake.store.dynamo import DynamoStore
from agentwake_local.stack import LocalStackRuntime
from agentwake_ops.cli import app
from tests.support.builders import seed_session
from tests.support.local_stack import local_stack, stack_store


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStackRuntime]:
    # `agentwake jobs create` finds this stack, never a developer's
    with local_stack(tmp_path_factory.mktemp("agentwake-home")) as runtime:
        yield runtime


@pytest.fixture(scope="module")
def store(local: LocalStackRuntime) -> DynamoStore:
    return stack_store(local)


@pytest.fixture
def session(store: DynamoStore) -> str:
    session_id = f"session-{uuid.uuid4().hex[:8]}"
    seed_session(store, session_id)
    return session_id


def agentwake(*args: str) -> Any:
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, f"agentwake {' '.join(args)}: {result.output}"
    return json.loads(result.stdout)


def notes(store: DynamoStore, session_id: str) -> list[Any]:
    return [e for e in store.history.history(session_id) if e.kind == "note"]


def created_at(local: LocalStackRuntime, schedule_name: str) -> dt.datetime:
    schedule = local.client("scheduler").get_schedule(Name=schedule_name, GroupName=local.outputs["ScheduleGroupName"])
    return schedule["CreationDate"].astimezone(dt.UTC)


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


def test_a_one_time_job_fires_once_at_its_time_with_a_note(
    local: LocalStackRuntime, store: DynamoStore, session: str
) -> None:
    # GIVEN a job created with `agentwake jobs create --at` 30 seconds from now
    start = now()
    at = start + dt.timedelta(seconds=30)
    job = agentwake("jobs", "create", "--session", session, "--name", "Once", "--at", at.strftime("%Y-%m-%dT%H:%M:%S"))
    assert local.scheduler is not None

    # WHEN the scheduler ticks before its time  THEN nothing fires
    assert [f for f in local.scheduler.tick(start + dt.timedelta(seconds=10)) if f.name == job["schedule_name"]] == []
    assert notes(store, session) == []

    # WHEN it ticks at its time
    [fired] = [f for f in local.scheduler.tick(at + dt.timedelta(seconds=1)) if f.name == job["schedule_name"]]

    # THEN the cron function was invoked with the scheduled time substituted, and it wrote one note
    assert fired.outcome == "invoked" and fired.scheduled_time == at
    stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    [note] = notes(store, session)
    assert note.run_id == f"cron:{job['job_id']}:{stamp}"
    assert note.content.startswith(f"[CronJob] Once triggered at {stamp}, "), note.content  # no description: no colon
    # AND the one-time schedule is gone (ActionAfterCompletion: DELETE), so it never fires again
    assert local.scheduler.tick(at + dt.timedelta(hours=1)) == []
    scheduler = local.client("scheduler")
    with pytest.raises(scheduler.exceptions.ResourceNotFoundException):
        scheduler.get_schedule(Name=job["schedule_name"], GroupName=local.outputs["ScheduleGroupName"])
    assert len(notes(store, session)) == 1


def test_a_rate_job_fires_every_period(local: LocalStackRuntime, store: DynamoStore, session: str) -> None:
    # GIVEN a job created with `agentwake jobs create --cron 'rate(5 minutes)'`
    job = agentwake("jobs", "create", "--session", session, "--name", "Every five", "--cron", "rate(5 minutes)")
    created = created_at(local, job["schedule_name"])  # a rate counts from its schedule's creation
    assert local.scheduler is not None

    def fire(at: dt.datetime) -> list[Any]:
        return [f for f in local.scheduler.tick(at) if f.name == job["schedule_name"]]  # type: ignore[union-attr]

    # WHEN the scheduler ticks over the next twelve minutes
    assert fire(created + dt.timedelta(minutes=4)) == []
    first = fire(created + dt.timedelta(minutes=5, seconds=2))
    assert [(f.outcome, str(f.error)) for f in first] == [("invoked", "None")]
    assert fire(created + dt.timedelta(minutes=6)) == []
    second = fire(created + dt.timedelta(minutes=10, seconds=2))

    # THEN it fired once per period, each firing a run of its own with its own note
    assert [f.outcome for f in first + second] == ["invoked", "invoked"]
    assert second[0].scheduled_time - first[0].scheduled_time == dt.timedelta(minutes=5)
    runs = sorted(n.run_id for n in notes(store, session))
    assert runs == sorted(f"cron:{job['job_id']}:{f.scheduled_time:%Y-%m-%dT%H:%M:%SZ}" for f in first + second)
    deleted = CliRunner().invoke(app, ["jobs", "delete", job["job_id"], "--yes"])
    assert deleted.exit_code == 0, deleted.output


def test_a_schedule_whose_target_cannot_be_invoked_lands_in_the_scheduler_dlq(local: LocalStackRuntime) -> None:
    # GIVEN a schedule of the stack's group whose target function does not exist, with the
    # scheduler DLQ and a retry policy of two retries (what `jobs create` sets up, but a wrong ARN)
    group = local.outputs["ScheduleGroupName"]
    name = f"broken-{uuid.uuid4().hex[:8]}"
    missing = local.outputs["CronWakeFunctionArn"] + "-deleted:live"
    local.client("scheduler").create_schedule(
        Name=name,
        GroupName=group,
        ScheduleExpression="rate(1 minute)",
        FlexibleTimeWindow={"Mode": "OFF"},
        Target={
            "Arn": missing,
            "RoleArn": local.outputs["SchedulerRoleArn"],
            "Input": json.dumps({"job_id": "job-x", "scheduled_time": "<aws.scheduler.scheduled-time>"}),
            "RetryPolicy": {"MaximumRetryAttempts": 2, "MaximumEventAgeInSeconds": 3600},
            "DeadLetterConfig": {"Arn": local.outputs["SchedulerDLQArn"]},
        },
    )
    start = created_at(local, name)
    assert local.scheduler is not None

    # WHEN it comes due and the scheduler keeps ticking (no backoff in this stack's timing)
    due = start + dt.timedelta(minutes=1, seconds=1)
    attempts = [f for t in range(3) for f in local.scheduler.tick(due + dt.timedelta(seconds=t)) if f.name == name]
    local.client("scheduler").delete_schedule(Name=name, GroupName=group)

    # THEN it was tried three times (one attempt and two retries), then dead-lettered
    [firing] = {id(f): f for f in attempts}.values()
    assert (firing.attempts, firing.outcome) == (3, "dead-lettered")
    messages = local.client("sqs").receive_message(
        QueueUrl=local.outputs["SchedulerDLQUrl"],
        MessageAttributeNames=["All"],
        MaxNumberOfMessages=10,
        VisibilityTimeout=0,
    )["Messages"]
    [message] = [m for m in messages if m["MessageAttributes"]["SCHEDULE_ARN"]["StringValue"].endswith("/" + name)]
    # AND the message is the target's input with the scheduled time substituted, with Scheduler's attributes
    body = json.loads(message["Body"])
    assert body == {"job_id": "job-x", "scheduled_time": firing.scheduled_time.strftime("%Y-%m-%dT%H:%M:%SZ")}
    attributes = {k: v["StringValue"] for k, v in message["MessageAttributes"].items()}
    assert attributes["ERROR_CODE"] == "AWS.Lambda.ResourceNotFoundException"
    assert missing in attributes["ERROR_MESSAGE"]
    assert attributes["RETRY_ATTEMPTS"] == "2"
    assert attributes["EXHAUSTED_RETRY_CONDITION"] == "MaximumRetryAttempts"
    assert attributes["TARGET_ARN"] == missing
    assert attributes["EXECUTION_ID"] == firing.execution_id
    # AND the operator's DLQ view reads it as the scheduler's error
    [row] = [r for r in agentwake("dlq", "list", "--queue", "scheduler") if r["message_id"] == message["MessageId"]]
    assert row["error_type"] == "AWS.Lambda.ResourceNotFoundException"


def test_a_schedule_outside_its_start_and_end_dates_does_not_fire(local: LocalStackRuntime) -> None:
    # GIVEN a schedule every minute that starts in an hour and ends in two
    group = local.outputs["ScheduleGroupName"]
    name = f"window-{uuid.uuid4().hex[:8]}"
    start = now()
    local.client("scheduler").create_schedule(
        Name=name,
        GroupName=group,
        ScheduleExpression="cron(* * * * ? *)",
        StartDate=start + dt.timedelta(hours=1),
        EndDate=start + dt.timedelta(hours=2),
        FlexibleTimeWindow={"Mode": "OFF"},
        Target={
            "Arn": local.outputs["CronWakeFunctionAliasArn"],
            "RoleArn": local.outputs["SchedulerRoleArn"],
            "Input": json.dumps({"job_id": "job-none", "scheduled_time": "<aws.scheduler.scheduled-time>"}),
        },
    )
    assert local.scheduler is not None

    def fired(at: dt.datetime) -> list[Any]:
        return [f for f in local.scheduler.tick(at) if f.name == name]  # type: ignore[union-attr]

    # THEN it is silent before its start, fires within its window, and is silent after its end
    assert fired(start + dt.timedelta(minutes=30)) == []
    [inside] = fired(start + dt.timedelta(hours=1, seconds=61))  # the first whole minute after its start
    assert start + dt.timedelta(hours=1) <= inside.scheduled_time <= start + dt.timedelta(hours=1, seconds=61)
    assert fired(start + dt.timedelta(hours=3)) == []
    local.client("scheduler").delete_schedule(Name=name, GroupName=group)
