"""What may reach an operator's terminal: text made inert, task tokens masked.

``agentwake_ops.render`` prints through these (and re-exports them); the progress bar and the
``error:`` lines use them too. A leaf module (no rich, no other CLI module), so every output path
can import it without an import cycle.

- :func:`inert`: C0/C1 control characters (and DEL) but newline and tab written out as ``\\xNN``
  (the runtime's own rule for what it stores, ``agentwake.store.itemsize.visible_controls``), so
  ESC/CSI/OSC bytes from a DLQ body, an attribute or a provider error print as text instead of
  clearing the screen, recolouring it or setting the window title.
- :func:`masked`: every field of :data:`SECRET_FIELDS` masked (in structures, and in a string
  that holds a JSON object: a DLQ body), and anything shaped like a task token in any string.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agentwake.store.itemsize import safe_text, visible_controls

#: the producer contract's secret fields (agentwake.wake.messages marks none else: ``task_token``,
#: the token ``register_task`` returned), masked wherever the CLI shows a body, a step or a record
SECRET_FIELDS = frozenset({"task_token"})
#: what a masked secret shows instead
MASKED = "[MASKED]"
#: a task token in free text (agentwake.product.tasks: ``awt_`` + 43 URL-safe characters)
_TOKEN_SHAPE = re.compile(r"\bawt_[A-Za-z0-9_-]{16,}")


def inert(text: Any) -> str:
    """``text`` safe to show on a terminal: control characters but newline and tab as ``\\xNN``
    text, lone surrogates as U+FFFD. Every output path of the CLI passes it."""
    return visible_controls(safe_text(text if isinstance(text, str) else str(text)))


def shown(text: Any) -> str:
    """Text as a person sees it (plain, not markup): task tokens masked, then inert."""
    return inert(_TOKEN_SHAPE.sub(MASKED, text if isinstance(text, str) else str(text)))


def masked(data: Any) -> Any:
    """A copy of JSON-like ``data`` with every :data:`SECRET_FIELDS` value masked (also inside a
    string that holds a JSON object, re-written for the view) and task tokens masked in every string."""
    if isinstance(data, dict):
        return {k: MASKED if k in SECRET_FIELDS and data[k] not in (None, "") else masked(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [masked(v) for v in data]
    if isinstance(data, str):
        return _masked_text(data)
    return data


def _masked_text(text: str) -> str:
    if text.lstrip().startswith("{") and any(f'"{name}"' in text for name in SECRET_FIELDS):
        try:
            parsed = json.loads(text)
        except (ValueError, RecursionError):
            parsed = None
        if isinstance(parsed, dict):
            return json.dumps(masked(parsed), ensure_ascii=False)
    # every token starts with the literal: most texts are passed without running the pattern
    return _TOKEN_SHAPE.sub(MASKED, text) if "awt_" in text else text


def first_line(text: str | None, limit: int = 200) -> str:
    """The first non-blank line of ``text``, stripped and cut to ``limit`` characters."""
    for line in (text or "").splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""
