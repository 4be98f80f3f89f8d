"""What-if replay (`agentwake runs replay`, `dlq redrive --verify`): a failed run re-run from its journal
with a changed config reaches the outcome a redrive would, while writing nothing to the table and
delivering nothing (DESIGN §7)."""

from __future__ import annotations

import json
import re
from typing import Any

import boto3
import pytest

from agentwake_ops import replay
from tests.e2e.conftest import Cli, Stack, cli_json
from tests.e2e.test_ops_dlq import DELIVERS_THEN_FAILS, make_failed_background_run
from tests.support.aws import REGION
from tests.support.builders import SCRIPTED_ARGS, session_config
from tests.support.receiver import CountingReceiver
from tests.support.store_writes import put_wake

#: the fix: step 0 comes from the journal; step 1 messages the user; step 2 ends the run
FIXED = {
    "type": "scripted",
    "id": "fixed",
    "script": [
        {"text": "(never asked: step 0 is in the journal)"},
        {"tool_calls": [{"name": "send_message_to_user", "arguments": {"text": "Here are the 3 offers."}}]},
        {"text": "Told the user about the offers."},
    ],
}


def table_items(stack: Stack) -> list[dict[str, Any]]:
    ddb = boto3.client("dynamodb", region_name=REGION)
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"TableName": stack.res.table}
    while True:
        resp = ddb.scan(**kwargs)
        items += resp["Items"]
        if "LastEvaluatedKey" not in resp:
            return sorted(items, key=lambda i: (i["pk"]["S"], i["sk"]["S"]))
        kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]


def item_count(stack: Stack) -> int:
    return int(boto3.client("dynamodb", region_name=REGION).scan(TableName=stack.res.table, Select="COUNT")["Count"])


@pytest.fixture
def receiver() -> Any:
    with CountingReceiver() as r:
        yield r


def failed_run_with_webhook(cli: Cli, stack: Stack, receiver: CountingReceiver, session: str) -> str:
    """A background run that delivers once by webhook, then fails on an auth error until dead-lettered."""
    task_id = make_failed_background_run(cli, stack, session, DELIVERS_THEN_FAILS)
    cli("sessions", "put", session, "--delivery", json.dumps({"type": "webhook", "url": receiver.url}))
    stack.poll_until_dead_lettered()
    assert stack.counts(stack.res.dlq_url) == (1, 0)
    assert receiver.texts() == ["Working on your research."]
    return task_id


def test_replay_with_a_fixed_provider_reports_done_without_writing_or_delivering(
    cli: Cli, stack: Stack, receiver: CountingReceiver
) -> None:
    # GIVEN a run that delivered once, then failed on an auth error on every attempt (now in the DLQ)
    task_id = failed_run_with_webhook(cli, stack, receiver, "s-replay")
    run_id = f"bg:{task_id}"
    before = table_items(stack)
    count_before = item_count(stack)

    # WHEN the operator replays it with a fixed provider
    result = cli("runs", "replay", run_id, "--provider", json.dumps(FIXED))

    # THEN the transcript shows step 0 reused from the journal and the new steps, and the outcome is DONE
    out = result.stdout
    assert re.search(r"step 0: model \[p\].*\(replayed from journal\)", out)
    assert re.search(r"step 1: model \[fixed\]", out)
    assert not re.search(r"step 1: model \[fixed\].*replayed", out)
    assert "state: DONE" in out
    assert "DONE" in out and "Here are the 3 offers." in out and "would be delivered" in out
    # AND nothing was written (same item count, same items) and nothing was delivered
    assert item_count(stack) == count_before
    assert table_items(stack) == before
    assert receiver.texts() == ["Working on your research."]
    assert stack.counts(stack.res.dlq_url) == (1, 0)
    assert stack.counts(stack.res.queue_url) == (0, 0)


def test_replay_json_names_what_would_be_delivered_and_what_was_already(
    cli: Cli, stack: Stack, receiver: CountingReceiver
) -> None:
    task_id = failed_run_with_webhook(cli, stack, receiver, "s-replay-json")
    # WHEN replayed as JSON with the fix
    data = json.loads(cli("runs", "replay", f"bg:{task_id}", "--provider", json.dumps(FIXED), "--json").stdout)
    # THEN the outcome, the reuse and the dry deliveries are explicit
    assert data["outcome"] == "DONE"
    assert data["original_status"] == "failed"
    assert data["replayed_steps"] == 1 and data["steps"] == 3
    assert [d["text"] for d in data["would_deliver"]] == ["Here are the 3 offers."]
    assert data["final_text"] == "Told the user about the offers."
    assert receiver.texts() == ["Working on your research."]


