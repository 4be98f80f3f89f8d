"""Claim: the selected DLQ messages taken for an action, held invisible while it works.

One complete scan of each queue holds every message it sees; once the selection has chosen, the
chosen ones stay held (and their holds are renewed as the action goes) and every other message is
made visible again at once. A chosen message whose hold ran out during the scan is refused: nothing
may act on a message another reader could have taken meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from agentwake_ops.context import OpsContext
from agentwake_ops.dlq.describe import DlqMessage, read
from agentwake_ops.dlq.scan import queue_urls, scanner
from agentwake_ops.dlq.select import Selection, select
from agentwake_ops.progress import SILENT, Progress
from agentwake_ops.sqs_scan import MAX_VISIBILITY_SECONDS, IncompleteScan, Scanner, queue_name

#: at least this long a redrive/delete/export holds the messages it claimed (renewed while it works)
CLAIM_HOLD_SECONDS = 120


@dataclass
class Claim:
    """Messages taken for an operation: held invisible (renewed as the work goes) until processed
    or released. ``missing``: ids of an exact selection that are not in the DLQ."""

    messages: list[DlqMessage]
    hold_seconds: int
    scanners: dict[str, Scanner] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)

    def renew(self, pending: Iterable[DlqMessage]) -> None:
        """Renew the holds of ``pending`` that would run out within half a hold."""
        by_url: dict[str, list[str]] = {}
        for msg in pending:
            by_url.setdefault(msg.queue_url, []).append(msg.message_id)
        for url, ids in by_url.items():
            scan = self.scanners[url]
            now = scan.clock()
            due = [i for i in ids if scan.result.held[i].until - now < self.hold_seconds / 2]
            lost = scan.keep(due, self.hold_seconds)
            if lost:
                raise IncompleteScan(
                    f"the hold on {len(lost)} claimed message(s) of {queue_name(url)} could not be renewed; "
                    "what was not processed yet is released — run it again"
                )

    def handle(self, msg: DlqMessage) -> str:
        """The newest receipt handle (the only one that surely deletes the message)."""
        return self.scanners[msg.queue_url].result.held[msg.message_id].handle

    def release(self, messages: Iterable[DlqMessage]) -> None:
        by_url: dict[str, list[str]] = {}
        for msg in messages:
            by_url.setdefault(msg.queue_url, []).append(msg.message_id)
        for url, ids in by_url.items():
            self.scanners[url].release(ids)


def claim(
    ctx: OpsContext,
    queues: list[str],
    selection: Selection,
    *,
    what: str,
    hold_seconds: int = CLAIM_HOLD_SECONDS,
    progress: Progress = SILENT,
) -> Claim:
    """Scan the queues completely, hold the selected messages, make every other one visible again."""
    hold_seconds = min(MAX_VISIBILITY_SECONDS, max(CLAIM_HOLD_SECONDS, hold_seconds))
    scanners: dict[str, Scanner] = {}
    messages: list[DlqMessage] = []

    def keep_alive() -> None:
        for scan in scanners.values():
            scan.renew_due()

    try:
        for name, url in queue_urls(ctx, queues, skip_unknown=len(queues) > 1):
            scan = scanner(ctx, name, url, progress)
            scanners[url] = scan
            result = scan.run()
            result.require_complete(what)
            messages += [read(raw, name, url) for raw in result.messages()]
        keep_alive()
        chosen = select(messages, selection, ctx.store, progress=progress, keep_alive=keep_alive)
        progress.phase(f"claiming {len(chosen)} message(s)", total=len(chosen))
        for url, scan in scanners.items():
            ids = [m.message_id for m in chosen if m.queue_url == url]
            lost = scan.lost_holds(ids) | scan.keep(ids, hold_seconds)
            if lost:
                raise IncompleteScan(
                    f"{what}: the hold on {len(lost)} of the chosen message(s) of {queue_name(url)} ran out during "
                    "the scan and could not be renewed; nothing was changed — run it again"
                )
            progress.advance(len(ids))
    except BaseException:
        for scan in scanners.values():
            scan.release()
        raise
    chosen_ids = {m.message_id for m in chosen}
    for scan in scanners.values():
        scan.release([mid for mid in scan.result.held if mid not in chosen_ids])
    return Claim(
        sorted(chosen, key=lambda m: (m.queue, m.sent_at or "")),
        hold_seconds,
        scanners,
        selection.missing(messages) if selection.exact else [],
    )
