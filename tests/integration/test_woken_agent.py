"""The woken agent earns the user's attention (issue 15, DESIGN §7): the final answer reaches the
user exactly once, runaways stop early, and the prompt is honest about what the user saw.

Real runs on moto, a real webhook receiver on 127.0.0.1 counting what arrives, scripted providers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from agentwake.agent.guards import REPEAT_FINAL_MESSAGE
from agentwake.agent.providers import build_provider
from agentwake.agent.runner import MAX_STEPS_MESSAGE
from agentwake.agent.types import ChatRequest, ModelReply
from agentwake.errors import RunFailed
from agentwake.settings import Settings
from agentwake.store.dynamo import DynamoStore
from agentwake.wake.background import wake_for_background_result
from agentwake.wake.messages import BackgroundResultMessage
from agentwake.wake.spec import WakeDeps
from agentwake_ops.runs import run_summary
from tests.support.aws import REGION, Resources
from tests.support.builders import seed_session, seed_task
from tests.support.faults import Crash, FaultyStore, around
from tests.support.receiver import CountingReceiver
from tests.support.store_writes import lease_holder
from tests.support.tasks import token_for

PLAIN_ANSWER = [{"text": "The research found that Aurora costs $0.12 per ACU-hour."}]


def send(text: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "send_message_to_user", "arguments": {"text": text}}]}


@pytest.fixture
def receiver() -> Iterator[CountingReceiver]:
    with CountingReceiver() as r:
        yield r


class Recording:
    """Wraps a provider and keeps every request it was asked (what the model saw)."""

    def __init__(self, inner: Any, seen: list[ChatRequest]) -> None:
        self.inner = inner
        self.id = inner.id
        self.seen = seen

    def complete(self, request: ChatRequest) -> ModelReply:
        self.seen.append(request)
        return self.inner.complete(request)  # type: ignore[no-any-return]


def deps_for(store: DynamoStore, seen: list[ChatRequest] | None = None) -> WakeDeps:
    factory = build_provider if seen is None else (lambda spec: Recording(build_provider(spec), seen))
    return WakeDeps(store=store, settings=Settings.from_env(), provider_factory=factory)


def message(task_id: str = "t1", session_id: str = "s1") -> BackgroundResultMessage:
    return BackgroundResultMessage(
        task_id=task_id,
        session_id=session_id,
        task_token=token_for(task_id),
        tool_name="web_research",
        status="succeeded",
        result_text="Aurora costs $0.12 per ACU-hour.",
        summary_name="Research",
        finished_at="2026-11-30T05:00:00Z",
    )


def setup(store: DynamoStore, receiver: CountingReceiver, script: list[dict[str, Any]], **session: Any) -> None:
    seed_session(
        store,
        "s1",
        providers=[{"type": "scripted", "id": "p", "script": script}],
        delivery={"type": "webhook", "url": receiver.url},
        **session,
    )
    seed_task(store, "t1", "s1")


def kinds(store: DynamoStore) -> list[str]:
    return [e.kind for e in store.history.history("s1")]


def note(store: DynamoStore) -> str:
    [entry] = [e for e in store.history.history("s1") if e.kind == "note"]
    return entry.content


# --- 1. the result reaches the user, exactly once ------------------------------------------------


def test_a_model_that_never_calls_the_send_tool_still_reaches_the_user_once(
    store: DynamoStore, receiver: CountingReceiver
) -> None:
    # GIVEN a session with the default deliver_final (if_nothing_sent) whose model answers in plain text
    setup(store, receiver, PLAIN_ANSWER)
    # WHEN its background result wakes it
    outcome = wake_for_background_result(message(), deps_for(store))
    # THEN its final answer was delivered once, under the run's own final delivery id
    assert outcome.status == "succeeded" and outcome.final_delivered
    assert receiver.by_delivery_id() == {"bg:t1#final": 1}
    assert receiver.texts() == ["The research found that Aurora costs $0.12 per ACU-hour."]
    # AND it is recorded in history as a delivery, before the marker and the note
    assert kinds(store) == ["delivery", "marker", "note"]
    [delivery] = [e for e in store.history.history("s1") if e.kind == "delivery"]
    assert delivery.delivery_id == "bg:t1#final" and delivery.run_id == "bg:t1"
    # AND the note says the final answer was sent to the user
    assert note(store).endswith("[the user was sent this final answer (delivery_id=bg:t1#final)]")
    # AND the run summary an operator reads lists it among the deliveries made
    assert [d["delivery_id"] for d in run_summary(store, "bg:t1").deliveries] == ["bg:t1#final"]


def test_a_metrics_error_between_the_final_send_and_the_commit_changes_no_outcome(
    store: DynamoStore, receiver: CountingReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the plain-text model, and metrics that fail (they are emitted after the final answer is
    # sent and before the commit that records it)
    setup(store, receiver, PLAIN_ANSWER)

    def broken(runner: Any) -> None:
        raise ValueError("metrics backend refused a dimension")

    monkeypatch.setattr("agentwake.wake.usage.emit_run_metrics", broken)
    # WHEN its background result wakes it
    outcome = wake_for_background_result(message(), deps_for(store))
    # THEN the run still commits: one delivery, recorded once, and the note
    assert outcome.status == "succeeded" and outcome.final_delivered
    assert receiver.by_delivery_id() == {"bg:t1#final": 1}
    assert kinds(store) == ["delivery", "marker", "note"]


@pytest.mark.parametrize("boundary", ["after_journal_before_commit", "inside_commit_not_landed"])
def test_a_crash_after_the_final_delivery_and_a_retry_still_deliver_it_once(
    boundary: str, resources: Resources, receiver: CountingReceiver, model_calls: Counter[str]
) -> None:
    # GIVEN the plain-text model, and a store that crashes once after the final answer was delivered
    faulty = FaultyStore(resources.table, client=boto3.client("dynamodb", region_name=REGION))
    setup(faulty, receiver, PLAIN_ANSWER)
    faulty.arm(boundary)
    deps = deps_for(faulty)
    # WHEN the run crashes there, then the trigger retries it
    with pytest.raises(Exception):  # noqa: B017 -- the injected crash or the failed transaction
        wake_for_background_result(message(), deps)
    assert receiver.by_delivery_id() == {"bg:t1#final": 1}
    outcome = wake_for_background_result(message(), deps)
    # THEN the retry succeeds, replays the model's answer, and does not send the final answer again
    assert outcome.status == "succeeded" and outcome.final_delivered
    assert receiver.by_delivery_id() == {"bg:t1#final": 1}
    assert model_calls["p"] == 1
    assert kinds(faulty) == ["delivery", "marker", "note"]


def test_a_crash_between_sending_and_recording_resends_the_same_delivery_id(
    resources: Resources, receiver: CountingReceiver
) -> None:
    # GIVEN a crash after the webhook got the final answer but before it was recorded
    faulty = FaultyStore(resources.table, client=boto3.client("dynamodb", region_name=REGION))
    setup(faulty, receiver, PLAIN_ANSWER)
    faulty.arm("after_send_before_journal")
    deps = deps_for(faulty)
    with pytest.raises(Exception) as crashed:  # noqa: B017
        wake_for_background_result(message(), deps)
    assert isinstance(crashed.value.__cause__, Crash)  # StepInterrupted: sent but not recorded
    # WHEN the run is retried
    wake_for_background_result(message(), deps)
    # THEN the receiver got the same delivery id twice (it drops the copy by X-Agentwake-Delivery-Id)
    assert receiver.by_delivery_id() == {"bg:t1#final": 2}
    # AND history holds it once
    assert kinds(faulty) == ["delivery", "marker", "note"]


class HardKill(BaseException):
    """The Lambda is killed (timeout, out of memory): no except clause runs, no failure is recorded."""


class KilledOnce(DynamoStore):
    """Kills the process once at a point between the model's final reply and the commit."""

    def __init__(self, *args: Any, at: str, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.at: str | None = at
        around(self.journals, "journal_put", self._journal_put)
        around(self.history, "delivery_record", self._delivery_record)
        around(self.ends, "commit_success", self._commit_success)

    def _kill(self, point: str) -> None:
        if self.at == point:
            self.at = None
            raise HardKill(point)

    def _journal_put(self, put: Any, run_id: str, key: str, value: dict[str, Any], **kw: Any) -> None:
        self._kill("reply_not_journaled")  # the model answered; nothing of it is written yet
        put(run_id, key, value, **kw)
        self._kill("reply_journaled_not_sent")

    def _delivery_record(self, build: Any, **kw: Any) -> list[tuple[str, Any]]:
        self._kill("sent_not_recorded")
        return build(**kw)  # type: ignore[no-any-return]

    def _commit_success(self, commit: Any, **kw: Any) -> Any:
        self._kill("commit_not_landed")
        return commit(**kw)


@pytest.mark.parametrize(
    ("point", "arrivals", "billed"),
    [
        ("reply_not_journaled", 1, 2),  # nothing was sent: the retry asks the model again and sends once
        ("reply_journaled_not_sent", 1, 1),  # the retry replays the reply and sends it once
        ("sent_not_recorded", 2, 1),  # the at-least-once edge: the same text under the same id
        ("commit_not_landed", 2, 1),
    ],
)
def test_a_hard_kill_between_the_final_reply_and_the_commit_sends_one_answer(
    point: str, arrivals: int, billed: int, resources: Resources, receiver: CountingReceiver, model_calls: Counter[str]
) -> None:
    # GIVEN the plain-text model, and a Lambda killed once at a point between its final reply and the commit
    store = KilledOnce(resources.table, client=boto3.client("dynamodb", region_name=REGION), at=point)
    setup(store, receiver, PLAIN_ANSWER)
    deps = deps_for(store)
    with pytest.raises(HardKill):
        wake_for_background_result(message(), deps)
    # WHEN the trigger retries the run (the killed holder's lease released, as if it expired)
    if lease_holder(store, "s1") is not None:
        store.table.db.delete_item(TableName=store.table.name, Key={"pk": {"S": "SESSION#s1"}, "sk": {"S": "LEASE"}})
    outcome = wake_for_background_result(message(), deps)
    # THEN the user got one answer: at most a copy of the same text under the same delivery id,
    # which the receiver drops by X-Agentwake-Delivery-Id
    assert outcome.status == "succeeded" and outcome.final_delivered
    assert receiver.by_delivery_id() == {"bg:t1#final": arrivals}
    assert set(receiver.texts()) == {PLAIN_ANSWER[0]["text"]}
    assert model_calls["p"] == billed
    # AND history holds it once, with the text the user saw
    [delivery] = [e for e in store.history.history("s1") if e.kind == "delivery"]
    assert delivery.content == PLAIN_ANSWER[0]["text"] and kinds(store) == ["delivery", "marker", "note"]


def test_never_sends_nothing(store: DynamoStore, receiver: CountingReceiver) -> None:
    # GIVEN deliver_final=never and a model that answers in plain text
    setup(store, receiver, PLAIN_ANSWER, deliver_final="never")
    # WHEN the run succeeds
    outcome = wake_for_background_result(message(), deps_for(store))
    # THEN nothing reached the user, and the note says the final answer was not delivered
    assert outcome.status == "succeeded" and not outcome.final_delivered
    assert receiver.received == []
    assert kinds(store) == ["marker", "note"]
    assert note(store).endswith(
        "[nothing from this run reached the user: this final answer was not sent to them (deliver_final is never)]"
    )


def test_if_nothing_sent_does_not_add_the_final_answer_to_a_delivery(
    store: DynamoStore, receiver: CountingReceiver
) -> None:
    # GIVEN the default policy and a model that messages the user itself
    setup(store, receiver, [send("Your research is done."), {"text": "I told the user."}])
    # WHEN the run succeeds
    wake_for_background_result(message(), deps_for(store))
    # THEN the user got only the model's message
    assert receiver.texts() == ["Your research is done."]


def test_always_sends_the_final_answer_even_after_another_delivery(
    store: DynamoStore, receiver: CountingReceiver
) -> None:
    # GIVEN deliver_final=always and a model that messages the user, then answers
    setup(
        store,
        receiver,
        [send("Your research is done."), {"text": "Summary: $0.12 per ACU-hour."}],
        deliver_final="always",
    )
    # WHEN the run succeeds
    outcome = wake_for_background_result(message(), deps_for(store))
    # THEN the user got the message and then the final answer, each once
    assert receiver.texts() == ["Your research is done.", "Summary: $0.12 per ACU-hour."]
    assert receiver.by_delivery_id() == {"bg:t1#0#0": 1, "bg:t1#final": 1}
    assert outcome.final_delivered
    assert kinds(store) == ["delivery", "delivery", "marker", "note"]


def test_the_forced_final_step_after_max_steps_is_delivered(store: DynamoStore, receiver: CountingReceiver) -> None:
    # GIVEN max_steps=2 and a model that keeps looking things up (never messaging the user) until
    # its tools are taken away, then answers
    lookup = {"tool_calls": [{"name": "lookup", "arguments": {"q": "aurora"}}]}
    lookup2 = {"tool_calls": [{"name": "lookup", "arguments": {"q": "aurora pricing"}}]}
    setup(store, receiver, [lookup, lookup2, {"text": "Aurora costs $0.12 per ACU-hour."}], max_steps=2)
    seen: list[ChatRequest] = []
    # WHEN the run reaches its step limit
    outcome = wake_for_background_result(message(), deps_for(store, seen))
    # THEN the third, tool-less step was forced
    assert len(seen) == 3 and seen[2].tools == () and seen[2].messages[-1].content == MAX_STEPS_MESSAGE
    # AND its answer was delivered to the user under if_nothing_sent
    assert outcome.status == "succeeded" and outcome.final_delivered
    assert receiver.texts() == ["Aurora costs $0.12 per ACU-hour."]


# --- 2. runaway guards ---------------------------------------------------------------------------


def test_identical_repeated_calls_stop_at_the_configured_count(
    store: DynamoStore, receiver: CountingReceiver, model_calls: Counter[str]
) -> None:
    # GIVEN a model that sends the very same message over and over (the reference framework's #8778),
    # with the default limit of 3 identical calls in a row
    same = send("Reminder: stand-up at 10.")
    setup(store, receiver, [same, same, same, same, {"text": "Stopped."}])
    seen: list[ChatRequest] = []
    # WHEN it is woken
    outcome = wake_for_background_result(message(), deps_for(store, seen))
    # THEN only the first two calls ran: the user got the message twice, not five times
    assert receiver.texts() == ["Reminder: stand-up at 10."] * 2
    # AND the third call was not run; the model was told it repeats itself
    steps = {s["key"]: s for s in run_summary(store, "bg:t1").steps}
    assert steps["002.tool.00"]["content"].startswith("error: not run: you made this same call")
    # AND the fourth was not run either, and the runner forced the final step (tools removed)
    assert steps["003.tool.00"]["content"].startswith("error: not run:")
    assert seen[4].tools == () and seen[4].messages[-1].content == REPEAT_FINAL_MESSAGE
    # AND the run ended after that final step: five model calls, not max_steps + 1
    assert outcome.status == "succeeded" and len(seen) == 5 and model_calls["p"] == 5


def test_the_fourth_delivery_of_a_run_is_refused_and_not_sent(store: DynamoStore, receiver: CountingReceiver) -> None:
    # GIVEN a model that sends four different messages in one run (cap: 3 per run, the default)
    script = [send("one"), send("two"), send("three"), send("four"), {"text": "done"}]
    setup(store, receiver, script)
    seen: list[ChatRequest] = []
    # WHEN it is woken
    wake_for_background_result(message(), deps_for(store, seen))
    # THEN three messages reached the user, the fourth did not
    assert receiver.texts() == ["one", "two", "three"]
    # AND the model got an error: result naming the cap for the fourth
    result = {s["key"]: s for s in run_summary(store, "bg:t1").steps}["003.tool.00"]["content"]
    assert result.startswith("error: this run already delivered 3 messages") and "max_deliveries_per_run=3" in result
    # AND each successful result told it how many it may still send
    tool_results = [m.content for m in seen[-1].messages if m.role == "tool"]
    assert tool_results[:3] == [
        "delivered (delivery_id=bg:t1#0#0; you may send 2 more in this run)",
        "delivered (delivery_id=bg:t1#1#0; you may send 1 more in this run)",
        "delivered (delivery_id=bg:t1#2#0; you may send 0 more in this run)",
    ]
    # AND history holds exactly the three delivered messages
    assert [e.content for e in store.history.history("s1") if e.kind == "delivery"] == ["one", "two", "three"]


def test_a_daily_delivery_cap_holds_across_runs(store: DynamoStore, receiver: CountingReceiver) -> None:
    # GIVEN a session allowed 2 deliveries a day, and runs that each send one message and answer
    seed_session(
        store,
        "s1",
        providers=[{"type": "scripted", "id": "p", "script": [send("daily report"), {"text": "sent"}]}],
        delivery={"type": "webhook", "url": receiver.url},
        max_deliveries_per_day=2,
    )
    for task in ("t1", "t2", "t3"):
        seed_task(store, task, "s1")
    deps = deps_for(store)
    # WHEN three runs come in on the same day
    for task in ("t1", "t2", "t3"):
        assert wake_for_background_result(message(task), deps).status == "succeeded"
    # THEN only two messages reached the user; the third run's send was refused, naming the cap
    assert receiver.texts() == ["daily report", "daily report"]
    refused = {s["key"]: s for s in run_summary(store, "bg:t3").steps}["000.tool.00"]["content"]
    assert refused.startswith("error: this session was sent 2 messages today") and "max_deliveries_per_day=2" in refused
    # AND the third run's final answer was not sent either: the note says nothing reached the user, and why
    notes = [e.content for e in store.history.history("s1") if e.kind == "note"]
    assert notes[2].endswith("(session setting max_deliveries_per_day=2); the message was not sent)]")


class CountedMeanwhile(DynamoStore):
    """Another run of the session counts a delivery right after this wake's batch read (before
    it takes the lease): counters read with the batch would be stale, those read under the lease are not."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        around(self.runs, "read_wake", self._read_wake)

    def _read_wake(self, read_wake: Any, **kw: Any) -> Any:
        read = read_wake(**kw)
        from agentwake.store.daily import DailyCounters

        add = DailyCounters(self.table, kw["session_id"]).add(deliveries=1)
        self.table.db.transact_write_items(TransactItems=[add])
        return read


def test_a_delivery_counted_between_the_wake_read_and_the_lease_counts(
    resources: Resources, receiver: CountingReceiver
) -> None:
    # GIVEN a session allowed 1 delivery a day whose model answers in plain text (deliver_final sends it),
    # and another run of the session that counts its delivery just after this wake read the counters
    store = CountedMeanwhile(resources.table, client=boto3.client("dynamodb", region_name=REGION))
    setup(store, receiver, PLAIN_ANSWER, max_deliveries_per_day=1)
    calls: list[str] = []
    store.table.db.meta.events.register("before-call.dynamodb", lambda model, **_: calls.append(model.name))
    # WHEN the wake runs
    outcome = wake_for_background_result(message(), deps_for(store))
    # THEN the run read the counters under its lease, as the other run left them: the day's one
    # delivery is spent, so the final answer is not sent
    assert outcome.status == "succeeded" and not outcome.final_delivered
    assert receiver.received == []
    assert note(store).endswith("(session setting max_deliveries_per_day=1); the message was not sent)]")
    # AND that cost the counters' one read, after the lease was taken, and no start transaction
    assert calls.count("TransactWriteItems") == 1 + 1, calls  # the other run's, the commit
    assert calls.count("GetItem") == 1 and calls.index("PutItem") < calls.index("GetItem"), calls


def test_a_run_budget_exceeded_is_a_permanent_failure_that_calls_no_model_again(
    store: DynamoStore, receiver: CountingReceiver, model_calls: Counter[str]
) -> None:
    # GIVEN a budget of 250 tokens per run and a model whose steps cost 100 + 100, then 200 tokens
    steps = [
        {**send("working on it"), "input_tokens": 80, "output_tokens": 20},
        {"tool_calls": [{"name": "lookup", "arguments": {}}], "input_tokens": 180, "output_tokens": 20},
        {"text": "done"},
    ]
    setup(store, receiver, steps, max_tokens_per_run=250)
    deps = deps_for(store)
    # WHEN it is woken
    with pytest.raises(RunFailed) as failed:
        wake_for_background_result(message(), deps)
    # THEN it stopped at step 1 (the second) with BudgetExceeded, which no retry can fix
    assert failed.value.failure_type == "BudgetExceeded" and not failed.value.retryable
    assert model_calls["p"] == 2
    run = store.records.get_run("bg:t1")
    assert run is not None and run.status == "failed" and run.last_error_type == "BudgetExceeded"
    assert "300 tokens" in (run.last_error or "") and "budget is 250" in (run.last_error or "")
    # AND the run record carries what it spent
    assert run.usage is not None and (run.usage["input_tokens"], run.usage["output_tokens"]) == (260, 40)
    # WHEN it is tried again without raising the budget
    with pytest.raises(RunFailed):
        wake_for_background_result(message(), deps)
    # THEN the model is not called again, and the user still got one message
    assert model_calls["p"] == 2
    assert receiver.texts() == ["working on it"]
    # WHEN the operator raises the budget and tries again
    seed_session(
        store,
        "s1",
        providers=[{"type": "scripted", "id": "p", "script": steps}],
        delivery={"type": "webhook", "url": receiver.url},
        max_tokens_per_run=1000,
    )
    outcome = wake_for_background_result(message(), deps)
    # THEN the run resumes at the step it stopped on, with one more model call
    assert outcome.status == "succeeded" and model_calls["p"] == 3


def test_a_daily_token_budget_counts_every_run_of_the_session(store: DynamoStore, receiver: CountingReceiver) -> None:
    # GIVEN a session with 150 tokens a day, whose runs cost 100 tokens each (a lookup, then an answer)
    script = [
        {"tool_calls": [{"name": "lookup", "arguments": {}}], "input_tokens": 90, "output_tokens": 10},
        {"text": "ok", "input_tokens": 0, "output_tokens": 0},
    ]
    seed_session(
        store,
        "s1",
        providers=[{"type": "scripted", "id": "p", "script": script}],
        delivery={"type": "webhook", "url": receiver.url},
        max_tokens_per_day=150,
        deliver_final="never",
    )
    seed_task(store, "t1", "s1")
    seed_task(store, "t2", "s1")
    deps = deps_for(store)
    # WHEN a first run spends 100
    assert wake_for_background_result(message("t1"), deps).status == "succeeded"
    # AND a second run on the same day is woken
    with pytest.raises(RunFailed) as failed:
        wake_for_background_result(message("t2"), deps)
    # THEN the second ends in BudgetExceeded once it goes over 150 today, naming the daily budget
    assert failed.value.failure_type == "BudgetExceeded"
    assert "200 tokens today" in failed.value.completion_text and "max_tokens_per_day" in failed.value.completion_text
    # AND the counter behind it is the session's item for today, updated with each journaled step
    from agentwake.store.daily import DailyCounters

    assert DailyCounters(store.table, "s1").read() == (200, 0)


# --- 4. the wake prompt stays honest -------------------------------------------------------------


def test_a_retry_replays_the_runs_deliveries_and_says_how_many_remain(
    resources: Resources, receiver: CountingReceiver
) -> None:
    # GIVEN a run that messaged the user once, then crashed before its next step
    faulty = FaultyStore(resources.table, client=boto3.client("dynamodb", region_name=REGION))
    setup(faulty, receiver, [send("first"), {"text": "done"}])
    faulty.arm("after_tool_result")
    seen: list[ChatRequest] = []
    deps = deps_for(faulty, seen)
    with pytest.raises(Crash):
        wake_for_background_result(message(), deps)
    first_system = seen[0].messages[0].content
    # WHEN it is retried
    wake_for_background_result(message(), deps)
    # THEN the first attempt's prompt offered all three deliveries and said the final answer rule
    assert "You may send at most 3 more messages to the user in this run." in first_system
    assert "If you send nothing, your final answer is sent to the user" in first_system
    # AND the retry's prompt says two remain and one was already sent in this run
    retry = seen[-1]
    assert (
        "You may send at most 2 more messages to the user in this run. 1 was already sent" in retry.messages[0].content
    )
    # AND that delivery is in the replayed context as the model's own call and its result
    assert any(
        m.role == "assistant" and m.tool_calls and m.tool_calls[0].name == "send_message_to_user"
        for m in retry.messages
    )
    assert any(m.role == "tool" and m.content.startswith("delivered (delivery_id=bg:t1#0#0") for m in retry.messages)
    # AND the user got the message once
    assert receiver.texts() == ["first"]


# --- round trips ---------------------------------------------------------------------------------


def test_daily_limits_cost_one_read_and_no_write(store: DynamoStore, receiver: CountingReceiver) -> None:
    # GIVEN two sessions with the same agent (a message, a lookup, an answer), one with daily limits
    script = [send("hello"), {"tool_calls": [{"name": "lookup", "arguments": {}}]}, {"text": "done"}]
    for session, extra in (("plain", {}), ("daily", {"max_tokens_per_day": 10_000, "max_deliveries_per_day": 10})):
        seed_session(
            store,
            session,
            providers=[{"type": "scripted", "id": "p", "script": script}],
            delivery={"type": "webhook", "url": receiver.url},
            **extra,
        )
    seed_task(store, "t-plain", "plain")
    seed_task(store, "t-daily", "daily")
    calls: list[str] = []
    store.table.db.meta.events.register("before-call.dynamodb", lambda model, **_: calls.append(model.name))
    deps = deps_for(store)
    # WHEN each is woken once
    wake_for_background_result(message("t-plain", "plain"), deps)
    plain, calls[:] = list(calls), []
    wake_for_background_result(message("t-daily", "daily"), deps)
    daily = list(calls)
    # THEN the daily limits cost one read (today's counters, under the lease) and no write: the token
    # counter rides on each step's journal write and the delivery counter on the delivery's own
    # transaction
    assert len(daily) == len(plain) + 1, (daily, plain)
    reads = ("BatchGetItem", "GetItem", "Query")
    assert [c for c in plain if c in reads] == ["BatchGetItem", "Query"]
    assert [c for c in daily if c in reads] == ["BatchGetItem", "Query", "GetItem"]
    writes = ("PutItem", "TransactWriteItems", "UpdateItem")
    assert sum(daily.count(w) for w in writes) == sum(plain.count(w) for w in writes)
    # AND the counters hold what the run spent and sent
    from agentwake.store.daily import DailyCounters

    tokens, deliveries = DailyCounters(store.table, "daily").read()
    assert deliveries == 1 and tokens == store.records.get_run("bg:t-daily").usage["total_tokens"]  # type: ignore[union-attr]


def test_what_woke_a_run_is_kept_by_its_retry_so_runs_killed_before_a_failure_record_replay(
    resources: Resources, receiver: CountingReceiver
) -> None:
    # GIVEN a Lambda killed (out of memory, a timeout) before its run wrote any record of a failure
    store = KilledOnce(resources.table, client=boto3.client("dynamodb", region_name=REGION), at="reply_not_journaled")
    setup(store, receiver, PLAIN_ANSWER)
    deps = deps_for(store)
    with pytest.raises(HardKill):
        wake_for_background_result(message(), deps)
    # THEN a first attempt keeps nothing of its wake (a run that succeeds at once never writes it)
    assert store.runs.get_wake("bg:t1") is None
    # WHEN the trigger retries it (the killed holder's lease released, as if it expired)
    if lease_holder(store, "s1") is not None:
        store.table.db.delete_item(TableName=store.table.name, Key={"pk": {"S": "SESSION#s1"}, "sk": {"S": "LEASE"}})
    wake_for_background_result(message(), deps)
    # THEN the retry's start kept what woke the run, for `runs replay` and `dlq redrive --verify`
    kept = store.runs.get_wake("bg:t1")
    assert kept is not None and kept[0] == "background"
    assert kept[1]["task_id"] == "t1", kept[1]
