"""`agentwake local up` serves the product API on 127.0.0.1: the REAL template.yaml on the embedded
local AWS, ProductApiFunction invoked through the local Lambda runtime with HTTP API events, the
URL in the state file (`local status`). A producer holding only ProducerPolicy (an IAM user of the
embedded IAM) creates its session, runs a live turn, registers and completes a task and reads the
wake back in the conversation, all through the API; every request's SigV4 signature is verified, so
an unsigned request, one signed with another secret and another principal are all refused."""

from __future__ import annotations

import contextlib
import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from agentwake_client import ApiError, ProductApiClient
from agentwake_local.server import FAKE_CREDENTIALS
from agentwake_local.stack import LocalStackRuntime, read_state
from agentwake_local.template import Resolver
from tests.e2e.test_busy_sessions import wait_until
from tests.support.builders import OK_SCRIPT

TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStackRuntime]:
    home = tmp_path_factory.mktemp("agentwake-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AGENTWAKE_HOME", str(home))
        runtime = LocalStackRuntime(async_retry_delays=0, home=home)
        runtime.start(TEMPLATE, {}, background=True)
        try:
            yield runtime
        finally:
            runtime.stop()


def producer_policy(local: LocalStackRuntime) -> str:
    """ProducerPolicy's document as template.yaml resolves it on this stack."""
    stack = local.stack
    resolver = Resolver(stack.template, lambda logical_id: stack.resources[logical_id])
    return json.dumps(resolver.resolve(stack.template.resources["ProducerPolicy"]["Properties"]["PolicyDocument"]))


def producer_credentials(local: LocalStackRuntime) -> Credentials:
    """An IAM user of the local stack holding exactly ProducerPolicy (no table access)."""
    iam = local.client("iam")
    iam.create_user(UserName="producer")
    iam.put_user_policy(UserName="producer", PolicyName="ProducerPolicy", PolicyDocument=producer_policy(local))
    key = iam.create_access_key(UserName="producer")["AccessKey"]
    return Credentials(key["AccessKeyId"], key["SecretAccessKey"])


def signed_http(
    local: LocalStackRuntime, method: str, path: str, creds: Credentials | None, body: Any = None
) -> tuple[int, dict[str, Any]]:
    """One plain HTTP request, SigV4-signed with ``creds`` (None: unsigned), as any language would."""
    data = None if body is None else json.dumps(body).encode()
    request = AWSRequest(
        method=method, url=local.api_url + path, data=data, headers={"Content-Type": "application/json"}
    )
    if creds is not None:
        SigV4Auth(creds, "execute-api", local.region).add_auth(request)
    sent = urllib.request.Request(request.url, data=data, headers=dict(request.headers.items()), method=method)
    try:
        with urllib.request.urlopen(sent, timeout=30) as resp:  # noqa: S310 - the local API on 127.0.0.1
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def test_a_producer_runs_the_whole_loop_through_the_api_with_producer_policy_alone(local: LocalStackRuntime) -> None:
    # GIVEN the local stack in its "up" mode: the API's URL is recorded for `local status`
    state = read_state(local.home)
    assert state is not None and state["api_url"] == local.api_url and local.api_url.startswith("http://127.0.0.1:")
    assert state["outputs"]["ProductApiUrl"] == local.api_url
    creds = producer_credentials(local)
    api = ProductApiClient(local.api_url, region=local.region, credentials=creds)
    # WHEN the producer creates its session, runs a live turn, registers and completes a task
    created = api.put_session("web-1", providers=[{"type": "scripted", "id": "scripted", "script": OK_SCRIPT}])
    assert created["owners"] == ["arn:aws:iam::123456789012:user/producer"]
    with api.live_turn("web-1") as turn:
        api.append(turn, [("user", "find me a flight"), ("assistant", "on it")], idempotency_key="m1")
    task = api.register_task("web-1", "flight_search", {"to": "Lisbon"})
    api.complete_task(task.task_id, task.task_token, "succeeded", "3 flights found", summary_name="Flights")
    # THEN the poller wakes the agent, and the conversation reads back in the order it was written
    wait_until(lambda: api.task_status(task.task_id)["status"] == "woken", 60, "the task's wake")
    entries = list(reversed(api.read_conversation("web-1")["entries"]))
    assert [(e["kind"], e["content"]) for e in entries[:2]] == [("live", "find me a flight"), ("live", "on it")]
    later = [e for e in entries[2:] if e["run_id"] == f"bg:{task.task_id}"]
    assert later and "3 flights found" in json.dumps(later)
    # AND by plain HTTP, signed with SigV4: the same conversation
    status, page = signed_http(local, "GET", "/sessions/web-1/conversation", creds)
    assert status == 200 and page["entries"] == api.read_conversation("web-1")["entries"]


