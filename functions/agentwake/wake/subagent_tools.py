"""The main agent's hand-off tools: ``ask_{name}`` for each subagent of its session (docs/subagents.md).

- **Foreground** (``background: false``): the subagent's agent loop runs here, inside the current
  tool call, with its own persona, tools and step limit, until min(its time budget, the run's
  deadline). Its final answer is the tool result; its ERROR (max steps, a malformed final call, every
  provider failing, its budget spent) is an ``error:`` result naming the reason. The result is
  journaled by the main run's step like any tool's: a retry or redrive of the main run reads it
  back and does not run the subagent (or bill its model calls) again. A crash of the main run
  *during* the hand-off runs the subagent again on the retry.
- **Background** (``background: true``): a ``subagent`` task is started through the one start path
  (``agentwake.wake.start_task.start_background_task``, exactly once per tool call); the model reads
  "started task T" and is woken with the answer (or the failure) when the ``sub:{task}`` run ends.

A what-if replay starts nothing (the start is a side effect) and runs a foreground subagent with its
own side-effecting tools not called.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from agentwake import deadline as run_deadlines
from agentwake.agent.runner import AgentState
from agentwake.agent.tools import DRY_RUN_RESULT, Tool, ToolContext
from agentwake.domain.models import truncate
from agentwake.errors import DeadlineExceeded

if TYPE_CHECKING:
    from agentwake.agent.subagents import SubagentSpec
    from agentwake.agent.tools import TaskStarter
    from agentwake.agent.woken import WokenAgent
    from agentwake.clock import Clock

#: the longest task text the main agent may hand over
MAX_TASK_CHARS = 20_000
#: builds the subagent's agent: (spec, run id, task text, deadline on the clock, dry run)
BuildSubagent = Callable[["SubagentSpec", str, str, "float | None", bool], "WokenAgent"]


class HandOffArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task: str = Field(
        min_length=1,
        max_length=MAX_TASK_CHARS,
        description="The work to hand over, complete and self-contained: the subagent sees nothing else.",
    )
    background: bool = Field(
        default=False,
        description=(
            "false: wait for the subagent's answer (it is this tool's result). true: start it as a "
            "background task and continue; you are woken with its answer later."
        ),
    )


def foreground_run_id(ctx: ToolContext, name: str) -> str:
    """The run id a foreground subagent's tools see: the main run's tool call, stable across retries."""
    return f"{ctx.idempotency_key}:{name}"


def started_text(task_id: str, name: str) -> str:
    """What the model reads when a background subagent task was started."""
    return (
        f"started task {task_id}: the subagent {name} works in the background; you will be woken with "
        "its answer (or why it failed) when it ends"
    )


class SubagentTool(Tool):
    """``ask_{name}``: hand work to one subagent, in the foreground or the background."""

    Args = HandOffArgs
    #: not a side effect itself: it handles a what-if replay on its own (nothing started, the
    #: foreground subagent's side-effecting tools not called)
    side_effect = False

    def __init__(
        self,
        spec: SubagentSpec,
        *,
        build: BuildSubagent,
        clock: Clock,
        deadline: float | None,
        start: TaskStarter | None,
    ) -> None:
        self.subagent = spec
        self.name = spec.tool_name
        if spec.approval is not None:
            from agentwake.domain.approvals import parse_rule

            self.approval = parse_rule(spec.approval)
        modes = {"both": "now or in the background", "foreground": "now only", "background": "in the background only"}
        self.description = (
            f"Hand a task to the subagent {spec.name!r} ({modes[spec.mode]}; at most {spec.max_steps} steps and "
            f"{spec.time_budget_s} s). {spec.description}"
        ).strip()
        self.build = build
        self.clock = clock
        #: the main run's deadline on ``clock`` (None: unbounded)
        self.deadline = deadline
        self.start = start

    def invoke(self, args: HandOffArgs, ctx: ToolContext) -> str:
        spec = self.subagent
        if not spec.allows(args.background):
            how = "true" if spec.mode == "background" else "false"
            return f"error: the subagent {spec.name} runs only {spec.mode}: call {self.name} with background {how}"
        if args.background:
            return self._start(args, ctx)
        return self._run_here(args, ctx)

    def _start(self, args: HandOffArgs, ctx: ToolContext) -> str:
        if ctx.dry_run:
            return DRY_RUN_RESULT
        if self.start is None:
            return f"error: background subagents cannot be started here; call {self.name} with background false"
        task = self.start(
            ctx,
            kind="subagent",
            name=self.subagent.name,
            args={"task": args.task},
            deadline_s=self.subagent.time_budget_s,
        )
        return started_text(task.task_id, self.subagent.name)

    def _run_here(self, args: HandOffArgs, ctx: ToolContext) -> str:
        spec = self.subagent
        own = self.clock.now() + spec.time_budget_s
        chain_deadline = own if self.deadline is None else min(own, self.deadline)
        outer = run_deadlines.current()
        http_deadline = time.monotonic() + spec.time_budget_s
        if outer is not None:
            http_deadline = min(http_deadline, outer)
        agent = self.build(spec, foreground_run_id(ctx, spec.name), args.task, chain_deadline, ctx.dry_run)
        try:
            with run_deadlines.run_deadline(http_deadline):
                result = agent.run()
        except DeadlineExceeded:
            if run_deadlines.passed():
                raise  # the main run's own deadline: it stops here, unjournaled, and is retried
            return self._out_of_time(agent)
        if result.state is AgentState.DONE:
            return result.completion_text
        if self.clock.now() >= chain_deadline and (self.deadline is None or chain_deadline < self.deadline):
            return self._out_of_time(agent)
        # bounded: every text that leaves a run is (a provider's error may be long)
        return f"error: the subagent {spec.name} failed ({result.error_type}): {truncate(result.completion_text, 4000)}"

    def _out_of_time(self, agent: WokenAgent) -> str:
        done = agent.result()
        steps = done.steps_done if done is not None else 0
        return (
            f"error: the subagent {self.subagent.name} did not finish within its time budget of "
            f"{self.subagent.time_budget_s} s ({steps} steps done); hand it a smaller task or start it in the background"
        )


def subagent_tools(specs: list[SubagentSpec], **parts: Any) -> list[Tool]:
    """One hand-off tool per subagent (``parts``: ``SubagentTool``'s keyword arguments)."""
    return [SubagentTool(spec, **parts) for spec in specs]
