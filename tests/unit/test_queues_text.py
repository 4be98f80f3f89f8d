"""What SQS accepts in a body or an attribute value, checked over every code point."""

from __future__ import annotations

from agentwake.store.queues import sqs_safe


def sqs_accepts(cp: int) -> bool:
    """The SQS documentation's allowed set: #x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF."""
    return cp in (0x9, 0xA, 0xD) or 0x20 <= cp <= 0xD7FF or 0xE000 <= cp <= 0xFFFD or 0x10000 <= cp <= 0x10FFFF


def test_sqs_safe_replaces_exactly_the_characters_sqs_refuses() -> None:
    # GIVEN a text holding every code point once (lone surrogates included)
    every = "".join(map(chr, range(0x110000)))
    # WHEN it is made SQS-safe
    safe = sqs_safe(every)
    # THEN each accepted character is kept and each refused one is U+FFFD, nothing else changes
    assert len(safe) == len(every)
    wrong = [cp for cp, ch in enumerate(safe) if ch != (chr(cp) if sqs_accepts(cp) else "\ufffd")]
    assert wrong == []
