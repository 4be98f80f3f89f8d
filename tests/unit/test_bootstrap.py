"""The composition root (agentwake.bootstrap): the three functions' adapters and services are built
in one place, once per process, and built again for a new environment."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentwake import bootstrap


@pytest.fixture
def root(monkeypatch: pytest.MonkeyPatch, aws_credentials: None) -> Iterator[None]:
    """A function's environment (no AWS call is made: clients are only built)."""
    monkeypatch.setenv("AGENTWAKE_TABLE", "t")
    monkeypatch.setenv("AGENTWAKE_RESULT_QUEUE_URL", "https://sqs.us-east-1.amazonaws.com/123456789012/results")
    bootstrap.reset_caches()
    yield
    bootstrap.reset_caches()


def test_the_wake_and_the_product_api_share_one_store_and_one_result_queue(root: None) -> None:
    # GIVEN what the wakes use and what the product API's routes use
    deps = bootstrap.wake_deps()
    sessions, tasks = bootstrap.sessions(), bootstrap.tasks()
    # THEN they work on one store and one result queue (a live turn's hand-off sends through the
    # queue a wake's hand-off sends through, and a completion through its client)
    assert deps.store is sessions.store is tasks.store is bootstrap.store()
    assert deps.result_queue is sessions.result_queue is bootstrap.result_queue()
    assert tasks.sqs is bootstrap.result_queue().client
    assert tasks.queue_url == bootstrap.result_queue().url
    # AND each is built once per process: asked again, the same objects
    assert bootstrap.wake_deps() is deps and bootstrap.sessions() is sessions and bootstrap.tasks() is tasks
    assert bootstrap.dead_letters() is bootstrap.dead_letters()
    assert bootstrap.cron_failures() is bootstrap.cron_failures()


def test_a_new_environment_builds_everything_again(root: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the parts built for one environment
    store, sessions = bootstrap.store(), bootstrap.sessions()
    # WHEN the settings are read again for another (the local runtime does it with each new stack)
    from agentwake.settings import get_settings

    monkeypatch.setenv("AGENTWAKE_TABLE", "another")
    get_settings.cache_clear()
    # THEN nothing of the earlier environment is reused
    assert bootstrap.store() is not store and bootstrap.sessions() is not sessions
    assert bootstrap.root().settings.table_name == "another"
    assert bootstrap.sessions().store is bootstrap.wake_deps().store is bootstrap.store()
