"""The composition root: settings and adapters, built once per process and cached."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from agentwake.settings import get_settings
from agentwake.store.dynamo import DynamoStore
from agentwake.store.idempotency import run_idempotency
from agentwake.store.queues import DeadLetters, ResultQueue
from agentwake.store.schedules import Schedules
from agentwake.wake.run import WakeDeps


@lru_cache(maxsize=1)
def wake_deps() -> WakeDeps:
    settings = get_settings()
    return WakeDeps(
        store=DynamoStore(settings.table_name, journal_ttl_days=settings.journal_ttl_days),
        settings=settings,
        schedules=Schedules(settings.schedule_group),
        idempotency=run_idempotency(settings.idempotency_table) if settings.idempotency_table else None,
        on_event=_transcript() if settings.transcript else None,
    )


def _transcript():  # type: ignore[no-untyped-def]
    import sys

    from agentwake.agent.transcript import TranscriptPrinter

    return TranscriptPrinter(out=sys.stdout, indent="      ")


def wake_deps_for(context: Any) -> WakeDeps:
    """The cached deps, with Powertools Idempotency told this invocation's remaining time, so an
    in-progress record left by a run that crashed expires with it and the retry can run."""
    deps = wake_deps()
    if deps.idempotency is not None:
        deps.idempotency.config.register_lambda_context(context)
    return deps


@lru_cache(maxsize=1)
def dead_letters() -> DeadLetters:
    return DeadLetters(get_settings().result_dlq_url)


@lru_cache(maxsize=1)
def result_queue() -> ResultQueue:
    return ResultQueue(get_settings().result_queue_url)


def reset() -> None:
    wake_deps.cache_clear()
    dead_letters.cache_clear()
    result_queue.cache_clear()


def reset_caches() -> None:
    """Forget cached settings, AWS clients and adapters (the local runtime calls this when the env changes)."""
    from agentwake.store import aws

    get_settings.cache_clear()
    aws.reset_clients()
    reset()
