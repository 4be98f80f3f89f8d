"""The ``websocket`` channel: push a delivery to every page of the session open on the stack's
WebSocket API (docs/channels.md). A page connects with a single-use ticket the product obtained
through ``POST /sessions/{id}/push-tickets``; its connection is recorded by ``$connect``
(``product/push.py``).

A send is one Query of the session's connections, then a ``PostToConnection`` to each through the
API's management endpoint (``AGENTWAKE_PUSH_ENDPOINT``, a stack setting). The frame a page receives::

    {"type": "delivery", "delivery_id": "...", "run_id": "...", "session_id": "...",
     "text": "...", "sent_at": "2026-12-03T09:30:00+00:00"}

An approval request's frame (issue 35) also carries ``"approval": {"approval_id", "tool", "arguments",
"expiry_at", "on_expiry", "token_gen", "decide_path"}``, so a page can show Approve and Reject
buttons; never its decision token (a page decides through its product, as the session's owner).

A page drops a frame whose ``delivery_id`` it has shown (the receiver's dedup: a retry after a crash
between the post and the journal write posts the same id again). A gone connection (410
``GoneException``) is forgotten. Reached at least one page: the receipt names the connections.
Reached none (no page open, all gone): the channel declines; as a session's last channel the
delivery is still kept in its history and the session is marked unread (a ``first`` route whose
next channel takes it marks nothing).
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from agentwake.delivery import Declined, Delivery, Receipt
from agentwake.delivery.kit import ChannelKit
from agentwake.errors import ChannelRefused, ChannelUnavailable, ConfigError

logger = logging.getLogger("agentwake.delivery")

SERVICE = "apigatewaymanagementapi"
#: API Gateway's answer for a connection that is closed
GONE = "GoneException"
#: the caller may not post to the connection (IAM): an operator fixes the grant
REFUSED = frozenset({"ForbiddenException", "AccessDeniedException", "PayloadTooLargeException"})


def frame(delivery: Delivery, sent_at: str) -> bytes:
    """What a page receives: one JSON text frame (the agreed format, docs/channels.md)."""
    body = {
        "type": "delivery",
        "delivery_id": delivery.delivery_id,
        "run_id": delivery.run_id,
        "session_id": delivery.session_id,
        "text": delivery.text,
        "sent_at": sent_at,
    }
    if delivery.approval is not None:
        body["approval"] = delivery.to_dict()["approval"]  # without the token
    return json.dumps(body, ensure_ascii=False).encode("utf-8")


def _code(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str((response.get("Error") or {}).get("Code") or "")
    return ""


class WebSocketChannel:
    """Posts to the session's open pages; the page drops a delivery id it has shown."""

    confirms = "receiver"

    def __init__(self, spec: Any, kit: ChannelKit) -> None:
        self.name = spec.target()
        self.kit = kit
        endpoint = getattr(kit.settings, "push_endpoint", None)
        if not endpoint:
            raise ConfigError(
                "a websocket delivery needs the stack's push API, and this stack has none "
                "(AGENTWAKE_PUSH_ENDPOINT is unset): deploy the template's PushApi, or choose another channel"
            )
        if kit.connections is None:
            raise ConfigError("a websocket delivery needs the store's connections, and this runtime has none")
        self.endpoint = str(endpoint)
        self._client: Any = None

    def __repr__(self) -> str:
        return f"WebSocketChannel({self.name!r})"

    @property
    def client(self) -> Any:
        """The management API's client, made on the first send: an explicit endpoint (it wins over
        ``AWS_ENDPOINT_URL``), botocore's standard retries (throttling, 5xx)."""
        if self._client is None:
            self._client = self.kit.client(SERVICE, endpoint_url=self.endpoint)
        return self._client

    def send(self, delivery: Delivery) -> Receipt | Declined:
        connections = self.kit.connections
        assert connections is not None  # checked when built
        try:
            cids = connections.of_session(delivery.session_id)
        except Exception as exc:  # the table: nothing was pushed, try again later
            raise ChannelUnavailable(
                f"websocket: the open pages of session {delivery.session_id} could not be read ({type(exc).__name__})",
                nothing_sent=True,
            ) from exc
        sent_at = datetime.fromtimestamp(self.kit.clock.wall(), UTC).isoformat()
        data = frame(delivery, sent_at)
        reached: list[str] = []
        gone = 0
        failures: list[str] = []
        for cid in cids:
            try:
                self.client.post_to_connection(ConnectionId=cid, Data=data)
            except Exception as exc:  # botocore's ClientError, or a connection error after its retries
                code = _code(exc)
                if code == GONE:
                    gone += 1
                    try:
                        connections.forget(delivery.session_id, cid)
                    except Exception:  # best effort: other pages may have been reached already
                        logger.warning("websocket: a gone page's connection was not forgotten", exc_info=True)
                    continue
                if code in REFUSED:
                    raise ChannelRefused(
                        f"websocket: the push API refused to post to a page of session {delivery.session_id} "
                        f"({code}); check the wake functions' execute-api:ManageConnections grant on the PushApi"
                    ) from exc
                failures.append(code or type(exc).__name__)
                continue
            reached.append(cid)
        if reached:
            extra: dict[str, Any] = {}
            if gone:
                extra["gone"] = gone
            if failures:
                extra["failed"] = len(failures)
            return Receipt(channel="websocket", target=self.name, ids=tuple(reached), extra=extra)
        if failures:
            # every open page failed for a reason other than "gone": nothing reached, try again later
            raise ChannelUnavailable(
                f"websocket: no page of session {delivery.session_id} could be reached ({', '.join(sorted(set(failures)))})",
                nothing_sent=True,
            )
        mark_unread = getattr(connections, "mark_unread", None)
        reason = f"{gone} page(s) gone" if gone else "no page open"
        return Declined(
            channel="websocket",
            target=self.name,
            reason=f"session {delivery.session_id}: {reason}",
            # only when no later channel takes it (a first route's fallback delivered: nothing unread)
            on_kept=(lambda: mark_unread(delivery.session_id, delivery.delivery_id)) if mark_unread else None,
        )