def test_unsigned_wrongly_signed_and_foreign_requests_are_refused(local: LocalStackRuntime) -> None:
    # GIVEN a session of the producer's
    creds = Credentials(*_second_producer(local))
    owner = ProductApiClient(local.api_url, region=local.region, credentials=creds)
    owner.put_session("web-2", providers=[{"type": "scripted", "id": "scripted", "script": OK_SCRIPT}])
    path = "/sessions/web-2/conversation"
    # WHEN a request is unsigned, or signed with the right key and another secret
    unsigned = signed_http(local, "GET", path, None)
    forged = signed_http(local, "GET", path, Credentials(creds.access_key, "not-the-secret"))
    unknown = signed_http(local, "GET", path, Credentials("AKIANOTAKEYATALL000", "whatever"))
    # THEN each is 403 before any function runs, saying why
    assert unsigned[0] == 403 and "not signed" in unsigned[1]["error"]
    assert forged[0] == 403 and "does not match" in forged[1]["error"]
    assert unknown[0] == 403 and "invalid" in unknown[1]["error"]
    # AND a validly signed request by another principal (the stack's own credentials) is refused too
    other = ProductApiClient(
        local.api_url,
        region=local.region,
        credentials=Credentials(
            FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            FAKE_CREDENTIALS["AWS_SESSION_TOKEN"],
        ),
    )
    for attempt in (lambda: other.read_conversation("web-2"), lambda: other.register_task("web-2", "x")):
        with pytest.raises(ApiError) as refused:
            attempt()
        assert refused.value.status == 403 and "session web-2" in str(refused.value)
    assert owner.read_conversation("web-2")["entries"] == []


def _second_producer(local: LocalStackRuntime, name: str = "producer-2") -> tuple[str, str]:
    iam = local.client("iam")
    iam.create_user(UserName=name)
    iam.put_user_policy(UserName=name, PolicyName="ProducerPolicy", PolicyDocument=producer_policy(local))
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return key["AccessKeyId"], key["SecretAccessKey"]


def test_the_callers_policies_are_evaluated_and_a_completions_only_worker_must_be_named(
    local: LocalStackRuntime,
) -> None:
    # GIVEN a producer's session and task, and a worker whose role holds only docs/producers.md's
    # completions-only statement (the API part), on this stack's API
    doc = (Path(__file__).resolve().parents[2] / "docs" / "producers.md").read_text()
    [block] = re.findall(r"<!-- completions-only-policy -->\s*```json\n(.*?)```", doc, flags=re.S)
    policy = json.loads(block)
    [through_api] = [s for s in policy["Statement"] if s["Action"] == "execute-api:Invoke"]
    api_arn = local.stack.template.arn("execute-api", local.stack.resources["ProductApi"].ref)
    through_api["Resource"] = api_arn + "/*/POST/tasks/*/completion"
    iam = local.client("iam")
    iam.create_user(UserName="worker")
    iam.put_user_policy(
        UserName="worker", PolicyName="completions", PolicyDocument=json.dumps({**policy, "Statement": [through_api]})
    )
    key = iam.create_access_key(UserName="worker")["AccessKey"]
    worker = ProductApiClient(
        local.api_url, region=local.region, credentials=Credentials(key["AccessKeyId"], key["SecretAccessKey"])
    )
    owner = ProductApiClient(
        local.api_url, region=local.region, credentials=Credentials(*_second_producer(local, "producer-3"))
    )
    owner.put_session("web-3", providers=[{"type": "scripted", "id": "scripted", "script": OK_SCRIPT}])
    task = owner.register_task("web-3", "render", {"page": 1})
    # WHEN the worker calls a route its policy does not grant THEN IAM refuses it (no function runs)
    with pytest.raises(ApiError) as denied:
        worker.put_session("web-4", providers=[{"type": "scripted"}])
    assert denied.value.status == 403 and "not authorized to perform execute-api:Invoke" in str(denied.value)
    # a route it is granted, on a session that does not name it: refused, as for a task that does
    # not exist (task ids say nothing to a caller who does not own their session)
    with pytest.raises(ApiError) as not_named:
        worker.complete_task(task.task_id, task.task_token, "succeeded", "page 1 rendered")
    assert not_named.value.status == 404 and task.task_id in str(not_named.value)
    # once the owner names the worker, its completion is accepted
    owner.put_session(
        "web-3", owners=[owner.get_session("web-3")["owners"][0], "arn:aws:iam::123456789012:user/worker"]
    )
    assert worker.complete_task(task.task_id, task.task_token, "succeeded", "page 1 rendered")


