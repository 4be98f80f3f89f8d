"""The product API over the wakes a session's agent scheduled (product/api_wakes.py), on moto through
ProductApiFunction's handler: its owners list and cancel them; another principal is refused like on
every session route (403) and changes nothing; a wake of another session is 404 from this one."""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest

from agentwake.handlers import cron_wake
from agentwake.jobs.service import JobsService, JobTargets
from agentwake.store.dynamo import DynamoStore
from agentwake.store.schedules import Schedules
from tests.support.aws import REGION, FakeLambdaContext, Resources
from tests.support.builders import PRODUCT_CALLER, seed_job, seed_session
from tests.support.product_api import call, fresh_services

CRON_ARN = "arn:aws:lambda:us-east-1:123456789012:function:agentwake-CronWakeFunction:live"
ROLE_ARN = "arn:aws:iam::123456789012:role/agentwake-SchedulerRole"
MALLORY = "arn:aws:iam::444455556666:role/other-tenant"


@pytest.fixture(autouse=True)
def fresh(resources: Resources) -> Iterator[None]:
    fresh_services()
    yield
    fresh_services()


def agent_wake(store: DynamoStore, resources: Resources, session_id: str, call_key: str, note: str) -> str:
    """A wake as schedule_wake makes it (JobsService.create with origin agent), with its schedule."""
    jobs = JobsService(
        store,
        Schedules(resources.schedule_group, client=boto3.client("scheduler", region_name=REGION)),
        JobTargets(cron_function_arn=CRON_ARN, scheduler_role_arn=ROLE_ARN),
    )
    job = jobs.create(
        session_id=session_id,
        name="wake",
        at="2099-01-01T09:00:00",
        job_id=f"wake-{call_key}",
        origin="agent",
        created_by_run="bg:t1",
        created_by_call=f"bg:t1#0#{call_key}",
        note=note,
    )
    return job.job_id


def schedule_names(resources: Resources) -> list[str]:
    client = boto3.client("scheduler", region_name=REGION)
    return [s["Name"] for s in client.list_schedules(GroupName=resources.schedule_group)["Schedules"]]


def test_the_owner_lists_and_cancels_its_sessions_wakes_once(store: DynamoStore, resources: Resources) -> None:
    # GIVEN session a with two agent wakes and an operator's job
    seed_session(store, "a")
    first = agent_wake(store, resources, "a", "1", "check the deploy")
    second = agent_wake(store, resources, "a", "2", "remind about the invoice")
    seed_job(store, "job-op", "a")

    # WHEN its owner lists its wakes  THEN both agent wakes, with their note, call and next fire; no operator job
    status, body = call("GET", "/sessions/a/wakes")
    assert status == 200
    by_id = {w["wake_id"]: w for w in body["wakes"]}
    assert set(by_id) == {first, second}
    assert by_id[first]["note"] == "check the deploy" and by_id[first]["created_by_call"] == "bg:t1#0#1"
    assert by_id[first]["pending"] and by_id[first]["next_fire"] == "2099-01-01T09:00:00+00:00"

    # WHEN it cancels the first, twice
    status, cancelled = call("DELETE", f"/sessions/a/wakes/{first}")
    again_status, again = call("DELETE", f"/sessions/a/wakes/{first}")

    # THEN the first cancels, the second changes nothing and says so
    assert (status, cancelled["cancelled"]) == (200, True)
    assert (again_status, again["cancelled"]) == (200, False) and "already cancelled" in again["message"]
    # AND its schedule (the API manages none) fires into a disabled job: no run, and the fire deletes it
    assert sorted(schedule_names(resources)) == sorted([f"agentwake-{first}", f"agentwake-{second}"])
    event = {"job_id": first, "scheduled_time": "2099-01-01T09:00:00Z", "session_id": "a"}
    assert cron_wake.handler(event, FakeLambdaContext())["status"] == "skipped"
    assert store.records.get_run(f"cron:{first}:2099-01-01T09:00:00Z") is None
    assert schedule_names(resources) == [f"agentwake-{second}"]
    # AND only the second is pending; with include_done the first shows who cancelled it
    assert [w["wake_id"] for w in call("GET", "/sessions/a/wakes")[1]["wakes"]] == [second]
    done = {w["wake_id"]: w for w in call("GET", "/sessions/a/wakes", query={"include_done": "true"})[1]["wakes"]}
    assert done[first]["disabled_reason"] == f"cancelled by {PRODUCT_CALLER} over the product API"


def test_another_principal_is_refused_and_another_sessions_wake_is_not_found(
    store: DynamoStore, resources: Resources
) -> None:
    # GIVEN session a (its owner: the product) with a wake, and session m owned by another principal
    seed_session(store, "a")
    seed_session(store, "m", owners=[MALLORY])
    wake = agent_wake(store, resources, "a", "1", "private plans")

    # WHEN the other principal lists or cancels a's wakes  THEN 403 naming the session, as on every session route
    status, body = call("GET", "/sessions/a/wakes", caller=MALLORY)
    assert status == 403 and "session a" in body["error"] and "private plans" not in str(body)
    assert call("DELETE", f"/sessions/a/wakes/{wake}", caller=MALLORY)[0] == 403
    # AND through its own session: a's wake is not found there (404), and nothing is said about it
    status, body = call("DELETE", f"/sessions/m/wakes/{wake}", caller=MALLORY)
    assert status == 404 and body["type"] == "UnknownWake" and "private plans" not in str(body)
    assert call("GET", "/sessions/m/wakes", caller=MALLORY) == (200, {"wakes": []})
    # AND the operator's job of a is not a wake the API cancels (404), and a's wake is untouched
    seed_job(store, "job-op", "a")
    assert call("DELETE", "/sessions/a/wakes/job-op")[0] == 404
    job = store.records.get_job(wake)
    assert job is not None and job.enabled and schedule_names(resources) == [f"agentwake-{wake}"]


def test_a_malformed_wake_id_is_a_clear_422(store: DynamoStore) -> None:
    seed_session(store, "a")
    status, body = call("DELETE", "/sessions/a/wakes/" + "x" * 300)
    assert status == 422 and body["error"].startswith("invalid request:")


def test_the_client_lists_and_cancels_wakes_over_http(store: DynamoStore, resources: Resources) -> None:
    from agentwake_client import ApiError, ProductApiClient
    from tests.support.builders import LOCAL_CALLER
    from tests.support.product_api import served

    # GIVEN session a, owned by the client's principal, with an agent wake
    seed_session(store, "a", owners=[LOCAL_CALLER])
    wake = agent_wake(store, resources, "a", "1", "check the deploy")
    with served(resources) as url:
        client = ProductApiClient(url, region="us-east-1")
        # WHEN the client lists and cancels it over signed HTTP
        assert [(w["wake_id"], w["note"]) for w in client.list_wakes("a")] == [(wake, "check the deploy")]
        assert client.cancel_wake("a", wake)["cancelled"] is True
        # THEN it is no longer pending, is listed as done, and an unknown wake is an ApiError 404
        assert client.list_wakes("a") == []
        assert [w["pending"] for w in client.list_wakes("a", include_done=True)] == [False]
        with pytest.raises(ApiError) as missing:
            client.cancel_wake("a", "wake-none")
        assert (missing.value.status, missing.value.type) == (404, "UnknownWake")
