"""Item sizes in bytes, as DynamoDB counts them, and the bounds agentwake keeps items within.

DynamoDB caps an item at 400 KB counted in UTF-8 bytes (attribute names + values), not in
characters: 60,000 characters of emoji are 240 KB, and the same text JSON-encoded with
``ensure_ascii`` is 720 KB. An item over the cap fails with ``ValidationException`` on every
attempt, so a run that produced it could never succeed and would re-bill the model on each retry.
Every item agentwake builds from text it does not control (journal steps, deliveries, notes,
failures) is bounded here; oversized content is cut with a visible marker.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")
#: C0 controls but tab and newline, DEL, and C1 controls: what makes a terminal act rather than print
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")

#: DynamoDB's hard limits: one item (400 KB), the items of one transaction summed (4 MB)
MAX_ITEM_BYTES = 400 * 1024
MAX_TRANSACTION_BYTES = 4 * 1024 * 1024
#: a journal step's value (JSON, UTF-8) stays below this: the item keeps room for keys and times
JOURNAL_VALUE_BYTES = 300_000
#: a history entry's content / a delivery's text / a failure's detail stay below these
HISTORY_CONTENT_BYTES = 200_000
FAILURE_DETAIL_BYTES = 60_000


def safe_text(text: str) -> str:
    """``text`` as valid Unicode: each lone surrogate (from a ``\\ud800`` JSON escape, say) becomes
    U+FFFD. DynamoDB, SQS and JSON encoders all refuse lone surrogates."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)


def visible_controls(text: str) -> str:
    """``text`` with every C0/C1 control character but tab and newline (and DEL) written out as
    ``\\xNN``: stored text a terminal shows (ESC, CSI, OSC, CR) prints as itself instead of driving
    the screen. The CLI renders with the same function (``agentwake_ops.render.inert``)."""
    return _CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8", errors="surrogatepass"))


def cut_text(text: str, max_bytes: int, *, why: str = "to fit a DynamoDB item") -> str:
    """``text`` within ``max_bytes`` UTF-8 bytes, cut on a character boundary with a visible marker
    (``why``: its last words)."""
    text = safe_text(text)
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    marker = f"\n…[truncated {len(data) - max_bytes} bytes {why}]"
    room = max(0, max_bytes - len(marker.encode("utf-8")))
    return data[:room].decode("utf-8", errors="ignore") + marker


def attribute_size(value: dict[str, Any]) -> int:
    """Bytes of one AttributeValue (``{"S": ...}``, ``{"N": ...}``, ``{"M": ...}``, ...)."""
    (kind, inner), *_ = value.items()
    if kind == "S":
        return utf8_len(inner)
    if kind == "N":
        digits = inner.lstrip("-").replace(".", "").strip("0") or "0"
        return (len(digits) + 1) // 2 + 1
    if kind == "B":
        return len(inner) if isinstance(inner, bytes | bytearray) else utf8_len(str(inner))
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(utf8_len(v) for v in inner)
    if kind == "NS":
        return sum(attribute_size({"N": v}) for v in inner)
    if kind == "BS":
        return sum(len(v) for v in inner)
    if kind == "L":
        return 3 + sum(1 + attribute_size(v) for v in inner)
    if kind == "M":
        return 3 + sum(1 + utf8_len(k) + attribute_size(v) for k, v in inner.items())
    raise ValueError(f"unknown attribute type {kind!r}")


def item_size(item: dict[str, dict[str, Any]]) -> int:
    """Bytes of a DynamoDB item (low-level AttributeValue form): names + values."""
    return sum(utf8_len(name) + attribute_size(value) for name, value in item.items())


def _sanitized(value: Any) -> Any:
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, dict):
        return {safe_text(str(k)): _sanitized(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_sanitized(v) for v in value]
    return value


def json_bytes(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False).encode("utf-8"))


def _largest_string(value: Any, path: tuple[Any, ...] = ()) -> tuple[int, tuple[Any, ...]]:
    best: tuple[int, tuple[Any, ...]] = (-1, ())
    items: Any = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        if isinstance(child, str):
            candidate = (utf8_len(child), (*path, key))
        elif isinstance(child, dict | list):
            candidate = _largest_string(child, (*path, key))
        else:
            continue
        if candidate[0] > best[0]:
            best = candidate
    return best


def bound_json(value: dict[str, Any], max_bytes: int) -> dict[str, Any]:
    """A copy of ``value`` whose JSON (UTF-8, not ASCII-escaped) fits ``max_bytes``: lone
    surrogates replaced, the longest strings cut (with a marker) until it fits."""
    out = _sanitized(value)
    for _ in range(64):
        size = json_bytes(out)
        if size <= max_bytes:
            return out  # type: ignore[no-any-return]
        length, path = _largest_string(out)
        if length <= 0:
            break
        parent = out
        for key in path[:-1]:
            parent = parent[key]
        # JSON escapes may make a string longer than its UTF-8 bytes: cut a little more than the excess
        parent[path[-1]] = cut_text(parent[path[-1]], max(0, length - (size - max_bytes) - 256))
    raise ValueError(f"cannot bound a value of {json_bytes(out)} bytes below {max_bytes}")


def oversize(items: Sequence[tuple[str, dict[str, Any]]]) -> str | None:
    """Why DynamoDB would refuse the transaction ``items`` ((tag, write) pairs) for its size, or
    None: an item over 400 KB, or items over 4 MB in all. Checked before the call, so the caller
    can refuse with a clear reason instead of a ``ValidationException`` after it."""
    sizes = [(tag, item_size(next(iter(write.values())).get("Item") or {})) for tag, write in items]
    for n, (tag, size) in enumerate(sizes, start=1):
        if size > MAX_ITEM_BYTES:
            return f"its item {n} ({tag}) is {size:,} bytes; DynamoDB stores at most {MAX_ITEM_BYTES:,} in one item"
    total = sum(size for _, size in sizes)
    if total > MAX_TRANSACTION_BYTES:
        return f"it is {total:,} bytes; DynamoDB writes at most {MAX_TRANSACTION_BYTES:,} bytes in one transaction"
    return None
