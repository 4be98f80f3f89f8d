"""The daily counters behind the store port: ``store.daily_counters`` and
``store.journals.journal(counters=...)``, the journal that counts a reply's tokens in the reply's own write."""

from __future__ import annotations

from agentwake.store.dynamo import DynamoStore
from agentwake.store.journal import DynamoJournal
from agentwake.store.keys import usage_day
from tests.support.probes import DynamoCalls
from tests.support.store_writes import begin_attempt

USAGE = {"input_tokens": 30, "output_tokens": 12}
TOOL_REPLY = {"text": "", "tool_calls": [{"id": "c1", "name": "t", "arguments": "{}"}], "usage": USAGE}


def test_a_counting_journal_adds_a_replys_tokens_in_the_same_write(store: DynamoStore) -> None:
    # GIVEN a run's journal built with the session's counters of today
    counters = store.daily.counters("s1")
    journal = store.journals.journal("bg:t1", fresh=True, counters=counters)
    calls = DynamoCalls(store.table.db)
    # WHEN a reply that calls tools is journaled (written at once)
    written = calls.during(lambda: journal.put("000.reply", TOOL_REPLY))
    # THEN the step and the tokens land in one transaction, and the counter holds them
    assert written == ["TransactWriteItems"]
    assert counters.read() == (42, 0)
    assert store.journals.journal_entries("bg:t1")["000.reply"]["usage"] == USAGE


def test_a_journal_without_counters_writes_the_step_alone(store: DynamoStore) -> None:
    # GIVEN a run's journal of a session without daily limits
    journal = store.journals.journal("bg:t2", fresh=True)
    calls = DynamoCalls(store.table.db)
    # WHEN the same reply is journaled THEN it is one PutItem and nothing is counted
    assert calls.during(lambda: journal.put("000.reply", TOOL_REPLY)) == ["PutItem"]
    assert store.daily.counters("s1").read() == (0, 0)


def test_the_counting_journal_is_the_journal_and_its_last_step_counts_with_the_commit(store: DynamoStore) -> None:
    # GIVEN a run begun, and its counting journal (no wrapper: the journal the channel records with)
    begin_attempt(store, "bg:t3", kind="background", session_id="s1")
    counters = store.daily.counters("s1", day=usage_day(store.table.now()))
    journal = store.journals.journal("bg:t3", counters=counters)
    assert isinstance(journal, DynamoJournal) and not hasattr(journal, "inner")
    # WHEN the run's last reply (no tool calls) is journaled: it is kept back for the commit
    journal.put("000.reply", {"text": "done", "tool_calls": [], "usage": USAGE})
    assert counters.read() == (0, 0)
    assert journal.get("000.reply") is not None and "000.reply" in journal.entries
    unwritten = journal.unwritten(for_commit=True)
    assert list(unwritten.steps) == ["000.reply"] and len(unwritten.also) == 1
    # AND the run commits
    store.ends.commit_success(run_id="bg:t3", session_id="s1", note="ok", steps=1, journal=journal)
    # THEN its tokens landed with the commit; the reply itself did not (the note keeps its text, and
    # a run that succeeded is never retried from its journal: issue 37)
    assert counters.read() == (42, 0)
    assert store.journals.journal_entries("bg:t3") == {} and not journal.unwritten()
