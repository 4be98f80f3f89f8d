"""WebSocket push's tickets, connections and unread mark (store/push.py, product/push.py, the product
API's push routes) on moto's table provisioned from template.yaml: a ticket only for the session's
owner, single use, expiring after 60 s (checked in the redeeming delete's condition, not by TTL),
stored only as its hash; ``$connect`` records the page under the ticket's session, never another;
``$disconnect`` forgets it; the unread mark read and cleared through the API."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import boto3
import pytest

from agentwake.product.push import handle
from agentwake.store.dynamo import DynamoStore
from agentwake.store.push import CONNECTION_TTL_S, TICKET_TTL_S
from agentwake_local.websocket_api import websocket_event
from tests.support.aws import REGION, Resources
from tests.support.builders import seed_session
from tests.support.product_api import call, fresh_services

PUSH_URL = "wss://abc123.execute-api.us-east-1.amazonaws.com/v1"
OTHER = "arn:aws:iam::123456789012:role/someone-else"


@pytest.fixture(autouse=True)
def push_api(resources: Resources, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    from agentwake.bootstrap import reset_caches

    monkeypatch.setenv("AGENTWAKE_PUSH_URL", PUSH_URL)
    monkeypatch.setenv("AGENTWAKE_PUSH_ENDPOINT", PUSH_URL.replace("wss://", "https://"))
    reset_caches()
    fresh_services()
    yield
    fresh_services()


class Clock:
    def __init__(self) -> None:
        import time

        self.t = time.time()

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def timed(resources: Resources, clock: Clock) -> DynamoStore:
    """The table through a store on a clock the test moves."""
    return DynamoStore(resources.table, client=boto3.client("dynamodb", region_name=REGION), now=clock)


def settings(max_connections: int = 10) -> Any:
    return SimpleNamespace(push_url=PUSH_URL, push_max_connections=max_connections)


def connect(store: DynamoStore, cid: str, ticket: str | None, **kw: Any) -> int:
    query = {"ticket": ticket} if ticket is not None else None
    event = websocket_event("$connect", cid, stage="v1", domain="local", query=query)
    return int(handle(event, store, settings(**kw))["statusCode"])


def ticket_for(session_id: str) -> dict[str, Any]:
    status, body = call("POST", f"/sessions/{session_id}/push-tickets")
    assert status == 201, body
    return body


def test_the_owner_gets_a_ticket_stored_only_as_its_hash(store: DynamoStore) -> None:
    seed_session(store, "alice")
    # WHEN the session's owner asks for a ticket
    body = ticket_for("alice")
    # THEN it is the agreed answer: the page opens {url}?ticket={ticket} within a minute
    assert set(body) == {"ticket", "url", "expires_in"}
    assert body["url"] == PUSH_URL and body["expires_in"] == TICKET_TTL_S == 60 and len(body["ticket"]) >= 40
    # AND the table holds its SHA-256, never the ticket
    items = store.table.db.scan(TableName=store.table.name)["Items"]
    tickets = [i for i in items if i["pk"]["S"].startswith("TICKET#")]
    assert [t["pk"]["S"] for t in tickets] == ["TICKET#" + hashlib.sha256(body["ticket"].encode()).hexdigest()]
    assert body["ticket"] not in repr(items)


def test_no_ticket_for_a_session_the_caller_does_not_own(store: DynamoStore) -> None:
    seed_session(store, "alice")
    status, refused = call("POST", "/sessions/alice/push-tickets", caller=OTHER)
    assert status == 403 and "alice" in refused["error"] and "ticket" not in refused
    assert call("POST", "/sessions/alice/push-tickets", caller=None)[0] == 403
    status, missing = call("POST", "/sessions/nobody/push-tickets")
    assert status == 404
    # nor its unread mark, nor clearing it
    assert call("GET", "/sessions/alice/unread", caller=OTHER)[0] == 403
    assert call("POST", "/sessions/alice/read", caller=OTHER)[0] == 403


def test_a_ticket_connects_one_page_once(timed: DynamoStore, store: DynamoStore) -> None:
    seed_session(store, "alice")
    seed_session(store, "bob")
    ticket = ticket_for("alice")["ticket"]
    # WHEN a page connects with it THEN it is recorded under alice's session only
    assert connect(timed, "conn-1", ticket) == 200
    assert timed.connections.of_session("alice") == ["conn-1"] and timed.connections.of_session("bob") == []
    # AND the same ticket again (a replayed URL from an access log) is refused
    assert connect(timed, "conn-2", ticket) == 401
    assert timed.connections.of_session("alice") == ["conn-1"]
    # no ticket, or one never issued: refused
    assert connect(timed, "conn-3", None) == 401
    assert connect(timed, "conn-4", "made-up") == 401


def test_a_ticket_expires_after_a_minute(timed: DynamoStore, store: DynamoStore, clock: Clock) -> None:
    seed_session(store, "alice")
    fresh = timed.connections.issue_ticket("alice", "p")[0]
    stale = timed.connections.issue_ticket("alice", "p")[0]
    clock.t += TICKET_TTL_S - 1
    assert connect(timed, "in-time", fresh) == 200
    clock.t += 2  # 61 s after it was issued: still in the table (TTL is lazy), refused by the condition
    assert connect(timed, "too-late", stale) == 401
    assert timed.connections.of_session("alice") == ["in-time"]


def test_a_session_s_pages_are_bounded_and_a_disconnect_forgets_one(timed: DynamoStore, store: DynamoStore) -> None:
    seed_session(store, "alice")
    tickets = [timed.connections.issue_ticket("alice", "p")[0] for _ in range(3)]
    assert connect(timed, "c1", tickets[0], max_connections=2) == 200
    assert connect(timed, "c2", tickets[1], max_connections=2) == 200
    assert connect(timed, "c3", tickets[2], max_connections=2) == 403
    # WHEN a page closes THEN both of its items are gone
    event = websocket_event("$disconnect", "c1", stage="v1", domain="local", disconnect_code=1000)
    assert handle(event, timed, settings())["statusCode"] == 200
    assert timed.connections.of_session("alice") == ["c2"]
    assert timed.table.read_item("CONN#c1", "CONN") is None
    # a disconnect of an unknown connection is no error (API Gateway sends it at most once, maybe never)
    event = websocket_event("$disconnect", "never", stage="v1", domain="local", disconnect_code=1006)
    assert handle(event, timed, settings())["statusCode"] == 200


def test_a_connection_outlives_api_gateway_s_two_hours_by_five_minutes(
    timed: DynamoStore, store: DynamoStore, clock: Clock
) -> None:
    seed_session(store, "alice")
    assert connect(timed, "c1", timed.connections.issue_ticket("alice", "p")[0]) == 200
    item = timed.table.read_item("CONN#c1", "CONN")
    assert item is not None and int(item["expires_at"]["N"]) == int(clock.t) + CONNECTION_TTL_S == int(clock.t) + 7500
    clock.t += CONNECTION_TTL_S + 1
    assert timed.connections.of_session("alice") == []  # expired items are no open page, TTL or not


def test_the_unread_mark_is_read_and_cleared_through_the_api(store: DynamoStore) -> None:
    seed_session(store, "alice")
    assert call("GET", "/sessions/alice/unread") == (200, {"unread": False, "delivery_id": None, "at": None})
    store.connections.mark_unread("alice", "run-1:s0:c0")
    status, mark = call("GET", "/sessions/alice/unread")
    assert status == 200 and mark["unread"] is True and mark["delivery_id"] == "run-1:s0:c0" and mark["at"]
    # a newer delivery came meanwhile: clearing the older one leaves it unread
    store.connections.mark_unread("alice", "run-2:s0:c0")
    assert call("POST", "/sessions/alice/read", {"delivery_id": "run-1:s0:c0"}) == (200, {"cleared": False})
    assert call("GET", "/sessions/alice/unread")[1]["delivery_id"] == "run-2:s0:c0"
    assert call("POST", "/sessions/alice/read", {"delivery_id": "run-2:s0:c0"}) == (200, {"cleared": True})
    assert call("POST", "/sessions/alice/read") == (200, {"cleared": False})
    assert call("GET", "/sessions/alice/unread")[1]["unread"] is False


def test_a_stack_without_a_push_api_issues_no_ticket(store: DynamoStore, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentwake.bootstrap import reset_caches

    seed_session(store, "alice")
    monkeypatch.delenv("AGENTWAKE_PUSH_URL")
    reset_caches()
    status, body = call("POST", "/sessions/alice/push-tickets")
    assert status == 400 and "no push API" in body["error"]
