"""Wake for a finished background task: validate, check the task and its session, run."""

from __future__ import annotations

from agentwake.errors import ForgedCompletion, SessionMismatch, UnknownTask
from agentwake.observability import logger
from agentwake.store.models import Task, truncate
from agentwake.wake.messages import BackgroundResultMessage
from agentwake.wake.run import RunSpec, WakeDeps, WakeOutcome, execute_run

#: how much of the result text the history note carries
NOTE_RESULT_CHARS = 20_000


def background_note(msg: BackgroundResultMessage, final_answer: str, task: Task | None = None) -> str:
    status = "finished" if msg.status == "succeeded" else "finished with status failed"
    name = msg.summary_name or (task.tool_name if task is not None else msg.tool_name) or "task"
    head = (
        f"[BackgroundTask] {name} (task_id={msg.task_id}) {status}. "
        f"Result: {truncate(msg.result_text, NOTE_RESULT_CHARS)}"
    )
    return f"{head}\n\n{final_answer}" if final_answer else head


def wake_for_background_result(
    msg: BackgroundResultMessage, deps: WakeDeps, *, remaining_ms: int | None = None
) -> WakeOutcome:
    """Raises UnknownTask / ForgedCompletion / SessionMismatch (permanent), SessionBusy, RunFailed (retry).

    Nothing is written before the task, its token and its session are checked.
    """
    logger.append_keys(task_id=msg.task_id, session_id=msg.session_id, run_id=msg.run_id)
    task = deps.store.get_task(msg.task_id)
    if task is None:
        raise UnknownTask(f"no task is registered with id {msg.task_id!r}")
    if not task.token_matches(msg.task_token):
        # only the holder of the token register_task returned may complete the task
        what = "carries no task_token" if not msg.task_token else "carries a task_token that is not this task's"
        raise ForgedCompletion(f"the completion of task {msg.task_id} {what}; the task is left untouched")
    if task.session_id != msg.session_id:
        # never write anything to either conversation: the message may be forged or misrouted
        raise SessionMismatch(
            f"task {msg.task_id} belongs to session {task.session_id!r}, but the message names {msg.session_id!r}"
        )
    wake = {
        "trigger": "background_task_finished",
        "task_id": msg.task_id,
        # what was registered, never what the message claims
        "tool_name": task.tool_name,
        "tool_args": task.tool_args,
        "status": msg.status,
        "summary_name": msg.summary_name or task.tool_name,
        "note": msg.note,
        "finished_at": msg.finished_at,
        "subagent_name": msg.subagent_name,
        "result": truncate(msg.result_text, NOTE_RESULT_CHARS),
    }
    spec = RunSpec(
        run_id=msg.run_id,
        kind="background",
        session_id=msg.session_id,
        wake=wake,
        note=lambda final: background_note(msg, final, task),
        task_id=msg.task_id,
    )
    return execute_run(spec, deps, remaining_ms=remaining_ms)
