"""What the sample events in ``events/`` name, created in a local stack.

``events/README.md`` promises what each file does (a note for ``task-ok-1``, a batch item failure
for ``task-fail-1``, a cron run for ``job-nightly``, ...); that needs the sessions, tasks and job
it names. ``agentwake local up`` seeds them (``--no-seed`` to skip) and ``agentwake local seed``
does it on a running stack. Idempotent: what exists is left as it is (a task already woken stays
woken), so the examples can be run again.
"""

from __future__ import annotations

from typing import Any

from agentwake.domain.models import SessionConfig, Task, task_token_hash
from agentwake.domain.run_models import Job
from agentwake.errors import TaskExists
from agentwake.store.dynamo import DynamoStore
from agentwake_local.server import LOCAL_CALLER_ARN

#: a session whose scripted agent tells the user, then answers
DEMO_SCRIPT = [
    {"tool_calls": [{"name": "send_message_to_user", "arguments": {"text": "Your research is done."}}]},
    {"text": "I told the user the research is done."},
]
#: a session whose every provider fails (a server error, then an auth error)
FAILING_PROVIDERS = [
    {"type": "scripted", "id": "primary", "script": [{"error": "server"}]},
    {"type": "scripted", "id": "fallback", "script": [{"error": "auth"}]},
]

SESSIONS: dict[str, list[dict[str, Any]]] = {
    "session-demo": [{"type": "scripted", "id": "scripted", "script": DEMO_SCRIPT}],
    "session-failing": FAILING_PROVIDERS,
}
TASKS = {"task-ok-1": "session-demo", "task-ok-2": "session-demo", "task-fail-1": "session-failing"}


def sample_token(task_id: str) -> str:
    """The task token the sample completions in ``events/`` carry (a sample, never a real secret)."""
    return f"awt_test-token-of-{task_id}"


JOBS = {
    "job-nightly": Job(
        job_id="job-nightly",
        session_id="session-demo",
        name="Nightly report",
        description="summarise yesterday's sign-ups",
        schedule_expression="cron(0 6 * * ? *)",
    )
}


def seed(store: DynamoStore) -> list[str]:
    """Create what is missing; returns what was created (``session:ID``, ``task:ID``, ``job:ID``)."""
    created: list[str] = []
    for session_id, providers in SESSIONS.items():
        if store.records.get_session(session_id) is None:
            config = SessionConfig(
                session_id=session_id, providers=providers, retry_base_delay_ms=0, owners=[LOCAL_CALLER_ARN]
            )
            store.records.put_session(config)
            created.append(f"session:{session_id}")
    for task_id, session_id in TASKS.items():
        try:
            store.records.put_task(
                Task(
                    task_id=task_id,
                    session_id=session_id,
                    tool_name="web_research",
                    tool_args={"query": "q"},
                    token_sha256=task_token_hash(sample_token(task_id)),
                )
            )
            created.append(f"task:{task_id}")
        except TaskExists:
            pass
    for job_id, job in JOBS.items():
        if store.records.get_job(job_id) is None:
            store.records.put_job(job)
            created.append(f"job:{job_id}")
    return created
