from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest

from tests.support.aws import REGION
from tests.support.botocore_data import share_botocore_data
from tests.support.model_calls import count_model_calls
from tests.support.outbound import (
    DEPLOYED_OUTBOUND_ENV,
    LOCAL_OUTBOUND_ENV,
    use_outbound_env,
    use_stackless_settings,
)


def pytest_configure(config: pytest.Config) -> None:
    """botocore's JSON data parsed once per test process (tests/support/botocore_data.py)."""
    share_botocore_data()


@pytest.fixture
def aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake credentials and no endpoint override: nothing can reach real AWS."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_REGION", REGION)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.fixture(autouse=True)
def local_outbound_policy(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Tests talk to HTTP servers on 127.0.0.1, as the local stack does: its functions' environment
    (AGENTWAKE_OUTBOUND_ALLOW_LOOPBACK/HTTP=1) allows loopback and plain http, read by the runtime
    from Settings as everywhere. Tests of the policy itself pass a strict ``OutboundPolicy()`` or
    use ``deployed_outbound_policy``."""
    from agentwake.settings import get_settings
    from tests.support.process_state import forget_secrets

    use_outbound_env(monkeypatch, LOCAL_OUTBOUND_ENV)
    yield
    get_settings.cache_clear()
    forget_secrets()


@pytest.fixture
def deployed_outbound_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The deployed template's outbound environment (https only, no loopback), read from Settings."""
    use_stackless_settings(monkeypatch)
    use_outbound_env(monkeypatch, DEPLOYED_OUTBOUND_ENV)


@pytest.fixture
def stackless_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Valid Settings for a test with no stack, so the adapters it builds read the outbound policy
    (and the secret scope) from them, as they do inside a function."""
    use_stackless_settings(monkeypatch)


@pytest.fixture
def model_calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Scripted provider id -> model calls made during this test (each call counted as it starts)."""
    return count_model_calls(monkeypatch)
