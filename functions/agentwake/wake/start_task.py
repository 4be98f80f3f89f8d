"""The one start path of a task agentwake runs itself: a background tool, a background subagent, or
either started by the product API. Register the task, then send its work message.

Exactly once per start (a tool call, or the product's task id), across retries and redrives of the
run that starts it (docs/background-work.md):

1. The task id comes from the start: ``task_id_for_call(ctx.idempotency_key)`` (the run, step and
   call), or the product's own id. A retried step registers the same id and finds it there.
2. The work message carries the task's token. The background-work function *claims* the work with it
   (``claim_task_work``: a conditional write on the task) before it calls anything.
3. A retried start that finds its task registered but unclaimed cannot know whether its first message
   was sent: it rotates the token (conditional on "still unclaimed") and sends again. A first message,
   if there was one, carries the old token and can no longer claim: one message is ever executed.
   One that finds the work claimed (or the task ended) sends nothing.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from agentwake.domain.models import DEFAULT_TASK_DEADLINE_S, Task, task_token_hash
from agentwake.errors import ConfigError, InvalidMessage, TaskExists
from agentwake.observability import logger
from agentwake.wake.messages import WorkMessage

if TYPE_CHECKING:
    from agentwake.agent.tools import ToolContext
    from agentwake.domain.models import SessionConfig
    from agentwake.product.tasks import TasksService

WorkKind = Literal["tool", "subagent"]


def task_id_for_call(idempotency_key: str) -> str:
    """The task a tool call starts: the same on every retry and redrive of its run (the call's
    ``{run}#{step}#{call}`` does not fit a task id, so it is hashed; the task keeps it as ``started_by_call``)."""
    return "t-" + hashlib.sha256(idempotency_key.encode("utf-8", errors="surrogatepass")).hexdigest()[:32]


def start_background_task(
    ctx: ToolContext,
    *,
    kind: WorkKind,
    name: str,
    args: dict[str, Any],
    deadline_s: float | None = None,
    tasks: TasksService,
    default_deadline_s: float = DEFAULT_TASK_DEADLINE_S,
) -> Task:
    """Start the background ``tool`` or ``subagent`` ``name`` for the run's tool call ``ctx``, once per
    call: returns the task (registered now, or by an earlier attempt of the same call). ``deadline_s``:
    the tool's or subagent's own budget (None: ``default_deadline_s``, the session's ``task_deadline_s``).
    A budget bounds one attempt of the work, and the work gets up to MaxReceiveCount attempts, each
    after the queue's visibility timeout: the task's deadline is never shorter than the session's
    ``task_deadline_s`` (3600 s by default: 5 attempts of the template's 720 s visibility).
    Raises ConfigError where there is no work queue (nothing registered)."""
    if ctx.dry_run:  # the registry never calls a side-effecting tool in a replay; this never starts one either
        raise ConfigError("a what-if replay starts no task")
    return start_task(
        tasks,
        task_id=task_id_for_call(ctx.idempotency_key),
        session_id=ctx.session_id,
        kind=kind,
        name=name,
        args=args,
        started_by=ctx.run_id,
        started_by_call=ctx.idempotency_key,
        deadline_s=max(deadline_s or 0, default_deadline_s),
    )


def start_for_session(
    tasks: TasksService,
    session: SessionConfig,
    *,
    kind: WorkKind,
    name: str,
    args: dict[str, Any],
    task_id: str | None = None,
    deadline_s: float | None = None,
) -> Task:
    """The product API's start: a background tool or subagent of ``session``, for the product's own
    live agent. ``task_id``: the caller's (a repeat of the same start returns the same task and sends
    nothing new), or a new one. Raises InvalidMessage for a name the session does not declare or
    arguments its tool refuses (nothing registered)."""
    import uuid

    budget: float | None = None
    if kind == "tool":
        budget = _check_tool_call(session, name, args)
    else:
        budget, args = _check_subagent_call(session, name, args)
    return start_task(
        tasks,
        task_id=task_id or f"task-{uuid.uuid4().hex[:16]}",
        session_id=session.session_id,
        kind=kind,
        name=name,
        args=args,
        started_by=None,
        started_by_call=None,
        deadline_s=deadline_s or max(budget or 0, session.task_deadline_s),
    )


def _check_subagent_call(session: SessionConfig, name: str, args: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """The session's subagent ``name`` may run in the background with ``args`` (``{"task": ...}``, as
    its hand-off tool takes them): its time budget and the arguments as the hand-off tool keeps them.
    InvalidMessage saying what is wrong otherwise (nothing registered)."""
    from pydantic import ValidationError

    from agentwake.agent.subagents import parse_subagents
    from agentwake.errors import describe_validation_error
    from agentwake.wake.subagent_tools import HandOffArgs

    specs = {s.name: s for s in parse_subagents(session.subagents, session.tools, session_id=session.session_id)}
    spec = specs.get(name)
    if spec is None:
        raise InvalidMessage(
            f"session {session.session_id} has no subagent {name!r} (it has: {', '.join(specs) or 'none'})"
        )
    if not spec.allows(True):
        raise InvalidMessage(f"subagent {name!r} runs only in the foreground (its mode is {spec.mode!r})")
    try:
        handed = HandOffArgs.model_validate({**args, "background": True})
    except ValidationError as exc:
        problems = describe_validation_error(exc, whole="(args)")
        raise InvalidMessage(f'arguments for subagent {name!r} must be {{"task": "..."}}: {problems}') from exc
    return float(spec.time_budget_s), {"task": handed.task}


def _check_tool_call(session: SessionConfig, name: str, args: dict[str, Any]) -> float | None:
    """The session's tool ``name`` accepts ``args``: its own deadline (None: the session's)."""
    from agentwake.agent.tools import ToolArgumentsInvalid
    from agentwake.agent.tools.config import build_tools, parse_tool_spec

    for raw in session.tools:
        spec = parse_tool_spec(raw)
        if spec.name != name:
            continue
        (tool,) = build_tools([raw], session_id=session.session_id, run_background=True)
        try:
            tool.parse_args(args)
        except ToolArgumentsInvalid as exc:
            raise InvalidMessage(f"arguments for tool {name!r} do not match its schema: {exc}") from exc
        return spec.deadline_s
    names = ", ".join(str(t.get("name")) for t in session.tools if isinstance(t, dict)) or "none"
    raise InvalidMessage(f"session {session.session_id} has no tool {name!r} (it has: {names})")


def start_task(
    tasks: TasksService,
    *,
    task_id: str,
    session_id: str,
    kind: WorkKind,
    name: str,
    args: dict[str, Any],
    started_by: str | None,
    started_by_call: str | None,
    deadline_s: float,
) -> Task:
    """Register task ``task_id`` and send its work message; a repeat of the same start (same session,
    kind, name, arguments and call) sends again only while no worker has claimed it (module docstring).
    Raises TaskExists when the id belongs to another start."""
    work_queue = tasks.work_queue
    if work_queue is None or not work_queue.url:
        raise ConfigError("AGENTWAKE_WORK_QUEUE_URL is not set: no background work can start here")
    deadline_at = (datetime.now(UTC) + timedelta(seconds=deadline_s)).isoformat(timespec="seconds")
    deadline_at = deadline_at.replace("+00:00", "Z")
    try:
        registered = tasks.register_task(
            session_id,
            name,
            args,
            task_id=task_id,
            kind=kind,
            started_by=started_by,
            started_by_call=started_by_call,
            subagent=name if kind == "subagent" else None,
            deadline_at=deadline_at,
        )
    except TaskExists:
        again = _restart(tasks, task_id, session_id=session_id, kind=kind, name=name, args=args, call=started_by_call)
        if again is None:
            task = tasks.store.records.get_task(task_id)
            assert task is not None
            logger.info("the task was started already; nothing sent", extra={"task_id": task_id})
            return task
        task, token = again
    else:
        assert registered.task is not None
        task, token = registered.task, registered.task_token
    message = WorkMessage(
        kind=kind,
        task_id=task.task_id,
        session_id=session_id,
        task_token=token,
        name=name,
        args=args,
        started_by=started_by,
        deadline_at=task.deadline_at,
    )
    work_queue.send(message.model_dump_json())
    logger.info("background task started", extra={"task_id": task.task_id, "kind": kind, "tool": name})
    return task


def _restart(
    tasks: TasksService,
    task_id: str,
    *,
    session_id: str,
    kind: WorkKind,
    name: str,
    args: dict[str, Any],
    call: str | None,
) -> tuple[Task, str] | None:
    """A repeat of a start whose task is registered: the task and a fresh token to send the work
    with, or None when a worker claimed it (or it ended) and nothing is to be sent."""
    from agentwake.product.tasks import new_task_token

    records = tasks.store.records
    task = records.get_task(task_id)
    if task is None:
        raise TaskExists(f"task {task_id!r} is registered and gone again; start it under a new id")
    same = (task.session_id, task.kind, task.tool_name, task.tool_args, task.started_by_call)
    if same != (session_id, kind, name, args, call):
        raise TaskExists(f"task id {task_id!r} is taken by another start; use a new task id")
    if task.work_claimed or task.outcome is not None or task.status != "running":
        return None
    token = new_task_token()
    if not records.rotate_task_token(task_id, task_token_hash(token)):
        return None  # claimed meanwhile: the work runs
    task = task.model_copy(update={"token_sha256": task_token_hash(token)})
    if task.deadline_at is not None and tasks.work_queue is not None and tasks.work_queue.url:
        # the deadline check sent with the old token retires: the task keeps its deadline with the new one
        tasks.send_deadline_check(task, token)
    return task, token
