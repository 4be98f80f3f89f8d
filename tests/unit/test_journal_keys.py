"""The journal's step keys (domain/steps.py): built and read back in one module, and which steps
the journal keeps back for the commit (docs/durability.md, durable steps)."""

from __future__ import annotations

import pytest

from agentwake.agent.tools import ToolContext
from agentwake.domain.steps import (
    FINAL_DELIVERY_KEY,
    StepKey,
    approval_delivery_id,
    approval_key,
    asked_key,
    decision_key,
    final_delivery_id,
    is_final_delivery,
    is_model_reply,
    is_tool_result,
    kept_for_commit,
    parse_step_key,
    reply_key,
    tool_key,
)


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        (reply_key(0), StepKey("reply", 0)),
        (reply_key(7), StepKey("reply", 7)),
        (reply_key(1234), StepKey("reply", 1234)),
        (tool_key(0, 0), StepKey("tool", 0, 0)),
        (tool_key(3, 12), StepKey("tool", 3, 12)),
        (tool_key(1000, 100), StepKey("tool", 1000, 100)),
        (FINAL_DELIVERY_KEY, StepKey("final")),
    ],
)
def test_a_built_key_reads_back_as_the_step_it_was_built_for(key: str, expected: StepKey) -> None:
    # GIVEN a key built for a step WHEN it is read back
    parsed = parse_step_key(key)
    # THEN it names that step, and builds the same key again
    assert parsed == expected
    assert str(parsed) == key


def test_keys_are_the_ones_stored_journals_hold() -> None:
    # GIVEN keys journaled by earlier releases (the stored journal of a run redriven after an upgrade)
    # THEN the grammar builds exactly them
    assert [reply_key(0), tool_key(0, 1), reply_key(12), FINAL_DELIVERY_KEY] == [
        "000.reply",
        "000.tool.01",
        "012.reply",
        "final.delivery",
    ]


def test_keys_sort_in_the_order_the_steps_were_written() -> None:
    # GIVEN a run's keys in the order it journals them (a retry replays them sorted)
    written = [reply_key(0), tool_key(0, 0), tool_key(0, 1), reply_key(1), tool_key(1, 0), reply_key(2)]
    # THEN sorting them keeps that order, and deliver_final's entry comes after every step
    assert sorted([*reversed(written), FINAL_DELIVERY_KEY]) == [*written, FINAL_DELIVERY_KEY]


@pytest.mark.parametrize("key", ["", "reply", "000", "000.reply.00", "x00.reply", "000.tool", "000.tool.x", "final"])
def test_a_key_the_journal_never_writes_is_no_step(key: str) -> None:
    # GIVEN a key outside the grammar WHEN it is read THEN it names no step, and no predicate holds
    assert parse_step_key(key) is None
    assert not (is_model_reply(key) or is_tool_result(key) or is_final_delivery(key))


def test_each_predicate_holds_for_its_own_kind_of_step_only() -> None:
    kinds = {
        reply_key(2): (True, False, False),
        tool_key(2, 0): (False, True, False),
        FINAL_DELIVERY_KEY: (False, False, True),
    }
    for key, expected in kinds.items():
        assert (is_model_reply(key), is_tool_result(key), is_final_delivery(key)) == expected, key


@pytest.mark.parametrize(
    ("key", "value", "kept"),
    [
        # a reply with no tool calls ends the run: the commit writes it
        (reply_key(1), {"text": "done", "tool_calls": []}, True),
        (reply_key(1), {"text": "done"}, True),
        # deliver_final's entry ends the run too
        (FINAL_DELIVERY_KEY, {"tool": "send_message_to_user", "delivery_id": "bg:t1#final"}, True),
        # a reply that calls tools is written at once: its tools may act on the world
        (reply_key(0), {"text": "", "tool_calls": [{"id": "c1", "name": "send_message_to_user"}]}, False),
        # a tool result is written at once, even one with no tool calls in it
        (tool_key(0, 0), {"content": "delivered", "tool": "send_message_to_user"}, False),
    ],
)
def test_the_commit_keeps_back_only_the_steps_that_end_the_run(key: str, value: dict, kept: bool) -> None:
    # GIVEN a completed step WHEN the journal asks whether to keep it back for the commit
    # THEN only the run's last steps are kept back
    assert kept_for_commit(key, value) is kept


def test_the_final_answer_is_delivered_under_the_id_its_journal_entry_records() -> None:
    # GIVEN deliver_final's tool context WHEN its delivery id is asked
    ctx = ToolContext(run_id="bg:t1", session_id="s1", final=True)
    # THEN it is the one the journal recognises as the final answer's
    assert ctx.delivery_id == final_delivery_id("bg:t1") == "bg:t1#final"


def test_a_gated_calls_keys_are_built_and_read_back_and_only_asked_is_kept_back() -> None:
    # GIVEN the keys of tool call 1 of step 2's approval: the request, its delivery, the decision
    keys = {approval_key(2, 1): "approval", asked_key(2, 1): "asked", decision_key(2, 1): "decision"}
    for key, kind in keys.items():
        # THEN each reads back as what it is, sorts within its step, and is no reply nor tool result
        assert parse_step_key(key) == StepKey(kind, 2, 1)  # type: ignore[arg-type]
        assert str(parse_step_key(key)) == key and key.startswith("002.")
        assert not is_tool_result(key) and not is_model_reply(key)
    # AND only the report that the request was delivered is kept back for the park transaction
    assert [k for k in keys if kept_for_commit(k, {})] == [asked_key(2, 1)]
    assert approval_delivery_id("bg:t1", 2, 1) == "bg:t1#2#1#approval"
