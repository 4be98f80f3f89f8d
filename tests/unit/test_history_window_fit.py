"""The history window's size bound (``agentwake.domain.conversation.fit_window``; docs/woken-agent.md,
"The history window"): newer messages win, the one crossing the bound is cut with a marker, text
is never cut inside a character."""

from __future__ import annotations

from agentwake.domain.conversation import MIN_CUT_BYTES, Message, fit_window


def size(messages: list[Message]) -> int:
    return sum(len(m.content.encode()) for m in messages)


def test_newer_messages_win_and_the_crossing_one_is_cut_with_a_marker() -> None:
    # GIVEN ten messages of 1,000 bytes WHEN they are fitted into 3,800 bytes
    messages = [Message(role="user", content=f"{i}" * 1000) for i in range(10)]
    fitted = fit_window(messages, 3800)
    # THEN the newest three are whole, the fourth newest is cut to what is left, with a marker
    assert [m.content for m in fitted[1:]] == [m.content for m in messages[-3:]]
    assert fitted[0].content.startswith("6") and "history window holds 3,800" in fitted[0].content
    assert size(fitted) <= 3800


def test_too_little_room_left_ends_the_window_before_the_crossing_message() -> None:
    # GIVEN a newest message that leaves less than MIN_CUT_BYTES of the bound
    messages = [Message(role="user", content="old" * 1000), Message(role="assistant", content="n" * (4096 - 100))]
    # WHEN fitted THEN only the newest is shown
    assert fit_window(messages, 4096) == messages[-1:]
    assert MIN_CUT_BYTES > 100


def test_a_cut_never_splits_a_character() -> None:
    # GIVEN one message of two-byte characters, larger than the whole bound
    [cut] = fit_window([Message(role="user", content="é" * 5000)], 2048)
    # THEN what is kept is whole characters, and the whole fits the bound
    assert set(cut.content.split("\n…[cut")[0]) == {"é"}
    assert len(cut.content.encode()) <= 2048
    assert "this message has 10,000 bytes" in cut.content
