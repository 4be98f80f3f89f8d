"""agentwake_client.ProductApiClient over real HTTP on 127.0.0.1: the local HTTP API built from
template.yaml's HttpApi events (infra/agentwake_local/http_api.py), each request turned into a
payload 2.0 event for ProductApiFunction's handler (on moto). Every request is SigV4-signed for
execute-api, and the API's errors arrive as ApiError with their type."""

from __future__ import annotations

import re
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from agentwake.errors import AgentwakeError
from agentwake.store.dynamo import DynamoStore
from agentwake_client import ApiError, ProductApiClient
from agentwake_local.http_api import LocalHttpApi, Route
from tests.support.aws import Resources, drain
from tests.support.builders import LOCAL_CALLER, OK_SCRIPT
from tests.support.product_api import served, verifier


@pytest.fixture
def api(resources: Resources) -> Iterator[tuple[ProductApiClient, list[dict[str, Any]]]]:
    seen: list[dict[str, Any]] = []
    with served(resources, seen) as url:
        yield ProductApiClient(url, region="us-east-1"), seen


def test_every_route_through_the_client(
    api: tuple[ProductApiClient, list[dict]], store: DynamoStore, resources: Resources
) -> None:
    client, seen = api
    # sessions: created through the API, owned by the client's principal
    scripted = [{"type": "scripted", "id": "scripted", "script": OK_SCRIPT}]
    created = client.put_session("alice", providers=scripted, persona="terse")
    assert created["owners"] == [LOCAL_CALLER] and client.get_session("alice")["persona"] == "terse"
    assert client.put_session("alice", persona="kind")["providers"] == scripted  # only the given fields
    client.put_session("mallory", providers=scripted)
    # live turns: begin, a busy second begin, append twice with one key, renew, end
    turn = client.begin_live_turn("alice", ttl_s=30)
    with pytest.raises(ApiError) as busy:
        client.begin_live_turn("alice", wait_s=0)
    assert (busy.value.status, busy.value.type, busy.value.holder) == (409, "SessionBusy", f"live:{turn.turn_id}")
    assert turn.token not in str(busy.value)
    first = client.append(turn, [("user", "hi"), ("assistant", "hello")], idempotency_key="k1")
    again = client.append(turn, [("user", "hi"), ("assistant", "hello")], idempotency_key="k1")
    assert (first["written"], again["written"]) == (True, False)
    assert client.renew_live_turn(turn, ttl_s=90).expires_at > turn.expires_at
    assert client.end_live_turn(turn) is None
    page = client.read_conversation("alice", limit=1)
    assert [e["content"] for e in page["entries"]] == ["hello"] and page["cursor"]
    assert [e["content"] for e in client.read_conversation("alice", cursor=page["cursor"])["entries"]] == ["hi"]
    # tasks: register, a refused re-registration, status with and without the token, the completion
    task = client.register_task("alice", "research", {"q": "x"}, task_id="t-c1")
    with pytest.raises(ApiError) as exists:
        client.register_task("mallory", "research", task_id="t-c1")
    assert (exists.value.status, exists.value.type) == (409, "TaskExists")
    assert client.task_status("t-c1")["args"] is None
    assert client.task_status("t-c1", task.task_token)["args"] == {"q": "x"}
    assert client.complete_task("t-c1", task.task_token, "succeeded", "done", summary_name="Research")
    assert len(drain(resources.queue_url)) == 1
    # THEN every request was signed with SigV4 for execute-api in the API's region
    assert seen and all(
        re.match(
            r"AWS4-HMAC-SHA256 Credential=\S+/\d{8}/us-east-1/execute-api/aws4_request", e["headers"]["authorization"]
        )
        for e in seen
    )
    # and the live turn's token travels in the body or a header, never in a URL
    assert not [e for e in seen if turn.token in e["rawPath"] + e.get("rawQueryString", "")]


