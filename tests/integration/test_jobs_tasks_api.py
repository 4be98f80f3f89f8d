"""The jobs and tasks API against moto's EventBridge Scheduler and SQS."""

from __future__ import annotations

import json

import boto3
import pytest

from agentwake.errors import UnknownTask
from agentwake.handlers import background_result, cron_wake
from agentwake.jobs.service import JobError, JobsService, JobTargets, schedule_expression
from agentwake.product.tasks import TasksService
from agentwake.store.dynamo import DynamoStore
from agentwake.store.schedules import Schedules
from tests.support.aws import REGION, FakeLambdaContext, Resources, drain
from tests.support.builders import seed_session

ALIAS_ARN = "arn:aws:lambda:us-east-1:123456789012:function:agentwake-CronWakeFunction:live"
ROLE_ARN = "arn:aws:iam::123456789012:role/agentwake-SchedulerRole"
DLQ_ARN = "arn:aws:sqs:us-east-1:123456789012:scheduler-dlq"


@pytest.fixture
def invocations() -> list[tuple[str, dict]]:
    return []


@pytest.fixture
def jobs(store: DynamoStore, resources: Resources, invocations: list) -> JobsService:
    schedules = Schedules(resources.schedule_group, client=boto3.client("scheduler", region_name=REGION))
    return JobsService(
        store,
        schedules,
        JobTargets(cron_function_arn=ALIAS_ARN, scheduler_role_arn=ROLE_ARN, scheduler_dlq_arn=DLQ_ARN),
        invoker=lambda arn, payload: invocations.append((arn, payload)),
    )


def test_create_job_makes_the_item_and_its_schedule(
    jobs: JobsService, store: DynamoStore, resources: Resources
) -> None:
    # GIVEN a session
    seed_session(store, "session-demo")
    # WHEN a job is created from six cron fields
    job = jobs.create(session_id="session-demo", name="Nightly", cron="0 6 * * ? *", timezone="Europe/Berlin")
    # THEN the job item exists and the schedule targets the alias with the scheduled-time placeholder
    # (and the session, so the wake reads its config in its first batch read)
    assert store.records.get_job(job.job_id) is not None
    sched = jobs.schedules.get(job.schedule_name or "")
    assert sched is not None
    assert sched["ScheduleExpression"] == "cron(0 6 * * ? *)"
    assert sched["ScheduleExpressionTimezone"] == "Europe/Berlin"
    assert sched["GroupName"] == resources.schedule_group
    target = sched["Target"]
    assert target["Arn"] == ALIAS_ARN and target["RoleArn"] == ROLE_ARN
    assert json.loads(target["Input"]) == {
        "job_id": job.job_id,
        "scheduled_time": "<aws.scheduler.scheduled-time>",
        "session_id": "session-demo",
    }
    assert target["RetryPolicy"]["MaximumRetryAttempts"] == 2
    assert target["DeadLetterConfig"]["Arn"] == DLQ_ARN
    assert [j.job_id for j in jobs.list()] == [job.job_id]


def test_delete_job_removes_the_schedule_too(jobs: JobsService, store: DynamoStore) -> None:
    seed_session(store, "session-demo")
    job = jobs.create(session_id="session-demo", name="Nightly", cron="cron(0 6 * * ? *)")
    jobs.delete(job.job_id)
    assert store.records.get_job(job.job_id) is None
    assert jobs.schedules.get(job.schedule_name or "") is None
    assert jobs.list() == []


def test_run_now_invokes_the_alias_asynchronously(jobs: JobsService, store: DynamoStore, invocations: list) -> None:
    seed_session(store, "session-demo")
    job = jobs.create(session_id="session-demo", name="Nightly", cron="rate(1 day)")
    run_id = jobs.run_now(job.job_id)
    [(arn, payload)] = invocations
    assert arn == ALIAS_ARN
    assert payload["job_id"] == job.job_id and payload["scheduled_time"].startswith("manual-")
    assert run_id == f"cron:{job.job_id}:{payload['scheduled_time']}"


