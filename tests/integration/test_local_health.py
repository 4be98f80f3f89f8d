"""The local stack's health check: constant-time, and a busy stack is never reported as gone."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentwake_local.server import HEALTH_PATH, MotoServer, free_port, is_reachable, probe
from agentwake_local.stack import LocalStackRuntime, read_state

TOY_TEMPLATE = (Path(__file__).parent / "toy" / "template.yaml").resolve()


@pytest.fixture
def silent_listener() -> Iterator[str]:
    """A port that accepts connections and never answers: a server busy with other requests."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_a_running_moto_server_is_up_and_the_check_does_not_read_its_contents() -> None:
    # GIVEN a moto server
    with MotoServer() as server:
        # THEN it is up, and the check asks for moto's small config document, not the data dump
        assert probe(server.endpoint_url) == "up"
        assert is_reachable(server.endpoint_url)
        assert HEALTH_PATH == "/moto-api/config" and "data.json" not in HEALTH_PATH


def test_a_server_that_accepts_but_does_not_answer_yet_is_busy_not_gone(silent_listener: str) -> None:
    # GIVEN a server that accepted the connection but answers nobody within the timeout
    # THEN it is busy, and still counts as a running stack
    assert probe(silent_listener, timeout=0.5) == "busy"
    assert is_reachable(silent_listener, timeout=0.5)


def test_nothing_listening_is_down() -> None:
    assert probe(f"http://127.0.0.1:{free_port()}") == "down"
    assert not is_reachable(f"http://127.0.0.1:{free_port()}")


def test_a_busy_stack_stays_recorded_as_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, silent_listener: str
) -> None:
    # GIVEN a running local stack whose server is momentarily too busy to answer the check
    monkeypatch.setenv("AGENTWAKE_HOME", str(tmp_path))
    with LocalStackRuntime(home=tmp_path).start(TOY_TEMPLATE) as running:
        real = running.endpoint_url
        monkeypatch.setattr(
            "agentwake_local.stack.is_reachable", lambda url: is_reachable(silent_listener if url == real else url, 0.5)
        )
        # WHEN another process looks for it  THEN it is found, not "no local stack is running"
        state = read_state(tmp_path)
        assert state is not None and state["endpoint_url"] == real