def test_a_sessions_tasks_through_the_client_register_list_cancel_and_a_late_completion(
    api: tuple[ProductApiClient, list[dict]], resources: Resources
) -> None:
    # GIVEN a session with two tasks, one with its own deadline
    client, _ = api
    client.put_session("alice", providers=[{"type": "scripted", "id": "scripted", "script": OK_SCRIPT}])
    first = client.register_task("alice", "research", task_id="t-l1", deadline=600)
    client.register_task("alice", "research", task_id="t-l2")
    # WHEN they are listed THEN newest first, with their deadlines
    page = client.list_tasks("alice", limit=1)
    assert [t["task_id"] for t in page["tasks"]] == ["t-l2"] and page["cursor"]
    assert [t["task_id"] for t in client.list_tasks("alice", cursor=page["cursor"])["tasks"]] == ["t-l1"]
    # WHEN the first is cancelled, and then completed
    assert client.cancel_task("t-l1")["status"] == "cancelled"
    with pytest.raises(ApiError) as late:
        client.complete_task("t-l1", first.task_token, "succeeded", "done")
    # THEN the completion is refused as late, nothing enqueued
    assert (late.value.status, late.value.type) == (409, "TaskAlreadyEnded")
    assert drain(resources.queue_url) == []
    assert client.task_status("t-l1")["late_completions"] == 1


def test_approvals_through_the_client_list_read_with_the_token_decide_once(
    api: tuple[ProductApiClient, list[dict]], store: DynamoStore
) -> None:
    from tests.support.approval_items import TOKEN, put_approval

    # GIVEN a session of the client's with two pending requests (written as the park writes them)
    client, seen = api
    client.put_session("alice", providers=[{"type": "scripted", "id": "scripted", "script": OK_SCRIPT}])
    first = put_approval(store, run_id="bg:a1", requested_at="2026-12-01T10:00:00Z")
    second = put_approval(store, run_id="bg:a2", requested_at="2026-12-01T11:00:00Z")
    # WHEN they are listed THEN newest request first
    page = client.list_approvals("alice", state="pending", limit=1)
    assert [a["approval_id"] for a in page["approvals"]] == [second.approval_id] and page["cursor"]
    assert [a["approval_id"] for a in client.list_approvals("alice", cursor=page["cursor"])["approvals"]] == [
        first.approval_id
    ]
    # WHEN one is read with its token and rejected (by an owner: the owner's authority comes first), the
    # other approved
    assert client.get_approval(first.approval_id, token=TOKEN)["tool"] == "create_ticket"
    rejected = client.decide_approval(first.approval_id, "reject", reason="no", decided_by="Bob", token=TOKEN)
    approved = client.decide_approval(second.approval_id, "approve")
    assert (rejected["state"], approved["state"]) == ("rejected", "approved")
    assert rejected["decided_by"].endswith("on behalf of Bob") and rejected["decided_via"] == "api-owner"
    # THEN a different decision is refused, saying what stands
    with pytest.raises(ApiError) as conflict:
        client.decide_approval(second.approval_id, "reject", reason="changed my mind")
    assert (conflict.value.status, conflict.value.type) == (409, "ApprovalAlreadyDecided")
    assert "approved" in str(conflict.value)
    # AND the token travelled in a header or the body, never in a URL
    assert not [e for e in seen if TOKEN in e["rawPath"] + e.get("rawQueryString", "")]


def test_the_local_http_api_answers_an_unknown_route_and_a_function_error(resources: Resources) -> None:
    def failing(_function_id: str, _event: dict[str, Any]) -> Any:
        return SimpleNamespace(response=None, error={"errorType": "RuntimeError", "errorMessage": "x"})

    server = LocalHttpApi([Route("GET", "/tasks/{task_id}", "F")], failing, verifier=verifier()).start()
    try:
        client = ProductApiClient(server.url, region="us-east-1")
        with pytest.raises(ApiError) as failed:
            client.task_status("t-1")
        assert failed.value.status == 500
        with pytest.raises(ApiError) as missing:
            client.read_conversation("alice")
        assert missing.value.status == 404
    finally:
        server.stop()


def test_the_client_refuses_to_send_unsigned(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    # GIVEN no credentials anywhere (no variables, no files, no instance metadata)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    # WHEN a client is made for a loopback URL THEN it says it cannot sign, rather than send unsigned
    with pytest.raises(AgentwakeError, match="no AWS credentials to sign"):
        ProductApiClient("http://127.0.0.1:9", region="us-east-1")
