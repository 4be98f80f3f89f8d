"""EventBridge Scheduler's one-time schedules (``at(...)``), fired locally.

moto stores schedules but never fires them. This fires the one-time ones of the stack's schedule
groups when their time has come, as the Scheduler does: the target is invoked asynchronously with
the schedule's ``Input`` (``<aws.scheduler.scheduled-time>`` replaced by the ``at`` time), and a
schedule with ``ActionAfterCompletion: DELETE`` is deleted (one without it is fired once and
left). agentwake creates such schedules for a cron wake that waits for its busy session.

Recurring expressions (``cron(...)``, ``rate(...)``) are not fired here: locally a job is run with
``agentwake jobs run`` or by invoking the function with the Scheduler's input.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

logger = logging.getLogger(__name__)

_AT = re.compile(r"^at\((\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})\)$")
SCHEDULED_TIME = "<aws.scheduler.scheduled-time>"

#: (target ARN, payload) -> None: an asynchronous invocation of the target
FireFn = Callable[[str, Any], None]


def at_time(expression: str, timezone: str | None) -> datetime | None:
    """The moment of an ``at(yyyy-mm-ddThh:mm:ss)`` expression, or None for any other expression."""
    match = _AT.match(expression.strip())
    if not match:
        return None
    naive = datetime.strptime(match.group(1), "%Y-%m-%dT%H:%M:%S")
    return naive.replace(tzinfo=ZoneInfo(timezone) if timezone and timezone != "UTC" else UTC)


class OneTimeSchedules:
    """Fires the due ``at(...)`` schedules of ``groups``: ``fire_due()`` once, or ``start()`` a thread."""

    def __init__(
        self,
        scheduler_client: Any,
        groups: Iterable[str],
        fire: FireFn,
        *,
        clock: Callable[[], float] = time.time,
        interval: float = 0.5,
    ) -> None:
        self.scheduler = scheduler_client
        self.groups = list(groups)
        self.fire = fire
        self.clock = clock
        self.interval = interval
        self._fired: set[tuple[str, str]] = set()  # (group, name) of kept schedules already fired
        self._known: dict[tuple[str, str], dict[str, Any] | None] = {}  # (group, arn) -> schedule or None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _schedules(self, group: str) -> Iterable[dict[str, Any]]:
        kwargs: dict[str, Any] = {"GroupName": group}
        while True:
            page = self.scheduler.list_schedules(**kwargs)
            yield from page.get("Schedules") or []
            if not page.get("NextToken"):
                return
            kwargs["NextToken"] = page["NextToken"]

    def _one_time(self, group: str, summary: dict[str, Any]) -> dict[str, Any] | None:
        """The full schedule if it is a one-time one (cached per ARN and modification time)."""
        key = (group, f"{summary.get('Arn')}@{summary.get('LastModificationDate')}")
        if key not in self._known:
            schedule = self.scheduler.get_schedule(Name=summary["Name"], GroupName=group)
            at = at_time(schedule.get("ScheduleExpression", ""), schedule.get("ScheduleExpressionTimezone"))
            self._known[key] = {**schedule, "_at": at} if at is not None else None
        return self._known[key]

    def fire_due(self) -> list[str]:
        """Fire every one-time schedule whose time has come; the names of those fired."""
        fired: list[str] = []
        now = datetime.fromtimestamp(self.clock(), UTC)
        for group in self.groups:
            for summary in list(self._schedules(group)):
                schedule = self._one_time(group, summary)
                if schedule is None or schedule["_at"] > now or (group, summary["Name"]) in self._fired:
                    continue
                if schedule.get("State") == "DISABLED":
                    continue
                if schedule.get("ActionAfterCompletion") == "DELETE":
                    try:
                        self.scheduler.delete_schedule(Name=summary["Name"], GroupName=group)
                    except self.scheduler.exceptions.ResourceNotFoundException:
                        continue  # fired by another firer meanwhile
                else:
                    self._fired.add((group, summary["Name"]))
                target = schedule["Target"]
                text = target.get("Input") or "{}"
                scheduled = schedule["_at"].astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                payload = json.loads(text.replace(SCHEDULED_TIME, scheduled))
                logger.info("scheduler %s/%s fired (%s) -> %s", group, summary["Name"], scheduled, target["Arn"])
                self.fire(target["Arn"], payload)
                fired.append(summary["Name"])
        return fired

    # -- background thread ----------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self.running:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="scheduler-at", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.fire_due()
            except Exception:  # the server went away, a transient error: keep the thread alive
                logger.exception("scheduler: firing one-time schedules failed")
            self._stop.wait(self.interval)
