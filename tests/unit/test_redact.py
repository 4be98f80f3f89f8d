"""The one redactor (agentwake/trust/redact.py): registered secrets and credential shapes are replaced in one
pass over the union of their matches, so overlapping matches give one marker and a redacted text
redacts to itself (issue 21 item 12)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from agentwake.trust.redact import REDACTED, redact, redact_data, register_secret
from tests.support.process_state import forget_secrets


@pytest.fixture
def key() -> Iterator[str]:
    """A registered secret shaped like an OpenAI key, so the registry and a shape both match it."""
    value = f"sk-proj-{uuid.uuid4().hex}"
    register_secret(value)
    yield value
    forget_secrets()


def test_overlapping_matches_give_one_marker_each(key: str) -> None:
    # GIVEN a text where the registered key, the key shape, the Bearer token and the header value overlap
    text = f"Authorization: Bearer {key} api_key={key}"
    # WHEN it is redacted THEN each overlapping group is one marker, with nothing left over
    assert redact(text) == f"Authorization: Bearer {REDACTED} api_key={REDACTED}"


def test_a_redacted_text_redacts_to_itself(key: str) -> None:
    # GIVEN texts that pass the redactor more than once on their way out (tool result, journal, CLI)
    texts = [
        f"Authorization: Bearer {key} api_key={key}",
        f'{{"authorization": "Basic {key}", "password": "{key}"}}',
        f"x-api-key: {key}; next",
        "password=[REDACTED] and Bearer [REDACTED]",
    ]
    for text in texts:
        once = redact(text)
        # WHEN they are redacted again, five times THEN nothing changes and no marker is mangled
        again = once
        for _ in range(5):
            again = redact(again)
        assert again == once, text
        assert "]]" not in again and "[[" not in again and key not in again


def test_a_secret_that_overlaps_a_shape_partly_leaves_no_fragment() -> None:
    # GIVEN a registered secret whose start ends a key shape that began before it
    secret = "tail.of." + uuid.uuid4().hex[:8]
    register_secret(secret)
    try:
        text = f"value sk-{uuid.uuid4().hex[:12]}{secret} end"
        # WHEN redacted THEN the union of both matches is one marker
        assert redact(text) == f"value {REDACTED} end"
        # AND a key shape right after a secret is found, although no word boundary precedes it
        # until the secret is gone
        assert redact(f"x {secret}sk-{'a' * 20}") == f"x {REDACTED}"
    finally:
        forget_secrets()


def test_every_occurrence_and_every_secret_is_replaced(key: str) -> None:
    other = uuid.uuid4().hex
    register_secret(other)
    text = f"{other} {key} {other}{other} ({key})"
    assert redact(text) == f"{REDACTED} {REDACTED} {REDACTED} ({REDACTED})"


def test_json_like_data_is_redacted_everywhere(key: str) -> None:
    data = {"a": [key, {"b": f"Bearer {key}"}], key: 3}
    assert redact_data(data) == {"a": [REDACTED, {"b": f"Bearer {REDACTED}"}], REDACTED: 3}
