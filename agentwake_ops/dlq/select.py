"""Select: which DLQ messages an operation applies to — decided on what each message carries
first, so that only the candidates are joined with their runs.

An id, and a session the body names, rule a message out without reading its run; an error type
that comes from a run's failure records needs the run, so such messages are joined (one Query of
the run's partition each) and judged on the joined view. ``dlq redrive --id X`` on a DLQ of
10,000 messages therefore reads one run, not 10,000.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from agentwake.store.dynamo import DynamoStore
from agentwake_ops.context import OpsContext, OpsError
from agentwake_ops.dlq.describe import DlqMessage, join, read
from agentwake_ops.dlq.scan import peek, queue_names, queue_urls
from agentwake_ops.progress import SILENT, Progress


@dataclass
class Selection:
    """Which messages an operation applies to (criteria combine with AND).

    ``ids`` are unique prefixes (as ``dlq list`` shows them), or whole ids with ``exact`` (ids
    read from an export file: one no longer in the DLQ is reported, not an error).
    """

    ids: tuple[str, ...] = ()
    error_type: str | None = None
    session_id: str | None = None
    everything: bool = False
    exact: bool = False

    @property
    def empty(self) -> bool:
        return not (self.ids or self.error_type or self.session_id or self.everything)

    @property
    def only_everything(self) -> bool:
        return self.everything and not (self.ids or self.error_type or self.session_id)

    def _id_matches(self, msg: DlqMessage) -> bool:
        if not self.ids:
            return True
        if self.exact:
            return msg.message_id in self.ids
        return any(msg.message_id.startswith(i) for i in self.ids)

    def matches(self, msg: DlqMessage) -> bool:
        """On a described message (joined, or complete as read)."""
        if not self._id_matches(msg):
            return False
        if self.error_type and (msg.error_type or "").lower() != self.error_type.lower():
            return False
        return not (self.session_id and msg.session_id != self.session_id)

    def may_match(self, msg: DlqMessage) -> bool:
        """False when what the message carries already rules it out; True when it matches or
        only its run can tell (a pending message: its error type may come from its failure records)."""
        if not msg.pending:
            return self.matches(msg)
        if not self._id_matches(msg):
            return False
        # a session the message names is final: the join only fills a missing one
        return not (self.session_id and msg.session_id and msg.session_id != self.session_id)

    def missing(self, messages: list[DlqMessage]) -> list[str]:
        """The given ids that match no message."""
        if self.exact:
            present = {m.message_id for m in messages}
            return [i for i in self.ids if i not in present]
        return [p for p in self.ids if not any(m.message_id.startswith(p) for m in messages)]

    def check_ids(self, messages: list[DlqMessage]) -> None:
        """A prefix that matches no message, or several, is an error (exact ids may be missing)."""
        if self.exact:
            return
        for prefix in self.ids:
            hits = {m.message_id for m in messages if m.message_id.startswith(prefix)}
            if not hits:
                raise OpsError(f"no DLQ message with id {prefix!r} (see `agentwake dlq list`)")
            if len(hits) > 1:
                raise OpsError(f"id {prefix!r} is ambiguous: it matches {len(hits)} messages; give more of it")


def select(
    messages: list[DlqMessage],
    selection: Selection,
    store: DynamoStore,
    *,
    now: float | None = None,
    progress: Progress = SILENT,
    keep_alive: Callable[[], None] | None = None,
) -> list[DlqMessage]:
    """The messages (as read, from one or more DLQs) that the selection chooses, each joined.

    Only the candidates are joined; ``keep_alive`` is called every 50 joins (a claim renews its holds).
    """
    selection.check_ids(messages)
    candidates = [m for m in messages if selection.may_match(m)]
    joined = 0
    for queue in dict.fromkeys(m.queue for m in candidates):
        group = [m for m in candidates if m.queue == queue]
        progress.phase(f"joining the {queue} DLQ with the runs", total=len(group))
        for msg in group:
            if msg.pending:
                join(msg, store, now=now)
                joined += 1
                if keep_alive is not None and joined % 50 == 0:
                    keep_alive()
            progress.advance()
    return [m for m in candidates if selection.matches(m)]


def list_messages(
    ctx: OpsContext,
    queue: str = "all",
    selection: Selection | None = None,
    *,
    now: float | None = None,
    progress: Progress = SILENT,
) -> list[DlqMessage]:
    """The described messages of the chosen DLQs that the selection (default: all) chooses; none
    consumed, all visible again after.

    Raises IncompleteScan when a scan cannot be sure it saw every message.
    """
    names = queue_names(queue)
    read_messages: list[DlqMessage] = []
    for name, url in queue_urls(ctx, names, skip_unknown=queue == "all"):
        read_messages += [read(raw, name, url, now=now) for raw in peek(ctx, name, url, progress)]
    return select(read_messages, selection or Selection(), ctx.store, now=now, progress=progress)


def find_message(ctx: OpsContext, message_id: str, queue: str = "all", *, progress: Progress = SILENT) -> DlqMessage:
    """The one message whose id starts with ``message_id`` (OpsError if none or several)."""
    [msg] = list_messages(ctx, queue, Selection(ids=(message_id,)), progress=progress)
    return msg
