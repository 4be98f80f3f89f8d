"""A tool call that waits for a person's decision (issue 35): its gate and the run's request to park
on it. Apart from the tools and the runner because only a session whose tools have an approval
rule builds them: a cold start does not (tests/unit/test_cold_start.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentwake.domain.approvals import ApprovalRule
    from agentwake.domain.conversation import ToolCall


@dataclass(frozen=True)
class Gate:
    """A call that must wait for a person's decision: its tool, the rule, the condition that matched
    (in words) and the arguments as the model gave them (validated)."""

    tool: str
    rule: ApprovalRule
    words: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ParkRequest:
    """The call a parked run waits on: tool call ``index`` of the reply at ``step``, and its gate."""

    step: int
    index: int
    call: ToolCall
    gate: Gate
    #: the request as journaled by an earlier attempt (``approval`` step), None if never asked
    asked: dict[str, Any] | None = None
