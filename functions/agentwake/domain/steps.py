"""The journal's step keys: the one module that builds and parses them (the DynamoDB adapter stores
and reads them, the agent, the wake and the CLI ask here):

- ``000.reply``: the model's reply at step 0 (``reply_key``);
- ``000.tool.01``: the result of that reply's tool call 1 (``tool_key``);
- ``final.delivery``: deliver_final's entry, sent as the delivery ``{run_id}#final``
  (``FINAL_DELIVERY_KEY``, ``final_delivery_id``);
- ``000.approval.01``: tool call 1 of step 0 needs a person's approval: the request as asked
  (``approval_key``); ``000.asked.01``: its delivery to the session's channel (``asked_key``, kept
  back for the park or failure transaction); ``000.decision.01``: the decision, written only by the
  decision's own transaction (``decision_key``).

Step numbers are zero-padded so that keys sort in the order they were written, and
``final.delivery`` sorts after every step. ``kept_for_commit`` says which steps end the run: those
the journal keeps back for the commit (or failure) transaction to write.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal, cast

StepKind = Literal["reply", "tool", "final", "approval", "asked", "decision"]
#: the kinds a gated tool call journals (issue 35): the request, its delivery, the decision
APPROVAL_KINDS = ("approval", "asked", "decision")

#: the final answer sent by deliver_final (sorts after every step key)
FINAL_DELIVERY_KEY = "final.delivery"
#: the result of a background tool's work, kept before its completion is sent (``work:{task}``'s journal)
WORK_RESULT_KEY = "work.result"
#: journaled once its completion was sent: a later copy of the work message sends nothing
WORK_SENT_KEY = "work.sent"
#: in a step's value: the run's attempt that journaled it (a later attempt replays it, never rewrites)
STEP_ATTEMPT = "attempt"
_STEP_KEY = re.compile(
    r"(?P<step>[0-9]+)\.(?:(?P<reply>reply)|(?P<kind>tool|approval|asked|decision)\.(?P<index>[0-9]+))"
)


@dataclass(frozen=True)
class StepKey:
    """One step key as a value: ``str()`` builds it, ``parse_step_key`` reads it back."""

    kind: StepKind
    #: the model call's step number (None for deliver_final's entry)
    step: int | None = None
    #: the tool call's index in its reply (tool results only)
    index: int | None = None

    def __str__(self) -> str:
        if self.kind == "final":
            return FINAL_DELIVERY_KEY
        if self.kind != "reply":
            return f"{self.step:03d}.{self.kind}.{self.index:02d}"
        return f"{self.step:03d}.reply"


def reply_key(step: int) -> str:
    """The key of the model's reply at ``step``."""
    return str(StepKey("reply", step))


def tool_key(step: int, index: int) -> str:
    """The key of the result of tool call ``index`` of the reply at ``step``."""
    return str(StepKey("tool", step, index))


def approval_key(step: int, index: int) -> str:
    """The key of the approval request of tool call ``index`` of the reply at ``step``."""
    return str(StepKey("approval", step, index))


def asked_key(step: int, index: int) -> str:
    """The key of the report that the request of that call was delivered (``{approval_id, delivery_id, token_gen}``)."""
    return str(StepKey("asked", step, index))


def decision_key(step: int, index: int) -> str:
    """The key of the decision on that call's request (written only by the decision)."""
    return str(StepKey("decision", step, index))


def approval_delivery_id(run_id: str, step: int, index: int) -> str:
    """The delivery id of the approval request of tool call ``index`` of step ``step``."""
    return f"{run_id}#{step}#{index}#approval"


def parse_step_key(key: str) -> StepKey | None:
    """The step ``key`` names; None for a key the journal never writes."""
    if key == FINAL_DELIVERY_KEY:
        return StepKey("final")
    found = _STEP_KEY.fullmatch(key)
    if found is None:
        return None
    if found["reply"]:
        return StepKey("reply", int(found["step"]))
    kind = cast("StepKind", found["kind"])
    return StepKey(kind, int(found["step"]), int(found["index"]))


def _kind(key: str) -> StepKind | None:
    parsed = parse_step_key(key)
    return parsed.kind if parsed is not None else None


def is_model_reply(key: str) -> bool:
    return _kind(key) == "reply"


def is_tool_result(key: str) -> bool:
    return _kind(key) == "tool"


def is_final_delivery(key: str) -> bool:
    return key == FINAL_DELIVERY_KEY


def final_delivery_id(run_id: str) -> str:
    """The delivery id of the run's final answer sent by deliver_final (journaled under
    ``final.delivery``); a tool call's deliveries are ``{run_id}#{step}#{call index}``."""
    return f"{run_id}#final"


def work_journal_id(task_id: str) -> str:
    """Where the background-work function journals a background tool's result (the task's own
    partition of the journal, never a run's): a retry sends the kept result instead of calling again."""
    return f"work:{task_id}"


def is_last_reply(key: str, value: dict[str, Any]) -> bool:
    """A model reply with no tool calls: the reply that ends the run (its final answer)."""
    return is_model_reply(key) and not value.get("tool_calls")


def kept_for_commit(key: str, value: dict[str, Any]) -> bool:
    """Whether this step ends the run, so the journal keeps it back for the commit (or failure)
    transaction to write: a model reply with no tool calls, deliver_final's entry, or the report that
    an approval request was delivered (the park transaction writes it). Any other
    step is written at once (a reply that calls tools: its tools may act on the world)."""
    return _kind(key) in ("final", "asked") or is_last_reply(key, value)
