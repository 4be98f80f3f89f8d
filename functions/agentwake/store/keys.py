"""Every key of the single table, in one place (docs/table-design.md lists the same).

| entity | pk | sk |
|---|---|---|
| session config | ``SESSION#{session}`` | ``CONFIG`` |
| history entry | ``SESSION#{session}`` | ``MSG#{time}#{id}`` |
| session lease | ``SESSION#{session}`` | ``LEASE`` |
| daily counters | ``SESSION#{session}`` | ``USAGE#{yyyy-mm-dd}`` (UTC) |
| waiter (a run waiting for the session) | ``SESSION#{session}`` | ``WAIT#{run}`` |
| its place on the wait list (while it waits) | ``SESSION#{session}`` | ``QUEUE#{arrived}#{run}`` |
| live-turn append (idempotency key) | ``SESSION#{session}`` | ``APPEND#{sha256 of the key}`` |
| an open page (WebSocket connection) | ``SESSION#{session}`` | ``CONN#{connection}`` |
| a delivery no open page received | ``SESSION#{session}`` | ``UNREAD`` |
| the connection itself (``$disconnect``) | ``CONN#{connection}`` | ``CONN`` |
| push ticket (single use, 60 s) | ``TICKET#{sha256 of the ticket}`` | ``TICKET`` |
| run | ``RUN#{run}`` | ``RUN`` |
| journal step / delivery / failure / wake | ``RUN#{run}`` | ``STEP#…`` / ``DELIVERY#…`` / ``FAILURE#…`` / ``WAKE`` |
| a send's intent (Slack, Telegram; a route's targets) | ``RUN#{run}`` | ``SENDING#{delivery}#{target}`` |
| task | ``TASK#{task}`` | ``TASK`` |
| job | ``JOB#{job}`` | ``JOB`` |
| a job's skipped / missed fire | ``JOB#{job}`` | ``FIRE#{kind}#{scheduled time}`` |
| approval request (a gated tool call) | ``APPROVAL#{approval}`` | ``APPROVAL`` |

Index ``gsi3`` (keys only): a run's ``gsi3pk`` is ``RUNS#{session}`` and its ``gsi3sk`` is
``{start of its latest attempt}#{run}`` (newest attempt first in ``agentwake runs list``); a task's
``gsi3pk`` is ``TASKS#{session}`` and its ``gsi3sk`` ``{created_at}#{task}`` (a session's tasks,
newest first, on the product API). Index ``gsi4`` (keys only, runs by time, all sessions): a run's
``gsi4pk`` is ``RUNDAY#{yyyy-mm-dd}`` (the UTC day its latest attempt started) and its ``gsi4sk``
the same ``{start}#{run}`` as its ``gsi3sk``. Keys only, so that a run's or task's change of
status, which every wake's commit makes, writes nothing on them (``store/listings.py`` reads the
items a page names with one ``BatchGetItem``; docs/table-design.md, "Capacity per wake").

Index ``gsi1``: a job's ``gsi1pk`` is ``JOBS`` and its ``gsi1sk`` the job id; a session's approval
requests ``APPROVALS#{session}``. Runs and tasks written before ``gsi3`` existed are on ``gsi1``
under the same keys as on ``gsi3`` (``RUNS#``/``TASKS#``), and such runs on ``gsi2`` by day: the
listings read those too (``store/listings.py``: ``BY_SESSION``, ``BY_DAY``); a run's next attempt moves it.

Index ``gsi2`` (the tree of a session): a task or job a run started has ``gsi2pk``
``TREE#{session}`` and ``gsi2sk`` ``{starting run}#{created}#{TASK|JOB}#{id}`` (``tree_keys``), so the
tasks and jobs one run started are one Query (``begins_with`` the run's id and ``#``), and a whole
session's are one Query too.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from typing import Any

#: sort-key prefixes of the items that share a partition
HISTORY_PREFIX = "MSG#"
STEP_PREFIX = "STEP#"
DELIVERY_PREFIX = "DELIVERY#"
SENDING_PREFIX = "SENDING#"
FAILURE_PREFIX = "FAILURE#"
TASK_PREFIX = "TASK#"
FIRE_PREFIX = "FIRE#"
SESSION_PREFIX = "SESSION#"
WAIT_PREFIX = "WAIT#"
QUEUE_PREFIX = "QUEUE#"
APPEND_PREFIX = "APPEND#"
#: the WebSocket API's items (store/push.py): a session's open pages, the connection's own item, tickets
CONN_PREFIX = "CONN#"
TICKET_PREFIX = "TICKET#"
#: sort keys of the one-of-a-kind items
RUN_SK = "RUN"
CONFIG_SK = "CONFIG"
#: what is left of a session its owners deleted over the product API: who owned it (its id is not
#: given to another principal)
DELETED_SK = "DELETED"
TASK_SK = "TASK"
WAKE_SK = "WAKE"
LEASE_SK = "LEASE"
CONN_SK = "CONN"
TICKET_SK = "TICKET"
UNREAD_SK = "UNREAD"
#: gsi3 partition keys (gsi1's, for runs and tasks written before gsi3 existed)
RUNS_PREFIX = "RUNS#"
TASKS_PREFIX = "TASKS#"
#: gsi1 partition key of the jobs
JOBS_GSI_PK = "JOBS"
#: gsi4 partition keys (one per UTC day; gsi2's, for runs written before gsi4 existed)
RUNDAY_PREFIX = "RUNDAY#"
#: gsi2 partition keys of the tasks and jobs runs started (one per session)
TREE_PREFIX = "TREE#"
#: what a tree entry is (the third part of its ``gsi2sk``)
TREE_TASK = "TASK"
TREE_JOB = "JOB"
TREE_APPROVAL = "APPROVAL"
#: an approval request (store/approvals.py): its item, and its session's partition of gsi1
APPROVAL_PREFIX = "APPROVAL#"
APPROVAL_SK = "APPROVAL"
APPROVALS_PREFIX = "APPROVALS#"


def session_pk(session_id: str) -> str:
    return f"{SESSION_PREFIX}{session_id}"


def run_pk(run_id: str) -> str:
    return f"RUN#{run_id}"


def run_key(run_id: str) -> tuple[str, str]:
    return run_pk(run_id), RUN_SK


def task_key(task_id: str) -> tuple[str, str]:
    return f"{TASK_PREFIX}{task_id}", TASK_SK


def tasks_gsi_pk(session_id: str) -> str:
    """The ``gsi3`` partition of a session's tasks."""
    return TASKS_PREFIX + session_id


