"""A client of the product API for products and producers (docs/product-api.md): every route, each
request signed with SigV4 (service ``execute-api``) through botocore, sent with urllib. No
dependency beyond botocore, which boto3 brings. Its own package, installed with agentwake and
outside the functions' CodeUri: no function imports it, so it ships in no Lambda bundle.

    api = ProductApiClient("https://abc123.execute-api.us-east-1.amazonaws.com")
    api.put_session("alice", providers=[{"type": "bedrock", "model_id": "amazon.nova-lite-v1:0"}])
    with api.live_turn("alice") as turn:
        api.append(turn, [("user", "hi"), ("assistant", "hello!")], idempotency_key="msg-41")
    task = api.register_task("alice", "web_research", {"query": "aurora"})
    api.complete_task(task.task_id, task.task_token, "succeeded", "3 offers")

Every request is signed, against the local stack too (``agentwake local up`` verifies signatures
against its embedded IAM: its fake credentials, or an access key created there; docs/local.md). Without credentials the client refuses to start.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote, urlencode, urlsplit

from agentwake.errors import AgentwakeError
from agentwake.product.sessions import LiveTurn
from agentwake.product.tasks import RegisteredTask

__all__ = ["ApiError", "LiveTurn", "ProductApiClient", "RegisteredTask"]

TURN_TOKEN_HEADER = "X-Agentwake-Turn-Token"
TASK_TOKEN_HEADER = "X-Agentwake-Task-Token"
APPROVAL_TOKEN_HEADER = "X-Agentwake-Approval-Token"
#: the most of an error response kept (a misbehaving proxy could answer with anything)
MAX_ERROR_BYTES = 64 * 1024


class ApiError(AgentwakeError):
    """The API answered with an error: ``status``, its ``type`` (SessionBusy, LiveTurnLost, TaskExists,
    ForgedCompletion, ValidationError, ...), ``message``, and for a busy session the ``holder``."""

    def __init__(self, status: int, body: Mapping[str, Any]) -> None:
        self.status = status
        self.type = str(body.get("type") or f"HTTP{status}")
        self.holder = body.get("holder")
        self.body = dict(body)
        super().__init__(f"{status} {self.type}: {body.get('error') or body.get('message') or 'no message'}")

    @property
    def retryable(self) -> bool:  # type: ignore[override]
        return self.status >= 500 or self.type == "SessionBusy"


@dataclass
class ProductApiClient:
    """``url``: the stack's ``ProductApiUrl`` output (or ``agentwake local status``'s api_url).
    ``region``: the API's region (default: from the URL, else the botocore session's);
    ``credentials``: botocore credentials (default: the botocore session's)."""

    url: str
    region: str | None = None
    credentials: Any = None
    timeout_s: float = 35.0

    def __post_init__(self) -> None:
        self.url = self.url.rstrip("/")
        host = urlsplit(self.url).hostname or ""
        if self.credentials is None or self.region is None:
            import botocore.session

            session = botocore.session.get_session()
            self.credentials = self.credentials or session.get_credentials()
            parts = host.split(".")
            from_url = parts[2] if len(parts) > 3 and parts[1] == "execute-api" else None
            self.region = self.region or from_url or session.get_config_variable("region") or "us-east-1"
        if self.credentials is None:
            raise AgentwakeError(
                "no AWS credentials to sign product API requests with (SigV4): configure a profile or "
                "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (the local stack's: docs/local.md)"
            )

    # -- sessions ---------------------------------------------------------------------------------

    def put_session(self, session_id: str, **config: Any) -> dict[str, Any]:
        """Create a session (the caller becomes its owner, with any ``owners`` named) or update the
        given fields of one the caller owns; ``config``: the session's settings (``providers``,
        ``persona``, ``delivery``, ... docs/product-api.md). Returns the stored config. To be sure
        the session is a new one of your own, use ``create_session``."""
        return self._call("PUT", f"/sessions/{_seg(session_id)}", config)

    def create_session(self, session_id: str, **config: Any) -> dict[str, Any]:
        """Create a session that does not exist yet (``If-None-Match: *``): the caller becomes its
        owner, with any ``owners`` named. ApiError 409 when a session of that id exists already —
        whoever made it, it is not yours to fill in. Returns the stored config."""
        return self._call("PUT", f"/sessions/{_seg(session_id)}", config, headers={"If-None-Match": "*"})

    def get_session(self, session_id: str) -> dict[str, Any]:
        return self._call("GET", f"/sessions/{_seg(session_id)}")

    def delete_session(self, session_id: str) -> dict[str, Any]:
        """Delete the session's config and history (for good)."""
        return self._call("DELETE", f"/sessions/{_seg(session_id)}")

    # -- live turns -------------------------------------------------------------------------------

    def begin_live_turn(self, session_id: str, *, ttl_s: float = 60.0, wait_s: float | None = None) -> LiveTurn:
        body: dict[str, Any] = {"ttl_s": ttl_s}
        if wait_s is not None:
            body["wait_s"] = wait_s
        out = self._call("POST", f"/sessions/{_seg(session_id)}/live-turns", body)
        return LiveTurn(session_id=session_id, turn_id=out["turn_id"], token=out["token"], expires_at=out["expires_at"])

    def renew_live_turn(self, turn: LiveTurn, *, ttl_s: float = 60.0) -> LiveTurn:
        path = f"/sessions/{_seg(turn.session_id)}/live-turns/{_seg(turn.turn_id)}/renew"
        out = self._call("POST", path, {"token": turn.token, "ttl_s": ttl_s})
        return LiveTurn(turn.session_id, turn.turn_id, turn.token, float(out["expires_at"]))

    def end_live_turn(self, turn: LiveTurn) -> str | None:
        path = f"/sessions/{_seg(turn.session_id)}/live-turns/{_seg(turn.turn_id)}"
        return self._call("DELETE", path, headers={TURN_TOKEN_HEADER: turn.token}).get("handed_to")

    @contextmanager
    def live_turn(self, session_id: str, *, ttl_s: float = 60.0, wait_s: float | None = None) -> Iterator[LiveTurn]:
        turn = self.begin_live_turn(session_id, ttl_s=ttl_s, wait_s=wait_s)
        try:
            yield turn
        finally:
            self.end_live_turn(turn)

    def append(self, turn: LiveTurn, messages: Sequence[tuple[str, str]], *, idempotency_key: str) -> dict[str, Any]:
        """``{"written": bool, "entries": n}``: written False for a retry of an append already made."""
        body = {
            "turn_id": turn.turn_id,
            "token": turn.token,
            "messages": [{"role": r, "content": c} for r, c in messages],
            "idempotency_key": idempotency_key,
        }
        return self._call("POST", f"/sessions/{_seg(turn.session_id)}/messages", body)

    def read_conversation(self, session_id: str, *, cursor: str | None = None, limit: int = 50) -> dict[str, Any]:
        """``{"entries": [...newest first], "cursor": next page or None}``."""
        query = {"limit": str(limit), **({"cursor": cursor} if cursor else {})}
        return self._call("GET", f"/sessions/{_seg(session_id)}/conversation", query=query)

    # -- tasks ------------------------------------------------------------------------------------

    def register_task(
        self,
        session_id: str,
        tool_name: str,
        args: Mapping[str, Any] | None = None,
        *,
        task_id: str | None = None,
        deadline: int | None = None,
    ) -> RegisteredTask:
        """Register a task you run; ``deadline``: seconds until it is completed failed (timed out) if you
        have not completed it (default: the session's ``task_deadline_s``)."""
        body: dict[str, Any] = {"session_id": session_id, "tool_name": tool_name, "args": dict(args or {})}
        if task_id is not None:
            body["task_id"] = task_id
        if deadline is not None:
            body["deadline"] = deadline
        out = self._call("POST", "/tasks", body)
        return RegisteredTask(task_id=out["task_id"], task_token=out["task_token"])

    def start_task(
        self,
        session_id: str,
        kind: Literal["tool", "subagent"],
        name: str,
        args: Mapping[str, Any] | None = None,
        *,
        task_id: str | None = None,
        deadline: int | None = None,
    ) -> dict[str, Any]:
        """Have agentwake run one of the session's background tools or subagents; the task's result
        wakes the session's agent. Returns the task (a repeat with the same ``task_id`` starts nothing new)."""
        body: dict[str, Any] = {"kind": kind, "name": name, "args": dict(args or {})}
        if task_id is not None:
            body["task_id"] = task_id
        if deadline is not None:
            body["deadline"] = deadline
        return self._call("POST", f"/sessions/{_seg(session_id)}/tasks", body)

    def list_tasks(self, session_id: str, *, cursor: str | None = None, limit: int = 20) -> dict[str, Any]:
        """``{"tasks": [...newest first], "cursor": next page or None}``."""
        query = {"limit": str(limit), **({"cursor": cursor} if cursor else {})}
        return self._call("GET", f"/sessions/{_seg(session_id)}/tasks", query=query)

    def cancel_task(self, task_id: str) -> dict[str, Any]:
        """Cancel a task with no outcome yet: it never wakes the agent, and a later completion is
        refused as late. ApiError 409 ``TaskAlreadyEnded`` when it already ended."""
        return self._call("POST", f"/tasks/{_seg(task_id)}/cancel", {})

    def task_status(self, task_id: str, task_token: str | None = None) -> dict[str, Any]:
        headers = {TASK_TOKEN_HEADER: task_token} if task_token else None
        return self._call("GET", f"/tasks/{_seg(task_id)}", headers=headers)

    def complete_task(
        self,
        task_id: str,
        task_token: str,
        status: Literal["succeeded", "failed"],
        result_text: str,
        *,
        note: str = "",
        summary_name: str | None = None,
        subagent_name: str | None = None,
    ) -> str:
        """Send the completion (enqueued to the result queue); returns the SQS message id. ApiError 409
        ``TaskAlreadyEnded`` when the task was cancelled, timed out or completed otherwise: nothing sent."""
        body: dict[str, Any] = {"task_token": task_token, "status": status, "result_text": result_text, "note": note}
        if summary_name is not None:
            body["summary_name"] = summary_name
        if subagent_name is not None:
            body["subagent_name"] = subagent_name
        return str(self._call("POST", f"/tasks/{_seg(task_id)}/completion", body)["message_id"])

    # -- the wakes a session's agent scheduled for itself -------------------------------------------

    def list_approvals(
        self,
        session_id: str,
        *,
        state: Literal["pending", "approved", "rejected"] | None = None,
        cursor: str | None = None,
        limit: int = 20,
    ) -> dict[str, Any]:
        """A session's approval requests: ``{"approvals": [...newest request first], "cursor": next page or
        None}``; ``state``: only pending, approved or rejected ones (a filtered page may hold fewer)."""
        query = {"limit": str(limit), **({"state": state} if state else {}), **({"cursor": cursor} if cursor else {})}
        return self._call("GET", f"/sessions/{_seg(session_id)}/approvals", query=query)

    def get_approval(self, approval_id: str, token: str | None = None) -> dict[str, Any]:
        """One approval request: to its session's owners, or with its decision ``token`` (the one its
        delivery carried). ApiError 404 ``UnknownApproval`` for anyone else."""
        headers = {APPROVAL_TOKEN_HEADER: token} if token else None
        return self._call("GET", f"/approvals/{_seg(approval_id)}", headers=headers)

    def decide_approval(
        self,
        approval_id: str,
        decision: Literal["approve", "reject"],
        *,
        reason: str | None = None,
        decided_by: str | None = None,
        token: str | None = None,
    ) -> dict[str, Any]:
        """Approve or reject a request, as an owner of its session (``decided_by``: on whose behalf) or
        with its decision ``token``; returns the request as decided (the same decision again answers the
        same). ApiError 409 ``ApprovalAlreadyDecided`` when another decision stands (its body's
        ``approval`` says which), 403 ``ForgedDecision``, 404 ``UnknownApproval``."""
        body: dict[str, Any] = {"decision": decision}
        for name, value in (("reason", reason), ("decided_by", decided_by), ("token", token)):
            if value is not None:
                body[name] = value
        return self._call("POST", f"/approvals/{_seg(approval_id)}/decision", body)

    def list_wakes(self, session_id: str, *, include_done: bool = False) -> list[dict[str, Any]]:
        """The session's agent wakes: pending ones, or every one with ``include_done``."""
        query = {"include_done": "true"} if include_done else None
        return list(self._call("GET", f"/sessions/{_seg(session_id)}/wakes", query=query)["wakes"])

    def cancel_wake(self, session_id: str, wake_id: str) -> dict[str, Any]:
        """``{"wake_id", "cancelled": False when it was cancelled or done already, "message"}``."""
        return self._call("DELETE", f"/sessions/{_seg(session_id)}/wakes/{_seg(wake_id)}")

    # -- WebSocket push (docs/channels.md) ---------------------------------------------------------

    def push_ticket(self, session_id: str) -> dict[str, Any]:
        """``{"ticket", "url", "expires_in": 60}``: hand them to the page, which opens
        ``{url}?ticket={ticket}`` within a minute (single use; the browser never holds AWS credentials)."""
        return self._call("POST", f"/sessions/{_seg(session_id)}/push-tickets")

    def unread(self, session_id: str) -> dict[str, Any]:
        """``{"unread", "delivery_id", "at"}``: a delivery no open page received."""
        return self._call("GET", f"/sessions/{_seg(session_id)}/unread")

    def mark_read(self, session_id: str, delivery_id: str | None = None) -> bool:
        """Clear the session's unread mark (only while it names ``delivery_id``, when given); False
        when nothing was unread."""
        body = {"delivery_id": delivery_id} if delivery_id is not None else None
        return bool(self._call("POST", f"/sessions/{_seg(session_id)}/read", body)["cleared"])

    # -- HTTP -------------------------------------------------------------------------------------

    def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        headers: Mapping[str, str] | None = None,
        query: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        url = self.url + path + (f"?{urlencode(query)}" if query else "")
        data = None if body is None else json.dumps(body).encode("utf-8")
        sent = {"Content-Type": "application/json", "Accept": "application/json", **(headers or {})}
        sent = self._signed(method, url, data, sent)
        request = urllib.request.Request(url, data=data, headers=sent, method=method)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as resp:  # noqa: S310 - the API's URL
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raw = exc.read(MAX_ERROR_BYTES)
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = {"message": raw[:200].decode("utf-8", "replace")}
            raise ApiError(exc.code, parsed if isinstance(parsed, dict) else {}) from None
        return dict(json.loads(raw)) if raw else {}

    def _signed(self, method: str, url: str, data: bytes | None, headers: dict[str, str]) -> dict[str, str]:
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        request = AWSRequest(method=method, url=url, data=data, headers=headers)
        SigV4Auth(self.credentials, "execute-api", str(self.region)).add_auth(request)
        return dict(request.headers.items())


def _seg(value: str) -> str:
    return quote(value, safe="")
