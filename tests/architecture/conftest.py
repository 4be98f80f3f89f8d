"""The architecture tests read the source, and check the suite's moto resources (patched as in integration)."""

from __future__ import annotations

import pytest

from tests.integration.conftest import resources  # noqa: F401  (the integration suite's fixture)
from tests.support.moto_patched import apply_moto_patches


def pytest_configure(config: pytest.Config) -> None:
    """moto patched as the local stack runs it (tests/support/moto_patched.py)."""
    apply_moto_patches()
