"""The outbound policy as the runtime reads it: from Settings (``AGENTWAKE_OUTBOUND_ALLOW_*``).

Tests set the environment the local stack gives its functions (loopback and plain http allowed,
``agentwake_local.stack.LOCAL_OUTBOUND_ENV``) or the deployed template's (both ``false``), and
clear the cached Settings so the runtime reads them again. Nothing in the runtime exists to let a
test choose its policy."""

from __future__ import annotations

import os
from collections.abc import Mapping

import pytest

#: what the local stack sets (tests/integration/test_outbound_env.py checks it is)
LOCAL_OUTBOUND_ENV = {"AGENTWAKE_OUTBOUND_ALLOW_LOOPBACK": "1", "AGENTWAKE_OUTBOUND_ALLOW_HTTP": "1"}
#: what template.yaml sets (checked there too)
DEPLOYED_OUTBOUND_ENV = {"AGENTWAKE_OUTBOUND_ALLOW_LOOPBACK": "false", "AGENTWAKE_OUTBOUND_ALLOW_HTTP": "false"}
#: a table name, for tests with no stack: Settings need one, and the runtime reads its policy from them
PLACEHOLDER_TABLE = "agentwake-unit-tests"


def use_outbound_env(monkeypatch: pytest.MonkeyPatch, env: Mapping[str, str]) -> None:
    """Put ``env`` in the environment and drop the cached Settings, so the next read sees it."""
    from agentwake.settings import get_settings

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()


def use_stackless_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Valid Settings without a stack (a placeholder table where none is set), so an adapter built
    on its own reads the outbound policy from them as it does inside a function."""
    from agentwake.settings import get_settings

    if not os.environ.get("AGENTWAKE_TABLE"):
        monkeypatch.setenv("AGENTWAKE_TABLE", PLACEHOLDER_TABLE)
    get_settings.cache_clear()
