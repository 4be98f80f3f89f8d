"""Background subagents (wake/subagent.py) on moto with the real functions and the local stack's own
SQS poller (partial batch responses, the queues' redrive policies from template.yaml).

First the seed's scenario (issue 33, "Must be shown"): a cron wake's agent hands research to a
background subagent; the subagent repeats a tool call to its step limit, its forced final step
returns a malformed call, then every provider fails; its ``sub:`` run fails, is retried, ends in
BackgroundWorkDLQ with its reason (the failure records); the task completes ``failed``; the main
agent is woken once and its delivery says the research failed. Then the provider is fixed, the run
redriven: it resumes from its journal (no completed model call asked again), the task completes
``succeeded``, the main agent is woken once more and delivers the result — every delivery id once at
the receiver. Then the edges: a stale work message, a cancelled task, a crash after the completion.
docs/subagents.md.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from agentwake import bootstrap
from agentwake.agent.providers import build_provider
from agentwake.agent.types import ChatRequest, ModelReply, Usage
from agentwake.domain.conversation import ToolCall
from agentwake.domain.models import subagent_run_id
from agentwake.errors import TransientProviderError
from agentwake.handlers import background_result, background_work, cron_wake
from agentwake.store.dynamo import DynamoStore
from agentwake_local.functions import FunctionSpec, SqsEventSource
from agentwake_local.lambda_runtime import Invocation
from agentwake_local.poller import SqsPoller
from tests.support.aws import REGION, FakeLambdaContext, create_resources, drain
from tests.support.builders import seed_job, seed_session
from tests.support.process_state import forget_python_tools
from tests.support.receiver import CountingReceiver

TEST_TOOLS = Path(__file__).resolve().parents[1] / "support" / "entry_point_tools"
SESSION = "s-research"
#: the template's MaxReceiveCount for this test: three attempts, then the DLQ
ATTEMPTS = 3
SUB_STEPS = 3
RESEARCHER = {
    "name": "researcher",
    "description": "Researches a question with its tools.",
    "persona": "You are a careful researcher.",
    "providers": [{"type": "scripted", "id": "sub-a"}, {"type": "scripted", "id": "sub-b"}],
    "tools": ["word_count"],
    "max_steps": SUB_STEPS,
    "time_budget_s": 120,
    "mode": "background",
}
FIXED = [{"type": "scripted", "id": "sub-fixed", "script": [{"text": "Mars has two moons: Phobos and Deimos."}]}]


def wake_of(request: ChatRequest) -> dict[str, Any]:
    """What woke the main agent, as its system prompt shows it (DESIGN §2)."""
    system = request.messages[0].content
    return json.loads(system.split("What woke you:\n", 1)[1])


@dataclass
class World:
    """The scenario's models, as the function's provider factory builds them: the main agent acts on
    what woke it; the researcher's two providers are broken (its final step's malformed call first,
    then errors) until an operator puts a fixed one in the session's config."""

    calls: Counter[str] = field(default_factory=Counter)
    #: the steps each provider was asked for
    steps: dict[str, list[int]] = field(default_factory=dict)
    malformed_sent: bool = False

    def __call__(self, spec: dict[str, Any]) -> Any:
        world, pid = self, str(spec.get("id"))

        class Model:
            id = pid

            def complete(self, request: ChatRequest) -> ModelReply:
                world.calls[pid] += 1
                world.steps.setdefault(pid, []).append(request.step)
                if pid == "main":
                    return world.main(request)
                if pid.startswith("sub-") and pid != "sub-fixed":
                    return world.broken(request)
                return build_provider(spec).complete(request)

        return Model()

    def main(self, request: ChatRequest) -> ModelReply:
        wake = wake_of(request)
        if wake.get("trigger") != "background_task_finished":
            if request.step == 0:
                args = {"task": "How many moons has Mars?", "background": True}
                return _reply(tool=("ask_researcher", json.dumps(args)))
            return _reply(text="I asked the researcher; you will hear from me.")
        if request.step == 0:
            verdict = "succeeded" if wake["status"] == "succeeded" else "failed"
            text = f"The research {verdict}: {wake['result']}"
            return _reply(tool=("send_message_to_user", json.dumps({"text": text})))
        return _reply(text="Told the user.")

    def broken(self, request: ChatRequest) -> ModelReply:
        if request.tools:  # a step with tools: the same call, again and again
            return _reply(tool=("word_count", json.dumps({"text": "moons of mars"})))
        if not self.malformed_sent:  # the forced final step: a malformed call
            self.malformed_sent = True
            return _reply(tool=("word_count", '{"text": "moons'))
        raise TransientProviderError("internal server error (scenario)", code="ServerError")