def test_replay_without_a_fix_reports_the_error_and_exits_1(cli: Cli, stack: Stack, receiver: CountingReceiver) -> None:
    task_id = failed_run_with_webhook(cli, stack, receiver, "s-replay-broken")
    count_before = item_count(stack)
    # WHEN replayed with the session's current (still broken) providers
    result = cli("runs", "replay", f"bg:{task_id}", expect=1)
    # THEN it says the redrive would fail, with the provider's error, and still changed nothing
    assert "ERROR (AllProvidersFailed)" in result.stdout
    assert "AccessDenied" in result.stdout
    assert "would fail again" in result.stdout
    assert item_count(stack) == count_before
    assert receiver.texts() == ["Working on your research."]


def test_redrive_verify_refuses_a_run_whose_replay_fails_then_redrives_once_fixed(
    cli: Cli, stack: Stack, receiver: CountingReceiver
) -> None:
    # GIVEN a dead-lettered run whose session is still broken
    failed_run_with_webhook(cli, stack, receiver, "s-verify")
    [row] = cli_json(cli, "dlq", "list")
    count_before = item_count(stack)

    # WHEN the operator redrives it with --verify
    refused = cli("dlq", "redrive", "--id", row["message_id"][:8], "--verify", expect=1)
    # THEN it refuses: nothing moved, nothing written, nothing delivered
    assert "refusing to redrive" in refused.stderr
    assert stack.counts(stack.res.dlq_url) == (1, 0)
    assert stack.counts(stack.res.queue_url) == (0, 0)
    assert item_count(stack) == count_before
    assert receiver.texts() == ["Working on your research."]

    # WHEN the session is fixed and the redrive is verified again
    cli("sessions", "put", "s-verify", "--provider", json.dumps(FIXED))
    moved = cli("dlq", "redrive", "--id", row["message_id"][:8], "--verify")
    assert "Redrive: moved 1, failed 0." in moved.stdout
    # THEN the real run resumes and succeeds: the first message is not sent again, the new one once
    ok, failed = stack.poll()
    assert len(ok) == 1 and failed == []
    assert receiver.texts() == ["Working on your research.", "Here are the 3 offers."]


def test_verify_passes_a_run_that_succeeded_since_without_asking_a_model(
    cli: Cli, stack: Stack, receiver: CountingReceiver
) -> None:
    """A succeeded run's commit no longer journals its last reply (issue 37): replaying one would ask
    the session's model for that step again, billed, perhaps failing and refusing the whole batch.
    A dead-lettered message whose run has succeeded since (its redriven copy succeeded and the
    delete failed, or a waiter's other copy ran it) is ok to redrive: the redrive changes nothing."""
    # GIVEN a dead-lettered run whose session is still broken, and its run succeeded since
    failed_run_with_webhook(cli, stack, receiver, "s-settled")
    [row] = cli_json(cli, "dlq", "list")
    boto3.client("dynamodb", region_name=REGION).update_item(
        TableName=stack.res.table,
        Key={"pk": {"S": f"RUN#{row['run_id']}"}, "sk": {"S": "RUN"}},
        UpdateExpression="SET #s = :s",
        ExpressionAttributeNames={"#s": "status"},
        ExpressionAttributeValues={":s": {"S": "succeeded"}},
    )
    asked: list[dict[str, Any]] = []

    def provider(spec: dict[str, Any]) -> Any:
        asked.append(spec)
        raise AssertionError("a succeeded run is not replayed")

    msg = type("Msg", (), {"message_id": row["message_id"], "run_id": row["run_id"]})()
    # WHEN its redrive is verified
    [verdict] = replay.verify(stack.store, [msg], provider_factory=provider)
    # THEN it passes, not replayed, saying why; no model was asked
    assert verdict.ok and verdict.outcome is None and asked == []
    assert "already succeeded" in verdict.reason


