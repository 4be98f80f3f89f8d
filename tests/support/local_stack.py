"""The REAL template.yaml on the embedded local AWS, for the tests that run against a whole stack."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from agentwake.store.dynamo import DynamoStore
from agentwake_local.stack import LocalStackRuntime

TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"


@contextlib.contextmanager
def local_stack(
    home: Path, parameters: Mapping[str, Any] | None = None, *, background: bool = False, **options: Any
) -> Iterator[LocalStackRuntime]:
    """The stack in ``home`` with the template's ``parameters`` (its defaults for the others), for
    the block: ``AGENTWAKE_HOME`` is ``home`` meanwhile, so the CLI finds this stack and never a
    developer's own, and nothing in the environment points it elsewhere. ``background``: the
    "up" mode (pollers, async queue, scheduler, HTTP APIs on threads); ``options``: the
    runtime's (``async_retry_delays``, ``poll_interval``...)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AGENTWAKE_HOME", str(home))
        for name in ("AGENTWAKE_TABLE", "AWS_ENDPOINT_URL", "AWS_PROFILE"):
            mp.delenv(name, raising=False)
        runtime = LocalStackRuntime(home=home, **options)
        runtime.start(TEMPLATE, dict(parameters or {}), background=background)
        try:
            yield runtime
        finally:
            runtime.stop()


def stack_store(runtime: LocalStackRuntime) -> DynamoStore:
    """The stack's table, as the runtime's store reads it."""
    return DynamoStore(runtime.outputs["AgentTableName"], client=runtime.client("dynamodb"))
