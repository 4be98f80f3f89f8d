"""The security tests reuse the operator CLI's in-process stack (moto, the CLI runner, the SQS poller)."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import Cli, Stack, cli, cli_json, stack  # noqa: F401 -- fixtures for these tests
from tests.support.moto_patched import apply_moto_patches


def pytest_configure(config: pytest.Config) -> None:
    """moto patched as the local stack runs it (tests/support/moto_patched.py)."""
    apply_moto_patches()
