"""The one redactor every outgoing text passes: tool results (success and error), journaled steps,
deliveries and the history they write, failure records, ``last_error``, log lines, DLQ attributes,
CLI output, provider and delivery error messages.

It removes

- every secret value resolved in this process (``agentwake.trust.secrets`` registers each one: provider
  keys, tool credentials, webhook signing secrets), and
- anything shaped like a credential whatever its origin: ``Bearer``/``Basic`` tokens, the value of
  an ``Authorization``, ``api-key``/``x-api-key``/``api_key`` header or field, and well-known key
  shapes (``sk-...`` API keys, AWS access key ids).

Every pattern is matched against the same text, and the union of what they match is replaced in one
pass: overlapping matches (a registered key inside a ``Bearer`` token inside an ``Authorization``
header) become one ``[REDACTED]``, never ``[REDACTED]]]]``; the markers already in the text join
the union, so a text that was redacted already comes out unchanged (``redact(redact(t)) ==
redact(t)``). Only when a pass revealed a shape that a removed secret hid (``SECRETsk-...`` has no
word boundary before ``sk-``) is the result passed over again.

Redact before cutting text short: a secret cut in half no longer matches its registered value.
"""

from __future__ import annotations

import re
import threading
from typing import Any

#: what a removed secret is replaced with
REDACTED = "[REDACTED]"
#: registered values shorter than this are not redacted (they would mangle ordinary words)
MIN_SECRET_LENGTH = 6
#: how many resolved secrets are remembered (oldest forgotten first)
MAX_SECRETS = 256

_lock = threading.Lock()
_secrets: dict[str, None] = {}  # insertion-ordered set

_HEADER_VALUE = re.compile(
    r"""(?ix)
    (?P<name>\b(?:proxy-)?authorization|\bx-api-key|\bapi[-_]?key|\bx-goog-api-key|\bapi[-_]?token|\baccess[-_]?token
        |\bsecret[-_]?access[-_]?key|\bclient[-_]?secret|\bpassword)
    (?P<sep>["']?\s*[:=]\s*["']?)
    (?:(?P<scheme>bearer|basic|token|bot|digest)\s+)?
    (?P<value>[^\s"'<>,;&}\]\\]+)
    """
)
_BEARER = re.compile(r"(?i)\b(?:bearer|basic)\s+(?P<value>[A-Za-z0-9\-._~+/=:]{6,})")
_KEY_SHAPES = re.compile(
    r"""(?x)
    \bsk-[A-Za-z0-9_\-]{12,}          # OpenAI-style secret keys (sk-..., sk-proj-...)
    | \b(?:AKIA|ASIA)[0-9A-Z]{16}\b   # AWS access key ids
    | \bxox[abposr]-[A-Za-z0-9-]{10,}  # Slack tokens
    | \bgh[pousr]_[A-Za-z0-9]{20,}    # GitHub tokens
    | \bawt_[A-Za-z0-9_\-]{20,}       # agentwake task tokens (register_task's)
    """
)
_MARKER = re.compile(re.escape(REDACTED))
#: passes over a text at most (the second finds what the first revealed; a third is rare)
_MAX_PASSES = 3


def register_secret(value: str | None) -> None:
    """Remember a secret resolved for a run, so it is redacted from every text from now on."""
    if not value or len(value) < MIN_SECRET_LENGTH:
        return
    with _lock:
        _secrets.pop(value, None)
        _secrets[value] = None
        while len(_secrets) > MAX_SECRETS:
            _secrets.pop(next(iter(_secrets)))


def _registered() -> list[str]:
    with _lock:
        return sorted(_secrets, key=len, reverse=True)


#: words every match of a pattern contains (for ASCII text; lowercase for the case-blind ones): a
#: text without any of them cannot match, so its scan is skipped (the patterns' case-blind
#: alternations cost about 0.2 s per MB; a 10,000-row ``dlq list --json`` is 6.5 MB)
_HEADER_HINTS = ("authorization", "api", "token", "secret", "password")
_BEARER_HINTS = ("bearer", "basic")
_KEY_HINTS = ("AKIA", "ASIA", "xox", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "awt_")


def _starts_a_word(text: str, word: str) -> bool:
    """``word`` occurs in ASCII ``text`` where ``\\b`` holds before it (``sk-`` in ``task-1`` does not)."""
    at = text.find(word)
    while at >= 0:
        if at == 0 or not (text[at - 1].isalnum() or text[at - 1] == "_"):
            return True
        at = text.find(word, at + 1)
    return False


def _spans(text: str, secrets: list[str], *, hints: bool = True) -> list[tuple[int, int]]:
    """Every span a secret or a credential shape covers in ``text`` (they may overlap).

    With ``hints``, a pattern is not run over ASCII text that lacks every word its matches contain
    (the same spans; non-ASCII text is always scanned: case-blind matching is wider there)."""
    spans: list[tuple[int, int]] = []
    for secret in secrets:
        start = text.find(secret)
        while start >= 0:
            spans.append((start, start + len(secret)))
            start = text.find(secret, start + len(secret))
    header = bearer = keys = True
    if hints and text.isascii():
        lowered = text.lower()
        header = any(word in lowered for word in _HEADER_HINTS)
        bearer = any(word in lowered for word in _BEARER_HINTS)
        keys = _starts_a_word(text, "sk-") or any(word in text for word in _KEY_HINTS)
    if header:
        spans += [m.span("value") for m in _HEADER_VALUE.finditer(text)]
    if bearer:
        spans += [m.span("value") for m in _BEARER.finditer(text)]
    if keys:
        spans += [m.span() for m in _KEY_SHAPES.finditer(text)]
    return spans


def _replace(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` with the union of ``spans`` replaced: one marker per run of overlapping or touching
    spans. The markers already in the text join the union, so a match inside one changes nothing
    and a match overlapping one merges with it (a redacted text redacts to itself)."""
    if not spans:
        return text
    spans = sorted(spans + [m.span() for m in _MARKER.finditer(text)])
    out: list[str] = []
    pos = 0
    start, end = spans[0]
    for s, e in spans[1:]:
        if s <= end:
            end = max(end, e)
            continue
        out += [text[pos:start], REDACTED]
        pos, start, end = end, s, e
    out += [text[pos:start], REDACTED, text[end:]]
    return "".join(out)


def redact(text: Any) -> str:
    """``text`` with every registered secret and credential-shaped value replaced by ``[REDACTED]``."""
    if text is None:
        return ""
    text = text if isinstance(text, str) else str(text)
    if not text:
        return text
    secrets = _registered()
    for _ in range(_MAX_PASSES):
        # a removed secret can reveal a shape it hid (``SECRETsk-...`` has no word boundary
        # before ``sk-`` until SECRET is a marker): pass again until nothing changes
        done = _replace(text, _spans(text, secrets))
        if done == text:
            break
        text = done
    return text


def redact_data(data: Any) -> Any:
    """Redact every string inside a JSON-like structure (dict keys included)."""
    if isinstance(data, str):
        return redact(data)
    if isinstance(data, dict):
        return {redact(k) if isinstance(k, str) else k: redact_data(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [redact_data(v) for v in data]
    return data
