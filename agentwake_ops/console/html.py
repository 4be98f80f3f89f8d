"""HTML for the console: every value escaped, one layout, tables, inline SVG charts.

:func:`h` is the only way a value reaches a page: the CLI's own rule for what a person sees
(``terminal.shown``: task tokens masked, control characters such as ESC written out as ``\\x1b``),
then ``html.escape`` (``<script>`` in a DLQ body is text). Markup is built only from literals and
``h``-escaped values.

Every link and form names a console route relative to the page's ``<base href="/TOKEN/">``
(:func:`href`): the console lives under its per-start token, and a path starting with ``/`` would
leave it.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import urlencode

from agentwake.trust.redact import redact
from agentwake_ops.terminal import masked, shown


class Markup(str):
    """Text that is already HTML (built here from literals and escaped values)."""


def h(value: Any) -> Markup:
    """A value as HTML text: redacted, task tokens masked, controls visible, then escaped."""
    if isinstance(value, Markup):
        return value
    if value is None:
        return Markup("-")
    if isinstance(value, bool):  # never Python's True/False on a page
        return Markup("yes" if value else "no")
    return Markup(html.escape(shown(redact(value if isinstance(value, str) else str(value))), quote=True))


def pretty(data: Any) -> Markup:
    """JSON-like data (masked) in a ``<pre>``."""
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except (ValueError, RecursionError):
            return Markup(f"<pre>{h(masked(data))}</pre>")
    text = json.dumps(masked(data), indent=2, ensure_ascii=False, default=str)
    return Markup(f"<pre>{h(text)}</pre>")


def href(route: str) -> str:
    """A console route (``/dlq``) as a URL relative to the page's base (the token's root)."""
    return route.lstrip("/") or "./"


def link(path: str, label: Any, /, **params: Any) -> Markup:
    query = urlencode({k: v for k, v in params.items() if v not in (None, "")})
    target = href(path) + (f"?{query}" if query else "")
    return Markup(f'<a href="{html.escape(target, quote=True)}">{h(label)}</a>')


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    cls: str = "",
    row_classes: Iterable[str] = (),
    empty: str = "none",
) -> Markup:
    """A table, or, with no rows, no table: ``empty`` as a line (nothing when it is "")."""
    rows = list(rows)
    if not rows:
        cls_attr = f" {html.escape(cls, quote=True)}-empty" if cls else ""
        return Markup(f"<p class='muted empty{cls_attr}'>{h(empty)}</p>" if empty else "")
    classes = list(row_classes)
    head = "".join(f"<th>{h(x)}</th>" for x in headers)
    body = []
    for i, row in enumerate(rows):
        row_cls = f' class="{html.escape(classes[i], quote=True)}"' if i < len(classes) and classes[i] else ""
        body.append(f"<tr{row_cls}>" + "".join(f"<td>{h(cell)}</td>" for cell in row) + "</tr>")
    cls_attr = f' class="{html.escape(cls, quote=True)}"' if cls else ""
    return Markup(f"<table{cls_attr}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")


def facts(rows: Iterable[tuple[str, Any]]) -> Markup:
    return Markup(
        "<table class='facts'><tbody>"
        + "".join(f"<tr><th>{h(k)}</th><td>{h(v)}</td></tr>" for k, v in rows)
        + "</tbody></table>"
    )


def hidden(name: str, value: Any) -> Markup:
    return Markup(f'<input type="hidden" name="{html.escape(name, quote=True)}" value="{h(value)}">')


NAV = (
    ("/dlq", "DLQ"),
    ("/runs", "Runs"),
    ("/approvals", "Approvals"),
    ("/sessions", "Sessions"),
    ("/jobs", "Jobs"),
    ("/charts", "Charts"),
)


def layout(title: str, body: str, *, stack: str, root: str) -> str:
    """The page: ``root`` (``/TOKEN/``) is its base, which every link and form is relative to."""
    nav = "".join(f'<a href="{href(p)}">{n}</a>' for p, n in NAV)
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<base href='{html.escape(root, quote=True)}'>"
        f"<title>{h(title)} · agentwake console</title>"
        "<link rel='stylesheet' href='static/console.css'><script src='static/console.js'></script>"
        f"</head><body><header><strong>agentwake</strong>{nav}<span class='stack'>{h(stack)}</span></header>"
        f"<main><h1>{h(title)}</h1>{body}</main></body></html>"
    )


# --------------------------------------------------------------------------------------------
# charts (inline SVG: no script, nothing loaded)

PALETTE = ("#d9534f", "#f0ad4e", "#5bc0de", "#5cb85c", "#8e6cc4", "#777777", "#c7a76b", "#3b7dd8")


def stacked_bars(title: str, buckets: Sequence[str], series: dict[str, list[int]], *, width: int = 720) -> Markup:
    """Bars per bucket (x) stacked by series (a colour each), with a legend; counts as text too."""
    height, pad, legend_h = 180, 28, 16 * max(1, len(series))
    top = max([sum(v[i] for v in series.values()) for i in range(len(buckets))] or [0]) or 1
    step = (width - pad * 2) / max(1, len(buckets))
    parts = [
        f"<svg role='img' aria-label='{h(title)}' width='{width}' height='{height + legend_h + 20}' "
        f"viewBox='0 0 {width} {height + legend_h + 20}' xmlns='http://www.w3.org/2000/svg'>",
        f"<title>{h(title)}</title>",
        f"<line x1='{pad}' y1='{height}' x2='{width - pad}' y2='{height}' stroke='#999'/>",
        f"<text x='2' y='12'>{top}</text><text x='2' y='{height}'>0</text>",
    ]
    for i, bucket in enumerate(buckets):
        y = float(height)
        for j, (name, values) in enumerate(series.items()):
            count = values[i]
            if not count:
                continue
            bar = (height - 14) * count / top
            y -= bar
            parts.append(
                f"<rect x='{pad + i * step + 1:.1f}' y='{y:.1f}' width='{max(1.0, step - 2):.1f}' height='{bar:.1f}' "
                f"fill='{PALETTE[j % len(PALETTE)]}'><title>{h(bucket)} {h(name)}: {count}</title></rect>"
            )
        if len(buckets) <= 16 or i % max(1, len(buckets) // 8) == 0:
            parts.append(f"<text x='{pad + i * step:.1f}' y='{height + 12}'>{h(bucket[-5:])}</text>")
    for j, name in enumerate(series):
        y = height + 28 + j * 16
        total = sum(series[name])
        parts.append(f"<rect x='{pad}' y='{y - 9}' width='10' height='10' fill='{PALETTE[j % len(PALETTE)]}'/>")
        parts.append(f"<text x='{pad + 16}' y='{y}'>{h(name)}: {total}</text>")
    parts.append("</svg>")
    return Markup("".join(parts))