def tasks_gsi_sk(created_at: str, task_id: str) -> str:
    return f"{created_at}#{task_id}"


def approval_key(approval_id: str) -> tuple[str, str]:
    return f"{APPROVAL_PREFIX}{approval_id}", APPROVAL_SK


def approvals_gsi_pk(session_id: str) -> str:
    """The ``gsi1`` partition of a session's approval requests (sorted ``{requested_at}#{approval}``)."""
    return APPROVALS_PREFIX + session_id


def job_key(job_id: str) -> tuple[str, str]:
    return f"JOB#{job_id}", "JOB"


def job_fire_key(job_id: str, kind: str, scheduled_time: str) -> tuple[str, str]:
    return job_key(job_id)[0], f"{FIRE_PREFIX}{kind}#{scheduled_time}"


def config_key(session_id: str) -> tuple[str, str]:
    return session_pk(session_id), CONFIG_SK


def deleted_key(session_id: str) -> tuple[str, str]:
    return session_pk(session_id), DELETED_SK


def lease_key(session_id: str) -> tuple[str, str]:
    return session_pk(session_id), LEASE_SK


def wait_key(session_id: str, run_id: str) -> tuple[str, str]:
    """A run waiting for its session (the session's wait list, docs/durability.md)."""
    return session_pk(session_id), WAIT_PREFIX + run_id


