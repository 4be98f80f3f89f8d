"""The one redactor every outgoing text passes: failure records, ``last_error``, log lines, DLQ
attributes, CLI output, provider and delivery error messages.

It removes

- every secret value resolved in this process (``agentwake.secrets`` registers each one), and
- anything shaped like a credential whatever its origin: ``Bearer``/``Basic`` tokens, the value of
  an ``Authorization``, ``api-key``/``x-api-key``/``api_key`` header or field, and well-known key
  shapes (``sk-...`` API keys, AWS access key ids).

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
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9\-._~+/=:]{6,}")
_KEY_SHAPES = re.compile(
    r"""(?x)
    \bsk-[A-Za-z0-9_\-]{12,}          # OpenAI-style secret keys (sk-..., sk-proj-...)
    | \b(?:AKIA|ASIA)[0-9A-Z]{16}\b   # AWS access key ids
    | \bxox[abposr]-[A-Za-z0-9-]{10,}  # Slack tokens
    | \bgh[pousr]_[A-Za-z0-9]{20,}    # GitHub tokens
    """
)


def register_secret(value: str | None) -> None:
    """Remember a secret resolved for a run, so it is redacted from every text from now on."""
    if not value or len(value) < MIN_SECRET_LENGTH:
        return
    with _lock:
        _secrets.pop(value, None)
        _secrets[value] = None
        while len(_secrets) > MAX_SECRETS:
            _secrets.pop(next(iter(_secrets)))


def forget_secrets() -> None:
    """Forget every registered secret (tests)."""
    with _lock:
        _secrets.clear()


def _header(match: re.Match[str]) -> str:
    scheme = f"{match.group('scheme')} " if match.group("scheme") else ""
    return f"{match.group('name')}{match.group('sep')}{scheme}{REDACTED}"


def redact(text: Any) -> str:
    """``text`` with every registered secret and credential-shaped value replaced by ``[REDACTED]``."""
    if text is None:
        return ""
    text = text if isinstance(text, str) else str(text)
    if not text:
        return text
    with _lock:
        secrets = sorted(_secrets, key=len, reverse=True)
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    text = _HEADER_VALUE.sub(_header, text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    return _KEY_SHAPES.sub(REDACTED, text)


def redact_data(data: Any) -> Any:
    """Redact every string inside a JSON-like structure (dict keys included)."""
    if isinstance(data, str):
        return redact(data)
    if isinstance(data, dict):
        return {redact(k) if isinstance(k, str) else k: redact_data(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [redact_data(v) for v in data]
    return data
