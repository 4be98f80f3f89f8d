"""The woken agent's ``cancel_task`` tool (agent/tools/cancel_task.py): offered when the session's
agent may start tasks, it cancels only tasks this conversation's runs started; every refusal is a
result the model reads; a what-if replay cancels nothing."""

from __future__ import annotations

import boto3
import pytest

from agentwake.agent.tools import DRY_RUN_RESULT, ToolContext, ToolRegistry
from agentwake.agent.tools.cancel_task import CancelTask, starts_tasks
from agentwake.domain.conversation import ToolCall
from agentwake.domain.models import Task, task_token_hash
from agentwake.product.tasks import TasksService
from agentwake.settings import Settings
from agentwake.store.dynamo import DynamoStore
from agentwake.store.queues import WorkQueue
from agentwake.wake.background import wake_for_background_result
from agentwake.wake.spec import WakeDeps
from tests.support.aws import REGION, Resources
from tests.support.builders import message, seed_session, seed_task

RESEARCHER = {"name": "researcher", "persona": "You research."}


def tasks_service(store: DynamoStore, resources: Resources) -> TasksService:
    sqs = boto3.client("sqs", region_name=REGION)
    return TasksService(store, resources.queue_url, sqs=sqs, work_queue=WorkQueue(resources.work_queue_url, client=sqs))


def put(store: DynamoStore, task_id: str, session_id: str, started_by: str | None) -> None:
    store.records.put_task(
        Task(
            task_id=task_id,
            session_id=session_id,
            tool_name="research",
            token_sha256=task_token_hash("awt_x"),
            kind="subagent" if started_by else "producer",
            started_by=started_by,
        )
    )


def cancel(registry: ToolRegistry, task_id: str, *, session: str = "s1", dry_run: bool = False) -> str:
    ctx = ToolContext(run_id="cron:j1:2026-11-30T05:00:00Z", session_id=session, step=1, dry_run=dry_run)
    return registry.execute(ToolCall(id="c1", name="cancel_task", arguments=f'{{"task_id": "{task_id}"}}'), ctx)


def test_the_agent_cancels_only_the_tasks_its_conversations_runs_started(
    store: DynamoStore, resources: Resources
) -> None:
    # GIVEN a task a run of s1 started, one the product registered for s1, and one a run of s2 started
    tasks = tasks_service(store, resources)
    registry = ToolRegistry([CancelTask(tasks)])
    put(store, "t-mine", "s1", "bg:t-earlier")
    put(store, "t-product", "s1", None)
    put(store, "t-other", "s2", "bg:t-else")
    # WHEN the agent of s1 asks to cancel each
    mine, again = cancel(registry, "t-mine"), cancel(registry, "t-mine")
    product, other = cancel(registry, "t-product"), cancel(registry, "t-other")
    # THEN its own is cancelled (and asking again, as a retried run does, answers the same)
    assert mine == again and mine.startswith("cancelled task t-mine (research): you will not be woken for it")
    assert store.records.get_task("t-mine").status == "cancelled"  # type: ignore[union-attr]
    # AND the others are refused as results the model reads, and left untouched
    assert product.startswith("refused: task t-product was started by the product, not by you")
    assert other == "refused: there is no task t-other started in this conversation; nothing was cancelled"
    for untouched in ("t-product", "t-other"):
        task = store.records.get_task(untouched)
        assert task is not None and (task.status, task.outcome) == ("running", None)


def test_a_task_that_already_ended_is_refused_and_a_replay_cancels_nothing(
    store: DynamoStore, resources: Resources
) -> None:
    tasks = tasks_service(store, resources)
    registry = ToolRegistry([CancelTask(tasks)])
    put(store, "t-done", "s1", "bg:t-earlier")
    put(store, "t-live", "s1", "bg:t-earlier")
    store.records.claim_task_outcome("t-done", number=1, outcome="succeeded", reason=None, at="2026-11-30T05:00:00Z")
    # WHEN the agent cancels a task that ended THEN it reads why, and what to do instead
    assert cancel(registry, "t-done").startswith("refused: task t-done has already ended (succeeded)")
    # WHEN a what-if replay calls it THEN nothing is cancelled
    assert cancel(registry, "t-live", dry_run=True) == DRY_RUN_RESULT
    assert store.records.get_task("t-live").status == "running"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("tools", "subagents", "offered"),
    [
        ([], [], False),
        ([{"type": "http", "name": "lookup", "url": "https://example.com"}], [], False),
        ([{"type": "http", "name": "lookup", "url": "https://example.com", "background": True}], [], True),
        ([], [RESEARCHER], True),
    ],
)
def test_cancel_task_is_offered_when_the_agent_may_start_tasks(tools: list, subagents: list, offered: bool) -> None:
    assert starts_tasks(tools, subagents) is offered


def test_a_woken_agent_with_a_subagent_cancels_its_task_in_its_run(store: DynamoStore, resources: Resources) -> None:
    # GIVEN a session with a subagent, a task one of its runs started, and a wake of that session
    # whose model cancels the task, then answers
    script = [
        {"tool_calls": [{"name": "cancel_task", "arguments": {"task_id": "t-sub"}}]},
        {"text": "Cancelled the research."},
    ]
    seed_session(store, "s1", providers=[{"type": "scripted", "id": "p", "script": script}], subagents=[RESEARCHER])
    put(store, "t-sub", "s1", "bg:t-earlier")
    seed_task(store, "t-wake", "s1")
    deps = WakeDeps(store=store, settings=Settings.from_env(), tasks=tasks_service(store, resources))
    # WHEN the wake runs
    outcome = wake_for_background_result(message("t-wake", "s1"), deps)
    # THEN the run succeeded, and the subagent's task is cancelled by that run
    assert outcome.status == "succeeded"
    task = store.records.get_task("t-sub")
    assert task is not None and task.status == "cancelled"
    assert task.outcome_reason == "cancelled by the agent (run bg:t-wake)"
