"""The producer contract is published and checked: schemas/ match the models, every payload in events/
and what the producer API sends validate against them, docs/producers.md's example sends a valid
body, and ProducerPolicy holds no table grant: the product API's routes and the queue only."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import boto3
import pytest
from cfnlint.decode.cfn_yaml import loads
from jsonschema import Draft202012Validator
from pydantic import ConfigDict

from agentwake.errors import ForgedCompletion, InvalidMessage
from agentwake.product import contract
from agentwake.product.tasks import TasksService
from agentwake.settings import Settings
from agentwake.store.dynamo import DynamoStore
from agentwake.wake.background import wake_for_background_result
from agentwake.wake.messages import BackgroundResultMessage
from agentwake.wake.spec import WakeDeps
from tests.support.aws import REGION, Resources
from tests.support.builders import LOCAL_CALLER, OK_SCRIPT, seed_session
from tests.support.product_api import served

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "schemas"
EVENTS = ROOT / "events"
DOCS = ROOT / "docs" / "producers.md"


def validator(name: str) -> Draft202012Validator:
    schema = json.loads((SCHEMAS / name).read_text())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def errors(v: Draft202012Validator, instance: Any) -> list[str]:
    return [e.message for e in v.iter_errors(instance)]


# ------------------------------------------------------------------ drift


def test_schema_files_match_the_models() -> None:
    # GIVEN the checked-in schemas WHEN compared with what the models generate THEN nothing drifted
    assert contract.drift(SCHEMAS) == [], "schemas/ is stale: run `make schemas`"
    assert contract.main(["--check", str(SCHEMAS)], echo=lambda _: None) == 0


def test_a_field_change_without_regenerating_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the completion model gains a field (as a code change would add one)
    class Changed(BackgroundResultMessage):
        model_config = ConfigDict(extra="forbid", strict=True)
        priority: int = 0

    models = contract._models()
    models["background-result.schema.json"] = (Changed, models["background-result.schema.json"][1])
    monkeypatch.setattr(contract, "_models", lambda: models)
    # WHEN the drift check runs against the checked-in files
    said: list[str] = []
    code = contract.main(["--check", str(SCHEMAS)], echo=said.append)
    # THEN it fails and names the stale file and the command that fixes it
    assert code == 1
    assert contract.drift(SCHEMAS) == ["background-result.schema.json"]
    assert "background-result.schema.json is stale: run `make schemas`" in said[0]


def test_every_field_of_the_contract_is_documented() -> None:
    for name in contract.render():
        schema = json.loads((SCHEMAS / name).read_text())
        undocumented = [f for f, prop in schema["properties"].items() if not prop.get("description")]
        assert undocumented == [], f"{name}: add these to contract.FIELD_DOCS: {undocumented}"
        documented_in_prose = DOCS.read_text()
        assert all(f"`{f}`" in documented_in_prose for f in schema["properties"]), name


def test_make_schemas_writes_what_the_check_accepts(tmp_path: Path) -> None:
    # GIVEN an empty folder WHEN `make schemas` (contract.main) writes into it THEN the check passes
    assert contract.main([str(tmp_path)], echo=lambda _: None) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(contract.render_all())
    assert contract.drift(tmp_path) == []


def test_the_openapi_document_is_generated_from_the_routes(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the checked-in OpenAPI document: every route of the product API, with its bodies
    doc = json.loads((SCHEMAS / contract.OPENAPI_FILE).read_text())
    routes = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    assert routes == {
        ("PUT", "/sessions/{session_id}"),
        ("GET", "/sessions/{session_id}"),
        ("DELETE", "/sessions/{session_id}"),
        ("POST", "/sessions/{session_id}/live-turns"),
        ("POST", "/sessions/{session_id}/live-turns/{turn_id}/renew"),
        ("DELETE", "/sessions/{session_id}/live-turns/{turn_id}"),
        ("POST", "/sessions/{session_id}/messages"),
        ("GET", "/sessions/{session_id}/conversation"),
        ("GET", "/sessions/{session_id}/wakes"),
        ("DELETE", "/sessions/{session_id}/wakes/{wake_id}"),
        ("POST", "/tasks"),
        ("GET", "/tasks/{task_id}"),
        ("POST", "/tasks/{task_id}/completion"),
        ("POST", "/tasks/{task_id}/cancel"),
        ("POST", "/sessions/{session_id}/tasks"),
        ("GET", "/sessions/{session_id}/tasks"),
        ("POST", "/sessions/{session_id}/push-tickets"),
        ("GET", "/sessions/{session_id}/unread"),
        ("POST", "/sessions/{session_id}/read"),
        ("GET", "/sessions/{session_id}/approvals"),
        ("GET", "/approvals/{approval_id}"),
        ("POST", "/approvals/{approval_id}/decision"),
    }
    assert "task_token" in doc["components"]["schemas"]["CompletionBody"]["required"]
    # WHEN a route's body model changes without `make schemas` THEN the drift check names the file
    from agentwake.product import api as product_api

    changed = product_api.openapi_json().replace('"maxItems": 25', '"maxItems": 26')
    monkeypatch.setattr(product_api, "openapi_json", lambda: changed)
    assert contract.drift(SCHEMAS) == [contract.OPENAPI_FILE]


# ------------------------------------------------------------------ events/


def sqs_bodies() -> list[tuple[str, str]]:
    out = []
    for path in sorted(EVENTS.glob("background-result-*.json")):
        for record in json.loads(path.read_text())["Records"]:
            out.append((f"{path.name}:{record['messageId'][:8]}", record["body"]))
    return out


@pytest.mark.parametrize(("where", "body"), sqs_bodies(), ids=[w for w, _ in sqs_bodies()])
def test_every_sqs_event_body_gets_the_same_verdict_from_schema_and_runtime(where: str, body: str) -> None:
    # GIVEN a body from events/ WHEN the schema and the runtime parser judge it
    try:
        instance = json.loads(body)
    except json.JSONDecodeError:
        instance = None
    schema_ok = instance is not None and not errors(validator("background-result.schema.json"), instance)
    try:
        BackgroundResultMessage.parse_body(body)
        runtime_ok = True
    except InvalidMessage:
        runtime_ok = False
    # THEN they agree; the only body either refuses is the deliberately malformed one
    assert schema_ok == runtime_ok, where
    assert runtime_ok or body == '{"task_id": 42', where


def test_events_contain_valid_bodies_at_all() -> None:
    valid = [b for _, b in sqs_bodies() if b != '{"task_id": 42']
    assert len(valid) >= 3
    for body in valid:
        assert errors(validator("background-result.schema.json"), json.loads(body)) == []


@pytest.mark.parametrize("name", ["cron-wake.json", "cron-wake-missing-job.json"])
def test_every_cron_event_validates(name: str) -> None:
    assert errors(validator("cron-wake.schema.json"), json.loads((EVENTS / name).read_text())) == []


VALID = json.loads(
    next(b for _, b in sqs_bodies() if b != '{"task_id": 42')  # a known-good body to mutate
)
MUTATIONS = {
    "unknown field": {**VALID, "priority": 1},
    "task id not a string": {**VALID, "task_id": 42},
    "task id with a slash": {**VALID, "task_id": "a/b"},
    "status not in the enum": {**VALID, "status": "done"},
    "result over 200,000 chars": {**VALID, "result_text": "x" * 200_001},
    "missing finished_at": {k: v for k, v in VALID.items() if k != "finished_at"},
    "empty summary": {**VALID, "summary_name": ""},
    "tool_args not an object": {**VALID, "tool_args": ["a"]},
}


@pytest.mark.parametrize("case", sorted(MUTATIONS))
def test_schema_refuses_what_the_runtime_refuses(case: str) -> None:
    body = MUTATIONS[case]
    with pytest.raises(InvalidMessage):
        BackgroundResultMessage.parse_body(json.dumps(body))
    assert errors(validator("background-result.schema.json"), body), case


def test_a_completion_without_its_token_is_refused_by_the_schema_and_never_succeeds(
    resources: Resources, store: DynamoStore
) -> None:
    # GIVEN a registered task and a completion that leaves its token out
    seed_session(store, "s-tokenless")
    registered = TasksService(store, resources.queue_url).register_task("s-tokenless", "web_research")
    body = {k: v for k, v in VALID.items() if k != "task_token"}
    body.update(task_id=registered.task_id, session_id="s-tokenless")
    # THEN the published schema refuses it (the contract requires the token)
    assert any(
        "'task_token' is a required property" in e for e in errors(validator("background-result.schema.json"), body)
    )
    # AND the runtime, which parses it, refuses to run it: a permanent ForgedCompletion, the task untouched
    msg = BackgroundResultMessage.parse_body(json.dumps(body))
    with pytest.raises(ForgedCompletion):
        wake_for_background_result(msg, WakeDeps(store=store, settings=Settings.from_env()))
    assert store.records.get_task(registered.task_id).status == "running"  # type: ignore[union-attr]


# ------------------------------------------------------------------ what producers send


def sent_bodies(sqs: Any, queue_url: str) -> list[str]:
    resp = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10)
    return [m["Body"] for m in resp.get("Messages", [])]


def test_what_finish_task_sends_validates(resources: Resources, store: DynamoStore) -> None:
    # GIVEN a session and the producer API
    seed_session(store, "s-contract")
    sqs = boto3.client("sqs", region_name=REGION)
    tasks = TasksService(store, resources.queue_url, sqs=sqs)
    # WHEN a producer registers tasks and finishes them (both statuses, optional fields)
    first = tasks.register_task("s-contract", "web_research", {"q": "aurora"})
    second = tasks.register_task("s-contract", "build_report")
    tasks.finish_task(
        first.task_id,
        "succeeded",
        "Found 3 offers.",
        task_token=first.task_token,
        summary_name="Aurora research",
        note="user asked",
    )
    tasks.finish_task(second.task_id, "failed", "timeout after 30s", task_token=second.task_token, subagent_name="x")
    # THEN every body on the queue validates against the published schema
    bodies = sent_bodies(sqs, resources.queue_url)
    assert len(bodies) == 2
    for body in bodies:
        assert errors(validator("background-result.schema.json"), json.loads(body)) == []


def doc_example_body() -> dict[str, Any]:
    """The JSON body of the plain-boto3 example in docs/producers.md (the block after its marker)."""
    text = DOCS.read_text()
    match = re.search(r"<!-- example-body -->\s*```json\n(.*?)```", text, re.DOTALL)
    assert match, "docs/producers.md lost its example body"
    return dict(json.loads(match.group(1)))


def test_the_documented_example_body_validates() -> None:
    body = doc_example_body()
    assert errors(validator("background-result.schema.json"), body) == []


# ------------------------------------------------------------------ ProducerPolicy


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    path = ROOT / "template.yaml"
    return dict(loads(path.read_text(), str(path)))


def test_producer_policy_is_a_managed_policy_in_the_outputs(template: dict[str, Any]) -> None:
    policy = template["Resources"]["ProducerPolicy"]
    assert policy["Type"] == "AWS::IAM::ManagedPolicy"
    assert template["Outputs"]["ProducerPolicyArn"]["Value"] == {"Ref": "ProducerPolicy"}


def producer_statements(template: dict[str, Any]) -> list[dict[str, Any]]:
    return list(template["Resources"]["ProducerPolicy"]["Properties"]["PolicyDocument"]["Statement"])


def test_producer_policy_invokes_the_api_and_sends_completions_and_nothing_else(template: dict[str, Any]) -> None:
    api, queue = producer_statements(template)
    assert (api["Sid"], api["Action"]) == ("ProductApiRoutes", "execute-api:Invoke")
    assert queue == {
        "Sid": "SendCompletions",
        "Effect": "Allow",
        "Action": "sqs:SendMessage",
        "Resource": {"Fn::GetAtt": ["BackgroundResultQueue", "Arn"]},
    }


def test_the_completions_only_policy_of_the_docs_is_narrower(template: dict[str, Any]) -> None:
    match = re.search(r"<!-- completions-only-policy -->\s*```json\n(.*?)```", DOCS.read_text(), re.DOTALL)
    assert match, "docs/producers.md lost its completions-only policy"
    statements = json.loads(match.group(1))["Statement"]
    assert {s["Action"] for s in statements} == {"execute-api:Invoke", "sqs:SendMessage"}
    (invoke,) = [s for s in statements if s["Action"] == "execute-api:Invoke"]
    assert invoke["Resource"].endswith("/*/POST/tasks/*/completion")


def test_the_boto3_example_registers_through_the_api_and_completes_a_task_that_wakes_the_agent(
    resources: Resources, store: DynamoStore
) -> None:
    # GIVEN the producer code of docs/producers.md, run as written (the API on 127.0.0.1, moto)
    match = re.search(r"<!-- example-boto3 -->\s*```python\n(.*?)```", DOCS.read_text(), re.DOTALL)
    assert match, "docs/producers.md lost its boto3 example"
    assert "dynamodb" not in match.group(1)
    namespace: dict[str, Any] = {}
    exec(compile(match.group(1), "docs/producers.md", "exec"), namespace)  # noqa: S102 -- our own docs
    calls: list[str] = []
    namespace["sqs"].meta.events.register(
        "provide-client-params.sqs.*", lambda model, **_: calls.append(f"sqs:{model.name}")
    )
    # WHEN it creates its session, registers a task and sends its completion
    with served(resources) as api_url:
        created = namespace["create_session"](api_url, "s-boto3", [{"type": "scripted", "script": OK_SCRIPT}])
        assert created["owners"] == [LOCAL_CALLER]  # the principal it signed as
        task_id, token = namespace["register_task"](api_url, "s-boto3", "web_research", {"query": "aurora"})
    namespace["finish_task"](resources.queue_url, task_id, token, "s-boto3", "succeeded", "3 offers", "Aurora")
    # THEN its one AWS call is what ProducerPolicy (or the completions-only policy) allows
    assert calls == ["sqs:SendMessage"]
    # THEN the body validates, the runtime accepts it, and the wake it triggers succeeds
    [body] = sent_bodies(boto3.client("sqs", region_name=REGION), resources.queue_url)
    assert errors(validator("background-result.schema.json"), json.loads(body)) == []
    msg = BackgroundResultMessage.parse_body(body)
    outcome = wake_for_background_result(msg, WakeDeps(store=store, settings=Settings.from_env()))
    assert outcome.status == "succeeded"
    assert store.records.get_task(task_id).status == "woken"  # type: ignore[union-attr]
