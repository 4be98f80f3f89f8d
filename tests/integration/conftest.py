from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from agentwake.agent.providers import scripted
from agentwake.settings import reset_caches
from agentwake.store.dynamo import DynamoStore
from agentwake.store.models import SessionConfig, Task
from tests.support.aws import REGION, Resources, create_resources
from tests.support.tasks import token_hash_for

OK_SCRIPT = [
    {"tool_calls": [{"name": "send_message_to_user", "arguments": {"text": "Your research is done."}}]},
    {"text": "I told the user the research is done."},
]
FAILING_PROVIDERS = [
    {"type": "scripted", "id": "primary", "script": [{"error": "server"}]},
    {"type": "scripted", "id": "fallback", "script": [{"error": "auth"}]},
]


@pytest.fixture
def resources(aws_credentials: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[Resources]:
    with mock_aws():
        res = create_resources()
        for k, v in res.env().items():
            monkeypatch.setenv(k, v)
        reset_caches()
        scripted.CALLS.clear()
        yield res
        reset_caches()


@pytest.fixture
def store(resources: Resources) -> DynamoStore:
    return DynamoStore(resources.table, client=boto3.client("dynamodb", region_name=REGION))


def seed_session(store: DynamoStore, session_id: str, providers: list[dict] | None = None, **kw: object) -> None:
    store.put_session(
        SessionConfig(
            session_id=session_id,
            providers=providers or [{"type": "scripted", "id": "scripted", "script": OK_SCRIPT}],
            retry_base_delay_ms=0,
            **kw,  # type: ignore[arg-type]
        )
    )


def seed_task(store: DynamoStore, task_id: str, session_id: str) -> None:
    store.put_task(
        Task(
            task_id=task_id,
            session_id=session_id,
            tool_name="web_research",
            tool_args={"q": "x"},
            token_sha256=token_hash_for(task_id),
        )
    )
