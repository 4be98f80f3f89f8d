"""Every key of the single table, in one place (docs/table-design.md lists the same).

| entity | pk | sk |
|---|---|---|
| session config | ``SESSION#{session}`` | ``CONFIG`` |
| history entry | ``SESSION#{session}`` | ``MSG#{time}#{id}`` |
| session lease | ``SESSION#{session}`` | ``LEASE`` |
| daily counters | ``SESSION#{session}`` | ``USAGE#{yyyy-mm-dd}`` (UTC) |
| run | ``RUN#{run}`` | ``RUN`` |
| journal step / delivery / failure / wake | ``RUN#{run}`` | ``STEP#…`` / ``DELIVERY#…`` / ``FAILURE#…`` / ``WAKE`` |
| task | ``TASK#{task}`` | ``TASK`` |
| job | ``JOB#{job}`` | ``JOB`` |
"""

from __future__ import annotations

from datetime import UTC, datetime


def session_pk(session_id: str) -> str:
    return f"SESSION#{session_id}"


def run_pk(run_id: str) -> str:
    return f"RUN#{run_id}"


def run_key(run_id: str) -> tuple[str, str]:
    return run_pk(run_id), "RUN"


def task_key(task_id: str) -> tuple[str, str]:
    return f"TASK#{task_id}", "TASK"


def job_key(job_id: str) -> tuple[str, str]:
    return f"JOB#{job_id}", "JOB"


def config_key(session_id: str) -> tuple[str, str]:
    return session_pk(session_id), "CONFIG"


def lease_key(session_id: str) -> tuple[str, str]:
    return session_pk(session_id), "LEASE"


def usage_day(now: float) -> str:
    """The UTC day of an epoch time, as the daily counters' key names it."""
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%d")


def usage_key(session_id: str, day: str) -> tuple[str, str]:
    return session_pk(session_id), f"USAGE#{day}"
