"""Every key of the single table, in one place (docs/table-design.md lists the same).

| entity | pk | sk |
|---|---|---|
| session config | ``SESSION#{session}`` | ``CONFIG`` |
| history entry | ``SESSION#{session}`` | ``MSG#{time}#{id}`` |
| session lease | ``SESSION#{session}`` | ``LEASE`` |
| daily counters | ``SESSION#{session}`` | ``USAGE#{yyyy-mm-dd}`` (UTC) |
| waiter (a run waiting for the session) | ``SESSION#{session}`` | ``WAIT#{run}`` |
| live-turn append (idempotency key) | ``SESSION#{session}`` | ``APPEND#{sha256 of the key}`` |
| run | ``RUN#{run}`` | ``RUN`` |
| journal step / delivery / failure / wake | ``RUN#{run}`` | ``STEP#…`` / ``DELIVERY#…`` / ``FAILURE#…`` / ``WAKE`` |
| task | ``TASK#{task}`` | ``TASK`` |
| job | ``JOB#{job}`` | ``JOB`` |

Index ``gsi1``: a run's ``gsi1pk`` is ``RUNS#{session}`` and its ``gsi1sk`` is
``{start of its latest attempt}#{run}`` (newest attempt first in ``agentwake runs list``); a job's
``gsi1pk`` is ``JOBS`` and its ``gsi1sk`` the job id.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime

#: sort-key prefixes of the items that share a partition
HISTORY_PREFIX = "MSG#"
STEP_PREFIX = "STEP#"
DELIVERY_PREFIX = "DELIVERY#"
FAILURE_PREFIX = "FAILURE#"
TASK_PREFIX = "TASK#"
WAIT_PREFIX = "WAIT#"
APPEND_PREFIX = "APPEND#"
#: sort keys of the one-of-a-kind items
RUN_SK = "RUN"
TASK_SK = "TASK"
WAKE_SK = "WAKE"
LEASE_SK = "LEASE"
#: gsi1 partition keys
RUNS_PREFIX = "RUNS#"
JOBS_GSI_PK = "JOBS"


def session_pk(session_id: str) -> str:
    return f"SESSION#{session_id}"


def run_pk(run_id: str) -> str:
    return f"RUN#{run_id}"


def run_key(run_id: str) -> tuple[str, str]:
    return run_pk(run_id), RUN_SK


def task_key(task_id: str) -> tuple[str, str]:
    return f"{TASK_PREFIX}{task_id}", TASK_SK


def job_key(job_id: str) -> tuple[str, str]:
    return f"JOB#{job_id}", "JOB"


def config_key(session_id: str) -> tuple[str, str]:
    return session_pk(session_id), "CONFIG"


def lease_key(session_id: str) -> tuple[str, str]:
    return session_pk(session_id), LEASE_SK


def wait_key(session_id: str, run_id: str) -> tuple[str, str]:
    """A run waiting for its session (the session's wait list, docs/durability.md)."""
    return session_pk(session_id), WAIT_PREFIX + run_id


def append_key(session_id: str, idempotency_key: str) -> tuple[str, str]:
    """The marker of one live-turn append: a retried append with the same key writes nothing."""
    import hashlib

    return session_pk(session_id), APPEND_PREFIX + hashlib.sha256(idempotency_key.encode()).hexdigest()


def history_cursor_sk(cursor: str) -> str:
    """A conversation cursor back to the history sort key it stands for (ValueError if it is not one)."""
    if not cursor.startswith(HISTORY_PREFIX) or len(cursor) > 64:
        raise ValueError("not a conversation cursor")
    return cursor


def wake_key(run_id: str) -> tuple[str, str]:
    return run_pk(run_id), WAKE_SK


def usage_day(now: float) -> str:
    """The UTC day of an epoch time, as the daily counters' key names it."""
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%d")


def usage_key(session_id: str, day: str) -> tuple[str, str]:
    return session_pk(session_id), f"USAGE#{day}"


def history_sk() -> str:
    """A new history entry's sort key: time-ordered and unique (nanoseconds since the epoch, then
    a random suffix)."""
    return f"{HISTORY_PREFIX}{time.time_ns():020d}#{uuid.uuid4().hex[:8]}"


def step_sk(key: str) -> str:
    return STEP_PREFIX + key


def delivery_sk(delivery_id: str) -> str:
    return DELIVERY_PREFIX + delivery_id


def failure_sk(attempt: int, at: str) -> str:
    return f"{FAILURE_PREFIX}{attempt:05d}#{at}"


def after(prefix: str, sk: str) -> str:
    """What follows ``prefix`` in a sort key (a step's key, a delivery's id)."""
    return sk[len(prefix) :]


def runs_gsi_pk(session_id: str) -> str:
    return RUNS_PREFIX + session_id


def runs_gsi_sk(started_at: str, run_id: str) -> str:
    return f"{started_at}#{run_id}"
