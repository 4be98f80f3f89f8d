"""The composition root: settings and adapters, built once per process and cached.

Cold start builds only what every wake uses: the settings and one DynamoDB client. The Scheduler
client is made on first use (deleting a run-once job's schedule), the SQS client only when a
permanent failure is dead-lettered (a background result to its DLQ, a cron wake to CronFailureQueue);
provider adapters when a session names them.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from agentwake.settings import get_settings
from agentwake.store.dynamo import DynamoStore
from agentwake.store.queues import DeadLetters, ResultQueue
from agentwake.store.schedules import Schedules
from agentwake.wake.spec import WakeDeps

if TYPE_CHECKING:
    from agentwake.store.cron_failures import CronFailures


@lru_cache(maxsize=1)
def wake_deps() -> WakeDeps:
    settings = get_settings()
    return WakeDeps(
        store=DynamoStore(settings.table_name, journal_ttl_days=settings.journal_ttl_days),
        settings=settings,
        schedules=Schedules(settings.schedule_group),
        on_event=_transcript() if settings.transcript else None,
        # a release hands the session to its next waiter through it (its client is made then)
        result_queue=result_queue(),
    )


def _transcript():  # type: ignore[no-untyped-def]
    import sys

    from agentwake.agent.transcript import TranscriptPrinter

    return TranscriptPrinter(out=sys.stdout, indent="      ")


@lru_cache(maxsize=1)
def dead_letters() -> DeadLetters:
    return DeadLetters(get_settings().result_dlq_url)


@lru_cache(maxsize=1)
def result_queue() -> ResultQueue:
    return ResultQueue(get_settings().result_queue_url)


@lru_cache(maxsize=1)
def cron_failures() -> CronFailures:
    """CronFailureQueue for a permanent cron failure (imported and built only on that path)."""
    from agentwake.store.cron_failures import CronFailures

    return CronFailures(get_settings().cron_failure_queue_url)


def reset() -> None:
    wake_deps.cache_clear()
    dead_letters.cache_clear()
    result_queue.cache_clear()
    cron_failures.cache_clear()


def reset_caches() -> None:
    """Forget cached settings, AWS clients and adapters (the local runtime calls this when the env changes)."""
    from agentwake.store import aws

    get_settings.cache_clear()
    aws.reset_clients()
    reset()
