from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from agentwake.bootstrap import reset_caches
from agentwake.store.dynamo import DynamoStore
from tests.support.aws import REGION, Resources, create_resources, moto_one_request_at_a_time
from tests.support.moto_patched import apply_moto_patches


def pytest_configure(config: pytest.Config) -> None:
    """moto patched as the local stack runs it (tests/support/moto_patched.py)."""
    apply_moto_patches()


@pytest.fixture
def resources(aws_credentials: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[Resources]:
    with mock_aws():
        res = create_resources()
        for k, v in res.env().items():
            monkeypatch.setenv(k, v)
        reset_caches()
        yield res
        reset_caches()


@pytest.fixture
def store(resources: Resources) -> DynamoStore:
    return DynamoStore(resources.table, client=boto3.client("dynamodb", region_name=REGION))


@pytest.fixture
def side_by_side(resources: Resources, monkeypatch: pytest.MonkeyPatch) -> None:
    """The background handlers running five records side by side (``AGENTWAKE_RECORD_CONCURRENCY``),
    over moto answering one request at a time, as the local stack's server does."""
    monkeypatch.setenv("AGENTWAKE_RECORD_CONCURRENCY", "5")
    moto_one_request_at_a_time(monkeypatch)
    reset_caches()


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    """The Powertools logger's lines at INFO, into a buffer in place of stdout."""
    from agentwake.observability import logger

    handler = logger.registered_handler
    assert isinstance(handler, logging.StreamHandler)
    buffer, level = io.StringIO(), logger.log_level
    stream = handler.setStream(buffer)
    logger.setLevel(logging.INFO)
    yield buffer
    handler.setStream(stream)
    logger.setLevel(level)
