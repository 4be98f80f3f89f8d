"""The product API's routes over a session's tasks, under the session's authority (only its owners;
``agentwake.product.authority``), included by ``product/api.py`` (docs/product-api.md):

- ``POST /sessions/{session_id}/tasks`` start one of the session's background tools or subagents
  (``wake.start_task.start_for_session``, the start path the woken agent's tools use) → 201 the task;
  a repeat with the same ``task_id`` starts nothing new
- ``GET /sessions/{session_id}/tasks?cursor=&limit=`` its tasks, newest first (bounded pages)
- ``POST /tasks/{task_id}/cancel`` cancel a task with no outcome yet → 200 the task (``cancelled``; it
  never wakes the agent, and a later completion is recorded as late); 409 when it already ended
"""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Path, Query

from agentwake import bootstrap
from agentwake.domain.models import SessionConfig, Task
from agentwake.errors import UnknownTask
from agentwake.product.api_models import StartBody, TaskList, TaskStatusOut
from agentwake.product.authority import caller, require_owner
from agentwake.wake.messages import ID_PATTERN

router = Router()

SessionId = Annotated[str, Path(pattern=ID_PATTERN)]
TaskId = Annotated[str, Path(pattern=ID_PATTERN)]
#: a page of a session's tasks
DEFAULT_TASK_PAGE = 20
MAX_TASK_PAGE = 100


def _caller() -> str | None:
    return caller(router.current_event.raw_event)


def owned_session(session_id: str) -> SessionConfig:
    """The session's config when the caller owns it (else 403/404: product/authority.py)."""
    from agentwake.product.authority import owned_session as owned  # the one check of every router

    return owned(router.current_event.raw_event, session_id)


def owned_task(task_id: str) -> Task:
    """The task when the caller owns its session. Another owner's task answers as one that does not
    exist (404), so that task ids — one namespace for every product on the stack — say nothing."""
    task = bootstrap.store().records.get_task(task_id)
    unknown = UnknownTask(f"no task is registered with id {task_id!r} for a session of yours")
    if task is None:
        raise unknown
    principal = _caller()
    if principal is None:
        require_owner(task.session_id, None, None)  # NotAnOwner: no identity
    config = bootstrap.store().records.get_session(task.session_id)
    if config is None or principal not in config.owners:
        raise unknown
    return task


def task_out(task: Task) -> TaskStatusOut:
    """What an owner sees of a task: its state, never its session's arguments or token."""
    return TaskStatusOut(
        task_id=task.task_id,
        tool_name=task.tool_name,
        status=task.status,
        created_at=task.created_at,
        finished_at=task.finished_at,
        kind=task.kind,
        outcome=task.outcome,
        outcomes=task.outcomes,
        deadline_at=task.deadline_at,
        cancelled_at=task.cancelled_at,
        timed_out_at=task.timed_out_at,
        late_completions=task.late_completions,
        started_by=task.started_by,
    )


@router.post(
    "/sessions/<session_id>/tasks",
    responses={400: {"description": "no such tool or subagent, or arguments it refuses"}},
)
def start_task(session_id: SessionId, body: StartBody) -> Response[TaskStatusOut]:
    from agentwake.wake.start_task import start_for_session

    config = owned_session(session_id)
    task = start_for_session(
        bootstrap.tasks(),
        config,
        kind=body.kind,
        name=body.name,
        args=body.args,
        task_id=body.task_id,
        deadline_s=body.deadline,
    )
    created: Response[Any] = Response(
        status_code=201, content_type=content_types.APPLICATION_JSON, body=task_out(task).model_dump(mode="json")
    )
    return created


@router.get("/sessions/<session_id>/tasks")
def list_tasks(
    session_id: SessionId,
    cursor: Annotated[str | None, Query(max_length=300)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_TASK_PAGE)] = DEFAULT_TASK_PAGE,
) -> TaskList:
    owned_session(session_id)
    tasks, more = bootstrap.store().records.session_tasks(session_id, limit=limit, before=cursor)
    return TaskList(tasks=[task_out(t) for t in tasks], cursor=more)


@router.post("/tasks/<task_id>/cancel", responses={409: {"description": "the task already ended"}})
def cancel_task(task_id: TaskId) -> TaskStatusOut:
    owned_task(task_id)
    return task_out(bootstrap.tasks().cancel_task(task_id, by=_caller() or "?"))
