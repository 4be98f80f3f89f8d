"""Slack and Telegram adapters against fake platforms on 127.0.0.1, built as a wake builds them:
the API bases and token refs from the stack's Settings (environment), a fake clock in the kit."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agentwake.delivery.kit import ChannelKit
from tests.support.clock import FakeClock
from tests.support.fake_slack import FakeSlack
from tests.support.fake_telegram import FakeTelegram


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def slack(monkeypatch: pytest.MonkeyPatch, stackless_settings: None) -> Iterator[FakeSlack]:
    with FakeSlack() as fake:
        monkeypatch.setenv("AGENTWAKE_SLACK_API_URL", fake.url)
        monkeypatch.setenv("AGENTWAKE_SLACK_TOKEN_REF", "env:AGENTWAKE_SECRET_SLACK_BOT")
        monkeypatch.setenv("AGENTWAKE_SECRET_SLACK_BOT", fake.token)
        yield fake


@pytest.fixture
def telegram(monkeypatch: pytest.MonkeyPatch, stackless_settings: None) -> Iterator[FakeTelegram]:
    with FakeTelegram() as fake:
        monkeypatch.setenv("AGENTWAKE_TELEGRAM_API_URL", fake.url)
        monkeypatch.setenv("AGENTWAKE_TELEGRAM_TOKEN_REF", "env:AGENTWAKE_SECRET_TELEGRAM_BOT")
        monkeypatch.setenv("AGENTWAKE_SECRET_TELEGRAM_BOT", fake.token)
        yield fake


@pytest.fixture
def build(clock: FakeClock) -> Callable[[dict[str, Any]], Any]:
    """Build a session's delivery spec as the wake does: ``build_channel`` with a kit holding the
    stack's Settings as the environment has them when called, and the fake clock."""
    from agentwake.delivery.factory import build_channel
    from agentwake.settings import get_settings

    def _build(spec: dict[str, Any]) -> Any:
        get_settings.cache_clear()
        return build_channel(spec, ChannelKit(settings=get_settings(), clock=clock))

    return _build


@pytest.fixture
def refusing_port() -> int:
    """A port on 127.0.0.1 where nothing listens (connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port on 127.0.0.1 that takes the connection and the request and never answers."""
    server = socket.create_server(("127.0.0.1", 0))
    try:
        yield int(server.getsockname()[1])
    finally:
        server.close()