def _reply(*, text: str = "", tool: tuple[str, str] | None = None) -> ModelReply:
    calls = (ToolCall(id="c1", name=tool[0], arguments=tool[1]),) if tool else ()
    return ModelReply(text=text, tool_calls=calls, usage=Usage(input_tokens=10, output_tokens=5))


@dataclass
class Stack:
    store: DynamoStore
    outputs: dict[str, str]
    world: World
    receiver: CountingReceiver
    work: SqsPoller
    results: SqsPoller

    def drain(self) -> None:
        """Run both functions until neither queue has a message left (retries included)."""
        for _ in range(20):
            worked = self.work.drain(timeout=120) + self.results.drain(timeout=120)
            if not worked:
                return
        raise AssertionError("the queues never drained")


def _poller(name: str, url: str, handler: Any) -> SqsPoller:
    """The local stack's event source mapping of ``handler`` on ``url`` (ReportBatchItemFailures)."""
    sqs = boto3.client("sqs", region_name=REGION)
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    source = SqsEventSource(
        name=name, queue_arn=arn, queue_url=url, batch_size=10, function_response_types=("ReportBatchItemFailures",)
    )
    function = FunctionSpec(name, name, f"arn:aws:lambda:{REGION}:123456789012:function:{name}", "h.h", Path("."))

    def invoke(event: Any) -> Invocation:
        try:
            return Invocation(function=name, request_id="r", response=handler(event, FakeLambdaContext()))
        except Exception as exc:  # the function raised: the poller keeps the whole batch
            return Invocation(function=name, request_id="r", error={"errorType": type(exc).__name__})

    return SqsPoller(function, source, sqs_client=sqs, invoke=invoke, visibility_timeout_override=0)


