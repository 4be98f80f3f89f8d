"""WebSocket push on `agentwake local up` (issue 34): the REAL template.yaml's PushApi served on
127.0.0.1 (agentwake_local.websocket_api), its $connect/$disconnect function run through the local
Lambda runtime, the wake functions posting to the page through the SigV4-checked management
endpoint. A producer holding only ProducerPolicy gets a ticket through the product API; a page (a
plain RFC 6455 client) connects with it; a background wake of that session delivers to the page
exactly once, and the delivery's marker keeps the receipt naming the connection."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from botocore.credentials import Credentials

from agentwake_client import ApiError, ProductApiClient
from agentwake_local.cli import status_lines
from agentwake_local.stack import LocalStackRuntime, read_state
from tests.e2e.test_busy_sessions import wait_until
from tests.e2e.test_local_product_api import _second_producer, producer_credentials
from tests.support.builders import OK_SCRIPT
from tests.support.local_stack import local_stack, stack_store
from tests.support.ws_client import HandshakeRefused, WsClient


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStackRuntime]:
    home: Path = tmp_path_factory.mktemp("agentwake-home")
    with local_stack(home, background=True, async_retry_delays=0) as runtime:
        yield runtime


@pytest.fixture(scope="module")
def api(local: LocalStackRuntime) -> ProductApiClient:
    assert local.api_url is not None
    return ProductApiClient(local.api_url, region=local.region, credentials=producer_credentials(local))


def receipts_of_run(local: LocalStackRuntime, run_id: str) -> list[dict[str, object]]:
    """The receipts the run's delivery markers keep (``RUN#{run}`` / ``DELIVERY#…``)."""
    store = stack_store(local)
    items = store.table.query(f"RUN#{run_id}", "DELIVERY#")
    return [r for item in items for r in json.loads(item.get("receipts", {}).get("S", "[]"))]


def test_local_up_serves_the_push_api_and_records_its_url(local: LocalStackRuntime) -> None:
    # GIVEN the stack in its "up" mode THEN the WebSocket API is on 127.0.0.1, in the state file
    # (`local status`) and the stack's PushApiUrl, and every function is given it
    assert local.push_url is not None and local.push_url.startswith("ws://127.0.0.1:")
    state = read_state(local.home)
    assert state is not None and state["push_url"] == local.push_url
    assert state["outputs"]["PushApiUrl"] == local.push_url
    assert f"  push       {local.push_url}" in status_lines(state, {})
    env = local.function_env("BackgroundResultFunction")
    assert env["AGENTWAKE_PUSH_URL"] == local.push_url
    assert env["AGENTWAKE_PUSH_ENDPOINT"] == local.push_url.replace("ws://", "http://")


def test_a_page_receives_a_background_wake_s_message_once_with_its_receipt(
    local: LocalStackRuntime, api: ProductApiClient
) -> None:
    # GIVEN a session that delivers to its open pages, and a page connected with a ticket
    api.put_session(
        "page-1",
        providers=[{"type": "scripted", "id": "scripted", "script": OK_SCRIPT}],
        delivery={"type": "websocket"},
    )
    ticket = api.push_ticket("page-1")
    assert ticket["url"] == local.push_url and ticket["expires_in"] == 60
    page = WsClient.connect(f"{ticket['url']}?ticket={ticket['ticket']}")
    with page:
        assert page.ping(b"still there?") == b"still there?"
        # the ticket was single use: a second page with it is refused before the upgrade
        with pytest.raises(HandshakeRefused) as refused:
            WsClient.connect(f"{ticket['url']}?ticket={ticket['ticket']}")
        assert refused.value.status == 401
        # WHEN a task of the session completes and wakes its agent, which messages the user
        task = api.register_task("page-1", "research", {"topic": "tides"})
        api.complete_task(task.task_id, task.task_token, "succeeded", "done", summary_name="Research")
        # THEN the page receives the agreed frame
        [frame] = page.frames(1, within=90)
        assert frame["type"] == "delivery" and frame["session_id"] == "page-1"
        assert frame["run_id"] == f"bg:{task.task_id}" and frame["text"] == "Your research is done."
        assert set(frame) == {"type", "delivery_id", "run_id", "session_id", "text", "sent_at"}
        wait_until(lambda: api.task_status(task.task_id)["status"] == "woken", 60, "the task's wake")
        # exactly once: the run is over and nothing more came
        assert page.quiet_for(0.5) == []
        # AND the delivery's marker keeps the websocket receipt naming the page's connection
        (connection,) = local.push_api.open_connections() if local.push_api else ()
        receipts = receipts_of_run(local, f"bg:{task.task_id}")
        assert receipts == [{"channel": "websocket", "target": "websocket", "ids": [connection]}]
        assert api.unread("page-1") == {"unread": False, "delivery_id": None, "at": None}


