"""``cancel_task``: the woken agent cancels a background task that a run of its own conversation
started (a background tool or subagent it handed work to). Offered when the session's agent may
start tasks (it has a background tool or a subagent).

A cancelled task never wakes the agent; its work's later completion changes nothing (counted as
late). A refusal — not this conversation's task, a task the product registered, one that already
ended — is a result the model reads, saying what it may do instead, never a failed run. Cancelling is
idempotent (a retried or redriven run that cancels again gets the same answer) and a what-if replay
never cancels anything (``side_effect``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from pydantic import BaseModel, ConfigDict, Field

from agentwake.agent.tools import Tool, ToolContext
from agentwake.errors import TaskAlreadyEnded

if TYPE_CHECKING:
    from agentwake.domain.models import Task

#: a task id as the completion message requires it (``wake.messages.ID_PATTERN``)
TASK_ID = r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$"


class TaskCanceller(Protocol):
    """Reads and cancels tasks (``product.tasks.TasksService``)."""

    def get_task(self, task_id: str) -> Task | None: ...

    def cancel_task(self, task_id: str, *, by: str) -> Task: ...


class CancelTaskArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task_id: str = Field(pattern=TASK_ID, description="The task id its start returned (started task ...).")


class CancelTask(Tool):
    name = "cancel_task"
    description = (
        "Cancel a background task that you (this conversation's agent) started and that has not ended yet. "
        "You will not be woken for it; a result that arrives later is ignored. Use it when the work is no "
        "longer wanted."
    )
    Args = CancelTaskArgs
    #: it changes the task: never called in a what-if replay
    side_effect = True

    def __init__(self, tasks: TaskCanceller) -> None:
        self.tasks = tasks

    def invoke(self, args: CancelTaskArgs, ctx: ToolContext) -> str:
        task = self.tasks.get_task(args.task_id)
        if task is None or task.session_id != ctx.session_id:
            # another conversation's task answers as one that does not exist
            return f"refused: there is no task {args.task_id} started in this conversation; nothing was cancelled"
        if task.started_by is None:
            return (
                f"refused: task {args.task_id} was started by the product, not by you; only the tasks your runs "
                "started can be cancelled here. Tell the user if it should be stopped."
            )
        try:
            cancelled = self.tasks.cancel_task(args.task_id, by=f"the agent (run {ctx.run_id})")
        except TaskAlreadyEnded:
            return (
                f"refused: task {args.task_id} has already ended ({task.outcome or task.status}); nothing to "
                "cancel. If you were woken for it, act on that result."
            )
        return (
            f"cancelled task {cancelled.task_id} ({cancelled.tool_name}): you will not be woken for it, and a "
            "result that arrives later is ignored."
        )


def starts_tasks(tools: list[dict[str, object]], subagents: list[dict[str, object]]) -> bool:
    """Whether a session's agent may start tasks: a background tool or a subagent (then it is
    offered ``cancel_task``)."""
    return bool(subagents) or any(isinstance(t, dict) and t.get("background") is True for t in tools)