@pytest.fixture
def stack(aws_credentials: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    with mock_aws(), CountingReceiver() as receiver:
        res = create_resources(max_receive_count=ATTEMPTS)
        outputs = dict(res.stack.outputs)
        env = {
            **res.env(),
            "AGENTWAKE_WORK_QUEUE_URL": outputs["BackgroundWorkQueueUrl"],
            "AGENTWAKE_WORK_DLQ_URL": outputs["BackgroundWorkDLQUrl"],
            "AGENTWAKE_MAX_RECEIVE_COUNT": str(ATTEMPTS),
        }
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        monkeypatch.syspath_prepend(str(TEST_TOOLS))  # the word_count tool, installed as in a bundle
        forget_python_tools()
        bootstrap.reset_caches()
        world = World()
        bootstrap.wake_deps().provider_factory = world  # the functions' models: the scenario's
        store = bootstrap.store()
        seed_session(
            store,
            SESSION,
            providers=[{"type": "scripted", "id": "main"}],
            delivery={"type": "webhook", "url": receiver.url},
            tools=[{"type": "python", "name": "word_count"}],
            subagents=[RESEARCHER],
            max_repeated_tool_calls=10,
            retry_max_attempts=1,
        )
        seed_job(store, "j-research", SESSION)
        yield Stack(
            store=store,
            outputs=outputs,
            world=world,
            receiver=receiver,
            work=_poller("BackgroundWorkFunction", outputs["BackgroundWorkQueueUrl"], background_work.handler),
            results=_poller("BackgroundResultFunction", res.queue_url, background_result.handler),
        )
        bootstrap.reset_caches()
        forget_python_tools()


def _the_task(store: DynamoStore) -> str:
    run = store.records.get_run("cron:j-research:2026-12-03T04:00:00Z")
    assert run is not None and run.status == "succeeded"
    steps = store.journals.journal_entries(run.run_id)
    started = steps["000.tool.00"]["content"]
    assert started.startswith("started task "), started
    return started.split()[2].rstrip(":")


def _texts_about(store: DynamoStore, task_id: str) -> list[str]:
    """Every text the table holds anywhere that names the task (a scan of the whole table)."""
    client = store.table.db
    texts: list[str] = []
    for page in client.get_paginator("scan").paginate(TableName=store.table.name):
        for item in page["Items"]:
            values = [v["S"] for v in item.values() if "S" in v]
            if any(task_id in v for v in values):
                texts += values
    return texts


def ops_context(stack: Stack) -> Any:
    """The operator CLI's context on this stack (agentwake_ops, as `agentwake` builds it)."""
    from agentwake_ops.context import Discovery, build_context

    discovery = Discovery(source="env", description="moto", outputs=stack.outputs, region=REGION)
    return build_context(discovery, session=boto3.session.Session(region_name=REGION))


def dlq_listing(stack: Stack) -> list[Any]:
    """BackgroundWorkDLQ as `agentwake dlq list --queue work` lists it: its messages joined with their runs."""
    from agentwake_ops.dlq.select import list_messages

    return list(list_messages(ops_context(stack), "work"))


def peek(url: str) -> list[dict[str, Any]]:
    """The messages on a queue, left there (visible again at once)."""
    sqs = boto3.client("sqs", region_name=REGION)
    messages = drain(url)
    for m in messages:
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0)
    return messages


def fail_truthfully(stack: Stack) -> str:
    """The first half: the cron wake starts the subagent, whose run fails to the DLQ; the main agent
    is told. Returns the task id."""
    store, world = stack.store, stack.world
    # GIVEN a cron wake whose agent hands the research to the researcher in the background
    cron_wake.handler(
        {"job_id": "j-research", "scheduled_time": "2026-12-03T04:00:00Z", "session_id": SESSION},
        FakeLambdaContext(),
    )
    task_id = _the_task(store)
    # WHEN the functions run until the queues are empty
    stack.drain()
    run_id = subagent_run_id(task_id)
    # THEN the sub run repeated its tool call to its step limit, its final step returned a
    # malformed call, then every provider failed: three attempts, each with its failure recorded
    failures = store.ends.failures(run_id)
    assert [f.error_type for f in failures] == ["MaxStepsExceeded", "AllProvidersFailed", "AllProvidersFailed"]
    assert "did not finish within 3 steps" in failures[0].detail
    assert set(failures[-1].provider_errors) == {"sub-a", "sub-b"}
    run = store.records.get_run(run_id)
    assert run is not None and (run.kind, run.status, run.attempts) == ("subagent", "failed", ATTEMPTS)
    # completed model calls were not asked again: steps 0-2 once each, only the final step retried
    assert world.steps["sub-a"] == [0, 1, 2, 3, 3, 3] and world.steps["sub-b"] == [3, 3]
    # and its record is in BackgroundWorkDLQ (its reason: the run's failure records, by its run id)
    dead = peek(stack.outputs["BackgroundWorkDLQUrl"])
    assert [json.loads(m["Body"])["task_id"] for m in dead] == [task_id]
    # as an operator's `dlq list --queue work` reads it: the sub run, and why its last attempt failed
    listed = dlq_listing(stack)
    assert [(m.kind, m.run_id, m.error_type) for m in listed] == [("work:subagent", run_id, "AllProvidersFailed")]
    assert "sub-a: ServerError" in str(listed[0].error_detail)
    # the task completed failed, once, with the reason
    task = store.records.get_task(task_id)
    assert task is not None and task.status in ("failed", "woken")
    # the main agent was woken once for it, and its delivery says the research failed
    texts = stack.receiver.texts()
    assert texts[0] == "I asked the researcher; you will hear from me."
    assert len(texts) == 2 and texts[1].startswith("The research failed: the subagent researcher failed")
    woken = store.records.get_run(f"bg:{task_id}")
    assert woken is not None and woken.status == "succeeded"
    # a subagent writes no history: every entry is the main agent's (its runs' markers, notes, deliveries)
    assert {e.run_id for e in store.history.history(SESSION)} == {
        "cron:j-research:2026-12-03T04:00:00Z",
        f"bg:{task_id}",
    }
    return task_id


