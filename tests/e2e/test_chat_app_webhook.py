"""The reference chat app's webhook receiver over HTTP (issue 32): it checks a delivery as
docs/operations.md tells a receiver to — the signature over the body, ``sent_at`` within the
tolerance, the *signed* ``delivery_id`` as the dedupe key, kept across restarts — so a replayed
signed body is never shown twice, whatever its ``X-Agentwake-Delivery-Id`` header says, and a body
signed long ago (or dated in the future) is refused. The first delivery is sent by agentwake's own
webhook channel; the replays are what an attacker who recorded it could send. No stack needed: the
receiver does not call the product API."""

from __future__ import annotations

import json
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from http.server import ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from agentwake.delivery import Delivery
from agentwake.delivery.webhook import (
    DELIVERY_ID_HEADER,
    SENT_AT_TOLERANCE_S,
    SIGNATURE_HEADER,
    WebhookChannel,
    sign,
)
from agentwake.trust.outbound import OutboundPolicy

APP_DIR = Path(__file__).resolve().parents[2] / "examples" / "chat-app"
SECRET = "chat-app-webhook-secret-for-tests"
DELIVERY = Delivery("bg:task-1#0#0", "bg:task-1", "chat-web", "Your research is ready.")
LOOPBACK = OutboundPolicy(allow_loopback=True, allow_http=True)


@pytest.fixture
def chat_app(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[ModuleType]:
    monkeypatch.setenv("AGENTWAKE_HOME", str(tmp_path))
    monkeypatch.syspath_prepend(str(APP_DIR))
    sys.modules.pop("app", None)
    import app  # examples/chat-app/app.py

    yield app
    sys.modules.pop("app", None)


@contextmanager
def receiver(chat_app: ModuleType, state: Path) -> Iterator[tuple[str, Any]]:
    """One start of the app's HTTP server (its webhook), its state in ``state``."""
    app = chat_app.ChatApp(
        api=None, webhook_secret=chat_app.webhook_secret(state), seen=chat_app.SeenDeliveries(state / "seen.sqlite3")
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), chat_app.handler_class(app))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/webhook", app
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)


def post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:  # noqa: S310 (127.0.0.1)
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())


def signed_at(when: Callable[[], datetime], delivery: Delivery = DELIVERY, secret: str = SECRET) -> bytes:
    """The body agentwake's channel builds for ``delivery`` at ``when()``."""
    return WebhookChannel("https://receiver.example/webhook", secret, now=when).body(delivery)


def shown(app: Any) -> list[str]:
    return [e["content"] for e in app.events_after(0)["events"] if e["kind"] == "delivery"]


def test_a_replayed_delivery_is_not_shown_again_with_its_header_changed_or_removed_nor_after_a_restart(
    chat_app: ModuleType, tmp_path: Path
) -> None:
    state = tmp_path / "chat-app"
    state.mkdir()
    (state / "webhook-secret").write_text(SECRET)
    with receiver(chat_app, state) as (url, app):
        # GIVEN a delivery sent by agentwake's webhook channel, shown once; the body it sent, recorded
        sent: list[bytes] = []
        channel = WebhookChannel(url, SECRET, policy=LOOPBACK)
        real_body = channel.body

        def recorded(delivery: Delivery) -> bytes:
            sent.append(real_body(delivery))
            return sent[-1]

        channel.body = recorded  # type: ignore[method-assign]
        channel.send(DELIVERY)
        assert shown(app) == [DELIVERY.text]
        [body] = sent
        signature = {SIGNATURE_HEADER: sign(body, SECRET)}

        # WHEN the same signed body is replayed under another delivery id header, and with none
        answers = [
            post(url, body, {**signature, DELIVERY_ID_HEADER: "bg:task-1#9#9"}),
            post(url, body, {**signature, DELIVERY_ID_HEADER: "something-new"}),
            post(url, body, signature),
        ]
        # THEN each is acknowledged (agentwake would stop resending) as a duplicate and not shown again
        assert answers == [(200, {"duplicate": True})] * 3
        assert shown(app) == [DELIVERY.text]

    # WHEN the app restarts (a new process: nothing in memory) and the body is replayed again
    with receiver(chat_app, state) as (url, app):
        again = post(url, body, {**signature, DELIVERY_ID_HEADER: "after-the-restart"})
        # THEN it is still a duplicate, and the restarted app shows nothing
        assert again == (200, {"duplicate": True})
        assert shown(app) == []
        # AND a retry of the run (same delivery id, a fresh body and signature) is a duplicate too
        channel = WebhookChannel(url, SECRET, policy=LOOPBACK)
        channel.send(DELIVERY)
        assert shown(app) == []
        # AND another delivery is shown
        other = Delivery("bg:task-2#0#0", "bg:task-2", "chat-web", "Second result.")
        channel.send(other)
        assert shown(app) == ["Second result."]


