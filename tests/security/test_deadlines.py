"""Build 4: deadlines hold across a whole HTTP exchange (connect + every read), so a run stops at its
deadline with a recorded DeadlineExceeded failure, before Lambda's own timeout would kill it
without one. The servers are real sockets on 127.0.0.1; bounds are generous (the slow servers would
otherwise go on for minutes)."""

from __future__ import annotations

import json
import time

import pytest

from agentwake.agent.providers.openai_compat import OpenAICompatProvider
from agentwake.agent.types import ChatRequest
from agentwake.bootstrap import reset_caches
from agentwake.domain.conversation import Message
from agentwake.errors import TransientProviderError
from agentwake_ops.runs import run_summary
from tests.security.conftest import Cli, Stack
from tests.security.servers import Dribbler, Silent
from tests.security.wake import completion_body, handle

#: the Lambda time the handler is given, and the margin the run keeps before it
REMAINING_MS = 8_000
MARGIN_MS = 3_000


@pytest.fixture
def short_lambda(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Stack:
    monkeypatch.setenv("AGENTWAKE_RUN_TIMEOUT_MARGIN_MS", str(MARGIN_MS))
    monkeypatch.setenv("AGENTWAKE_MIN_RUN_BUDGET_MS", "0")
    reset_caches()
    return stack


def test_a_dribbling_server_cannot_outlive_the_exchange_deadline(stackless_settings: None) -> None:
    # GIVEN a provider whose server answers one byte every 0.5 s (a whole answer would take hours)
    with Dribbler(interval=0.5) as server:
        provider = OpenAICompatProvider(id="slow", base_url=server.url + "/v1", model="m")
        started = time.monotonic()
        # WHEN it is asked with a 2 s timeout
        with pytest.raises(TransientProviderError) as info:
            provider.complete(ChatRequest(messages=(Message(role="user", content="hi"),), timeout=2.0))
        # THEN the exchange ends as a timeout, long before the server would have finished
        assert info.value.code == "Timeout"
        assert time.monotonic() - started < 30
        assert server.bytes_sent > 0  # it was dribbling, not silent


def test_a_run_against_a_dribbling_provider_ends_at_its_deadline_with_a_recorded_failure(
    short_lambda: Stack, cli: Cli
) -> None:
    stack = short_lambda
    with Dribbler(interval=0.5) as server:
        # GIVEN a session whose only provider dribbles
        provider = {"type": "openai", "id": "slow", "base_url": server.url + "/v1", "model": "m"}
        cli("sessions", "put", "s-slow", "--provider", json.dumps(provider))
        body = completion_body(stack, "s-slow")
        task_id = json.loads(body)["task_id"]
        started = time.monotonic()
        # WHEN its wake runs with 8 s of Lambda time left
        response = handle([body], remaining_ms=REMAINING_MS)
        elapsed = time.monotonic() - started
    # THEN the handler returned before Lambda's timeout, the record is a batch item failure (retry) ...
    assert elapsed < REMAINING_MS / 1000
    assert len(response["batchItemFailures"]) == 1
    # ... and the run's failure says why
    [failure] = stack.store.ends.failures(f"bg:{task_id}")
    assert failure.error_type == "DeadlineExceeded"
    assert "deadline" in failure.detail
    assert stack.store.records.get_task(task_id).status == "failed"  # type: ignore[union-attr]


def test_a_webhook_answering_after_the_deadline_ends_the_run_at_its_deadline(short_lambda: Stack, cli: Cli) -> None:
    stack = short_lambda
    with Silent() as hook:
        # GIVEN a session whose agent messages the user through a webhook that never answers in time
        # (its own timeout, 60 s, is longer than the run has)
        script = [
            {"tool_calls": [{"name": "send_message_to_user", "arguments": {"text": "Your report is ready."}}]},
            {"text": "Told the user."},
        ]
        provider = {"type": "scripted", "id": "p", "script": script}
        cli("sessions", "put", "s-hook", "--provider", json.dumps(provider))
        session = stack.store.records.get_session("s-hook")
        stack.store.records.put_session(
            session.model_copy(update={"delivery": {"type": "webhook", "url": hook.url + "/hook", "timeout": 60}})  # type: ignore[union-attr]
        )
        body = completion_body(stack, "s-hook")
        task_id = json.loads(body)["task_id"]
        started = time.monotonic()
        # WHEN its wake runs with 8 s of Lambda time left
        response = handle([body], remaining_ms=REMAINING_MS)
        elapsed = time.monotonic() - started
        # THEN the webhook got the request, the run stopped at its deadline, and the failure is recorded
        assert len(hook.requests) == 1
    assert elapsed < REMAINING_MS / 1000
    assert len(response["batchItemFailures"]) == 1
    [failure] = stack.store.ends.failures(f"bg:{task_id}")
    assert failure.error_type == "DeadlineExceeded"
    assert "may have arrived" in failure.detail
    # AND the delivery was not journaled as done: the retry sends the same delivery id again
    assert run_summary(stack.store, f"bg:{task_id}").deliveries == []


def test_the_runs_deadline_is_one_deadline_exceeded_for_every_outbound_caller(stackless_settings: None) -> None:
    from agentwake.agent.tools import ToolContext
    from agentwake.agent.tools.config import build_tools
    from agentwake.delivery import Delivery
    from agentwake.delivery.webhook import WebhookChannel
    from agentwake.errors import DeadlineExceeded
    from agentwake.trust.outbound import ExchangeTimeout, run_deadline

    with Silent() as server:
        # GIVEN a provider, a webhook and an HTTP tool on a server that never answers, each with a
        # 60 s timeout of its own, inside a run whose deadline is 1 s away
        provider = OpenAICompatProvider(id="slow", base_url=server.url + "/v1", model="m")
        channel = WebhookChannel(server.url + "/hook", None, timeout=60)
        [tool] = build_tools(
            [{"type": "http", "name": "t", "description": "d", "url": server.url + "/t", "timeout": 60}],
            session_id="s1",
        )
        calls = {
            "provider": lambda: provider.complete(
                ChatRequest(messages=(Message(role="user", content="hi"),), timeout=60.0)
            ),
            "webhook": lambda: channel.send(Delivery(delivery_id="bg:t#0#0", run_id="bg:t", session_id="s", text="x")),
            "tool": lambda: tool.invoke({}, ToolContext(run_id="bg:t", session_id="s1")),
        }
        for name, call in calls.items():
            started = time.monotonic()
            # WHEN each is called
            with run_deadline(time.monotonic() + 1.0), pytest.raises(DeadlineExceeded) as info:
                call()
            # THEN each ends at the run's deadline with the same error, saying the request may have arrived
            assert time.monotonic() - started < 10, name
            assert "did not finish before the run's deadline; the request may have arrived" in str(info.value), name
            assert isinstance(info.value.__cause__, ExchangeTimeout), name
        assert server.connections == 3  # each request reached the server before the deadline
