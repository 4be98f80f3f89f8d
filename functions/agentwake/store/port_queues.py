"""What the wake and the services send through beside the table: the result and work queues, the
dead letters, and EventBridge Scheduler (``store/queues.py``, ``store/schedules.py`` implement
them). Split from ``store/port.py``, which keeps the table's aggregates.

Plain Python only, like ``store/port.py``: no boto3.
"""

from __future__ import annotations

from typing import Any, Protocol


class ResultQueuePort(Protocol):
    """The background-result queue as the wake writes to it: a delayed re-send (a waiting record,
    a handed copy). ``url`` None or empty: there is no queue to re-send through."""

    url: str | None

    def send_later(
        self, *, body: str, delay_s: float, attributes: dict[str, dict[str, Any]], wait: dict[str, str]
    ) -> str: ...


class WorkQueuePort(Protocol):
    """The background-work queue (``store.queues.WorkQueue``): agentwake's own functions send to it."""

    url: str | None

    def send(self, body: str, *, delay_s: float = 0) -> str: ...


class DeadLettersPort(Protocol):
    """Where a record no retry can help goes, with its reason."""

    def send(
        self,
        *,
        body: str,
        error_type: str,
        reason: str,
        original_message_id: str,
        source: str = "",
        receive_count: str = "1",
        extra: dict[str, str] | None = None,
    ) -> str: ...


class SchedulesPort(Protocol):
    """EventBridge Scheduler as the cron wake uses it (a run-once job's schedule, a wait's return)."""

    group: str | None

    def create_once(
        self,
        *,
        name: str,
        at: Any,
        target_arn: str,
        role_arn: str,
        payload: dict[str, Any],
        dlq_arn: str | None = None,
        max_retries: int = 2,
    ) -> bool: ...

    def set_enabled(self, name: str, enabled: bool) -> bool: ...

    def delete(self, name: str) -> None: ...