def test_a_second_different_decision_answers_409_naming_the_one_that_stands(local: LocalStackRuntime) -> None:
    from agentwake.domain.models import SessionConfig
    from agentwake.product.tasks import TasksService
    from tests.integration.test_approvals import ToolServer, ticket_tool
    from tests.support.builders import local_stack_rules
    from tests.support.local_stack import stack_store
    from tests.support.receiver import CountingReceiver

    # GIVEN a producer's session whose agent files a ticket through a gated tool (a server on
    # 127.0.0.1 counting its calls), and a task of it finished: its run parks on the request
    creds = Credentials(*_second_producer(local, "producer-decides"))
    store = stack_store(local)
    script = [
        {"tool_calls": [{"name": "create_ticket", "arguments": {"amount": 500, "customer": "acme"}}]},
        {"text": "Handled the ticket."},
    ]
    with CountingReceiver() as receiver, contextlib.closing(ToolServer()) as tool:
        store.records.put_session(
            SessionConfig(
                session_id="web-apr",
                providers=[{"type": "scripted", "id": "scripted", "script": script}],
                delivery={"type": "webhook", "url": receiver.url, "timeout": 90},
                tools=[ticket_tool(tool.url)],
                retry_base_delay_ms=0,
                owners=["arn:aws:iam::123456789012:user/producer-decides"],
            ),
            local_stack_rules(),
        )
        tasks = TasksService(store, local.outputs["BackgroundResultQueueUrl"], sqs=local.client("sqs"))
        task = tasks.register_task("web-apr", "web_research", {"query": "q"})
        tasks.finish_task(task.task_id, "succeeded", "found", task_token=task.task_token, summary_name="R")
        run_id = f"bg:{task.task_id}"

        def parked() -> bool:
            run = store.records.get_run(run_id)
            return run is not None and run.status == "parked"

        wait_until(parked, 120, f"{run_id} parked")
        status, page = signed_http(local, "GET", "/sessions/web-apr/approvals?state=pending", creds)
        assert status == 200, page
        [request] = page["approvals"]
        path = f"/approvals/{request['approval_id']}/decision"
        # WHEN the owner approves it through the API (plain HTTP, SigV4-signed)
        status, approved = signed_http(local, "POST", path, creds, {"decision": "approve", "reason": "fine"})
        assert status == 200 and approved["state"] == "approved", approved
        # AND then rejects it
        status, refused = signed_http(local, "POST", path, creds, {"decision": "reject", "reason": "changed my mind"})
        # THEN 409, naming the decision that stands: what, by whom, when, why
        assert status == 409 and refused["type"] == "ApprovalAlreadyDecided", refused
        stands = refused["approval"]
        assert (stands["state"], stands["decided_by"], stands["decided_at"], stands["reason"]) == (
            "approved",
            approved["decided_by"],
            approved["decided_at"],
            "fine",
        )
        assert "approved" in refused["error"] and approved["decided_at"] in refused["error"]
        # AND the same decision again answers 200 with the decision as it stands (idempotent)
        status, again = signed_http(local, "POST", path, creds, {"decision": "approve", "reason": "other words"})
        decision = ("state", "decided_by", "decided_via", "decided_at", "reason")
        assert status == 200 and [again[k] for k in decision] == [approved[k] for k in decision], again

        # AND the run resumed once on the approval: the tool was called exactly once
        def resumed() -> bool:
            run = store.records.get_run(run_id)
            return run is not None and run.status == "succeeded"

        wait_until(resumed, 120, f"{run_id} resumed")
        assert list(tool.calls.values()) == [1]
        assert store.approvals.get(request["approval_id"]).state == "approved"  # type: ignore[union-attr]
