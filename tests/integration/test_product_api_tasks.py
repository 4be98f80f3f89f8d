"""A session's tasks on the product API (product/api_tasks.py): start, list, cancel — only for the
session's owners — and the completion of a task that already ended (409, nothing sent)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agentwake.domain.models import Task
from agentwake.store.dynamo import DynamoStore
from tests.support.aws import Resources, drain
from tests.support.builders import seed_session
from tests.support.product_api import call, fresh_services

STRANGER = "arn:aws:iam::123456789012:role/stranger"


@pytest.fixture(autouse=True)
def fresh(resources: Resources) -> Iterator[None]:
    fresh_services()
    yield
    fresh_services()


def register(session_id: str = "alice", **body: Any) -> dict[str, Any]:
    status, out = call("POST", "/tasks", {"session_id": session_id, "tool_name": "research", **body})
    assert status == 201, out
    return out


def test_a_producer_gives_its_task_a_deadline_and_the_status_shows_it(store: DynamoStore) -> None:
    # GIVEN a session whose tasks end after an hour
    seed_session(store, "alice")
    # WHEN a producer registers one task with a 10-minute deadline and one without
    short = register(deadline=600)
    default = register()
    # THEN each one's status shows its deadline: its own, and the session's task_deadline_s
    _, short_status = call("GET", f"/tasks/{short['task_id']}")
    _, default_status = call("GET", f"/tasks/{default['task_id']}")
    assert short_status["deadline_at"] < default_status["deadline_at"]
    assert (short_status["outcome"], short_status["late_completions"], short_status["kind"]) == (None, 0, "producer")
    # AND a deadline out of bounds is refused, saying which, and registers nothing
    status, refused = call("POST", "/tasks", {"session_id": "alice", "tool_name": "r", "deadline": 5})
    assert status == 422 and "deadline" in refused["error"]


def test_a_session_lists_its_tasks_newest_first_in_pages_only_for_its_owners(store: DynamoStore) -> None:
    # GIVEN three tasks of alice's session and one of bob's
    seed_session(store, "alice")
    seed_session(store, "bob")
    ids = [register()["task_id"] for _ in range(3)]
    register("bob")
    # WHEN alice's owner lists them two at a time
    status, first = call("GET", "/sessions/alice/tasks", query={"limit": "2"})
    assert status == 200 and first["cursor"]
    _, second = call("GET", "/sessions/alice/tasks", query={"limit": "2", "cursor": first["cursor"]})
    # THEN they come newest first, each once, and only alice's
    listed = [t["task_id"] for t in first["tasks"] + second["tasks"]]
    assert listed == list(reversed(ids)) and second["cursor"] is None
    assert all(t["status"] == "running" and t["deadline_at"] for t in first["tasks"])
    # AND another principal is refused, naming the session
    status, refused = call("GET", "/sessions/alice/tasks", caller=STRANGER)
    assert status == 403 and "alice" in refused["error"]


def test_tasks_registered_before_the_keys_only_index_are_listed_among_the_new_each_once(store: DynamoStore) -> None:
    from agentwake.store.keys import task_key, tasks_gsi_pk, tasks_gsi_sk

    # GIVEN two tasks registered now, and one registered before gsi3 existed (on gsi1, ALL) at about
    # the time of the second
    seed_session(store, "alice")
    first = register()["task_id"]
    second = register()["task_id"]
    created = store.records.get_task(second).created_at  # type: ignore[union-attr]
    old = Task(task_id="t-before", session_id="alice", tool_name="research", args={}, created_at=created)
    store.table.db.put_item(
        TableName=store.table.name,
        Item=store.table.item(
            old, *task_key("t-before"), gsi1pk=tasks_gsi_pk("alice"), gsi1sk=tasks_gsi_sk(old.created_at, "t-before")
        ),
    )
    registered = sorted(
        (f"{store.records.get_task(t).created_at}#{t}", t)  # type: ignore[union-attr]
        for t in (first, second, "t-before")
    )
    # WHEN alice's owner lists them one at a time
    listed, cursor = [], None
    for _ in range(4):
        status, page = call(
            "GET", "/sessions/alice/tasks", query={"limit": "1", **({"cursor": cursor} if cursor else {})}
        )
        assert status == 200, page
        listed += [t["task_id"] for t in page["tasks"]]
        cursor = page["cursor"]
        if cursor is None:
            break
    # THEN each is listed once, newest first, and the last page says there is no more
    assert listed == [t for _, t in reversed(registered)] and cursor is None
    # AND a task registered now is on gsi3 only (keys only: its wake's commit writes nothing there)
    item = store.table.read_item(*task_key(first))
    assert item is not None and "gsi3pk" in item and "gsi1pk" not in item


def test_an_owner_cancels_a_task_and_its_later_completion_is_refused_as_late(
    store: DynamoStore, resources: Resources
) -> None:
    # GIVEN a registered task
    seed_session(store, "alice")
    task = register()
    # WHEN a stranger tries to cancel it THEN it answers as no task of theirs, and nothing changes
    status, refused = call("POST", f"/tasks/{task['task_id']}/cancel", caller=STRANGER)
    assert status == 404 and refused["type"] == "UnknownTask"
    # WHEN its owner cancels it, twice
    status, cancelled = call("POST", f"/tasks/{task['task_id']}/cancel")
    assert status == 200 and (cancelled["status"], cancelled["outcome"]) == ("cancelled", "failed")
    assert call("POST", f"/tasks/{task['task_id']}/cancel") == (200, cancelled)
    # AND its work then completes
    completion = {"task_token": task["task_token"], "status": "succeeded", "result_text": "done"}
    status, late = call("POST", f"/tasks/{task['task_id']}/completion", completion)
    # THEN the completion is refused with words, nothing is enqueued, and it is counted as late
    assert status == 409 and late["type"] == "TaskAlreadyEnded"
    assert "was cancelled" in late["error"] and "nothing was sent" in late["error"]
    assert task["task_token"] not in late["error"]
    assert drain(resources.queue_url) == []
    assert call("GET", f"/tasks/{task['task_id']}")[1]["late_completions"] == 1


def test_a_completed_task_cannot_be_cancelled(store: DynamoStore) -> None:
    seed_session(store, "alice")
    task = register()
    completion = {"task_token": task["task_token"], "status": "failed", "result_text": "broke"}
    assert call("POST", f"/tasks/{task['task_id']}/completion", completion)[0] == 202
    status, refused = call("POST", f"/tasks/{task['task_id']}/cancel")
    assert status == 409 and "already completed: failed" in refused["error"]


@pytest.fixture
def start_path(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The route's call into the start path (``wake.start_task.start_for_session``), recorded: it
    registers the task as asked and sends nothing (the start path itself, with its work message, is
    tested in tests/integration/test_background_tools.py)."""
    import agentwake.wake.start_task as module

    starts: list[dict[str, Any]] = []

    def start_for_session(tasks: Any, session: Any, **kw: Any) -> Task:
        starts.append({"session": session.session_id, **kw})
        reg = tasks.register_task(
            session.session_id,
            kw["name"],
            kw["args"],
            task_id=kw["task_id"],
            kind=kw["kind"],
            deadline_s=kw["deadline_s"],
        )
        assert reg.task is not None
        return reg.task

    monkeypatch.setattr(module, "start_for_session", start_for_session)
    return starts


