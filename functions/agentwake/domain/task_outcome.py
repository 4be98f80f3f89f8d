"""One truthful outcome per task: who may claim it, and what a later completion means.

A task's outcome is claimed once, by the first of: its completion, its deadline (``failed``, timed
out) or a cancel (``failed``, no wake at all). The claim is a conditional write on the task
(``store.records.claim_task_outcome``) made BEFORE the completion message is sent, so the wake that
follows is for the claimed outcome and no other. ``judge`` is the one rule every path asks —
``TasksService.finish_task``, ``TasksService.cancel_task``, the deadline check
(``wake.task_deadline``) and the wake itself (``wake.background``) — given the task as read:

- ``Claim(n)``: nobody has claimed outcome ``n`` yet: claim it (conditional write), then send.
- ``Again(n)``: this is the claimed outcome ``n`` again (a retry after the claim, e.g. the sender
  crashed before it sent): send again; the wake of ``bg:{task}`` / ``bg:{task}:n`` is idempotent.
  For the wake, any claimed outcome is ``Again``: outcome 1's completion that arrives after outcome 2
  was claimed still wakes ``bg:{task}`` once.
- ``Late(reason)``: the task already ended otherwise (cancelled, timed out, or the other outcome):
  nothing changes, nothing is sent; the completion is counted in ``late_completions``.

Outcome 2 exists for one transition only: a ``tool`` or ``subagent`` task whose own worker completed
it ``failed`` (its run was dead-lettered), was redriven and then succeeded. Never after a cancel or a
timeout, never for a producer's task, and never two for one outcome.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agentwake.domain.models import Task

#: who asks: a completion (the worker's, the producer's), the deadline check, a cancel, or the wake
#: of a completion message (which runs only for the claimed outcome)
Asker = Literal["completion", "deadline", "cancel", "wake"]


@dataclass(frozen=True)
class Claim:
    number: int


@dataclass(frozen=True)
class Again:
    number: int


@dataclass(frozen=True)
class Late:
    reason: str


Verdict = Claim | Again | Late


def timed_out_reason(deadline_s: int) -> str:
    """The reason of a task the deadline completed (the ``failed`` completion's text)."""
    return f"timed out: no completion within {deadline_s} s"


def judge(task: Task, status: Literal["succeeded", "failed"], *, by: Asker, outcome: int | None = None) -> Verdict:
    """What ``by``'s completion with ``status`` (for ``outcome``, the wake's message number) means for
    ``task`` as read. Pure: the caller writes the claim conditionally and asks again if it lost."""
    if task.cancelled_at is not None:
        if by == "cancel":
            return Again(task.outcomes or 1)
        return Late(f"task {task.task_id} was cancelled at {task.cancelled_at}")
    if task.timed_out_at is not None:
        if by == "deadline" or (by == "wake" and status == "failed" and (outcome or 1) == task.outcomes):
            return Again(task.outcomes or 1)  # the deadline's own completion, sent again
        return Late(f"task {task.task_id} timed out at {task.timed_out_at} (its deadline)")
    if task.outcome is None:
        if by in ("deadline", "cancel") and task.status != "running":
            # a task from before outcomes were claimed, already completed
            return Late(f"task {task.task_id} has already completed (status {task.status})")
        if by == "wake" and (outcome or 1) != 1:
            return Late(f"task {task.task_id} has no outcome 1 yet; a message for outcome {outcome} changes nothing")
        return Claim(1)
    if by in ("deadline", "cancel"):
        return Late(f"task {task.task_id} has already completed: {task.outcome}")
    if by == "wake" and (outcome or 1) == 1 and task.outcomes == 2 and status == "failed":
        # outcome 1 (the worker's failure) reaching the wake after outcome 2 was claimed: it is still
        # a claimed outcome, and each wakes the agent once, in whatever order SQS delivers them
        return Again(1)
    if status == task.outcome and (by != "wake" or (outcome or 1) == task.outcomes):
        return Again(task.outcomes)
    if (
        status == "succeeded"
        and task.outcome == "failed"
        and task.outcomes == 1
        and task.kind != "producer"
        and (by != "wake" or outcome == 2)
    ):
        # its own worker failed (dead-lettered), was redriven and succeeded: the one second outcome
        return Claim(2)
    return Late(f"task {task.task_id} has already completed: {task.outcome}")