def test_redrive_force_overrides_a_failing_replay(cli: Cli, stack: Stack, receiver: CountingReceiver) -> None:
    failed_run_with_webhook(cli, stack, receiver, "s-force")
    [row] = cli_json(cli, "dlq", "list")
    # WHEN the operator forces it (with --json: the verdicts go to stderr, stdout stays JSON)
    result = cli("dlq", "redrive", "--id", row["message_id"][:8], "--verify", "--force", "--json")
    # THEN it is redriven although its replay fails
    assert "--force" in result.stderr and "refused" in result.stderr
    report = json.loads(result.stdout)
    assert len(report["moved"]) == 1 and report["failed"] == []
    assert stack.counts(stack.res.queue_url) == (1, 0)


def test_the_read_only_store_refuses_every_write(stack: Stack) -> None:
    # GIVEN the store a replay reads through
    ro = replay.read_only(stack.store)
    # WHEN anything tries to write THEN it is refused before reaching the table
    with pytest.raises(replay.WriteRefused, match="put_item"):
        ro.records.put_session(session_config("s-ro"))
    with pytest.raises(replay.WriteRefused, match="transact_write_items"):
        ro.history.record_delivery(run_id="bg:x", delivery_id="d", session_id="s", text="t")
    assert stack.store.records.get_session("s-ro") is None
    # AND reads still work
    assert ro.records.get_run("bg:missing") is None


def test_replay_of_an_unknown_run_is_a_clear_error(cli: Cli) -> None:
    result = cli("runs", "replay", "bg:task-nope", expect=1)
    assert "no run 'bg:task-nope'" in result.stderr


def test_sessions_put_takes_tools_and_refuses_a_bad_spec(cli: Cli, stack: Stack) -> None:
    tools = [{"type": "python", "name": "word_count"}]
    shown = cli_json(cli, "sessions", "put", "s-tools", *SCRIPTED_ARGS, "--tools", json.dumps(tools))
    assert shown["tools"] == tools
    assert stack.store.records.get_session("s-tools").tools == tools  # type: ignore[union-attr]
    bad = cli("sessions", "put", "s-tools", "--tools", '[{"type": "http", "name": "x"}]', expect=1)
    assert "invalid tool spec 'x'" in bad.stderr
    assert stack.store.records.get_session("s-tools").tools == tools  # type: ignore[union-attr]


#: the provider a replay is given: the journal's step 0, then a second ticket at step 1, then an answer
SECOND_TICKET = {
    "type": "scripted",
    "id": "fixed",
    "script": [
        {"text": "(journal)"},
        {"tool_calls": [{"name": "create_ticket", "arguments": {"title": "second"}}]},
        {"text": "Done."},
    ],
}


def failed_run_that_opened_a_ticket(cli: Cli, stack: Stack, httpserver: Any, session: str, **declared: Any) -> str:
    """A run whose step 0 called the HTTP tool ``create_ticket`` (declared with ``declared`` beside
    its name, description, schema and url), then failed on auth until dead-lettered; its task id.
    The tool's server has seen exactly that one request."""
    tool = {
        "type": "http",
        "name": "create_ticket",
        "description": "Open a ticket.",
        "parameters": {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]},
        "url": httpserver.url_for("/tickets"),
        **declared,
    }
    broken = {
        "type": "scripted",
        "id": "p",
        "script": [{"tool_calls": [{"name": "create_ticket", "arguments": {"title": "first"}}]}, {"error": "auth"}],
    }
    task_id = make_failed_background_run(cli, stack, session, [broken])
    cli("sessions", "put", session, "--tools", json.dumps([tool]))
    stack.poll_until_dead_lettered()
    assert len(httpserver.log) == 1
    return task_id


