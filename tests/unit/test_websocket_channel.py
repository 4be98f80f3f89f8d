"""The websocket channel (delivery/websocket.py) against a fake management API and fake connections:
the agreed frame, every page of the session and only that session's, a gone page forgotten, none
reached → the session marked unread and the channel declining, refusals and outages typed."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from agentwake.delivery import Declined, Delivery, Receipt
from agentwake.delivery.factory import build_channel
from agentwake.delivery.kit import ChannelKit
from agentwake.errors import ChannelRefused, ChannelUnavailable, ConfigError
from tests.support.clock import FakeClock

ENDPOINT = "https://abc123.execute-api.us-east-1.amazonaws.com/v1"


class ClientError(Exception):
    """What botocore raises: the error code in ``response``."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.response = {"Error": {"Code": code, "Message": ""}}


@dataclass
class FakeConnections:
    by_session: dict[str, list[str]] = field(default_factory=dict)
    forgotten: list[tuple[str, str]] = field(default_factory=list)
    unread: dict[str, str] = field(default_factory=dict)

    def of_session(self, session_id: str) -> list[str]:
        return list(self.by_session.get(session_id, []))

    def forget(self, session_id: str, connection_id: str) -> None:
        self.forgotten.append((session_id, connection_id))
        self.by_session[session_id].remove(connection_id)

    def mark_unread(self, session_id: str, delivery_id: str) -> None:
        self.unread[session_id] = delivery_id


@dataclass
class FakeManagementApi:
    """Posts land in the page's inbox; ``gone`` ids answer GoneException, ``fail`` ids another code."""

    inbox: dict[str, list[bytes]] = field(default_factory=dict)
    gone: set[str] = field(default_factory=set)
    fail: dict[str, str] = field(default_factory=dict)
    made: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def post_to_connection(self, *, ConnectionId: str, Data: bytes) -> dict[str, Any]:  # noqa: N803 - botocore's names
        if ConnectionId in self.gone:
            raise ClientError("GoneException")
        if ConnectionId in self.fail:
            raise ClientError(self.fail[ConnectionId])
        self.inbox.setdefault(ConnectionId, []).append(Data)
        return {}

    def factory(self, service: str, **options: Any) -> FakeManagementApi:
        self.made.append((service, options))
        return self


def kit(connections: FakeConnections, api: FakeManagementApi, endpoint: str | None = ENDPOINT) -> ChannelKit:
    return ChannelKit(
        settings=SimpleNamespace(push_endpoint=endpoint),
        clock=FakeClock(start=1_765_000_000.0),
        client=api.factory,
        connections=connections,
    )


def delivery(session_id: str = "alice", n: int = 0) -> Delivery:
    return Delivery(delivery_id=f"run-1:s0:c{n}", run_id="run-1", session_id=session_id, text=f"hello {n}")


def test_every_open_page_of_the_session_gets_the_agreed_frame_and_the_receipt_names_them() -> None:
    # GIVEN two pages of alice's open
    conns = FakeConnections({"alice": ["c1", "c2"]})
    api = FakeManagementApi()
    channel = build_channel({"type": "websocket"}, kit(conns, api))
    # WHEN a delivery is sent
    receipt = channel.send(delivery())
    # THEN each page got one frame: the agreed format, the delivery id a page dedups on
    assert api.inbox.keys() == {"c1", "c2"}
    for frames in api.inbox.values():
        [raw] = frames
        frame = json.loads(raw)
        assert frame == {
            "type": "delivery",
            "delivery_id": "run-1:s0:c0",
            "run_id": "run-1",
            "session_id": "alice",
            "text": "hello 0",
            "sent_at": frame["sent_at"],
        }
        assert frame["sent_at"].startswith("2025-12-06T")  # the kit's clock, ISO with its offset
    assert receipt == Receipt(channel="websocket", target="websocket", ids=("c1", "c2"))
    assert receipt.describe() == "websocket 2 connections"
    # the management client is made once, with the stack's endpoint (never AWS_ENDPOINT_URL's)
    assert api.made == [("apigatewaymanagementapi", {"endpoint_url": ENDPOINT})]
    assert type(channel).confirms == "receiver"


def test_a_session_s_pages_never_get_another_session_s_delivery() -> None:
    conns = FakeConnections({"alice": ["a1"], "bob": ["b1", "b2"]})
    api = FakeManagementApi()
    channel = build_channel({"type": "websocket", "name": "page"}, kit(conns, api))
    channel.send(delivery("bob", 1))
    channel.send(delivery("alice", 2))
    got = {cid: [json.loads(f)["session_id"] for f in frames] for cid, frames in api.inbox.items()}
    assert got == {"a1": ["alice"], "b1": ["bob"], "b2": ["bob"]}


def test_a_gone_page_is_forgotten_and_the_others_still_count() -> None:
    conns = FakeConnections({"alice": ["old", "new"]})
    api = FakeManagementApi(gone={"old"})
    receipt = build_channel({"type": "websocket"}, kit(conns, api)).send(delivery())
    assert receipt == Receipt(channel="websocket", target="websocket", ids=("new",), extra={"gone": 1})
    assert receipt.describe() == "websocket 1 connection, 1 gone"
    assert conns.forgotten == [("alice", "old")] and conns.unread == {}


