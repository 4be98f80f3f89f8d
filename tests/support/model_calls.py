"""Model calls counted per provider id, for the tests that assert what a run billed.

The scripted provider keeps no global tally (the Lambda bundle ships nothing only tests read):
``count_model_calls`` wraps ``ScriptedProvider.complete`` for the length of one test. Every call
is counted as it starts, whether it answers or raises, like a billed request. The local stack runs
its functions in this process (``agentwake_local.lambda_runtime``) on the same ``agentwake``
modules, so calls made inside its handlers, on any of its threads, are counted too."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest


def count_model_calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """From now until the test ends: scripted provider id -> calls to ``complete``."""
    from agentwake.agent.providers.scripted import ScriptedProvider

    calls: Counter[str] = Counter()
    lock = threading.Lock()  # the local stack's async invocations and pollers run on threads
    complete = ScriptedProvider.complete

    def counted(self: ScriptedProvider, request: Any) -> Any:
        with lock:
            calls[self.id] += 1
        return complete(self, request)

    monkeypatch.setattr(ScriptedProvider, "complete", counted)
    return calls


def record_model_requests(monkeypatch: pytest.MonkeyPatch) -> list[list[tuple[str, str]]]:
    """From now until the test ends: the messages (role, content) of every request a scripted
    provider was sent, in order: what a woken agent was shown."""
    from agentwake.agent.providers.scripted import ScriptedProvider

    requests: list[list[tuple[str, str]]] = []
    lock = threading.Lock()
    complete = ScriptedProvider.complete

    def recorded(self: ScriptedProvider, request: Any) -> Any:
        with lock:
            requests.append([(m.role, m.content) for m in request.messages])
        return complete(self, request)

    monkeypatch.setattr(ScriptedProvider, "complete", recorded)
    return requests
