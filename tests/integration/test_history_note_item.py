"""A DONE run's marker and note are one history item (issue 37: one write, not two), and every
reader expands it into the two entries the model and the product see. Items older versions wrote
(the marker and the note as two items) read identically: both shapes are written here side by side
and read through the window, the whole history and the product's pages."""

from __future__ import annotations

from typing import Any

import pytest

from agentwake.domain.models import HistoryEntry
from agentwake.store.dynamo import DynamoStore
from agentwake.store.history import MARKER_TEXT
from agentwake.store.keys import HISTORY_PREFIX, session_pk
from tests.integration.test_wake_handlers import invoke_background, result_body, sqs_record
from tests.support.aws import Resources
from tests.support.builders import seed_session, seed_task


def _write(store: DynamoStore, session_id: str, *, old_shape: bool) -> None:
    """A live exchange, two runs' marker and note, and a live message after them."""
    h = store.history

    def entry(role: str, content: str, kind: str, run_id: str | None = None) -> dict[str, Any]:
        return h.entry_put(HistoryEntry(session_id=session_id, role=role, content=content, kind=kind, run_id=run_id))  # type: ignore[arg-type]

    store.table.transact([("a", entry("user", "hello", "live")), ("b", entry("assistant", "hi", "live"))])
    for run in ("bg:t1", "bg:t2"):
        if old_shape:  # as versions before issue 37 wrote them: two items
            items = [
                ("m", entry("user", MARKER_TEXT, "marker", run)),
                ("n", entry("assistant", f"note {run}", "note", run)),
            ]
        else:
            items = [("n", h.note_put(session_id=session_id, run_id=run, note=f"note {run}"))]
        store.table.transact(items)
    store.table.transact([("c", entry("user", "thanks", "live"))])


def _view(entries: list[HistoryEntry]) -> list[tuple[str, str, str, str | None]]:
    return [(e.kind, e.role, e.content, e.run_id) for e in entries]


def _pages(store: DynamoStore, session_id: str, limit: int) -> list[list[tuple[str, str, str, str | None]]]:
    pages, cursor = [], None
    while True:
        entries, cursor = store.history.conversation_page(session_id, limit=limit, before=cursor)
        pages.append(_view(entries))
        if cursor is None:
            return pages


def test_a_note_item_reads_as_its_marker_and_its_note_like_the_two_items_older_versions_wrote(
    store: DynamoStore,
) -> None:
    # GIVEN the same conversation written in the old shape and in the new one
    _write(store, "old", old_shape=True)
    _write(store, "new", old_shape=False)
    # THEN the new shape holds two items fewer (one per run)
    assert len(list(store.table.query(session_pk("new"), HISTORY_PREFIX))) == 5
    assert len(list(store.table.query(session_pk("old"), HISTORY_PREFIX))) == 7
    # AND the whole history reads the same, each run's marker before its note
    whole = _view(store.history.history("new"))
    assert whole == _view(store.history.history("old"))
    assert [k for k, *_ in whole] == ["live", "live", "marker", "note", "marker", "note", "live"]
    # AND every window the wake reads holds the same newest entries
    for limit in range(1, 9):
        assert _view(store.history.history_window("new", limit)) == _view(store.history.history_window("old", limit))
        assert _view(store.history.history_window("new", limit)) == whole[-limit:]
    # AND the product's pages, newest first, show every entry once, in order, at any page size
    newest_first = whole[::-1]
    for limit in range(1, 9):
        for session_id in ("new", "old"):
            pages = _pages(store, session_id, limit)
            assert [e for p in pages for e in p] == newest_first, (session_id, limit, pages)
            # every page but the last holds exactly ``limit`` entries (the last may be empty, as
            # before, after a full one): a page may end between a note and its marker, and the
            # next page starts at that marker (its cursor says so: keys.MARKER_CURSOR)
            assert all(len(p) == limit for p in pages[:-1]) and len(pages[-1]) <= limit


@pytest.mark.parametrize("runs", [1, 2])
def test_a_wake_writes_its_marker_and_note_as_one_item(resources: Resources, store: DynamoStore, runs: int) -> None:
    # GIVEN a session whose tasks finish, its agent answering in one step
    seed_session(
        store, "s1", providers=[{"type": "scripted", "id": "p", "script": [{"text": "Noted."}]}], deliver_final="never"
    )
    for n in range(runs):
        seed_task(store, f"t{n}", "s1")
        # WHEN each result wakes the agent
        assert invoke_background({"Records": [sqs_record(result_body(f"t{n}", "s1"))]}) == {"batchItemFailures": []}
    # THEN each run wrote one history item, its note, carrying its marker
    items = list(store.table.query(session_pk("s1"), HISTORY_PREFIX))
    assert [i["kind"]["S"] for i in items] == ["note"] * runs
    # AND the history reads as before: each run's marker, then its note
    assert [(e.kind, e.role) for e in store.history.history("s1")] == [("marker", "user"), ("note", "assistant")] * runs
    assert all(e.content == MARKER_TEXT for e in store.history.history("s1") if e.kind == "marker")