@pytest.mark.parametrize("pages", [[], ["gone-1", "gone-2"]])
def test_reaching_no_page_marks_the_session_unread_and_declines(pages: list[str]) -> None:
    # GIVEN no open page, or only pages that are gone
    conns = FakeConnections({"alice": list(pages)})
    api = FakeManagementApi(gone=set(pages))
    # WHEN a delivery is sent
    answer = build_channel({"type": "websocket"}, kit(conns, api)).send(delivery())
    # THEN nothing reached anyone; the gone pages are forgotten; the channel declines
    assert isinstance(answer, Declined) and answer.channel == "websocket" and "alice" in answer.reason
    assert api.inbox == {}
    assert conns.forgotten == [("alice", p) for p in pages]
    # AND the session is marked unread only once the decline is kept (no later channel took it)
    assert conns.unread == {}
    assert answer.kept().extra == {"unread": True}
    assert conns.unread == {"alice": "run-1:s0:c0"}


def test_a_first_route_whose_next_channel_delivers_marks_nothing_unread() -> None:
    # GIVEN push to the open page, else the log: and no page is open
    conns = FakeConnections({"alice": []})
    spec = {"type": "first", "channels": [{"type": "websocket"}, {"type": "log"}]}
    # WHEN a delivery is sent
    answer = build_channel(spec, kit(conns, FakeManagementApi())).send(delivery())
    # THEN the log took it and the session has nothing unread
    assert isinstance(answer, Receipt) and answer.channel == "log"
    assert conns.unread == {}


def test_a_refused_post_fails_for_good_and_an_outage_for_now() -> None:
    conns = FakeConnections({"alice": ["c1"]})
    with pytest.raises(ChannelRefused, match="ManageConnections"):
        build_channel({"type": "websocket"}, kit(conns, FakeManagementApi(fail={"c1": "ForbiddenException"}))).send(
            delivery()
        )
    with pytest.raises(ChannelUnavailable, match="alice"):
        build_channel({"type": "websocket"}, kit(conns, FakeManagementApi(fail={"c1": "InternalServerError"}))).send(
            delivery()
        )
    assert conns.unread == {}  # an outage is no "unread": the retry posts again


def test_a_stack_without_a_push_api_has_no_websocket_channel() -> None:
    with pytest.raises(ConfigError, match="no push API|has none"):
        build_channel({"type": "websocket"}, kit(FakeConnections(), FakeManagementApi(), endpoint=None))


def test_a_wake_that_delivers_elsewhere_loads_no_push_module() -> None:
    # GIVEN a fresh process that composes a webhook session's channel as a wake does (the store's
    # connections port handed to the kit)
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from agentwake.store.dynamo import DynamoStore\n"
        "from agentwake.delivery.kit import ChannelKit\n"
        "from agentwake.delivery.factory import build_channel\n"
        "from types import SimpleNamespace\n"
        "store = DynamoStore('t', client=object())\n"
        "kit = ChannelKit(settings=SimpleNamespace(), connections=getattr(store, 'connections', None))\n"
        "build_channel({'type': 'webhook', 'url': 'https://example.com/hook'}, kit)\n"
        "print(sorted(m for m in sys.modules if m in ('agentwake.store.push', 'agentwake.delivery.websocket')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    # THEN neither the push store nor the websocket channel was imported
    assert out.stdout.strip() == "[]", out.stderr


class BrokenTable(FakeConnections):
    """The connections' table failing (throttled): reading the pages, or forgetting a gone one."""

    def __init__(self, by_session: dict[str, list[str]], *, reads: bool) -> None:
        super().__init__(by_session)
        self.reads = reads

    def of_session(self, session_id: str) -> list[str]:
        if self.reads:
            raise ClientError("ProvisionedThroughputExceededException")
        return super().of_session(session_id)

    def forget(self, session_id: str, connection_id: str) -> None:
        raise ClientError("ProvisionedThroughputExceededException")


def test_a_gone_page_not_forgotten_does_not_fail_a_delivery_other_pages_got() -> None:
    # GIVEN two pages, one gone, and the table failing to forget it
    api = FakeManagementApi(gone={"c1"})
    channel = build_channel({"type": "websocket"}, kit(BrokenTable({"alice": ["c1", "c2"]}, reads=False), api))
    # THEN the page that got it is the receipt (an error would have the model send it again)
    receipt = channel.send(delivery())
    assert isinstance(receipt, Receipt) and receipt.ids == ("c2",) and api.inbox.keys() == {"c2"}


def test_pages_that_cannot_be_read_are_unavailable_not_an_error_for_the_model() -> None:
    channel = build_channel({"type": "websocket"}, kit(BrokenTable({}, reads=True), FakeManagementApi()))
    with pytest.raises(ChannelUnavailable, match="could not be read"):
        channel.send(delivery())
