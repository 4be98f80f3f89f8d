"""Test builders shared by every layer: sessions, tasks, jobs and completion messages.

One definition each, so a change to a model (a new required field) is made once.
"""

from __future__ import annotations

import json
from typing import Any

from agentwake.domain.models import SessionConfig, Task
from agentwake.store.dynamo import DynamoStore
from agentwake.trust.session_checks import ConfigRules
from agentwake.wake.messages import BackgroundResultMessage

# the demo's sessions, re-exported: OK_SCRIPT messages the user at step 0 and answers at step 1 (a
# run that ends DONE with one delivery); with FAILING_PROVIDERS every provider fails (ERROR)
from agentwake_local.seed import DEMO_SCRIPT as OK_SCRIPT
from agentwake_local.seed import FAILING_PROVIDERS as FAILING_PROVIDERS
from tests.support.tasks import token_for, token_hash_for

#: the scripted provider, named as a session must name it: there is no default provider, so a test
#: that does not care which model answers says so here, once
SCRIPTED = [{"type": "scripted"}]
#: the same for ``agentwake sessions put``: ``cli("sessions", "put", "s1", *SCRIPTED_ARGS)``
SCRIPTED_ARGS = ("--provider", json.dumps(SCRIPTED[0]))


def session_config(session_id: str, providers: list[dict] | None = None, **kw: Any) -> SessionConfig:
    """A session config naming its providers (the scripted provider unless ``providers`` are given)."""
    return SessionConfig(session_id=session_id, providers=providers or SCRIPTED, **kw)


def local_stack_rules() -> ConfigRules:
    """What the local stack's wakes allow (its outbound allowances: loopback, plain http), for a test
    that writes a session to a running local stack from a process without its Settings."""
    from agentwake_local.stack import LOCAL_OUTBOUND_ENV

    return ConfigRules.from_env(LOCAL_OUTBOUND_ENV)


#: the principal the tests' product signs as: the owner of the sessions they seed
PRODUCT_CALLER = "arn:aws:iam::123456789012:role/product"
#: the principal of the stack's own (fake) credentials: what moto's STS answers for a key it did not
#: issue, and so what the local HTTP API verifies a request signed with them as
LOCAL_CALLER = "arn:aws:sts::123456789012:user/moto"


def seed_session(
    store: DynamoStore,
    session_id: str,
    providers: list[dict] | None = None,
    *,
    rules: ConfigRules | None = None,
    **kw: object,
) -> None:
    """A session with the scripted provider unless ``providers``, owned by ``PRODUCT_CALLER`` unless
    ``owners``; ``rules``: what ``put_session`` checks it against (None: this process's settings)."""
    kw.setdefault("owners", [PRODUCT_CALLER])
    store.records.put_session(
        SessionConfig(
            session_id=session_id,
            providers=providers or [{"type": "scripted", "id": "scripted", "script": OK_SCRIPT}],
            retry_base_delay_ms=0,
            **kw,  # type: ignore[arg-type]
        ),
        rules=rules,
    )


def seed_task(store: DynamoStore, task_id: str, session_id: str) -> None:
    """A registered task whose token is ``tests.support.tasks.token_for(task_id)``."""
    store.records.put_task(
        Task(
            task_id=task_id,
            session_id=session_id,
            tool_name="web_research",
            tool_args={"q": "x"},
            token_sha256=token_hash_for(task_id),
        )
    )


def seed_job(store: DynamoStore, job_id: str, session_id: str, **kw: Any) -> None:
    from agentwake.domain.run_models import Job  # as the runtime: not what a background wake loads

    store.records.put_job(
        Job(
            job_id=job_id,
            session_id=session_id,
            name="Nightly report",
            description="summarise yesterday's sign-ups",
            schedule_expression="cron(0 6 * * ? *)",
            **kw,
        )
    )


def message(task_id: str, session_id: str, result_text: str = "the result") -> BackgroundResultMessage:
    """A valid completion message for a task registered with ``seed_task``."""
    return BackgroundResultMessage(
        task_id=task_id,
        session_id=session_id,
        task_token=token_for(task_id),
        tool_name="web_research",
        status="succeeded",
        result_text=result_text,
        summary_name="Research",
        finished_at="2026-11-30T05:00:00Z",
    )