def test_a_background_subagent_that_fails_ends_in_the_dlq_and_the_agent_tells_the_user(stack: Stack) -> None:
    fail_truthfully(stack)
    assert max(stack.receiver.by_delivery_id().values()) == 1


def redrive(stack: Stack) -> None:
    """An operator's `dlq redrive --queue work --all`: each message back to BackgroundWorkQueue (a new
    message id, a new receive count)."""
    from agentwake_ops.dlq.act import redrive as dlq_redrive
    from agentwake_ops.dlq.select import Selection

    report = dlq_redrive(ops_context(stack), Selection(everything=True), queue="work")
    assert len(report.moved) == 1 and not report.failed


def fix_and_redrive(stack: Stack, task_id: str) -> None:
    """The second half: the provider fixed, the run redriven; it resumes from its journal."""
    store, world = stack.store, stack.world
    session = store.records.get_session(SESSION)
    assert session is not None
    fixed = [{**RESEARCHER, "providers": FIXED}]
    store.records.put_session(session.model_copy(update={"subagents": fixed}))
    redrive(stack)
    stack.drain()
    # THEN the sub run resumed from its journal: only its final step was asked, of the fixed provider
    assert world.steps["sub-fixed"] == [SUB_STEPS]
    run = store.records.get_run(subagent_run_id(task_id))
    assert run is not None and (run.status, run.attempts) == ("succeeded", ATTEMPTS + 1)


def test_a_redriven_subagent_resumes_from_its_journal_and_completes_its_task_succeeded(stack: Stack) -> None:
    task_id = fail_truthfully(stack)
    sent: list[dict[str, Any]] = []
    tasks = bootstrap.wake_deps().tasks
    assert tasks is not None
    finish = tasks.finish_task

    def spy(*args: Any, **kw: Any) -> str:
        sent.append({"args": args, **kw})
        return finish(*args, **kw)

    tasks.finish_task = spy  # type: ignore[method-assign]
    fix_and_redrive(stack, task_id)
    # THEN its DONE completed the task succeeded with the subagent's final answer
    assert [(c["args"][:3], c["subagent_name"]) for c in sent] == [
        ((task_id, "succeeded", "Mars has two moons: Phobos and Deimos."), "researcher")
    ]


def test_the_seed_scenario_end_to_end(stack: Stack) -> None:
    task_id = fail_truthfully(stack)
    # a scan of the whole table finds no "finished" / "here is the result" for that task (as a word:
    # the wake's field names background_task_finished / finished_at claim nothing)
    for text in _texts_about(stack.store, task_id):
        assert not re.search(r"\bfinished\b|here is the result", text, re.IGNORECASE), text
    fix_and_redrive(stack, task_id)
    # THEN the main agent was woken once more (outcome 2) and delivered the result
    texts = stack.receiver.texts()
    assert texts[2:] == ["The research succeeded: Mars has two moons: Phobos and Deimos."]
    woken = stack.store.records.get_run(f"bg:{task_id}:2")
    assert woken is not None and woken.status == "succeeded"
    # every delivery id once at the receiver
    assert set(stack.receiver.by_delivery_id().values()) == {1} and len(texts) == 3


