"""The wake's one batch read: the run record, the task or job, the session config, today's counters
and the run's entry on the wait list, before anything is written (``wake_begin`` writes next).

Apart from the start transaction because the wake uses them at different moments: the use case
reads and checks (the task, its token, its session), then the run starts.
"""

from __future__ import annotations

import time
from typing import Any

from agentwake.store.journal import JournalStore
from agentwake.store.keys import config_key, job_key, run_key, task_key, usage_day, usage_key, wait_key
from agentwake.store.models import Job, RunRecord, SessionConfig, Task, _Stored
from agentwake.store.port import DailyUsage, WakeRead


def usage_from_item(session_id: str, day: str, item: dict[str, Any] | None) -> DailyUsage:
    """The day's counters as stored (``USAGE#{day}``); 0 for an item not there yet."""
    item = item or {}
    return DailyUsage(
        session_id=session_id,
        day=day,
        tokens=int(item.get("tokens", {}).get("N", "0")),
        deliveries=int(item.get("deliveries", {}).get("N", "0")),
    )


class WakeReads(JournalStore):
    def read_wake(
        self,
        *,
        run_id: str,
        session_id: str | None = None,
        task_id: str | None = None,
        job_id: str | None = None,
        waiter: bool = False,
    ) -> WakeRead:
        """The run record, the task or job, the session config and the session's counters of today
        (``USAGE#{day}``) in one (consistent) BatchGetItem; with ``waiter``, the run's entry on the
        session's wait list too."""
        keys: dict[tuple[str, str], str] = {run_key(run_id): "run"}
        if task_id is not None:
            keys[task_key(task_id)] = "task"
        if job_id is not None:
            keys[job_key(job_id)] = "job"
        day = usage_day(self.now())
        if session_id is not None:
            keys[config_key(session_id)] = "session"
            # one more key, not one more round trip: whether the session has daily limits is in
            # its config, which this same read fetches
            keys[usage_key(session_id, day)] = "usage"
            if waiter:
                keys[wait_key(session_id, run_id)] = "waiter"
        found = self._batch_get([self._key(pk, sk) for pk, sk in keys])
        read = WakeRead()
        if session_id is not None:
            read.usage = DailyUsage(session_id=session_id, day=day)
        models: dict[str, type[_Stored]] = {"run": RunRecord, "task": Task, "job": Job, "session": SessionConfig}
        for item in found:
            name = keys.get((item["pk"]["S"], item["sk"]["S"]))
            if name == "usage" and session_id is not None:
                read.usage = usage_from_item(session_id, day, item)
            elif name == "waiter":
                read.waiter_gen = int(item.get("gen", {}).get("N", "0"))
            elif name is not None:
                setattr(read, name, self._load(models[name], item))
        return read

    def _batch_get(self, keys: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The items of ``keys`` that exist, in one consistent BatchGetItem (again for keys left
        unprocessed)."""
        request: dict[str, Any] = {self.table: {"Keys": keys, "ConsistentRead": True}}
        found: list[dict[str, Any]] = []
        for attempt in range(8):
            resp = self.db.batch_get_item(RequestItems=request)
            found += resp.get("Responses", {}).get(self.table, [])
            request = resp.get("UnprocessedKeys") or {}
            if not request:
                return found
            time.sleep(min(1.0, 0.05 * 2**attempt))  # throttled keys: back off, then ask again
        raise RuntimeError(f"DynamoDB left keys unprocessed after 8 tries: {list(request)}")