def test_run_once_job_is_disabled_and_its_schedule_deleted_after_success(
    jobs: JobsService, store: DynamoStore, invocations: list
) -> None:
    # GIVEN a one-time job
    seed_session(store, "session-demo")
    job = jobs.create(session_id="session-demo", name="Reminder", at="2030-12-01T09:00:00")
    assert job.run_once and job.schedule_expression == "at(2030-12-01T09:00:00)"
    # WHEN it fires and the run succeeds
    out = cron_wake.handler({"job_id": job.job_id, "scheduled_time": "2026-12-01T09:00:00Z"}, FakeLambdaContext())
    assert out["status"] == "succeeded"
    # THEN the job is disabled and its schedule is gone; a second firing does nothing
    after = store.records.get_job(job.job_id)
    assert after is not None and after.enabled is False and after.status == "completed"
    assert jobs.schedules.get(job.schedule_name or "") is None
    again = cron_wake.handler({"job_id": job.job_id, "scheduled_time": "2026-12-02T09:00:00Z"}, FakeLambdaContext())
    assert again["status"] == "skipped"


@pytest.mark.parametrize(
    ("cron", "at", "message"),
    [
        (None, None, "exactly one"),
        ("0 6 * * ?", None, "six fields"),
        (None, "tomorrow", "2026-12-01T09:00:00"),
    ],
)
def test_bad_schedules_are_refused_clearly(cron: str | None, at: str | None, message: str) -> None:
    with pytest.raises(JobError, match=message):
        schedule_expression(cron, at)


def test_job_for_unknown_session_or_timezone_is_refused(jobs: JobsService, store: DynamoStore) -> None:
    with pytest.raises(JobError, match="no session .ghost."):
        jobs.create(session_id="ghost", name="x", cron="rate(1 hour)")
    seed_session(store, "session-demo")
    with pytest.raises(JobError, match="timezone"):
        jobs.create(session_id="session-demo", name="x", cron="rate(1 hour)", timezone="Mars/Olympus")
    assert jobs.list() == []


def test_register_and_finish_task_wakes_the_agent(store: DynamoStore, resources: Resources) -> None:
    # GIVEN a producer that registered a task when it started
    seed_session(store, "session-demo")
    sqs = boto3.client("sqs", region_name=REGION)
    tasks = TasksService(store, resources.queue_url, sqs=sqs)
    registered = tasks.register_task("session-demo", "web_research", {"query": "aurora"})
    task_id = registered.task_id
    assert store.records.get_task(task_id).status == "running"  # type: ignore[union-attr]
    # AND the store keeps only the token's hash
    assert registered.task_token not in json.dumps(
        store.table.db.get_item(TableName=store.table.name, Key=store.table.key(f"TASK#{task_id}", "TASK"))
    )
    # WHEN it finishes, with its token
    tasks.finish_task(
        task_id, "succeeded", "Aurora costs X", task_token=registered.task_token, summary_name="Aurora research"
    )
    # THEN a valid completion message is on the queue, and handling it wakes the agent
    [msg] = drain(resources.queue_url)
    body = json.loads(msg["Body"])
    assert body["task_id"] == task_id and body["session_id"] == "session-demo" and body["status"] == "succeeded"
    record = {
        "messageId": msg["MessageId"],
        "receiptHandle": msg["ReceiptHandle"],
        "body": msg["Body"],
        "attributes": {
            "ApproximateReceiveCount": "1",
            "SentTimestamp": "1",
            "SenderId": "x",
            "ApproximateFirstReceiveTimestamp": "1",
        },
        "messageAttributes": {},
        "md5OfBody": msg["MD5OfBody"],
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:results",
        "awsRegion": REGION,
    }
    assert background_result.handler({"Records": [record]}, FakeLambdaContext()) == {"batchItemFailures": []}
    assert store.records.get_task(task_id).status == "woken"  # type: ignore[union-attr]


def test_finish_unknown_task_is_refused(store: DynamoStore, resources: Resources) -> None:
    tasks = TasksService(store, resources.queue_url, sqs=boto3.client("sqs", region_name=REGION))
    with pytest.raises(UnknownTask):
        tasks.finish_task("task-nope", "succeeded", "x", task_token="awt_whatever")
    assert drain(resources.queue_url) == []


def test_a_one_time_job_in_the_past_is_refused_by_the_api(jobs: JobsService, store: DynamoStore) -> None:
    # GIVEN a session  WHEN the jobs API is asked for an at() job whose time (in its zone) has passed
    seed_session(store, "session-past")
    with pytest.raises(JobError, match=r"at\(2020-01-01T00:00:00\) \(Europe/Berlin\) is in the past"):
        jobs.create(session_id="session-past", name="Past", at="2020-01-01T00:00:00", timezone="Europe/Berlin")
    # THEN nothing was written: no job, no schedule
    assert jobs.list() == []
    assert jobs.schedules.client.list_schedules(GroupName=jobs.schedules.group)["Schedules"] == []