def test_runs_show_and_runs_replay_read_a_sub_run(stack: Stack) -> None:
    from agentwake_ops.replay import replay
    from agentwake_ops.runs import run_summary, transcript

    # GIVEN the sub run that failed to the DLQ
    task_id = fail_truthfully(stack)
    run_id = subagent_run_id(task_id)
    # WHEN an operator shows it THEN they see its attempts' failures and the steps it journaled
    summary = run_summary(stack.store, run_id)
    assert summary.run is not None and summary.run.kind == "subagent"
    assert [f.error_type for f in summary.failures] == ["MaxStepsExceeded", "AllProvidersFailed", "AllProvidersFailed"]
    assert [s["key"] for s in summary.steps][:2] == ["000.reply", "000.tool.00"]
    assert sum(1 for e in transcript(summary) if e.kind == "failure") == ATTEMPTS
    # WHEN they replay it as it is, and with the fixed provider (what-if: the subagent's providers)
    as_is = replay(stack.store, run_id, provider_factory=stack.world)
    fixed = replay(stack.store, run_id, providers=FIXED, provider_factory=stack.world)
    # THEN as it is it fails again; fixed it answers from its journal, asking only the final step
    assert (as_is.state, as_is.error_type) == ("ERROR", "AllProvidersFailed")
    assert (fixed.state, fixed.final_text, fixed.replayed_steps) == (
        "DONE",
        "Mars has two moons: Phobos and Deimos.",
        SUB_STEPS,
    )
    # and neither wrote anything: the run is still failed, the task not completed again
    run = stack.store.records.get_run(run_id)
    assert run is not None and (run.status, run.attempts) == ("failed", ATTEMPTS)
    assert not peek(stack.outputs["BackgroundWorkQueueUrl"]) and len(stack.receiver.texts()) == 2


# --- the edges ----------------------------------------------------------------------------------


def _start_fixed(stack: Stack) -> str:
    """The cron wake starts the researcher, whose provider works; its work message is queued."""
    session = stack.store.records.get_session(SESSION)
    assert session is not None
    stack.store.records.put_session(session.model_copy(update={"subagents": [{**RESEARCHER, "providers": FIXED}]}))
    cron_wake.handler(
        {"job_id": "j-research", "scheduled_time": "2026-12-03T04:00:00Z", "session_id": SESSION},
        FakeLambdaContext(),
    )
    return _the_task(stack.store)


def test_a_retried_start_leaves_one_runnable_work_message_and_one_run(stack: Stack) -> None:
    from agentwake.agent.tools import ToolContext
    from agentwake.wake.start_task import start_background_task

    # GIVEN a started subagent task, and the same tool call's start retried (its run crashed before
    # journaling the result): the task's token is rotated and its work sent again
    task_id = _start_fixed(stack)
    ctx = ToolContext(run_id="cron:j-research:2026-12-03T04:00:00Z", session_id=SESSION)
    again = start_background_task(
        ctx,
        kind="subagent",
        name="researcher",
        args={"task": "How many moons has Mars?"},
        deadline_s=120,
        tasks=bootstrap.tasks(),
    )
    assert again.task_id == task_id and len(peek(stack.outputs["BackgroundWorkQueueUrl"])) == 2
    # WHEN both copies are run
    stack.drain()
    # THEN the stale copy ran nothing: one sub run, one model call, one completion, one wake
    assert stack.world.steps["sub-fixed"] == [0]
    run = stack.store.records.get_run(subagent_run_id(task_id))
    assert run is not None and (run.status, run.attempts) == ("succeeded", 1)
    assert stack.receiver.texts()[1:] == ["The research succeeded: Mars has two moons: Phobos and Deimos."]


