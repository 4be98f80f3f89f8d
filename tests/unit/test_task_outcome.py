"""One truthful outcome per task (domain/task_outcome.py), and the words the woken agent and the
history get for it (wake/background.py's note head, wake/prompt.py): a failed outcome never says
"finished" or "Result", a success after a redrive says so."""

from __future__ import annotations

from typing import Any

import pytest

from agentwake.domain.models import Task
from agentwake.domain.task_outcome import Again, Claim, Late, judge
from agentwake.wake.background import background_note_head
from agentwake.wake.messages import BackgroundResultMessage
from agentwake.wake.prompt import build_wake_messages


def task(**kw: Any) -> Task:
    return Task(task_id="t1", session_id="s1", tool_name="Research", **kw)


def result(status: str = "succeeded", outcome: int = 1, text: str = "the answer") -> BackgroundResultMessage:
    return BackgroundResultMessage(
        task_id="t1",
        session_id="s1",
        task_token="awt_x",
        status=status,  # type: ignore[arg-type]
        result_text=text,
        finished_at="2026-11-30T05:00:00Z",
        outcome=outcome,
    )


ENDED_BY_CANCEL = {"cancelled_at": "2026-11-30T05:00:00Z", "outcome": "failed", "outcomes": 1, "status": "cancelled"}
ENDED_BY_DEADLINE = {"timed_out_at": "2026-11-30T05:00:00Z", "outcome": "failed", "outcomes": 1}
FAILED_WORKER = {"outcome": "failed", "outcomes": 1, "kind": "tool", "status": "woken"}


@pytest.mark.parametrize(
    ("state", "status", "by", "outcome", "verdict"),
    [
        ({}, "succeeded", "completion", None, Claim(1)),
        ({}, "failed", "deadline", None, Claim(1)),
        ({}, "failed", "cancel", None, Claim(1)),
        ({"status": "woken"}, "failed", "deadline", None, Late),  # a task from before outcomes: ended
        ({"outcome": "succeeded", "outcomes": 1}, "succeeded", "completion", None, Again(1)),  # a retried claim
        ({"outcome": "succeeded", "outcomes": 1}, "failed", "completion", None, Late),
        ({"outcome": "succeeded", "outcomes": 1}, "failed", "deadline", None, Late),
        ({"outcome": "succeeded", "outcomes": 1}, "failed", "cancel", None, Late),
        (ENDED_BY_CANCEL, "succeeded", "completion", None, Late),
        (ENDED_BY_CANCEL, "failed", "cancel", None, Again(1)),  # cancel is idempotent
        (ENDED_BY_CANCEL, "succeeded", "wake", 1, Late),  # a cancelled task never wakes
        (ENDED_BY_DEADLINE, "succeeded", "completion", None, Late),
        (ENDED_BY_DEADLINE, "failed", "deadline", None, Again(1)),  # the check's own retry
        (ENDED_BY_DEADLINE, "failed", "wake", 1, Again(1)),  # the timed-out completion wakes
        (ENDED_BY_DEADLINE, "succeeded", "wake", 1, Late),
        (FAILED_WORKER, "succeeded", "completion", None, Claim(2)),  # redriven and succeeded
        ({**FAILED_WORKER, "kind": "producer"}, "succeeded", "completion", None, Late),
        ({**FAILED_WORKER, "kind": "subagent"}, "succeeded", "completion", None, Claim(2)),
        ({**FAILED_WORKER, "outcome": "succeeded", "outcomes": 2}, "succeeded", "completion", None, Again(2)),
        ({**FAILED_WORKER, "outcome": "succeeded", "outcomes": 2}, "failed", "completion", None, Late),
        ({**FAILED_WORKER, "outcome": "succeeded", "outcomes": 2}, "succeeded", "wake", 1, Late),
        # outcome 1's completion reaching the wake after outcome 2 was claimed: still claimed, it wakes
        ({**FAILED_WORKER, "outcome": "succeeded", "outcomes": 2}, "failed", "wake", 1, Again(1)),
        ({**FAILED_WORKER, "outcome": "succeeded", "outcomes": 2}, "failed", "wake", 2, Late),
        ({**FAILED_WORKER, "outcome": "succeeded", "outcomes": 2}, "succeeded", "wake", 2, Again(2)),
        ({**FAILED_WORKER, **ENDED_BY_DEADLINE}, "succeeded", "completion", None, Late),  # never after a timeout
    ],
)
def test_one_outcome_per_task_and_a_second_only_for_a_redriven_workers_success(
    state: dict[str, Any], status: str, by: str, outcome: int | None, verdict: Any
) -> None:
    # GIVEN a task in ``state`` WHEN a completion / the deadline / a cancel / a wake asks THEN the rule answers
    got = judge(task(**state), status, by=by, outcome=outcome)  # type: ignore[arg-type]
    assert isinstance(got, Late) if verdict is Late else got == verdict


def test_a_failed_outcome_says_failed_with_its_reason_never_finished_or_result() -> None:
    head = background_note_head(result("failed", text="every provider failed: p1 timeout"), task())
    assert head == "[BackgroundTask] Research (task_id=t1) failed: every provider failed: p1 timeout"
    assert "finished" not in head and "Result" not in head


def test_a_success_after_a_redrive_says_so_and_a_first_success_is_unchanged() -> None:
    assert background_note_head(result(outcome=2), task()) == (
        "[BackgroundTask] Research (task_id=t1) succeeded after a redrive. Result: the answer"
    )
    assert (
        background_note_head(result(), task()) == "[BackgroundTask] Research (task_id=t1) finished. Result: the answer"
    )


@pytest.mark.parametrize(
    ("status", "outcome", "says"),
    [("failed", 1, "has failed"), ("succeeded", 2, "succeeded after a redrive"), ("succeeded", 1, "has finished")],
)
def test_the_wake_prompt_of_a_failed_task_never_says_finished(status: str, outcome: int, says: str) -> None:
    # GIVEN the wake of a task's outcome WHEN its prompt is built THEN its rule and its turn say what happened
    messages = build_wake_messages(
        persona="p", kind="background", wake={"status": status, "outcome": outcome}, history=[]
    )
    system, turn = messages[0].content, messages[-1].content
    assert says in system
    if status == "failed":
        assert "finished" not in system.split("What woke you")[0] and "finished" not in turn
        assert "failed" in turn
