from __future__ import annotations

import pytest

from tests.support.aws import REGION


def pytest_configure(config: pytest.Config) -> None:
    """Every test runs on moto as the local stack runs it, whatever the order: with
    ``agentwake_local.moto_patches`` (pinned to moto's source, checked here). Unpatched, an SQS
    receive walks the whole queue and a transaction copies the whole table, so a DLQ scan costs n²
    (the 10,000-body ``make fuzz``) and a 100,000-entry table costs gigabytes."""
    from agentwake_local import moto_patches

    moto_patches.apply()


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
def local_outbound_policy() -> object:
    """Tests talk to HTTP servers on 127.0.0.1, as the local stack does: loopback and plain http are
    allowed, exactly as AGENTWAKE_OUTBOUND_ALLOW_LOOPBACK/HTTP=1 allow them locally. Tests of the
    policy itself pass a strict ``OutboundPolicy()``."""
    from agentwake import outbound
    from agentwake.redact import forget_secrets

    outbound.set_default_policy(outbound.OutboundPolicy(allow_loopback=True, allow_http=True))
    yield
    outbound.set_default_policy(None)
    forget_secrets()
