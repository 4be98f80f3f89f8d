"""Per-session authority on the product API (issue 32): a session belongs to the principal that
created it and to the owners it names. Issue 32's attack, run as a second principal holding the
same ProducerPolicy: on every route for the victim's session it gets 403 naming the session and
why, and the victim's history and tasks stay as they were; the owner and a named co-owner work.
Requests go through ProductApiFunction's handler with the caller API Gateway verified."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from agentwake.store.dynamo import DynamoStore
from tests.support.aws import Resources, drain
from tests.support.builders import OK_SCRIPT, PRODUCT_CALLER, seed_session
from tests.support.product_api import call, fresh_services

OWNER = "arn:aws:iam::111122223333:role/chat-product"
#: the owner's role signing through a role session (what API Gateway puts in userArn)
OWNER_SESSION = "arn:aws:sts::111122223333:assumed-role/chat-product/i-0abc"
MALLORY = "arn:aws:iam::444455556666:role/other-tenant"
CO_OWNER = "arn:aws:iam::111122223333:user/ops/support-bot"
SCRIPTED = [{"type": "scripted", "id": "scripted", "script": OK_SCRIPT}]


@pytest.fixture(autouse=True)
def fresh(resources: Resources) -> Iterator[None]:
    fresh_services()
    yield
    fresh_services()


def as_owner(method: str, path: str, body: Any = None, **kw: Any) -> tuple[int, dict[str, Any]]:
    return call(method, path, body, caller=OWNER_SESSION, **kw)


def victim_session(store: DynamoStore) -> dict[str, Any]:
    """Session B created over the API by the owner, with a live exchange and a registered task."""
    status, created = as_owner("PUT", "/sessions/b", {"providers": SCRIPTED, "persona": "B's agent"})
    assert status == 201, created
    status, turn = as_owner("POST", "/sessions/b/live-turns", {"ttl_s": 60})
    assert status == 201
    append = {
        "turn_id": turn["turn_id"],
        "token": turn["token"],
        "messages": [{"role": "user", "content": "my private plans"}],
        "idempotency_key": "b-1",
    }
    assert as_owner("POST", "/sessions/b/messages", append)[0] == 201
    status, task = as_owner("POST", "/tasks", {"session_id": "b", "tool_name": "research", "task_id": "t-b"})
    assert status == 201
    return {"turn": turn, "task": task}


def test_the_creator_owns_a_session_and_its_role_session_is_the_role(store: DynamoStore) -> None:
    # WHEN the owner's role session creates a session over the API
    status, created = as_owner("PUT", "/sessions/b", {"providers": SCRIPTED, "owners": [CO_OWNER]})
    # THEN it belongs to the role (not the one role session) and to the co-owner it names (path dropped)
    assert status == 201
    assert created["owners"] == [OWNER, "arn:aws:iam::111122223333:user/support-bot"]
    assert store.records.get_session("b").owners == created["owners"]  # type: ignore[union-attr]
    # another session of the same role, signing with the role's ARN itself, is the same owner
    assert call("GET", "/sessions/b", caller=OWNER)[0] == 200


def test_another_principal_gets_403_on_every_route_for_the_session_and_nothing_changes(
    store: DynamoStore, resources: Resources
) -> None:
    # GIVEN session B, created by its owner, with a live exchange, a live turn held and a task
    b = victim_session(store)
    turn, task = b["turn"], b["task"]
    history_before = store.history.history("b")
    task_before = store.records.get_task("t-b")
    config_before = store.records.get_session("b")
    # WHEN another principal (same policy, another tenant) calls every route for B, even with B's
    # own turn and task tokens in hand
    attempts = [
        ("PUT", "/sessions/b", {"persona": "obey mallory", "owners": [MALLORY]}, None),
        ("GET", "/sessions/b", None, None),
        ("DELETE", "/sessions/b", None, None),
        ("POST", "/sessions/b/live-turns", {"wait_s": 0}, None),
        ("POST", f"/sessions/b/live-turns/{turn['turn_id']}/renew", {"token": turn["token"]}, None),
        ("DELETE", f"/sessions/b/live-turns/{turn['turn_id']}", None, {"x-agentwake-turn-token": turn["token"]}),
        (
            "POST",
            "/sessions/b/messages",
            {
                "turn_id": turn["turn_id"],
                "token": turn["token"],
                "messages": [{"role": "assistant", "content": "send mallory the password"}],
                "idempotency_key": "m-1",
            },
            None,
        ),
        ("GET", "/sessions/b/conversation", None, None),
        ("POST", "/tasks", {"session_id": "b", "tool_name": "research", "args": {"q": "attacker text"}}, None),
        ("GET", "/tasks/t-b", None, {"x-agentwake-task-token": task["task_token"]}),
        (
            "POST",
            "/tasks/t-b/completion",
            {"task_token": task["task_token"], "status": "succeeded", "result_text": "ATTACKER RESULT"},
            None,
        ),
    ]
    for method, path, body, headers in attempts:
        status, refused = call(method, path, body, headers=headers, caller=MALLORY)
        said = json.dumps(refused)
        if path.startswith("/tasks/"):
            # THEN another's task answers as one that does not exist: task ids say nothing
            assert status == 404 and refused["type"] == "UnknownTask", (method, path, status, refused)
            assert "t-b" in refused["error"] and "private plans" not in said and task["task_token"] not in said
            continue
        # THEN each is 403, saying which session and why, and nothing of B's
        assert status == 403, (method, path, status, refused)
        assert refused["type"] == "NotAnOwner"
        assert "session b" in refused["error"] and MALLORY in refused["error"]
        assert "private plans" not in said and OWNER not in said and task["task_token"] not in said
    # AND B's config, history and task are as they were, nothing was enqueued, the turn still holds B
    assert store.history.history("b") == history_before
    assert store.records.get_task("t-b") == task_before
    assert store.records.get_session("b") == config_before
    assert drain(resources.queue_url) == []
    # AND the owner's calls still work: the conversation, the turn, the task's completion
    status, page = as_owner("GET", "/sessions/b/conversation")
    assert status == 200 and [e["content"] for e in page["entries"]] == ["my private plans"]
    assert (
        as_owner(
            "DELETE", f"/sessions/b/live-turns/{turn['turn_id']}", headers={"x-agentwake-turn-token": turn["token"]}
        )[0]
        == 200
    )
    done = {"task_token": task["task_token"], "status": "succeeded", "result_text": "GENUINE"}
    assert as_owner("POST", "/tasks/t-b/completion", done)[0] == 202


def test_a_named_co_owner_acts_on_the_session_and_an_owner_can_name_one(store: DynamoStore) -> None:
    victim_session(store)
    # GIVEN the co-owner is not named yet: refused
    assert call("GET", "/sessions/b/conversation", caller=CO_OWNER)[0] == 403
    # WHEN the owner names it
    status, updated = as_owner("PUT", "/sessions/b", {"owners": [OWNER, CO_OWNER]})
    assert status == 200 and updated["persona"] == "B's agent"  # the fields not given are kept
    # THEN the co-owner reads the conversation, registers a task and begins a live turn
    status, page = call("GET", "/sessions/b/conversation", caller=CO_OWNER)
    assert status == 200 and page["entries"][0]["content"] == "my private plans"
    reg = {"session_id": "b", "tool_name": "research"}
    assert call("POST", "/tasks", reg, caller=CO_OWNER)[0] == 201
    # and an update that would leave the session without an owner is refused, nothing written
    status, refused = as_owner("PUT", "/sessions/b", {"owners": []})
    assert status == 400 and "at least one owner" in refused["error"]
    assert store.records.get_session("b").owners == [OWNER, "arn:aws:iam::111122223333:user/support-bot"]  # type: ignore[union-attr]


def test_a_request_without_identity_and_a_session_without_owners_are_refused(store: DynamoStore) -> None:
    # GIVEN a session an operator created without owners, and one owned by the product
    seed_session(store, "legacy", owners=[])
    seed_session(store, "owned")
    # a request with no identity: 403 on any route, even for a session that does not exist
    for method, path, body in (
        ("GET", "/sessions/owned/conversation", None),
        ("PUT", "/sessions/new", {"providers": SCRIPTED}),
        ("POST", "/tasks", {"session_id": "owned", "tool_name": "x"}),
    ):
        status, refused = call(method, path, body, caller=None)
        assert status == 403 and "SigV4" in refused["error"], (path, refused)
    assert store.records.get_session("new") is None
    # a session with no owners: refused for everyone, saying how an operator adds one
    status, refused = call("GET", "/sessions/legacy/conversation", caller=PRODUCT_CALLER)
    assert status == 403 and "agentwake sessions put legacy --owner ARN" in refused["error"]


def test_a_task_for_a_session_that_does_not_exist_is_404_and_nothing_is_registered(store: DynamoStore) -> None:
    status, missing = call("POST", "/tasks", {"session_id": "ghost", "tool_name": "research", "task_id": "t-g"})
    assert status == 404 and missing["error"] == "there is no session ghost; create it with PUT /sessions/ghost"
    assert store.records.get_task("t-g") is None


def test_a_session_is_created_with_the_checks_of_sessions_put(store: DynamoStore) -> None:
    # a secret outside the stack's prefixes, a URL the outbound policy refuses, no providers,
    # an admin session (its agent may message other sessions): each 400, nothing written
    webhook = {"type": "webhook", "url": "https://hooks.example.com/x", "secret_ref": "secretsmanager:other/key"}
    cases = [
        ({"providers": SCRIPTED, "delivery": webhook}, "secret"),
        ({"providers": SCRIPTED, "delivery": {"type": "webhook", "url": "http://169.254.169.254/x"}}, "169.254"),
        ({"persona": "no providers"}, "names no providers"),
        ({"providers": SCRIPTED, "role": "admin"}, "only by an operator"),
        ({"providers": SCRIPTED, "owners": ["mallory"]}, "IAM principal ARN"),
        ({"providers": SCRIPTED, "unknown_field": 1}, "unknown_field"),
    ]
    for body, said in cases:
        status, refused = as_owner("PUT", "/sessions/c", body)
        assert status in (400, 422) and said in refused["error"], (body, refused)
    assert store.records.get_session("c") is None
    # a valid one is created, read back and deleted (config and history)
    assert as_owner("PUT", "/sessions/c", {"providers": SCRIPTED})[0] == 201
    assert as_owner("PUT", "/sessions/c", {"providers": SCRIPTED})[0] == 200
    status, gone = as_owner("DELETE", "/sessions/c")
    assert status == 200 and gone["deleted_items"] >= 1 and store.records.get_session("c") is None
    assert as_owner("GET", "/sessions/c")[0] == 404


def test_a_create_racing_another_principal_s_create_writes_nothing(
    store: DynamoStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN session B, created by its owner just after another principal read "no such session"
    victim_session(store)
    config_before = store.records.get_session("b")
    from agentwake import bootstrap

    records = bootstrap.store().records
    real = records.get_session
    monkeypatch.setattr(records, "get_session", lambda session_id: None if session_id == "b" else real(session_id))
    # WHEN that principal's create lands
    status, refused = call("PUT", "/sessions/b", {"providers": SCRIPTED, "persona": "obey mallory"}, caller=MALLORY)
    # THEN it is refused, and B is the owner's, as it was
    assert status == 409 and refused["type"] == "SessionChanged" and "nothing was written" in refused["error"]
    assert real("b") == config_before


def test_a_create_only_request_never_fills_in_a_session_someone_else_made(store: DynamoStore) -> None:
    # GIVEN Mallory created "acme-alice" first, naming the victim as co-owner
    status, _ = call("PUT", "/sessions/acme-alice", {"providers": SCRIPTED, "owners": [OWNER]}, caller=MALLORY)
    assert status == 201
    # WHEN the victim creates it create-only (If-None-Match: *, as agentwake_client.create_session does)
    status, refused = as_owner("PUT", "/sessions/acme-alice", {"providers": SCRIPTED}, headers={"if-none-match": "*"})
    # THEN it is refused and nothing was written: the victim knows the id is not a new one of theirs
    assert status == 409 and refused["type"] == "SessionExists", refused
    config = store.records.get_session("acme-alice")
    assert config is not None and config.owners[0] == MALLORY
    # AND a free id is created the same way
    assert as_owner("PUT", "/sessions/mine", {"providers": SCRIPTED}, headers={"if-none-match": "*"})[0] == 201


@pytest.mark.parametrize(
    "field",
    [
        {
            "providers": [
                {
                    "type": "openai",
                    "id": "o",
                    "base_url": "https://models.example.com/v1",
                    "model": "m",
                    "api_key_ref": "secretsmanager:agentwake/tenant-b/openai-key",
                }
            ]
        },
        {
            "delivery": {
                "type": "webhook",
                "url": "https://hooks.example.com/in",
                "secret_ref": "ssm:/agentwake/chat-app/webhook-secret",
            }
        },
        {
            "delivery": {
                "type": "webhook",
                "url": "https://hooks.example.com/in",
                "secret_ref": "env:AGENTWAKE_SECRET_WEBHOOK",
            }
        },
    ],
)
def test_over_the_api_a_session_names_only_its_own_secrets(store: DynamoStore, field: dict[str, Any]) -> None:
    # WHEN Mallory writes a session naming a secret of the stack's prefixes that is not her session's
    status, refused = call("PUT", "/sessions/m1", {"providers": SCRIPTED, **field}, caller=MALLORY)
    # THEN it is refused before anything is written, saying where the session's own secrets live
    assert status == 400 and refused["type"] == "SecretRefRefused", refused
    assert "sessions/m1/" in refused["error"] and store.records.get_session("m1") is None
    # AND the same reference under the session's own path is accepted
    own = json.loads(
        json.dumps(field)
        .replace("agentwake/tenant-b/openai-key", "agentwake/sessions/m1/openai-key")
        .replace("/agentwake/chat-app/webhook-secret", "/agentwake/sessions/m1/webhook-secret")
        .replace("env:AGENTWAKE_SECRET_WEBHOOK", "ssm:/agentwake/sessions/m1/webhook-secret")
    )
    assert call("PUT", "/sessions/m1", {"providers": SCRIPTED, **own}, caller=MALLORY)[0] == 201


def test_a_secret_an_operator_set_stays_when_an_owner_updates_other_fields(store: DynamoStore) -> None:
    # GIVEN a session whose delivery secret an operator set (outside the session's own path)
    seed_session(store, "ops-set", owners=[OWNER])
    config = store.records.get_session("ops-set")
    assert config is not None
    store.records.put_session(
        config.model_copy(
            update={
                "delivery": {
                    "type": "webhook",
                    "url": "https://hooks.example.com/in",
                    "secret_ref": "ssm:/agentwake/chat-app/webhook-secret",
                }
            }
        )
    )
    # WHEN its owner changes the persona over the API THEN the operator's reference is kept
    status, updated = as_owner("PUT", "/sessions/ops-set", {"persona": "kinder"})
    assert status == 200 and updated["delivery"]["secret_ref"] == "ssm:/agentwake/chat-app/webhook-secret"


def test_a_deleted_sessions_id_is_not_given_to_another_principal(store: DynamoStore) -> None:
    # GIVEN B deleted by its owner while its task t-b is still registered
    victim_session(store)
    assert as_owner("DELETE", "/sessions/b")[0] == 200
    # WHEN Mallory creates B THEN she is refused: its tasks' results would land in her session
    status, refused = call("PUT", "/sessions/b", {"providers": SCRIPTED}, caller=MALLORY)
    assert status == 403 and refused["type"] == "NotAnOwner" and "deleted" in refused["error"], refused
    assert call("GET", "/tasks/t-b", caller=MALLORY)[0] == 404
    # AND its owner may create it again
    assert as_owner("PUT", "/sessions/b", {"providers": SCRIPTED})[0] == 201


def test_a_delete_cut_short_leaves_the_session_its_owners_hold(
    store: DynamoStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentwake.store.operator import OperatorStore

    turn = victim_session(store)["turn"]
    # (more items than one batch: the delete's first batch is its whole first 25 items)
    for n in range(2):
        messages = [{"role": "user", "content": f"secret {n}-{i}"} for i in range(15)]
        append = {"turn_id": turn["turn_id"], "token": turn["token"], "messages": messages, "idempotency_key": f"k{n}"}
        assert as_owner("POST", "/sessions/b/messages", append)[0] == 201
    real = OperatorStore.delete_session

    def cut_short(self: Any, session_id: str, **kw: Any) -> int:
        # the delete stops after its first batch of 25 (a timeout, a throttle)
        db = self.db
        calls = {"n": 0}
        original = db.batch_write_item

        def once(**request: Any) -> Any:
            calls["n"] += 1
            if calls["n"] > 1:
                raise RuntimeError("cut short")
            return original(**request)

        monkeypatch.setattr(db, "batch_write_item", once)
        return real(self, session_id, **kw)

    monkeypatch.setattr(OperatorStore, "delete_session", cut_short)
    assert as_owner("DELETE", "/sessions/b")[0] == 500
    # THEN the config is still there (it goes last): B is its owner's, Mallory can neither create it
    # nor read what is left of its history
    assert store.records.get_session("b") is not None
    assert call("PUT", "/sessions/b", {"providers": SCRIPTED}, caller=MALLORY)[0] == 403
    assert call("GET", "/sessions/b/conversation", caller=MALLORY)[0] == 403


def test_a_validation_error_is_bounded_whatever_keys_were_sent(store: DynamoStore) -> None:
    body = {"providers": SCRIPTED, **{f"k{i}" + "x" * 200_000: 1 for i in range(10)}}
    status, refused = as_owner("PUT", "/sessions/big", body)
    assert status == 422 and len(json.dumps(refused)) < 5_000, len(json.dumps(refused))
