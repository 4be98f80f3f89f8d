"""What a channel adapter needs from the outside, composed once by the wake (``wake/attempt.py``
``channels_for``): the stack's settings (API bases, default token refs, the push endpoint), the
clock (a 429's wait sleeps on it, so tests do not), AWS clients by service name (SNS, the WebSocket
API's management endpoint), the session's open pages, and the run's intents. ``delivery/`` imports no store module:
the connections port is handed in."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentwake.clock import Clock, SystemClock


class Connections(Protocol):
    """The WebSocket connections a session's open pages hold (``store/push.py``; it also has
    ``mark_unread(session_id, delivery_id)``, which the websocket channel calls when none is reached)."""

    def of_session(self, session_id: str) -> list[str]: ...

    def forget(self, session_id: str, connection_id: str) -> None: ...


def _no_client(service: str, **options: Any) -> Any:
    from agentwake.store.aws import client

    return client(service, **options)


@dataclass(frozen=True)
class ChannelKit:
    settings: Any  # agentwake.settings.Settings (kept loose: a test may pass a namespace)
    clock: Clock = field(default_factory=SystemClock)
    #: an AWS client by service name ("sns", "apigatewaymanagementapi"; keyword ``endpoint_url``,
    #: ``region``), made on first use
    client: Callable[..., Any] = _no_client
    #: the session's open pages; None where there is no push API (the websocket channel refuses)
    connections: Connections | None = None
    #: the run's intents (``delivery.intents.IntentLog``: the run's journal); None: no intents are
    #: written (a replay, a channel built outside a run)
    intents: Any = None
