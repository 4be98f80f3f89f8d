"""The security tests reuse the operator CLI's in-process stack (moto, the CLI runner, the SQS poller)."""

from __future__ import annotations

from tests.e2e.conftest import Cli, Stack, cli, cli_json, stack  # noqa: F401 -- fixtures for these tests
