"""A background tool as the woken agent sees it: the call starts a task and returns at once.

A session's HTTP or Python tool that says ``"background": true`` is offered to the model with its own
name, description and arguments; calling it validates the arguments as the tool would, then starts a
task (``TaskStarter``: once per call, across retries and redrives) instead of calling the tool. The
background-work function later calls the real tool, through the same registry path as a foreground
call, and completes the task; its completion wakes the agent (docs/background-work.md).
"""

from __future__ import annotations

from typing import Any

from agentwake.agent.tools import TaskStarter, Tool, ToolContext
from agentwake.agent.types import ToolSpec
from agentwake.errors import AgentwakeError, ConfigError, StepInterrupted


class BackgroundTool(Tool):
    """``tool``, started as a background task rather than called in the run."""

    #: starting a task is a side effect: a what-if replay never starts one
    side_effect = True

    def __init__(self, tool: Tool, starter: TaskStarter | None, *, deadline_s: float | None = None) -> None:
        self.tool = tool
        self.name = tool.name
        self.description = (
            f"{tool.description}\n\n(Runs in the background: the call returns a task id at once, and you are "
            "woken with its result, or the reason it failed, when it ends.)"
        )
        self.starter = starter
        self.deadline_s = deadline_s

    def spec(self) -> ToolSpec:
        inner = self.tool.spec()
        return ToolSpec(name=inner.name, description=self.description, parameters=inner.parameters)

    def parse_args(self, raw: dict[str, Any]) -> Any:
        self.tool.parse_args(raw)  # refused here as it would be there: the model sees why, nothing starts
        return raw  # the work message carries the arguments as the model gave them

    def invoke(self, args: dict[str, Any], ctx: ToolContext) -> str:
        if self.starter is None:
            raise ConfigError(f"background tool {self.name!r} cannot start here: this process has no work queue")
        try:
            task = self.starter(ctx, kind="tool", name=self.name, args=args, deadline_s=self.deadline_s)
        except AgentwakeError:
            raise  # a refusal the model reads (no work queue, a task id taken), or an interrupted step
        except Exception as exc:
            # the table or the queue failed: perhaps registered, perhaps sent. Not an error the model
            # should act on: the step is redone on retry, and the start is idempotent on this call
            raise StepInterrupted(
                f"starting background tool {self.name!r} did not finish: {type(exc).__name__}"
            ) from exc
        until = f", deadline {task.deadline_at}" if task.deadline_at else ""
        return (
            f"started task {task.task_id} ({self.name} in the background{until}): "
            "you will be woken when it finishes, with its result or the reason it failed"
        )
