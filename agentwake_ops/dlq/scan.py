"""Scan: the DLQs by their short name, and one complete scan of each (``agentwake_ops.sqs_scan``).

A scan receives every message of a queue, holding each invisible while it pages on; if it cannot be
sure it saw every message, the caller raises ``IncompleteScan`` and changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agentwake_ops.context import OpsContext, OpsError
from agentwake_ops.progress import SILENT, Progress
from agentwake_ops.sqs_scan import Scanner

#: the DLQs by the short name the CLI uses -> queue role in OpsContext
DLQS: dict[str, str] = {
    "results": "results-dlq",
    "work": "work-dlq",
    "cron": "cron-failures",
    "scheduler": "scheduler-dlq",
}
QUEUE_CHOICES = (*DLQS, "all")


def queue_names(choice: str) -> list[str]:
    """``results|work|cron|scheduler|all`` -> the short queue names."""
    if choice == "all":
        return list(DLQS)
    if choice not in DLQS:
        raise OpsError(f"unknown queue {choice!r}: use one of {', '.join(QUEUE_CHOICES)}")
    return [choice]


def queue_urls(ctx: OpsContext, names: Iterable[str], *, skip_unknown: bool) -> list[tuple[str, str]]:
    """(short name, URL) of each DLQ; with ``skip_unknown`` the ones this context does not know are left out."""
    out = []
    for name in names:
        role = DLQS[name]
        if not ctx.has_queue(role) and skip_unknown:
            continue
        out.append((name, ctx.queue_url(role)))
    return out


def scanner(ctx: OpsContext, name: str, url: str, progress: Progress = SILENT) -> Scanner:
    """A scanner for one DLQ, with the context's hold and the progress bar."""
    progress.phase(f"scanning the {name} DLQ")
    return Scanner(ctx.sqs, url, hold_seconds=ctx.scan_hold_seconds, on_progress=progress.update)


def peek(ctx: OpsContext, name: str, url: str, progress: Progress = SILENT) -> list[dict[str, Any]]:
    """Every message of one DLQ, none consumed and all visible again; IncompleteScan if unsure."""
    scan = scanner(ctx, name, url, progress)
    try:
        result = scan.run()
    finally:
        scan.release()
    result.require_complete(f"listing the {name} DLQ")
    return result.messages()