def test_replay_never_calls_a_side_effecting_tool(cli: Cli, stack: Stack, httpserver: Any) -> None:
    # GIVEN a run that created a ticket at step 0 (a side-effecting HTTP tool), then failed on auth
    httpserver.expect_request("/tickets").respond_with_json({"ticket": "T-1"})
    task_id = failed_run_that_opened_a_ticket(cli, stack, httpserver, "s-side", side_effect=True)
    # WHEN it is replayed with a provider that would open a second ticket at step 1
    fixed = SECOND_TICKET
    data = json.loads(cli("runs", "replay", f"bg:{task_id}", "--provider", json.dumps(fixed), "--json").stdout)
    # THEN the replay reaches DONE, lists the call it did not make, and the server saw no new request
    assert data["outcome"] == "DONE"
    assert [(c["tool"], json.loads(c["arguments"])) for c in data["side_effects_not_called"]] == [
        ("create_ticket", {"title": "second"})
    ]
    assert len(httpserver.log) == 1


def test_replay_and_verify_never_call_a_tool_declared_with_the_defaults(
    cli: Cli, stack: Stack, httpserver: Any
) -> None:
    # GIVEN a run that called an HTTP tool declared with the defaults (method POST, side_effect unset)
    # at step 0, then failed on auth until dead-lettered; the tool's server counts its requests
    httpserver.expect_request("/tickets", method="POST").respond_with_json({"ticket": "T-1"})
    task_id = failed_run_that_opened_a_ticket(cli, stack, httpserver, "s-default-post")
    fixed = SECOND_TICKET
    # WHEN it is replayed with a provider that opens a second ticket at step 1
    shown = cli("runs", "replay", f"bg:{task_id}", "--provider", json.dumps(fixed)).stdout
    data = json.loads(cli("runs", "replay", f"bg:{task_id}", "--provider", json.dumps(fixed), "--json").stdout)
    # THEN the replay reaches DONE, says which call it did not make, and the server saw no new request
    assert data["outcome"] == "DONE"
    assert [(c["tool"], json.loads(c["arguments"])) for c in data["side_effects_not_called"]] == [
        ("create_ticket", {"title": "second"})
    ]
    assert "no side-effecting tool is called" in shown
    assert "side-effecting tool create_ticket would be called at step 1 (not called)" in shown
    assert len(httpserver.log) == 1
    # AND once the session is fixed, `dlq redrive --verify` replays it without calling the tool either,
    # and says so in its verdict
    cli("sessions", "put", "s-default-post", "--provider", json.dumps(fixed))
    [row] = cli_json(cli, "dlq", "list")
    verified = cli("dlq", "redrive", "--id", row["message_id"][:8], "--verify", "--dry-run")
    said = " ".join((verified.stdout + verified.stderr).split())
    assert "DONE" in said and "side-effecting tool(s) not called: create_ticket (step 1)" in said
    assert len(httpserver.log) == 1


def test_the_wake_kept_for_replay_fits_a_dynamodb_item_whatever_its_size(stack: Stack) -> None:
    # GIVEN a wake far over DynamoDB's 400 KB once encoded (emoji: 4 bytes each)
    wake = {"trigger": "background_task_finished", "result": "😀" * 150_000, "tool_args": {"q": "x"}}
    # WHEN a run keeps it for replay THEN the write succeeds and reads back bounded, with a marker
    put_wake(stack.store, "bg:huge", kind="background", wake=wake)
    kind, kept = stack.store.runs.get_wake("bg:huge")  # type: ignore[misc]
    assert kind == "background" and kept["tool_args"] == {"q": "x"}
    assert kept["result"].startswith("😀") and "…[truncated" in kept["result"]
    assert len(json.dumps(kept, ensure_ascii=False).encode()) <= 300_000


def test_max_steps_and_persona_change_the_replay(cli: Cli, stack: Stack, receiver: CountingReceiver) -> None:
    task_id = failed_run_with_webhook(cli, stack, receiver, "s-knobs")
    # GIVEN --max-steps 1: step 0 is in the journal, so the next step is the final, tool-less one;
    # the fixed provider still calls a tool there, so the replay must end in MaxStepsExceeded
    data = json.loads(
        cli(
            "runs", "replay", f"bg:{task_id}", "--provider", json.dumps(FIXED), "--max-steps", "1", "--json", expect=1
        ).stdout
    )
    assert (data["outcome"], data["error_type"]) == ("ERROR", "MaxStepsExceeded")
    # AND --persona reaches the system prompt the new steps are asked with
    seen: list[str] = []

    def factory(spec: dict[str, Any]) -> Any:
        from agentwake.agent.providers import build_provider

        provider = build_provider(spec)
        original = provider.complete

        def complete(request: Any) -> Any:
            seen.append(request.messages[0].content)
            return original(request)

        provider.complete = complete  # type: ignore[method-assign]
        return provider

    outcome = replay.replay(
        stack.store, f"bg:{task_id}", providers=[FIXED], persona="You are a pirate.", provider_factory=factory
    )
    assert outcome.ok
    assert seen and all(prompt.startswith("You are a pirate.") for prompt in seen)


