"""The composition root: the one place that builds the adapters and services of the three functions
(cron wake, background result, background work, product API), once per process and per settings.

Each part is built on first use, from the parts it needs, and kept (``Root``): a wake's first
invocation builds the settings, the store (one DynamoDB client) and the wake's dependencies; the
Scheduler client is made on first use (deleting a run-once job's schedule), the SQS client only when a
result is re-sent or handed on, or a permanent failure is dead-lettered (a background result to its
DLQ, a cron wake to CronFailureQueue); provider adapters when a session names them. The product API's
first request builds the store, the result queue and the sessions and tasks services over them, and
never the wake's own machinery: this module imports each part where it is built, so importing it
costs nothing at cold start.

A new settings object (``reset_caches``, or the settings' own cache cleared: the local runtime does
it with each new environment) builds a new root: clients of an earlier stack are never reused.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, cast

from agentwake.on_first_use import OnFirstUse
from agentwake.settings import Settings, get_settings

if TYPE_CHECKING:
    from agentwake.product.approvals import ApprovalsService
    from agentwake.product.sessions import SessionsService
    from agentwake.product.tasks import TasksService
    from agentwake.store.cron_failures import CronFailures
    from agentwake.store.dynamo import DynamoStore
    from agentwake.store.queues import DeadLetters, ResultQueue, WorkQueue
    from agentwake.store.schedules import Schedules
    from agentwake.wake.spec import WakeDeps

__all__ = [
    "Root",
    "approvals",
    "cron_failures",
    "dead_letters",
    "reset",
    "reset_caches",
    "result_queue",
    "root",
    "sessions",
    "store",
    "tasks",
    "wake_deps",
    "work_dead_letters",
]


class Root:
    """Every adapter and service of this process over one ``settings``, each built on first use."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    # -- adapters ---------------------------------------------------------------------------------

    @cached_property
    def store(self) -> DynamoStore:
        from agentwake.store.dynamo import DynamoStore

        return DynamoStore(self.settings.table_name, journal_ttl_days=self.settings.journal_ttl_days)

    @cached_property
    def result_queue(self) -> ResultQueue:
        """The background-result queue (its SQS client is made on the first send)."""
        from agentwake.store.queues import ResultQueue

        return ResultQueue(self.settings.result_queue_url)

    @cached_property
    def dead_letters(self) -> DeadLetters:
        from agentwake.store.queues import DeadLetters

        return DeadLetters(self.settings.result_dlq_url)

    @cached_property
    def work_queue(self) -> WorkQueue:
        """The background-work queue (its SQS client is made on the first send: a started task)."""
        from agentwake.store.queues import WorkQueue

        return WorkQueue(self.settings.work_queue_url)

    @cached_property
    def work_dead_letters(self) -> DeadLetters:
        """BackgroundWorkDLQ: a work message no retry can help goes there at once, with its reason."""
        from agentwake.store.queues import DeadLetters

        return DeadLetters(self.settings.work_dlq_url, env="AGENTWAKE_WORK_DLQ_URL")

    @cached_property
    def cron_failures(self) -> CronFailures:
        """CronFailureQueue for a permanent cron failure (imported and built only on that path)."""
        from agentwake.store.cron_failures import CronFailures

        return CronFailures(self.settings.cron_failure_queue_url)

    @cached_property
    def schedules(self) -> Schedules:
        from agentwake.store.schedules import Schedules

        return Schedules(self.settings.schedule_group)

    # -- the wake ---------------------------------------------------------------------------------

    @cached_property
    def wake_deps(self) -> WakeDeps:
        from agentwake.wake.spec import WakeDeps

        return WakeDeps(
            store=self.store,
            settings=self.settings,
            schedules=self.schedules,
            on_event=_transcript() if self.settings.transcript else None,
            # a release hands the session to its next waiter through it (its client is made then)
            result_queue=self.result_queue,
            # a background tool or subagent is started, and completed, through it (no client until then)
            tasks=cast("TasksService", OnFirstUse(lambda: self.tasks)),  # loaded by the first run that starts one
        )

    # -- the product API's services ---------------------------------------------------------------

    @cached_property
    def sessions(self) -> SessionsService:
        """Live turns and the conversation; ending a turn hands the session on through the result queue."""
        from agentwake.product.sessions import SessionsService

        return SessionsService(self.store, self.result_queue, max_hold_s=self.settings.live_turn_max_hold_s)

    @cached_property
    def approvals(self) -> ApprovalsService:
        """Deciding approval requests (the one decision path: product API, CLI, console, expiry) and
        sending their checks to the work queue (issue 35); loaded on first use."""
        from agentwake.product.approvals import ApprovalsService

        return ApprovalsService(self.store, self.work_queue)

    @cached_property
    def tasks(self) -> TasksService:
        """Registering, starting and completing tasks: a completion is sent to the result queue, the work
        agentwake runs itself to the work queue (each SQS client is made on its first send)."""
        from agentwake.product.tasks import TasksService

        return TasksService(self.store, self.settings.result_queue_url, work_queue=self.work_queue)


def _transcript():  # type: ignore[no-untyped-def]
    import sys

    from agentwake.agent.transcript import TranscriptPrinter

    return TranscriptPrinter(out=sys.stdout, indent="      ")


_roots: list[Root] = []


def root() -> Root:
    """This process's root, built again when the settings were built again."""
    settings = get_settings()
    if not _roots or _roots[0].settings is not settings:
        _roots[:] = [Root(settings)]
    return _roots[0]


def wake_deps() -> WakeDeps:
    return root().wake_deps


def store() -> DynamoStore:
    return root().store


def result_queue() -> ResultQueue:
    return root().result_queue


def dead_letters() -> DeadLetters:
    return root().dead_letters


def work_dead_letters() -> DeadLetters:
    return root().work_dead_letters


def cron_failures() -> CronFailures:
    return root().cron_failures


def sessions() -> SessionsService:
    return root().sessions


def tasks() -> TasksService:
    return root().tasks


def approvals() -> ApprovalsService:
    return root().approvals


def reset() -> None:
    """Forget every adapter and service built (the next use builds them again)."""
    _roots.clear()


def reset_caches() -> None:
    """Forget cached settings, AWS clients and adapters (the local runtime calls this when the env changes)."""
    from agentwake.store import aws

    get_settings.cache_clear()
    aws.reset_clients()
    reset()