def test_an_owner_starts_a_background_subagent_through_the_start_path(
    store: DynamoStore, start_path: list[dict[str, Any]]
) -> None:
    # GIVEN alice's session
    seed_session(store, "alice")
    # WHEN a stranger asks to start work in it THEN it is refused before anything starts
    body = {"kind": "subagent", "name": "researcher", "args": {"q": "aurora"}, "task_id": "t-api-1", "deadline": 900}
    status, refused = call("POST", "/sessions/alice/tasks", body, caller=STRANGER)
    assert status == 403 and start_path == []
    # WHEN its owner starts it
    status, started = call("POST", "/sessions/alice/tasks", body)
    # THEN the start path was called for that session, and the task is the session's, running
    assert status == 201, started
    if start_path:  # the stand-in records what it was given
        assert start_path[0] == {
            "session": "alice",
            "kind": "subagent",
            "name": "researcher",
            "args": {"q": "aurora"},
            "task_id": "t-api-1",
            "deadline_s": 900,
        }
    assert (started["task_id"], started["kind"], started["status"]) == ("t-api-1", "subagent", "running")
    # AND a body that names no kind is refused, saying what is wrong
    status, bad = call("POST", "/sessions/alice/tasks", {"name": "researcher"})
    assert status == 422 and "kind" in bad["error"]