def test_a_cancelled_task_never_runs_its_subagent(stack: Stack) -> None:
    # GIVEN a started subagent task, cancelled before its work ran
    task_id = _start_fixed(stack)
    # (as the lifecycle's cancel writes it: the task item's cancelled_at and status)
    from agentwake.store.codec import key
    from agentwake.store.keys import task_key

    stack.store.table.db.update_item(
        TableName=stack.store.table.name,
        Key=key(*task_key(task_id)),
        UpdateExpression="SET cancelled_at = :c, #s = :s",
        ExpressionAttributeNames={"#s": "status"},
        ExpressionAttributeValues={":c": {"S": "2026-12-03T04:00:01Z"}, ":s": {"S": "cancelled"}},
    )
    # WHEN its work message is run
    stack.drain()
    # THEN no model was asked, no run began, nothing completed the task and nobody was woken
    assert "sub-fixed" not in stack.world.steps
    assert stack.store.records.get_run(subagent_run_id(task_id)) is None
    assert stack.store.records.get_run(f"bg:{task_id}") is None and len(stack.receiver.texts()) == 1


def test_a_crash_after_the_completion_wakes_the_agent_once(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a sub run whose success write crashes once, after its task was completed
    task_id = _start_fixed(stack)
    ends = stack.store.ends
    commit = ends.commit_success
    crashed: list[str] = []

    def crash_once(**kw: Any) -> Any:
        if not crashed:
            crashed.append(kw["run_id"])
            raise RuntimeError("the Lambda died after the completion was sent")
        return commit(**kw)

    monkeypatch.setattr(ends, "commit_success", crash_once)
    # WHEN the record is retried
    stack.drain()
    # THEN the retry replayed the journal (the model asked once), the run succeeded on attempt 2, and
    # the main agent was woken once and delivered the answer once
    assert crashed == [subagent_run_id(task_id)] and stack.world.steps["sub-fixed"] == [0]
    run = stack.store.records.get_run(subagent_run_id(task_id))
    assert run is not None and (run.status, run.attempts) == ("succeeded", 2)
    assert stack.receiver.texts()[1:] == ["The research succeeded: Mars has two moons: Phobos and Deimos."]
    assert set(stack.receiver.by_delivery_id().values()) == {1}


def test_a_main_run_retried_after_the_hand_off_starts_one_subagent(stack: Stack) -> None:
    from tests.support.faults import Crash, around

    # GIVEN a cron wake that dies right after ask_researcher started the task, before its result
    # was journaled (the step is redone on the retry)
    session = stack.store.records.get_session(SESSION)
    assert session is not None
    stack.store.records.put_session(session.model_copy(update={"subagents": [{**RESEARCHER, "providers": FIXED}]}))
    crashed: list[str] = []

    def crash_once(put: Any, run_id: str, key: str, value: dict[str, Any], **kw: Any) -> None:
        if key == "000.tool.00" and run_id.startswith("cron:") and not crashed:
            crashed.append(value["content"])
            raise Crash("after the hand-off, before its result was journaled")
        put(run_id, key, value, **kw)

    around(stack.store.journals, "journal_put", crash_once)
    event = {"job_id": "j-research", "scheduled_time": "2026-12-03T04:00:00Z", "session_id": SESSION}
    with pytest.raises(Crash):
        cron_wake.handler(event, FakeLambdaContext())
    # WHEN Lambda retries the cron wake, and the functions run
    cron_wake.handler(event, FakeLambdaContext())
    stack.drain()
    # THEN the retried step started the same task again, and one subagent run ran it once
    task_id = _the_task(stack.store)
    assert crashed == [
        f"started task {task_id}: the subagent researcher works in the background; you will be "
        "woken with its answer (or why it failed) when it ends"
    ]
    assert stack.world.steps["sub-fixed"] == [0]
    run = stack.store.records.get_run(subagent_run_id(task_id))
    assert run is not None and (run.status, run.attempts) == ("succeeded", 1)
    # and the agent was woken once with its answer: every delivery id once
    assert stack.receiver.texts()[-1] == "The research succeeded: Mars has two moons: Phobos and Deimos."
    assert set(stack.receiver.by_delivery_id().values()) == {1} and len(stack.receiver.texts()) == 2
