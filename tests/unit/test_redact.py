"""The one redactor (agentwake/trust/redact.py): registered secrets and credential shapes are replaced in one
pass over the union of their matches, so overlapping matches give one marker and a redacted text
redacts to itself (issue 21 item 12)."""

from __future__ import annotations

import json
import string
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentwake.trust.redact import REDACTED, _spans, redact, redact_data, register_secret
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


#: pieces of every shape the patterns know, in several cases, and text around them
_FRAGMENTS = (
    "Authorization: Bearer abcdef123456",
    "PROXY-AUTHORIZATION=basic dXNlcjpwYXNz",
    '"x-api-key": "k-123456789"',
    "Api_Key=zzzzzzzz",
    "x-goog-api-key: g0000000",
    "API-TOKEN: t1",
    "access_token=eyJhbGciOi",
    "Secret-Access-Key = AbCd/1234",
    "client_secret: s3cr3t",
    "PassWord=hunter22",
    "bEaReR tokentoken",
    "sk-proj-abcdefghijklmnop",
    "AKIAABCDEFGHIJKLMNOP",
    "ASIAABCDEFGHIJKLMNOP",
    "xoxb-1234567890-abc",
    "ghp_abcdefghijklmnopqrstuvwx",
    "awt_abcdefghijklmnopqrstuvwx",
    "reason 17",
    "task-1",
    "_sk-abcdefghijklmnop",
    "-sk-abcdefghijklmnop",
    '{"error": "UnknownTask", "run_id": null}',
    "\u212a",  # KELVIN SIGN: case-blind matching treats it as k (the text is then not ASCII)
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_FRAGMENTS), st.text(alphabet=string.printable, max_size=12)), max_size=8))
def test_the_word_hints_skip_only_scans_that_could_not_match(parts: list[str]) -> None:
    # GIVEN any text made of credential shapes, near misses and other text
    text = "".join(parts)
    # WHEN its spans are found with the hints, and by running every pattern
    # THEN they are the same spans
    assert sorted(_spans(text, [], hints=True)) == sorted(_spans(text, [], hints=False))


def test_a_large_json_text_without_any_hint_is_returned_as_is() -> None:
    # GIVEN 10,000 dlq list rows as JSON (no word any credential shape contains)
    rows = [
        {"message_id": f"id-{i}", "task_id": f"task-{i}", "error_type": "UnknownTask", "error": f"reason {i}"}
        for i in range(10_000)
    ]
    text = json.dumps(rows, indent=2)
    # WHEN redacted THEN it is unchanged
    assert redact(text) == text