def test_a_failed_cron_run_replays_from_its_job_wake(cli: Cli, stack: Stack) -> None:
    from agentwake.errors import RunFailed
    from agentwake.settings import Settings
    from agentwake.wake.cron import wake_for_cron_job
    from agentwake.wake.messages import CronWakeInput
    from agentwake.wake.spec import WakeDeps
    from tests.support.builders import seed_job, seed_session

    # GIVEN a cron run that failed on an auth error
    seed_session(stack.store, "s-cron", providers=[{"type": "scripted", "id": "p", "script": [{"error": "auth"}]}])
    seed_job(stack.store, "job-replay", "s-cron")
    wake = CronWakeInput(job_id="job-replay", scheduled_time="2026-11-30T06:00:00Z")
    with pytest.raises(RunFailed):
        wake_for_cron_job(wake, WakeDeps(store=stack.store, settings=Settings.from_env()))
    count_before = item_count(stack)
    # WHEN it is replayed with a working provider
    fixed = {"type": "scripted", "id": "fixed", "script": [{"text": "Report sent."}]}
    data = json.loads(cli("runs", "replay", wake.run_id, "--provider", json.dumps(fixed), "--json").stdout)
    # THEN it reaches DONE from the wake the run kept, writing nothing
    assert (data["outcome"], data["kind"], data["final_text"]) == ("DONE", "cron", "Report sent.")
    assert item_count(stack) == count_before
    assert stack.store.records.get_run(wake.run_id).status == "failed"  # type: ignore[union-attr]


def test_a_replay_says_what_would_be_delivered_never_that_it_was(cli: Cli, stack: Stack) -> None:
    from agentwake.errors import RunFailed
    from agentwake.settings import Settings
    from agentwake.wake.cron import wake_for_cron_job
    from agentwake.wake.messages import CronWakeInput
    from agentwake.wake.spec import WakeDeps
    from tests.support.builders import seed_job, seed_session

    # GIVEN a cron run that failed, and a fix whose model answers in plain text (deliver_final sends it)
    seed_session(stack.store, "s-say", providers=[{"type": "scripted", "id": "p", "script": [{"error": "auth"}]}])
    seed_job(stack.store, "job-say", "s-say")
    wake = CronWakeInput(job_id="job-say", scheduled_time="2026-11-30T06:00:00Z")
    with pytest.raises(RunFailed):
        wake_for_cron_job(wake, WakeDeps(store=stack.store, settings=Settings.from_env()))
    fixed = {"type": "scripted", "id": "fixed", "script": [{"text": "Report sent."}]}
    # WHEN it is replayed
    out = cli("runs", "replay", wake.run_id, "--provider", json.dumps(fixed)).stdout
    # THEN the transcript says the final answer would be delivered, not that it was
    assert f"final answer would be delivered to the user (not sent) ({wake.run_id}#final)" in out, out
    assert "final answer delivered" not in out
    assert stack.store.history.history("s-say") == []


def test_a_run_that_failed_for_want_of_a_session_replays_once_the_session_exists(cli: Cli, stack: Stack) -> None:
    from agentwake.errors import RunFailed
    from agentwake.settings import Settings
    from agentwake.wake.background import wake_for_background_result
    from agentwake.wake.spec import WakeDeps
    from tests.support.builders import message, seed_task

    # GIVEN a run that failed before its first step: its session had no config
    seed_task(stack.store, "t-nosession", "s-missing")
    with pytest.raises(RunFailed):
        wake_for_background_result(
            message("t-nosession", "s-missing"), WakeDeps(store=stack.store, settings=Settings.from_env())
        )
    # WHEN the operator creates the session and replays the run
    cli("sessions", "put", "s-missing", *SCRIPTED_ARGS)
    data = json.loads(cli("runs", "replay", "bg:t-nosession", "--json").stdout)
    # THEN the replay reaches DONE from the wake the failed attempt kept
    assert data["outcome"] == "DONE" and data["replayed_steps"] == 0