def test_with_no_open_page_the_delivery_is_kept_unread_until_read(
    local: LocalStackRuntime, api: ProductApiClient
) -> None:
    # GIVEN a session whose only page connected, then closed (its $disconnect forgot it)
    api.put_session(
        "page-2",
        providers=[{"type": "scripted", "id": "scripted", "script": OK_SCRIPT}],
        delivery={"type": "websocket"},
    )
    ticket = api.push_ticket("page-2")
    page = WsClient.connect(f"{ticket['url']}?ticket={ticket['ticket']}")
    page.close()
    wait_until(lambda: not stack_store(local).connections.of_session("page-2"), 30, "the $disconnect", 0.2)
    # WHEN a wake delivers
    task = api.register_task("page-2", "research", {"topic": "waves"})
    api.complete_task(task.task_id, task.task_token, "succeeded", "done", summary_name="Research")
    wait_until(lambda: api.task_status(task.task_id)["status"] == "woken", 90, "the task's wake")
    # THEN it is kept in the history, unread, and the product reads the mark, then clears it
    receipts = receipts_of_run(local, f"bg:{task.task_id}")
    assert receipts == [{"channel": "websocket", "target": "websocket", "extra": {"unread": True}}]
    unread = api.unread("page-2")
    assert unread["unread"] is True and unread["delivery_id"]
    assert api.mark_read("page-2", unread["delivery_id"]) is True
    assert api.unread("page-2")["unread"] is False and api.mark_read("page-2") is False


def test_a_ticket_is_only_for_the_session_s_owner(local: LocalStackRuntime, api: ProductApiClient) -> None:
    api.put_session("page-3", providers=[{"type": "scripted", "id": "scripted", "script": OK_SCRIPT}])
    stranger = ProductApiClient(
        local.api_url or "", region=local.region, credentials=Credentials(*_second_producer(local, "ws-stranger"))
    )
    with pytest.raises(ApiError) as refused:
        stranger.push_ticket("page-3")
    assert refused.value.status == 403 and "page-3" in str(refused.value)
    # and without a ticket, or with a made-up one, no page connects
    for query in ("", "?ticket=not-a-ticket"):
        with pytest.raises(HandshakeRefused) as no:
            WsClient.connect(f"{local.push_url}{query}")
        assert no.value.status == 401


def test_a_page_that_vanished_without_disconnect_is_forgotten_and_the_open_one_still_gets_it(
    local: LocalStackRuntime, api: ProductApiClient
) -> None:
    # GIVEN a session with a connection API Gateway never told us was closed (no $disconnect came)
    # and an open page
    api.put_session(
        "page-4",
        providers=[{"type": "scripted", "id": "scripted", "script": OK_SCRIPT}],
        delivery={"type": "websocket"},
    )
    store = stack_store(local)
    store.connections.connect("page-4", "vanished0000", max_connections=10)
    ticket = api.push_ticket("page-4")
    with WsClient.connect(f"{ticket['url']}?ticket={ticket['ticket']}") as page:
        [live] = [c for c in store.connections.of_session("page-4") if c != "vanished0000"]
        # WHEN a wake delivers
        task = api.register_task("page-4", "research", {"topic": "currents"})
        api.complete_task(task.task_id, task.task_token, "succeeded", "done", summary_name="Research")
        # THEN the open page gets it; the vanished one answered GoneException and is forgotten
        [frame] = page.frames(1, within=90)
        assert frame["run_id"] == f"bg:{task.task_id}"
        wait_until(lambda: api.task_status(task.task_id)["status"] == "woken", 60, "the task's wake")
        receipts = receipts_of_run(local, f"bg:{task.task_id}")
        assert receipts == [{"channel": "websocket", "target": "websocket", "ids": [live], "extra": {"gone": 1}}]
        assert store.connections.of_session("page-4") == [live]
        assert store.table.read_item("CONN#vanished0000", "CONN") is None
        assert api.unread("page-4")["unread"] is False
