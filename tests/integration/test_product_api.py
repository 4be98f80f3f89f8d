"""The product API (ProductApiFunction, issue 23): every route through the real handler with HTTP API
(payload 2.0) events, on moto's table and queues provisioned from template.yaml.

What a product sees: status codes, JSON bodies with a clear ``error``, a token shown only where it is
issued, the completion enqueued as the published schema says, a retried append written once, an
existing task id never overwritten.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentwake.store.dynamo import DynamoStore
from tests.support.aws import Resources, drain
from tests.support.builders import seed_session
from tests.support.product_api import call, fresh_services

SCHEMA = Path(__file__).resolve().parents[2] / "schemas" / "background-result.schema.json"


@pytest.fixture(autouse=True)
def fresh(resources: Resources) -> Iterator[None]:
    fresh_services()
    yield
    fresh_services()


def begin(session_id: str = "alice", **body: Any) -> dict[str, Any]:
    status, turn = call("POST", f"/sessions/{session_id}/live-turns", body)
    assert status == 201, turn
    return turn


def test_a_live_turn_begins_appends_renews_and_ends(store: DynamoStore, capsys: pytest.CaptureFixture[str]) -> None:
    seed_session(store, "alice")
    # WHEN a live turn begins
    turn = begin(ttl_s=30)
    assert set(turn) == {"turn_id", "token", "expires_at"}
    # THEN the session is held: a second begin (no wait) is refused with the holder named
    status, busy = call("POST", "/sessions/alice/live-turns", {"wait_s": 0})
    assert status == 409 and busy["holder"] == f"live:{turn['turn_id']}"
    assert "busy" in busy["error"] and turn["token"] not in json.dumps(busy)
    # WHEN the turn appends two messages, and the same append is retried
    append = {
        "turn_id": turn["turn_id"],
        "token": turn["token"],
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello!"}],
        "idempotency_key": "msg-1",
    }
    assert call("POST", "/sessions/alice/messages", append) == (201, {"written": True, "entries": 2})
    assert call("POST", "/sessions/alice/messages", append) == (200, {"written": False, "entries": 2})
    # renewed, then ended
    status, renewed = call(
        "POST", f"/sessions/alice/live-turns/{turn['turn_id']}/renew", {"token": turn["token"], "ttl_s": 120}
    )
    assert status == 200 and renewed["expires_at"] > turn["expires_at"]
    status, ended = call(
        "DELETE", f"/sessions/alice/live-turns/{turn['turn_id']}", headers={"x-agentwake-turn-token": turn["token"]}
    )
    assert (status, ended) == (200, {"turn_id": turn["turn_id"], "handed_to": None})
    # THEN the history holds the two messages once, in order, read back newest first
    status, page = call("GET", "/sessions/alice/conversation")
    assert status == 200 and page["cursor"] is None
    assert [(e["kind"], e["role"], e["content"]) for e in page["entries"]] == [
        ("live", "assistant", "hello!"),
        ("live", "user", "hi"),
    ]
    # the ended turn holds nothing: appending with its token is refused, nothing written
    status, lost = call("POST", "/sessions/alice/messages", {**append, "idempotency_key": "msg-2"})
    assert status == 409 and lost["type"] == "LiveTurnLost"
    assert turn["token"] not in capsys.readouterr().out  # not in any log line either


def test_the_conversation_pages_with_a_cursor(store: DynamoStore) -> None:
    seed_session(store, "alice")
    turn = begin()
    for i in range(5):
        body = {
            "turn_id": turn["turn_id"],
            "token": turn["token"],
            "messages": [{"role": "user", "content": f"m{i}"}],
            "idempotency_key": f"k{i}",
        }
        assert call("POST", "/sessions/alice/messages", body)[0] == 201
    seen: list[str] = []
    cursor: str | None = None
    while True:
        query = {"limit": "2", **({"cursor": cursor} if cursor else {})}
        status, page = call("GET", "/sessions/alice/conversation", query=query)
        assert status == 200 and len(page["entries"]) <= 2
        seen += [e["content"] for e in page["entries"]]
        cursor = page["cursor"]
        if cursor is None:
            break
    assert seen == ["m4", "m3", "m2", "m1", "m0"]
    status, bad = call("GET", "/sessions/alice/conversation", query={"cursor": "not-a-cursor"})
    assert status == 400 and bad["error"]
    assert call("GET", "/sessions/alice/conversation", query={"limit": "0"})[0] == 422


def test_bad_input_gets_a_clear_error_without_the_token(store: DynamoStore) -> None:
    seed_session(store, "alice")
    turn = begin()
    # a role a live turn may not append: 422 saying where, never echoing the body (it holds the token)
    body = {
        "turn_id": turn["turn_id"],
        "token": turn["token"],
        "messages": [{"role": "system", "content": "x"}],
        "idempotency_key": "k",
    }
    status, err = call("POST", "/sessions/alice/messages", body)
    assert status == 422 and "messages.0.role" in err["error"] and turn["token"] not in json.dumps(err)
    # not JSON at all
    status, err = call("POST", "/sessions/alice/messages", "{not json")
    assert status == 422 and err["error"].startswith("invalid request")
    # a begin without a body takes the defaults
    seed_session(store, "bob")
    status, turn = call("POST", "/sessions/bob/live-turns", body=None)
    assert status == 201 and 30 < turn["expires_at"] - time.time() <= 60  # the default TTL, 60 s
    # a session with no config, an invalid session id, a TTL out of range
    assert call("POST", "/sessions/nobody/live-turns", {})[0] == 404
    assert call("POST", "/sessions/bad%20id/live-turns", {})[0] == 422
    assert call("POST", "/sessions/alice/live-turns", {"ttl_s": 5000})[0] == 422
    # an unknown route
    assert call("GET", "/nothing-here")[0] == 404


def test_a_task_registers_once_and_its_status_hides_what_the_caller_did_not_register(
    store: DynamoStore,
) -> None:
    seed_session(store, "alice")
    status, reg = call(
        "POST",
        "/tasks",
        {"session_id": "alice", "tool_name": "research", "args": {"q": "secret plans"}, "task_id": "t-1"},
    )
    assert status == 201 and reg["task_id"] == "t-1" and reg["task_token"].startswith("awt_")
    # registering the same id again (for another session of the caller) is refused and changes nothing
    seed_session(store, "mallory")
    status, again = call("POST", "/tasks", {"session_id": "mallory", "tool_name": "x", "task_id": "t-1"})
    assert status == 409 and again["type"] == "TaskExists" and "task_token" not in again
    task = store.records.get_task("t-1")
    assert task is not None and task.session_id == "alice" and task.token_matches(reg["task_token"])
    # status without the token: no session, no arguments, never the token hash
    status, seen = call("GET", "/tasks/t-1")
    assert status == 200 and seen["status"] == "running" and seen["args"] is None and seen["session_id"] is None
    assert task.token_sha256 not in json.dumps(seen) and "secret plans" not in json.dumps(seen)
    # with another task's token: the same
    _, other = call("POST", "/tasks", {"session_id": "alice", "tool_name": "x"})
    _, seen = call("GET", "/tasks/t-1", headers={"x-agentwake-task-token": other["task_token"]})
    assert seen["args"] is None
    # with its own token: what was registered
    _, seen = call("GET", "/tasks/t-1", headers={"x-agentwake-task-token": reg["task_token"]})
    assert (seen["session_id"], seen["args"]) == ("alice", {"q": "secret plans"})
    assert call("GET", "/tasks/nope")[0] == 404


def test_a_completion_is_enqueued_as_the_published_schema_says(store: DynamoStore, resources: Resources) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    seed_session(store, "alice")
    _, reg = call("POST", "/tasks", {"session_id": "alice", "tool_name": "research", "task_id": "t-2"})
    # a forged completion (another token) is refused and nothing is sent
    status, err = call(
        "POST", "/tasks/t-2/completion", {"task_token": "awt_forged", "status": "succeeded", "result_text": "ATTACKER"}
    )
    assert status == 403 and err["type"] == "ForgedCompletion"
    # a body outside the schema (an unknown status, an extra field) is refused
    assert (
        call("POST", "/tasks/t-2/completion", {"task_token": reg["task_token"], "status": "ok", "result_text": ""})[0]
        == 422
    )
    body = {"task_token": reg["task_token"], "status": "succeeded", "result_text": "42", "extra": 1}
    assert call("POST", "/tasks/t-2/completion", body)[0] == 422
    assert drain(resources.queue_url) == []
    # the genuine one is enqueued: valid against schemas/background-result.schema.json
    status, sent = call(
        "POST", "/tasks/t-2/completion", {"task_token": reg["task_token"], "status": "succeeded", "result_text": "42"}
    )
    assert status == 202 and sent["task_id"] == "t-2" and sent["message_id"]
    (message,) = drain(resources.queue_url)
    enqueued = json.loads(message["Body"])
    jsonschema.validate(enqueued, json.loads(SCHEMA.read_text()))
    assert (enqueued["task_id"], enqueued["session_id"], enqueued["result_text"]) == ("t-2", "alice", "42")
    assert call("POST", "/tasks/none/completion", {"task_token": "x", "status": "failed", "result_text": ""})[0] == 404


def test_an_unexpected_error_is_a_500_without_details(store: DynamoStore, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentwake import bootstrap

    def broken(*_a: Any, **_k: Any) -> Any:
        raise RuntimeError("boom with awt_secret")

    monkeypatch.setattr(bootstrap.store().records, "get_task", broken)
    status, err = call("GET", "/tasks/t-9")
    assert status == 500 and "awt_secret" not in json.dumps(err) and err["type"] == "InternalError"


def test_arguments_too_large_to_keep_are_refused_without_echoing_them(store: DynamoStore) -> None:
    seed_session(store, "alice")
    big = {"blob": "x" * (70 * 1024)}
    status, err = call("POST", "/tasks", {"session_id": "alice", "tool_name": "research", "args": big})
    assert status == 400 and "at most 65536 are kept" in err["error"] and "xxxxxxxxxx" not in err["error"]


def test_a_new_environment_gets_new_services(store: DynamoStore, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the API answering on this stack's table
    seed_session(store, "alice")
    assert call("POST", "/sessions/alice/live-turns", {})[0] == 201
    # WHEN the environment changes as the local runtime changes it (another stack: its settings
    # and clients reset) THEN the API works on the new table, not with the clients of the old one
    from agentwake.bootstrap import reset_caches

    monkeypatch.setenv("AGENTWAKE_TABLE", "another-stacks-table")
    reset_caches()
    status, err = call("POST", "/sessions/alice/live-turns", {})
    assert status == 500 and err["type"] == "InternalError"  # that table does not exist


def test_the_api_and_the_sessions_service_take_the_same_live_turns(store: DynamoStore) -> None:
    # GIVEN a session, reached over HTTP and through the sessions service the API itself uses
    from agentwake import bootstrap
    from agentwake.errors import ConfigError

    seed_session(store, "alice")
    sessions = bootstrap.sessions()

    def over_http(**body: Any) -> bool:
        status, answer = call("POST", "/sessions/alice/live-turns", body)
        if status == 201:
            ended = call("DELETE", f"/sessions/alice/live-turns/{answer['turn_id']}", headers=_turn_token(answer))
            assert ended[0] == 200
        return status == 201

    def in_python(ttl_s: float) -> bool:
        try:
            turn = sessions.begin_live_turn("alice", ttl_s=ttl_s)
        except ConfigError:
            return False
        sessions.end_live_turn(turn)
        return True

    # THEN a turn's longest lease is the same both ways
    for ttl_s, taken in ((900, True), (900.5, False), (0, False)):
        assert over_http(ttl_s=ttl_s) is taken and in_python(ttl_s) is taken, ttl_s

    # AND so is an append: at most 25 messages, a key of at most 256 characters, user or assistant
    def appends(messages: list[tuple[str, str]], key: str) -> tuple[bool, bool]:
        turn = sessions.begin_live_turn("alice")
        try:
            body = {
                "turn_id": turn.turn_id,
                "token": turn.token,
                "messages": [{"role": r, "content": c} for r, c in messages],
                "idempotency_key": key,
            }
            http = call("POST", "/sessions/alice/messages", body)[0] == 201
            try:
                sessions.append(turn, messages, idempotency_key=key + "-py")
                python = True
            except ValueError:
                python = False
            return http, python
        finally:
            sessions.end_live_turn(turn)

    assert appends([("user", "hi")] * 25, "k" * 250) == (True, True)
    assert appends([("user", "hi")] * 26, "k1") == (False, False)
    assert appends([("user", "hi")], "k" * 257) == (False, False)
    assert appends([("system", "hi")], "k2") == (False, False)


def _turn_token(turn: dict[str, Any]) -> dict[str, str]:
    return {"x-agentwake-turn-token": turn["token"]}


def _append(
    turn: dict[str, Any], messages: list[tuple[str, str]], key: str, token: str | None = None
) -> dict[str, Any]:
    return {
        "turn_id": turn["turn_id"],
        "token": token or turn["token"],
        "messages": [{"role": r, "content": c} for r, c in messages],
        "idempotency_key": key,
    }


def test_an_append_too_large_to_store_is_a_413_before_any_write(store: DynamoStore) -> None:
    seed_session(store, "alice")
    turn = begin()
    # WHEN one message is 60,000 emoji (240,000 bytes: more than one entry holds)
    status, err = call("POST", "/sessions/alice/messages", _append(turn, [("user", "😀" * 60_000)], "k1"))
    # THEN 413 saying which message, how large and the cap, never echoing it
    assert status == 413 and err["type"] == "AppendTooLarge", err
    assert "message 1 is 240,000 bytes" in err["error"] and "200,000" in err["error"] and "😀" not in err["error"]
    # WHEN 25 messages of 60,000 characters of 3 bytes each (4.5 MB: over one DynamoDB transaction)
    status, err = call("POST", "/sessions/alice/messages", _append(turn, [("user", "€" * 60_000)] * 25, "k1"))
    # THEN 413 saying the transaction's limit
    assert status == 413 and "4,194,304 bytes in one transaction" in err["error"], err
    # AND nothing was written, not even the key: the same key appends what fits
    assert call("GET", "/sessions/alice/conversation")[1]["entries"] == []
    assert call("POST", "/sessions/alice/messages", _append(turn, [("user", "€" * 60_000)] * 20, "k1")) == (
        201,
        {"written": True, "entries": 20},
    )


def test_a_bogus_token_is_refused_alike_whether_or_not_the_key_was_used(store: DynamoStore) -> None:
    # GIVEN a turn that appended under key "used"
    seed_session(store, "alice")
    turn = begin()
    assert call("POST", "/sessions/alice/messages", _append(turn, [("user", "hi")], "used"))[0] == 201
    # WHEN someone without the token appends under that key, and under a key nobody used
    bogus = "f" * 32
    used = call("POST", "/sessions/alice/messages", _append(turn, [("user", "x")], "used", token=bogus))
    unused = call("POST", "/sessions/alice/messages", _append(turn, [("user", "x")], "unused", token=bogus))
    # THEN both get the same refusal: the key tells nothing to a caller who does not hold the turn
    assert used == unused and used[0] == 409 and used[1]["type"] == "LiveTurnLost", (used, unused)
    # AND the turn's own retry of its append is still answered with what it wrote, even after it ended
    assert call("POST", "/sessions/alice/messages", _append(turn, [("user", "hi")], "used")) == (
        200,
        {"written": False, "entries": 1},
    )
    call("DELETE", f"/sessions/alice/live-turns/{turn['turn_id']}", headers=_turn_token(turn))
    assert call("POST", "/sessions/alice/messages", _append(turn, [("user", "hi")], "used")) == (
        200,
        {"written": False, "entries": 1},
    )
    assert [e["content"] for e in call("GET", "/sessions/alice/conversation")[1]["entries"]] == ["hi"]


@pytest.mark.parametrize("depth", [40, 900, 5000])
def test_arguments_nested_past_the_bound_are_a_400(store: DynamoStore, depth: int) -> None:
    seed_session(store, "alice")
    nested = "[" * depth + "]" * depth
    raw = '{"session_id": "alice", "tool_name": "research", "task_id": "t-deep", "args": {"a": ' + nested + "}}"
    # WHEN a task is registered with arguments nested `depth` levels deep
    status, err = call("POST", "/tasks", raw)
    # THEN 400 saying the bound, and no task
    assert status == 400 and "nests deeper than 32 levels" in err["error"], (status, err)
    assert store.records.get_task("t-deep") is None
    # AND arguments within the bound register
    within = "[" * 30 + "]" * 30
    raw = '{"session_id": "alice", "tool_name": "research", "args": {"a": ' + within + "}}"
    assert call("POST", "/tasks", raw)[0] == 201


def test_a_renewal_past_the_turns_cap_is_a_409_that_says_the_cap(
    store: DynamoStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a stack whose live turns hold a session at most 1 s (renewals included)
    from agentwake.bootstrap import reset_caches

    monkeypatch.setenv("AGENTWAKE_LIVE_TURN_MAX_HOLD_S", "1")
    reset_caches()
    seed_session(store, "alice")
    # WHEN a turn asks for 60 s, then renews
    turn = begin(ttl_s=60)
    status, err = call(
        "POST", f"/sessions/alice/live-turns/{turn['turn_id']}/renew", {"token": turn["token"], "ttl_s": 60}
    )
    # THEN it was granted the cap, not 60 s; the renewal is refused naming the cap, and the session is free
    assert turn["expires_at"] - time.time() <= 1
    assert status == 409 and err["type"] == "LiveTurnCapped", err
    assert "at most 1 s" in err["error"] and "AGENTWAKE_LIVE_TURN_MAX_HOLD_S" in err["error"]
    assert turn["token"] not in json.dumps(err)
    assert begin(wait_s=0)["turn_id"] != turn["turn_id"]