# --- the replay is the wake, dry: the same prompt for the same run and journal ------------------


def recording_factory(asked: list[Any]) -> Any:
    """A provider factory whose providers record the message list of every request they are given."""
    from agentwake.agent.providers import build_provider

    def factory(spec: dict[str, Any]) -> Any:
        provider = build_provider(spec)
        original = provider.complete

        def complete(request: Any) -> Any:
            asked.append(request.messages)
            return original(request)

        provider.complete = complete  # type: ignore[method-assign]
        return provider

    return factory


def test_a_replay_asks_the_prompt_the_wake_asked_after_a_delivery(stack: Stack) -> None:
    from agentwake.errors import RunFailed
    from agentwake.settings import Settings
    from agentwake.wake.background import wake_for_background_result
    from agentwake.wake.spec import WakeDeps
    from tests.support.builders import message, seed_session, seed_task
    from tests.support.probes import seed_history

    # GIVEN a session with a history, and a background run that messages the user, then fails
    seed_session(stack.store, "s-same-bg", providers=DELIVERS_THEN_FAILS)
    seed_history(stack.store, "s-same-bg", 6)
    seed_task(stack.store, "t-same-bg", "s-same-bg")
    wake_asked: list[Any] = []
    deps = WakeDeps(store=stack.store, settings=Settings.from_env(), provider_factory=recording_factory(wake_asked))
    with pytest.raises(RunFailed):
        wake_for_background_result(message("t-same-bg", "s-same-bg"), deps)
    # WHEN the trigger retries it (its journal holds the delivery step) and then the operator replays it
    wake_asked.clear()
    with pytest.raises(RunFailed):
        wake_for_background_result(message("t-same-bg", "s-same-bg"), deps)
    replay_asked: list[Any] = []
    outcome = replay.replay(stack.store, "bg:t-same-bg", provider_factory=recording_factory(replay_asked))
    # THEN the first model call of each is asked with the very same message list: the wake's prompt,
    # the history window, and the journaled step that delivered (reused, not asked again)
    assert not outcome.ok and outcome.replayed_steps == 1
    assert wake_asked and replay_asked
    assert replay_asked[0] == wake_asked[0]
    prompt = wake_asked[0]
    assert prompt[0].role == "system" and sum(m.role == "tool" for m in prompt) == 1
    assert [d.text for d in outcome.already_delivered] == [] and outcome.would_deliver == []
    assert sum(m.role in ("user", "assistant") for m in prompt) > 6  # the history window is in it


def test_a_replay_asks_the_prompt_the_wake_asked_on_a_cron_run(stack: Stack) -> None:
    from agentwake.errors import RunFailed
    from agentwake.settings import Settings
    from agentwake.wake.cron import wake_for_cron_job
    from agentwake.wake.messages import CronWakeInput
    from agentwake.wake.spec import WakeDeps
    from tests.support.builders import seed_job, seed_session
    from tests.support.probes import seed_history

    # GIVEN a cron run that failed at its first model call
    seed_session(stack.store, "s-same-cron", providers=[{"type": "scripted", "id": "p", "script": [{"error": "auth"}]}])
    seed_history(stack.store, "s-same-cron", 4)
    seed_job(stack.store, "job-same", "s-same-cron")
    wake = CronWakeInput(job_id="job-same", scheduled_time="2026-11-30T06:00:00Z")
    wake_asked: list[Any] = []
    deps = WakeDeps(store=stack.store, settings=Settings.from_env(), provider_factory=recording_factory(wake_asked))
    with pytest.raises(RunFailed):
        wake_for_cron_job(wake, deps)
    # WHEN it is replayed with its session's providers
    replay_asked: list[Any] = []
    outcome = replay.replay(stack.store, wake.run_id, provider_factory=recording_factory(replay_asked))
    # THEN the replay's first model call is asked exactly what the wake's was
    assert not outcome.ok and outcome.kind == "cron"
    assert wake_asked and replay_asked
    assert replay_asked[0] == wake_asked[0]
    assert "job-same" in wake_asked[0][0].content  # what woke it is in the system prompt