def test_a_body_outside_the_tolerance_is_refused_and_its_id_stays_unseen(chat_app: ModuleType, tmp_path: Path) -> None:
    state = tmp_path / "chat-app"
    state.mkdir()
    (state / "webhook-secret").write_text(SECRET)
    now = datetime.now(UTC)
    with receiver(chat_app, state) as (url, app):
        # GIVEN bodies signed with the right secret, dated in 2024, in 2030, and just past the tolerance
        dated = {
            "2024": datetime(2024, 1, 1, tzinfo=UTC),
            "2030": datetime(2030, 1, 1, tzinfo=UTC),
            "past the tolerance": now - timedelta(seconds=SENT_AT_TOLERANCE_S + 60),
        }
        answers = {}
        for name, when in dated.items():
            body = signed_at(lambda when=when: when)
            # WHEN each is posted
            answers[name] = post(url, body, {SIGNATURE_HEADER: sign(body, SECRET), DELIVERY_ID_HEADER: "x"})
        # THEN each is a 400 that says sent_at is outside the tolerance, and nothing is shown
        assert {name: status for name, (status, _) in answers.items()} == dict.fromkeys(dated, 400)
        assert all(f"outside the {SENT_AT_TOLERANCE_S:g} s tolerance" in a["error"] for _, a in answers.values())
        assert "ahead of this receiver's clock" in answers["2030"][1]["error"]
        assert shown(app) == []
        # AND a body with a wrong signature is a 401, one signed but not a delivery a 400
        forged = signed_at(lambda: now, secret="another-secret")
        assert post(url, forged, {SIGNATURE_HEADER: sign(forged, "another-secret")})[0] == 401
        assert post(url, forged, {})[0] == 401
        not_a_delivery = json.dumps({"delivery_id": "bg:task-1#0#0", "text": "hi"}).encode()
        status, answer = post(url, not_a_delivery, {SIGNATURE_HEADER: sign(not_a_delivery, SECRET)})
        assert status == 400 and "no run_id, session_id, sent_at" in answer["error"]
        assert shown(app) == []
        # AND the refused bodies marked nothing seen: the genuine delivery, sent now, is shown once
        WebhookChannel(url, SECRET, policy=LOOPBACK).send(DELIVERY)
        assert shown(app) == [DELIVERY.text]


def test_the_app_keeps_its_webhook_secret_and_seen_ids_in_its_state_folder(
    chat_app: ModuleType, tmp_path: Path
) -> None:
    # WHEN the app's state is made twice in the same folder
    folder = chat_app.state_dir()
    first, second = chat_app.webhook_secret(folder), chat_app.webhook_secret(folder)
    # THEN it lives under $AGENTWAKE_HOME, the secret is made once (kept private), the seen ids persist
    assert folder == tmp_path / "chat-app"
    assert first == second and len(first) >= 32
    assert (folder / "webhook-secret").stat().st_mode & 0o077 == 0
    assert chat_app.SeenDeliveries(folder / "seen.sqlite3").first_time("d-1")
    assert not chat_app.SeenDeliveries(folder / "seen.sqlite3").first_time("d-1")


def test_a_signed_delivery_for_another_session_is_not_shown(chat_app: ModuleType, tmp_path: Path) -> None:
    state = tmp_path / "chat-app"
    state.mkdir()
    (state / "webhook-secret").write_text(SECRET)
    with receiver(chat_app, state) as (url, app):
        # GIVEN a delivery signed with the app's secret, for a session that is not the app's
        other = Delivery("bg:x#0#0", "bg:x", "someone-else", "text another product's agent sent")
        body = signed_at(lambda: datetime.now(UTC), other)
        # WHEN it is posted THEN it is refused, and nothing is shown
        status, answer = post(url, body, {SIGNATURE_HEADER: sign(body, SECRET)})
        assert status == 400 and "someone-else" in answer["error"], answer
        assert shown(app) == []
        # AND the app's own session's delivery is shown
        mine = signed_at(lambda: datetime.now(UTC))
        assert post(url, mine, {SIGNATURE_HEADER: sign(mine, SECRET)}) == (200, {"duplicate": False})
        assert shown(app) == [DELIVERY.text]