def test_a_long_result_and_a_long_answer_leave_the_note_item_bounded(
    resources: Resources, store: DynamoStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentwake.store.itemsize import item_size
    from agentwake.wake.usage import NOTE_FINAL_BYTES, NOTE_RESULT_BYTES
    from tests.support.model_calls import record_model_requests

    # GIVEN a task whose result is 20,000 characters and an agent whose final answer is as long
    result, answer = "r" * 19_990 + "RESULT-END", "a" * 19_990 + "ANSWER-END"
    seed_session(
        store, "s1", providers=[{"type": "scripted", "id": "p", "script": [{"text": answer}]}], deliver_final="never"
    )
    seed_task(store, "t1", "s1")
    requests = record_model_requests(monkeypatch)
    # WHEN the result wakes the agent
    body = result_body("t1", "s1", result_text=result)
    assert invoke_background({"Records": [sqs_record(body)]}) == {"batchItemFailures": []}
    # THEN the run's own prompt had the whole result
    assert any("RESULT-END" in content for _, content in requests[0])
    # AND the note keeps the first NOTE_RESULT_BYTES of the result and of the answer, each cut visibly
    [item] = store.table.query(session_pk("s1"), HISTORY_PREFIX)
    note = item["content"]["S"]
    assert "r" * (NOTE_RESULT_BYTES - 100) in note and "RESULT-END" not in note
    assert "a" * (NOTE_FINAL_BYTES - 100) in note and "ANSWER-END" not in note
    assert note.count("a note keeps the first 4,000]") == 2
    # AND the item stays under 9 KB (today's 40 KB made the commit pay about 80 WRU for it)
    assert item_size(item) < 9 * 1024, item_size(item)


def test_a_secret_the_notes_cut_would_split_is_redacted_whole(resources: Resources, store: DynamoStore) -> None:
    from agentwake.trust.redact import register_secret
    from agentwake.wake.usage import NOTE_RESULT_BYTES

    # GIVEN a secret resolved in this process, and a task result in which it straddles the note's cut
    secret = "Zq9-Wm3-Rt7-Lp2-Hx5-" + "Yy8" * 100
    register_secret(secret)
    result = "r" * (NOTE_RESULT_BYTES - 150) + secret + "RESULT-END"
    seed_session(
        store, "s1", providers=[{"type": "scripted", "id": "p", "script": [{"text": "ok"}]}], deliver_final="never"
    )
    seed_task(store, "t1", "s1")
    # WHEN the result wakes the agent
    body = result_body("t1", "s1", result_text=result)
    assert invoke_background({"Records": [sqs_record(body)]}) == {"batchItemFailures": []}
    # THEN the note keeps no part of the secret: it was redacted before the cut
    [item] = store.table.query(session_pk("s1"), HISTORY_PREFIX)
    note = item["content"]["S"]
    assert "Zq9-Wm3" not in note and "Yy8Yy8" not in note, note[-600:]
    assert "r" * 1000 in note  # the result is there, cut after the redaction


def test_each_entry_of_a_note_item_is_its_own_cursor(resources: Resources, store: DynamoStore) -> None:
    # GIVEN a session whose history is an older message, then a run's note item (its marker and note)
    seed_session(store, "s1")
    store.table.db.put_item(
        **store.history.entry_put(HistoryEntry(session_id="s1", role="user", content="older"))["Put"]
    )
    seed_task(store, "t1", "s1")
    assert invoke_background({"Records": [sqs_record(result_body("t1", "s1"))]}) == {"batchItemFailures": []}
    page, _ = store.history.conversation_page("s1", limit=10)
    assert [e.content for e in page][-1] == "older"
    note = next(e for e in page if e.kind == "note")
    marker = next(e for e in page if e.kind == "marker")
    # WHEN a reader pages on from the note's sort key (as `history show --json` says an sk is a cursor)
    after_note, _ = store.history.conversation_page("s1", limit=10, before=note.sk)
    after_marker, _ = store.history.conversation_page("s1", limit=10, before=marker.sk)
    # THEN before the note comes its marker, and before the marker the older entries: none skipped
    assert note.sk != marker.sk
    assert [e.kind for e in after_note][:1] == ["marker"] and after_note[-1].content == "older"
    assert "marker" not in [e.kind for e in after_marker] and after_marker[-1].content == "older"
