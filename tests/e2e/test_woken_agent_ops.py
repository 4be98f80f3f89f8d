"""What a woken run cost and when it must stop, as an operator sees it (issue 15, DESIGN §7):
token budgets end a run in the DLQ at once, and `runs show` sums each provider's real usage fields.

On moto with the real handler and SQS redrive semantics (tests/e2e/conftest), an OpenAI-compatible
server on 127.0.0.1 (pytest-httpserver) and Bedrock through botocore's Stubber.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.stub import Stubber
from pytest_httpserver import HTTPServer

from agentwake.agent.chain import RetryPolicy
from agentwake.agent.providers import build_provider
from agentwake.agent.providers.bedrock import BedrockProvider
from agentwake.domain.models import SessionConfig, Task
from agentwake.settings import Settings
from agentwake.store.queues import ATTR_ERROR_TYPE, ATTR_REASON, ATTR_RECEIVE_COUNT
from agentwake.wake.background import wake_for_background_result
from agentwake.wake.messages import BackgroundResultMessage
from agentwake.wake.spec import WakeDeps
from tests.e2e.conftest import Cli, Stack, cli_json
from tests.support.aws import REGION, drain
from tests.support.builders import SCRIPTED_ARGS
from tests.support.tasks import token_for, token_hash_for

#: step 0 costs 100 tokens, step 1 another 200: a 250-token budget is exceeded at step 2 (index 1)
OVER_BUDGET_AT_STEP_2 = {
    "type": "scripted",
    "id": "p",
    "script": [
        {"tool_calls": [{"name": "lookup", "arguments": {"q": "a"}}], "input_tokens": 80, "output_tokens": 20},
        {"tool_calls": [{"name": "lookup", "arguments": {"q": "b"}}], "input_tokens": 180, "output_tokens": 20},
        {"text": "done", "input_tokens": 10, "output_tokens": 5},
    ],
}


def start_task(cli: Cli, session: str) -> str:
    registered = json.loads(cli("tasks", "register", "--session", session, "--tool", "web_research", "--json").stdout)
    task_id: str = registered["task_id"]
    cli(
        "tasks", "finish", task_id, "--token", registered["task_token"],
        "--status", "succeeded", "--result", "3 offers found", "--summary", "Research",
    )  # fmt: skip
    return task_id


def test_a_token_budget_exceeded_at_step_2_is_dead_lettered_after_one_receive(
    cli: Cli, stack: Stack, model_calls: Counter[str]
) -> None:
    # GIVEN a session with a 250-token run budget, and a model that spends 100 then 200 tokens
    cli(
        "sessions",
        "put",
        "s-budget",
        "--provider",
        json.dumps(OVER_BUDGET_AT_STEP_2),
        "--set",
        "max_tokens_per_run=250",
    )
    task_id = start_task(cli, "s-budget")

    # WHEN the poller receives the completion message once
    ok, failed = stack.poll()

    # THEN the record was handled (no retry burned) and the message sits in the DLQ already
    assert len(ok) == 1 and failed == []
    assert stack.counts(stack.res.queue_url) == (0, 0)
    [dead] = drain(stack.res.dlq_url)
    attributes = {k: v["StringValue"] for k, v in dead["MessageAttributes"].items()}
    # AND it carries its reason: BudgetExceeded at step 1, after exactly one receive
    assert attributes[ATTR_ERROR_TYPE] == "BudgetExceeded"
    assert attributes[ATTR_RECEIVE_COUNT] == "1"
    assert "token budget exceeded at step 1" in attributes[ATTR_REASON]
    assert "used 300 tokens" in attributes[ATTR_REASON] and "budget is 250" in attributes[ATTR_REASON]
    assert model_calls["p"] == 2
    stack.sqs.change_message_visibility(
        QueueUrl=stack.res.dlq_url, ReceiptHandle=dead["ReceiptHandle"], VisibilityTimeout=0
    )
    # AND the failure is recorded: the operator's list and run show say why and what it spent
    [row] = cli_json(cli, "dlq", "list")
    assert row["run_id"] == f"bg:{task_id}" and row["error_type"] == "BudgetExceeded" and row["attempts"] == 1
    run = cli_json(cli, "runs", "show", f"bg:{task_id}")["run"]
    assert run["status"] == "failed" and run["usage"]["total_tokens"] == 300
    shown = cli("dlq", "show", row["message_id"][:8]).stdout
    assert "BudgetExceeded" in shown and "model calls by provider" in shown and "260" in shown

    # WHEN the operator redrives it without raising the budget
    assert "moved 1, failed 0" in cli("dlq", "redrive", "--id", row["message_id"][:8]).stdout
    ok, failed = stack.poll()
    # THEN it is dead-lettered again at once, and the model was not called again
    assert len(ok) == 1 and failed == []
    assert model_calls["p"] == 2
    [again] = cli_json(cli, "dlq", "list")
    assert again["error_type"] == "BudgetExceeded" and again["attempts"] == 2

    # WHEN the operator raises the budget and redrives once more
    cli("sessions", "put", "s-budget", "--set", "max_tokens_per_run=5000")
    cli("dlq", "redrive", "--id", again["message_id"][:8])
    ok, failed = stack.poll()
    # THEN the run resumes at the step it stopped on and succeeds: one more model call
    assert len(ok) == 1 and failed == []
    assert model_calls["p"] == 3
    assert cli_json(cli, "runs", "show", f"bg:{task_id}")["run"]["status"] == "succeeded"
    assert cli_json(cli, "dlq", "list") == []


# --- token counts from the providers' own usage fields --------------------------------------------

NOVA = "amazon.nova-lite-v1:0"
PRICES = {
    "openai:gpt-test": {"input_per_mtok": 2.5, "output_per_mtok": 10.0},
    NOVA: {"input_per_mtok": 0.06, "output_per_mtok": 0.24},  # priced by model: the fallback's id differs
}


@pytest.fixture
def bedrock() -> Iterator[tuple[Any, Stubber]]:
    client = boto3.client("bedrock-runtime", region_name=REGION, config=Config(retries={"total_max_attempts": 1}))
    with Stubber(client) as stub:
        yield client, stub
        stub.assert_no_pending_responses()


def openai_reply(message: dict[str, Any], usage: dict[str, int]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-test-2026-01",
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": "stop"}],
        "usage": {**usage, "total_tokens": sum(usage.values())},
    }


def test_token_counts_from_openai_and_bedrock_usage_are_summed_per_provider_with_their_cost(
    cli: Cli, stack: Stack, httpserver: HTTPServer, bedrock: tuple[Any, Stubber], capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN an OpenAI-compatible primary on 127.0.0.1 that answers two steps, then rejects the key,
    # and a Bedrock fallback (Stubber) that answers the last step
    lookup = {
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}],
    }
    path = "/v1/chat/completions"
    httpserver.expect_ordered_request(path, method="POST").respond_with_json(
        openai_reply(lookup, {"prompt_tokens": 120, "completion_tokens": 30})
    )
    httpserver.expect_ordered_request(path, method="POST").respond_with_json(
        openai_reply(lookup, {"prompt_tokens": 180, "completion_tokens": 20})
    )
    httpserver.expect_ordered_request(path, method="POST").respond_with_json(
        {"error": {"message": "invalid api key"}}, status=401
    )
    client, stub = bedrock
    stub.add_response(
        "converse",
        {
            "output": {"message": {"role": "assistant", "content": [{"text": "Three offers; the best is $40."}]}},
            "stopReason": "end_turn",
            "usage": {"inputTokens": 400, "outputTokens": 60, "totalTokens": 460},
            "metrics": {"latencyMs": 300},
        },
    )
    providers = [
        {"type": "openai", "base_url": httpserver.url_for("/v1"), "model": "gpt-test"},
        {"type": "bedrock", "id": "nova", "model_id": NOVA},
    ]
    stack.store.records.put_session(SessionConfig(session_id="s-cost", providers=providers, prices=PRICES))
    stack.store.records.put_task(
        Task(task_id="t-cost", session_id="s-cost", tool_name="web_research", token_sha256=token_hash_for("t-cost"))
    )

    def factory(spec: dict[str, Any]) -> Any:
        if spec["type"] == "bedrock":
            return BedrockProvider(id=spec["id"], model_id=spec["model_id"], client=client)
        return build_provider(spec)

    deps = WakeDeps(
        store=stack.store, settings=Settings.from_env(), provider_factory=factory, retry=RetryPolicy(base_delay=0)
    )
    msg = BackgroundResultMessage(
        task_id="t-cost",
        session_id="s-cost",
        task_token=token_for("t-cost"),
        tool_name="web_research",
        status="succeeded",
        result_text="3 offers found",
        summary_name="Offers",
        finished_at="2026-11-30T05:00:00Z",
    )
    from agentwake.observability import metrics

    metrics.flush_metrics()  # what earlier wakes of this process ran outside a handler left
    capsys.readouterr()

    # WHEN the run is woken
    outcome = wake_for_background_result(msg, deps)
    metrics.flush_metrics()  # as the handler's metrics.log_metrics does when the invocation ends
    emitted = capsys.readouterr().out
    assert outcome.status == "succeeded"

    # THEN runs show --json sums each provider's own usage fields
    run = cli_json(cli, "runs", "show", "bg:t-cost")
    usage = run["run"]["usage"]
    openai_row, bedrock_row = usage["by_provider"]["openai:gpt-test"], usage["by_provider"]["nova"]
    assert (openai_row["calls"], openai_row["input_tokens"], openai_row["output_tokens"]) == (2, 300, 50)
    assert openai_row["model"] == "gpt-test-2026-01"  # the model the server says answered
    assert (bedrock_row["calls"], bedrock_row["input_tokens"], bedrock_row["output_tokens"]) == (1, 400, 60)
    assert bedrock_row["model"] == NOVA
    assert (usage["model_calls"], usage["input_tokens"], usage["output_tokens"]) == (3, 700, 110)
    # AND the estimated cost matches the price table: USD per million tokens, per provider and in total
    openai_cost = (300 * 2.5 + 50 * 10.0) / 1e6
    bedrock_cost = (400 * 0.06 + 60 * 0.24) / 1e6
    assert openai_row["estimated_cost_usd"] == pytest.approx(openai_cost)
    assert bedrock_row["estimated_cost_usd"] == pytest.approx(bedrock_cost)
    assert usage["estimated_cost_usd"] == pytest.approx(openai_cost + bedrock_cost)
    # AND each journaled step carries its provider, tokens, latency and attempt
    replies = [s for s in run["steps"] if s["key"].endswith(".reply")]
    assert [(s["provider_id"], s["usage"]["input_tokens"], s["usage"]["output_tokens"]) for s in replies] == [
        ("openai:gpt-test", 120, 30),
        ("openai:gpt-test", 180, 20),
        ("nova", 400, 60),
    ]
    assert all(s["usage"]["attempt"] == 1 and s["usage"]["latency_ms"] >= 0 for s in replies)
    # AND the table an operator reads shows the same per provider with the cost
    table = cli("runs", "show", "bg:t-cost").stdout
    assert "model calls by provider" in table and "openai:gpt-test" in table and "$0.001250" in table
    assert "700 in / 110 out over 3 model calls" in table
    # AND the EMF metrics InputTokens/OutputTokens were emitted per provider with the invocation's
    # metrics, one line each with both
    blobs = [json.loads(line) for line in emitted.splitlines() if line.startswith('{"_aws"')]
    tokens = {
        (b["provider"], m["Name"]): b[m["Name"]]
        for b in blobs
        for m in b["_aws"]["CloudWatchMetrics"][0]["Metrics"]
        if "provider" in b
    }
    assert tokens == {
        ("openai:gpt-test", "InputTokens"): [300.0],
        ("openai:gpt-test", "OutputTokens"): [50.0],
        ("nova", "InputTokens"): [400.0],
        ("nova", "OutputTokens"): [60.0],
    }
    assert all(
        ["provider", "service"] in b["_aws"]["CloudWatchMetrics"][0]["Dimensions"] for b in blobs if "provider" in b
    )
    assert len([b for b in blobs if "provider" in b]) == 2  # one line a provider, both metrics in it


def test_sessions_put_sets_the_attention_settings_and_refuses_unknown_ones(cli: Cli, stack: Stack) -> None:
    # GIVEN a session
    cli("sessions", "put", "s-set", *SCRIPTED_ARGS)
    # WHEN the operator sets the new settings by name
    shown = cli_json(
        cli,
        "sessions",
        "put",
        "s-set",
        "--set",
        "deliver_final=never",
        "--set",
        "max_tokens_per_day=50000",
        "--set",
        'prices={"p": {"input_per_mtok": 3, "output_per_mtok": 15}}',
    )
    # THEN they are stored, validated, and shown
    assert (shown["deliver_final"], shown["max_tokens_per_day"]) == ("never", 50000)
    assert shown["prices"] == {"p": {"input_per_mtok": 3.0, "output_per_mtok": 15.0}}
    assert "max_tokens_per_day" not in cli("sessions", "show", "s-set").stdout  # shown by meaning, not name
    assert "50000 per day" in cli("sessions", "show", "s-set").stdout
    # AND an unknown setting or a bad value is a clear error that changes nothing
    bad = cli("sessions", "put", "s-set", "--set", "max_tokenz=5", expect=None)
    assert bad.exit_code != 0 and "NAME a session setting" in bad.output
    worse = cli("sessions", "put", "s-set", "--set", "deliver_final=sometimes", expect=None)
    assert worse.exit_code != 0 and "deliver_final" in worse.output
    assert stack.store.records.get_session("s-set").deliver_final == "never"  # type: ignore[union-attr]


# --- the cron path: a budget exceeded reaches CronFailureQueue at once ----------------------------


def lambda_destination_record(event: dict[str, Any], error: dict[str, Any]) -> str:
    """What Lambda itself sends to the on-failure destination after the retries (as infra/agentwake_local does)."""
    return json.dumps(
        {
            "version": "1.0",
            "timestamp": "2026-11-30T06:03:00.000Z",
            "requestContext": {
                "requestId": "req-lambda",
                "functionArn": "arn:aws:lambda:us-east-1:123456789012:function:agentwake-CronWakeFunction:live",
                "condition": "RetriesExhausted",
                "approximateInvokeCount": 3,
            },
            "requestPayload": event,
            "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
            "responsePayload": error,
        }
    )


def test_the_cli_shows_a_cron_budget_failure_like_a_lambda_destination_record(
    cli: Cli, stack: Stack, model_calls: Counter[str]
) -> None:
    from agentwake.domain.run_models import Job
    from agentwake.handlers import cron_wake
    from tests.support.aws import FakeLambdaContext

    # GIVEN a nightly job whose session has a 250-token run budget that its run exceeds at step 2
    cli(
        "sessions",
        "put",
        "s-cron-budget",
        "--provider",
        json.dumps(OVER_BUDGET_AT_STEP_2),
        "--set",
        "max_tokens_per_run=250",
    )
    stack.store.records.put_job(
        Job(job_id="job-budget", session_id="s-cron-budget", name="Nightly", schedule_expression="cron(0 6 * * ? *)")
    )
    event = {"job_id": "job-budget", "scheduled_time": "2026-11-30T06:00:00Z"}
    # AND, for comparison, Lambda's own record of a job whose retries ran out (a run the store never saw)
    stack.sqs.send_message(
        QueueUrl=stack.res.cron_failure_url,
        MessageBody=lambda_destination_record(
            {"job_id": "job-gone", "scheduled_time": "2026-11-29T06:00:00Z"},
            {"errorType": "RunFailed", "errorMessage": "run cron:job-gone failed: All chat models failed"},
        ),
    )

    # WHEN the schedule invokes the cron function once
    result = cron_wake.handler(event, FakeLambdaContext())

    # THEN it returned, and the operator's list shows the budget failure beside Lambda's record
    assert result["status"] == "failed_permanently"
    rows = {r["run_id"]: r for r in cli_json(cli, "dlq", "list", "--queue", "cron")}
    budget = rows["cron:job-budget:2026-11-30T06:00:00Z"]
    lambdas = rows["cron:job-gone:2026-11-29T06:00:00Z"]
    assert budget.keys() == lambdas.keys()
    assert (budget["kind"], lambdas["kind"]) == ("cron", "cron")
    assert budget["session_id"] == "s-cron-budget" and budget["job_id"] == "job-budget"
    assert budget["error_type"] == "BudgetExceeded" and budget["attempts"] == 1
    assert "budget is 250" in budget["error"] and budget["run_status"] == "failed"
    assert budget["in_dlq_since"] is not None
    # AND `dlq show` says it was dead-lettered at once as permanent, with what the run spent
    shown_json = cli_json(cli, "dlq", "show", budget["message_id"][:8])
    assert shown_json["trigger"]["condition"] == "PermanentFailure"
    assert "approximate_invoke_count" not in shown_json["trigger"]
    assert shown_json["payload"] == event
    shown = cli("dlq", "show", budget["message_id"][:8]).stdout
    assert "PermanentFailure" in shown and "BudgetExceeded" in shown and "model calls by provider" in shown
    # AND the table lists both
    listed = cli("dlq", "list", "--queue", "cron").stdout
    assert "BudgetExceeded" in listed and "RunFailed" in listed

    # WHEN the operator redrives it without raising the budget
    cli("dlq", "redrive", "--id", budget["message_id"][:8])
    # THEN the CLI re-invoked the function with the original input
    assert stack.invocations == [("CronWakeFunction", event)]
    # AND that invocation stops at once without calling the model, back on the queue
    assert cron_wake.handler(stack.invocations[0][1], FakeLambdaContext())["status"] == "failed_permanently"
    assert model_calls["p"] == 2
    again = [r for r in cli_json(cli, "dlq", "list", "--queue", "cron") if r["job_id"] == "job-budget"]
    assert [(r["error_type"], r["attempts"]) for r in again] == [("BudgetExceeded", 2)]