def queue_key(session_id: str, arrived: float, run_id: str) -> tuple[str, str]:
    """A waiting run's place on its session's wait list: sorted by when it first waited (epoch
    seconds, zero-padded to sort as text), then by run id."""
    return session_pk(session_id), f"{QUEUE_PREFIX}{arrived:017.3f}#{run_id}"


def append_key(session_id: str, idempotency_key: str) -> tuple[str, str]:
    """The marker of one live-turn append: a retried append with the same key writes nothing."""
    import hashlib

    return session_pk(session_id), APPEND_PREFIX + hashlib.sha256(idempotency_key.encode()).hexdigest()


#: a conversation cursor that ends a page between a note and its marker (one item: ``with_marker``):
#: the item's sort key and this suffix, which sorts after that key and before every other history key
#: (all are one length), so the next page's Query starts at that item, and shows only its marker
MARKER_CURSOR = "~marker"  # URL-safe: a query string's "+" reads as a space where it is not encoded


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


def sending_sk(delivery_id: str, target: str) -> str:
    """An intent's sort key; a target's name has no ``#`` (factory.py), a delivery id may."""
    return f"{SENDING_PREFIX}{delivery_id}#{target}"


def intent_key_parts(sk: str) -> tuple[str, str, str]:
    """An intent's sort key as (delivery id, "#", target): a target's name has no ``#``."""
    return after(SENDING_PREFIX, sk).rpartition("#")


def failure_sk(attempt: int, at: str) -> str:
    return f"{FAILURE_PREFIX}{attempt:05d}#{at}"


def after(prefix: str, sk: str) -> str:
    """What follows ``prefix`` in a sort key (a step's key, a delivery's id)."""
    return sk[len(prefix) :]


def runs_gsi_pk(session_id: str) -> str:
    return RUNS_PREFIX + session_id


def runs_gsi_sk(started_at: str, run_id: str) -> str:
    return f"{started_at}#{run_id}"


def runs_by_day_pk(day: str) -> str:
    """The ``gsi4`` partition of the runs whose latest attempt started on ``day`` (yyyy-mm-dd, UTC)."""
    return RUNDAY_PREFIX + day


def runs_by_day_set(started_at: str, run_id: str, *, keep: bool = False) -> tuple[str, dict[str, Any]]:
    """The ``SET`` clauses (with a leading ``, ``) and values that put a run on the ``gsi4`` index
    (runs by time): its partition is the UTC day of ``started_at``. ``keep``: only where the run has
    no ``gsi4`` keys yet (``if_not_exists``)."""
    pk, sk = ("if_not_exists(gsi4pk, :g4pk)", "if_not_exists(gsi4sk, :g4sk)") if keep else (":g4pk", ":g4sk")
    values = {":g4pk": {"S": runs_by_day_pk(started_at[:10])}, ":g4sk": {"S": runs_gsi_sk(started_at, run_id)}}
    return f", gsi4pk = {pk}, gsi4sk = {sk}", values


def tree_gsi_pk(session_id: str) -> str:
    """The ``gsi2`` partition of the tasks and jobs the runs of ``session_id`` started."""
    return TREE_PREFIX + session_id


def tree_run_prefix(run_id: str) -> str:
    """The ``gsi2sk`` prefix of everything ``run_id`` started (ids never hold ``#``)."""
    return f"{run_id}#"


def tree_keys(session_id: str, started_by: str | None, created_at: str, kind: str, target_id: str) -> dict[str, str]:
    """The ``gsi2`` keys that put a task (``kind`` ``TREE_TASK``), job (``TREE_JOB``) or approval
    request (``TREE_APPROVAL``) under the run
    that started it, in the order they were created; none when no run started it (the product or an
    operator did)."""
    if not started_by:
        return {}
    return {
        "gsi2pk": tree_gsi_pk(session_id),
        "gsi2sk": f"{tree_run_prefix(started_by)}{created_at}#{kind}#{target_id}",
    }
