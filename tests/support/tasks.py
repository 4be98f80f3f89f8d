"""Task tokens for tests that seed tasks directly in the store (producers get theirs from register_task)."""

from __future__ import annotations

from agentwake.domain.models import task_token_hash


def token_for(task_id: str) -> str:
    """The task token a test's seeded task ``task_id`` was registered with."""
    return f"awt_test-token-of-{task_id}"


def token_hash_for(task_id: str) -> str:
    return task_token_hash(token_for(task_id))
