"""Slack, Telegram, WebSocket and SNS deliveries on `agentwake local up`'s stack (issue 34, "Must be
shown"), with the REAL adapters against fake platforms on 127.0.0.1 (tests/support/fake_slack.py,
fake_telegram.py; the stack's own WebSocket API and a plain RFC 6455 page; an SQS queue subscribed
to an SNS topic), every delivery counted at the receiver.

The stack's functions are given the fakes' API bases and their bot tokens as ``env:`` references
(``override_env``: what ``sam local invoke --env-vars`` does), over the template's defaults
(https://slack.com/api/, https://api.telegram.org/, no token).

The background-result queue is polled by the stack's own SQS poller, one poll at a time from the
test (the stack runs without its poller threads; the HTTP and WebSocket APIs are served as in "up"
mode). That is how a crash is injected on the local stack itself: its functions run in this
process, so a ``HardKill`` (a BaseException, as a Lambda killed by a timeout: no except clause
runs) raised right after the adapter's ``send`` returned — the platform has answered, nothing is
journaled yet — escapes the poll; the killed invocation's visibility timeout and lease run out
(shortened: the message is made visible, the lease deleted) and the next poll is the retry.

Slack's 429 is answered for real: a 1 s Retry-After is waited; a 3600 s one fails the run, and
the test moves the intent's ``not_before`` to the past instead of waiting an hour. The operator's
commands (``runs show``, ``runs replay``, ``dlq list/show/redrive``) are the CLI in-process, which
finds this stack by its state file.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentwake.delivery import Delivery
from agentwake.store.keys import lease_key, run_pk, sending_sk
from agentwake_client import ProductApiClient
from agentwake_local import timing
from agentwake_local.poller import PollResult
from agentwake_local.stack import LocalStackRuntime
from agentwake_ops.cli import app
from tests.e2e.test_busy_sessions import wait_until
from tests.e2e.test_local_product_api import producer_credentials
from tests.integration.test_approvals import FILES_A_TICKET, ToolServer, ticket_tool
from tests.support import fake_slack, fake_telegram
from tests.support.fake_slack import FakeSlack
from tests.support.fake_telegram import FakeTelegram
from tests.support.local_stack import local_stack, stack_store
from tests.support.ws_client import WsClient

NOTIFY_PREFIX = "agentwake-notify-"
SIGNING_SECRET = "0a1b2c3d4e5f60718293a4b5c6d7e8f9"
WEBHOOK_SECRET = "local-webhook-secret_42"
SAID = "Working on your research."
#: step 0 tells the user, step 1 answers: a run with one delivery (the final answer is kept back)
TELLS = [
    {"tool_calls": [{"name": "send_message_to_user", "arguments": {"text": SAID}}]},
    {"text": "Told the user."},
]
#: step 0 tells the user, step 1 fails on every attempt (a provider error after the delivery)
TELLS_THEN_FAILS = [TELLS[0], {"error": "auth"}]
#: the fix: step 1 ends the run
FIXED = {"type": "scripted", "id": "p2", "script": [{"text": "(replayed)"}, {"text": "All done."}]}


class HardKill(BaseException):
    """The Lambda is killed (timeout, out of memory): no except clause runs, no failure is recorded."""


def provider(script: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "scripted", "id": "p", "script": script}]


# --- the stack ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def slack() -> Iterator[FakeSlack]:
    with FakeSlack() as server:
        yield server


@pytest.fixture(scope="module")
def telegram() -> Iterator[FakeTelegram]:
    with FakeTelegram() as server:
        yield server


@pytest.fixture(scope="module")
def local(
    tmp_path_factory: pytest.TempPathFactory, slack: FakeSlack, telegram: FakeTelegram
) -> Iterator[LocalStackRuntime]:
    home: Path = tmp_path_factory.mktemp("agentwake-home")
    parameters = {"MaxReceiveCount": 2, "NotifyTopicPrefix": NOTIFY_PREFIX}
    # a failed record is visible again at once (the queue's timeout shortened, as `local up` does)
    with local_stack(home, parameters, timing=timing.immediate(0)) as runtime:
        # the "up" mode's APIs, without its poller threads: the test polls
        runtime.start_http_api()
        runtime.start_push_api()
        channels = {
            "AGENTWAKE_SLACK_API_URL": slack.url,
            "AGENTWAKE_SLACK_TOKEN_REF": "env:AGENTWAKE_SECRET_SLACK_BOT",
            "AGENTWAKE_SECRET_SLACK_BOT": slack.token,
            "AGENTWAKE_TELEGRAM_API_URL": telegram.url,
            "AGENTWAKE_TELEGRAM_TOKEN_REF": "env:AGENTWAKE_SECRET_TELEGRAM_BOT",
            "AGENTWAKE_SECRET_TELEGRAM_BOT": telegram.token,
            # the chats' callbacks: approval requests carry buttons, their clicks come back verified
            "AGENTWAKE_SLACK_SIGNING_SECRET_REF": "env:AGENTWAKE_SECRET_SLACK_SIGNING",
            "AGENTWAKE_SECRET_SLACK_SIGNING": SIGNING_SECRET,
            "AGENTWAKE_TELEGRAM_WEBHOOK_SECRET_REF": "env:AGENTWAKE_SECRET_TELEGRAM_WEBHOOK",
            "AGENTWAKE_SECRET_TELEGRAM_WEBHOOK": WEBHOOK_SECRET,
        }
        for logical_id in runtime.functions:
            runtime.override_env(logical_id, channels)
        yield runtime


@pytest.fixture(scope="module")
def api(local: LocalStackRuntime) -> ProductApiClient:
    assert local.api_url is not None
    return ProductApiClient(local.api_url, region=local.region, credentials=producer_credentials(local))


def agentwake(*args: str, expect: int = 0) -> Any:
    """``agentwake ARGS...`` in-process, finding the local stack by its state file (AGENTWAKE_HOME)."""
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == expect, f"agentwake {' '.join(args)}: {result.exit_code}\n{result.output}"
    return result


def agentwake_json(*args: str) -> Any:
    return json.loads(agentwake(*args, "--json").stdout)


def poll(local: LocalStackRuntime) -> PollResult:
    """One poll of BackgroundResultFunction's event source mapping: one batch, one invocation."""
    return local.poller("BackgroundResultFunction").poll_once()


def wake(api: ProductApiClient, session: str) -> str:
    """A task of ``session`` completes (its result message is on the queue): the run's id."""
    task = api.register_task(session, "research", {"topic": session})
    api.complete_task(task.task_id, task.task_token, "succeeded", "done", summary_name="Research")
    return f"bg:{task.task_id}"


def dead_letter(local: LocalStackRuntime, run_id: str) -> dict[str, Any]:
    """Poll until the results queue is empty (a failing record moves to the DLQ after its
    receives): the run's ``dlq list`` row."""
    poller = local.poller("BackgroundResultFunction")
    for _ in range(6):
        attrs = local.client("sqs").get_queue_attributes(
            QueueUrl=poller.queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        if attrs == {"ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesNotVisible": "0"}:
            break
        poll(local)
    rows = [r for r in agentwake_json("dlq", "list") if r["run_id"] == run_id]
    assert len(rows) == 1, f"{run_id} was not dead-lettered: {agentwake('dlq', 'list').output}"
    return dict(rows[0])


def expire_lease(local: LocalStackRuntime, session: str) -> None:
    """The killed holder's lease runs out."""
    table = stack_store(local).table
    table.db.delete_item(TableName=table.name, Key=table.key(*lease_key(session)))


@pytest.fixture
def kill_after_send(monkeypatch: pytest.MonkeyPatch) -> Callable[[type], None]:
    """Arm a channel class: its next ``send`` returns from the platform, then the Lambda dies."""

    def arm(cls: type) -> None:
        sent = cls.send  # type: ignore[attr-defined]

        def send(self: Any, delivery: Delivery) -> Any:
            answer = sent(self, delivery)
            monkeypatch.setattr(cls, "send", sent)  # once
            raise HardKill(f"killed after {type(self).__name__} sent {delivery.delivery_id}: {answer!r}")

        monkeypatch.setattr(cls, "send", send)

    return arm


def page_gone(local: LocalStackRuntime, session: str) -> None:
    """Wait for the closed page's $disconnect: the stack's functions run in this process and swap
    os.environ while they run, so the in-process CLI must not read its credentials meanwhile."""
    wait_until(lambda: not stack_store(local).connections.of_session(session), 30, "the $disconnect", 0.1)


def run_json(run_id: str) -> dict[str, Any]:
    return dict(agentwake_json("runs", "show", run_id))


def receipts(run_id: str) -> list[dict[str, Any]]:
    """The receipts ``agentwake runs show RUN --json`` lists, over the run's deliveries."""
    return [r for d in run_json(run_id)["deliveries"] for r in d["receipts"]]


def slack_ids(slack: FakeSlack, run_id: str) -> list[str]:
    return [d for d in slack.by_delivery_id().elements() if d.startswith(f"{run_id}#")]


# --- 1. the happy path of each channel ------------------------------------------------------------


def test_slack_posts_once_and_runs_show_keeps_its_ts(
    local: LocalStackRuntime, api: ProductApiClient, slack: FakeSlack
) -> None:
    api.put_session("ch-slack", providers=provider(TELLS), delivery={"type": "slack", "channel": "C0HAPPY"})
    run_id = wake(api, "ch-slack")
    result = poll(local)
    assert result.deleted and not result.failed, result
    # THEN Slack got the delivery once, in the channel, with its delivery id in the metadata
    assert slack_ids(slack, run_id) == [f"{run_id}#0#0"]
    [message] = [m for m in slack.messages if m["channel"] == "C0HAPPY"]
    assert message["text"] == SAID
    # AND `runs show` keeps Slack's ts as the receipt
    assert receipts(run_id) == [{"channel": "slack", "target": "slack", "where": "C0HAPPY", "ids": [message["ts"]]}]


def test_telegram_sends_once_and_runs_show_keeps_its_message_id(
    local: LocalStackRuntime, api: ProductApiClient, telegram: FakeTelegram
) -> None:
    api.put_session("ch-tg", providers=provider(TELLS), delivery={"type": "telegram", "chat_id": 1001})
    run_id = wake(api, "ch-tg")
    result = poll(local)
    assert result.deleted and not result.failed, result
    [message] = [m for m in telegram.messages if m["chat_id"] == 1001]
    assert message["text"] == SAID
    [receipt] = receipts(run_id)
    assert receipt["channel"] == "telegram" and receipt["ids"] == [str(message["message_id"])], receipt


def test_a_page_gets_the_delivery_once_and_runs_show_keeps_its_connection(
    local: LocalStackRuntime, api: ProductApiClient
) -> None:
    api.put_session("ch-ws", providers=provider(TELLS), delivery={"type": "websocket"})
    ticket = api.push_ticket("ch-ws")
    with WsClient.connect(f"{ticket['url']}?ticket={ticket['ticket']}") as page:
        [connection] = stack_store(local).connections.of_session("ch-ws")
        run_id = wake(api, "ch-ws")
        result = poll(local)
        assert result.deleted and not result.failed, result
        [frame] = page.frames(1, within=30)
        assert (frame["delivery_id"], frame["text"]) == (f"{run_id}#0#0", SAID)
        assert page.quiet_for(0.3) == []
    page_gone(local, "ch-ws")
    assert receipts(run_id) == [{"channel": "websocket", "target": "websocket", "ids": [connection]}]


def test_an_sns_subscriber_gets_the_delivery_once_and_runs_show_keeps_its_message_id(
    local: LocalStackRuntime, api: ProductApiClient
) -> None:
    sns, sqs = local.client("sns"), local.client("sqs")
    topic = sns.create_topic(Name=f"{NOTIFY_PREFIX}happy")["TopicArn"]
    queue = sqs.create_queue(QueueName="ch-sns-subscriber")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn)
    api.put_session("ch-sns", providers=provider(TELLS), delivery={"type": "sns", "topic_arn": topic})
    run_id = wake(api, "ch-sns")
    result = poll(local)
    assert result.deleted and not result.failed, result
    got = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, WaitTimeSeconds=0).get("Messages", [])
    [notification] = [json.loads(m["Body"]) for m in got]
    body = json.loads(notification["Message"])
    assert (body["delivery_id"], body["text"]) == (f"{run_id}#0#0", SAID)
    assert receipts(run_id) == [{"channel": "sns", "target": "sns", "where": topic, "ids": [notification["MessageId"]]}]


# --- 2. a crash after the send, a retry, a provider failure, a replay and a DLQ redrive ------------


def killed_then_retried(local: LocalStackRuntime, session: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The poll whose send is armed is killed; the killed invocation's visibility timeout and its
    holder's lease run out (shortened here: the message is made visible, the lease deleted)."""
    poller = local.poller("BackgroundResultFunction")
    handles: list[str] = []
    invoke = poller.invoke

    def recording(event: Any) -> Any:
        handles.extend(r["receiptHandle"] for r in event["Records"])
        return invoke(event)

    monkeypatch.setattr(poller, "invoke", recording)
    with pytest.raises(HardKill):
        poll(local)
    monkeypatch.setattr(poller, "invoke", invoke)
    assert handles, "the killed poll received nothing"
    for handle in handles:
        local.client("sqs").change_message_visibility(
            QueueUrl=poller.queue_url, ReceiptHandle=handle, VisibilityTimeout=0
        )
    expire_lease(local, session)


def replay_fix_redrive(local: LocalStackRuntime, api: ProductApiClient, session: str, run_id: str) -> None:
    """The run failed after its delivery (the provider errs at step 1) and sits in the DLQ: the
    operator replays it with a fixed provider, fixes the session and redrives; the run ends."""
    row = dead_letter(local, run_id)
    replayed = agentwake_json("runs", "replay", run_id, "--provider", json.dumps(FIXED))
    # the what-if replay reaches DONE with the fix and would deliver nothing (step 0 is journaled)
    assert (replayed["outcome"], replayed["would_deliver"], replayed["in_doubt"]) == ("DONE", [], []), replayed
    api.put_session(session, providers=[FIXED])
    agentwake("dlq", "redrive", "--id", row["message_id"])
    result = poll(local)
    assert result.deleted and not result.failed, result
    assert run_json(run_id)["run"]["status"] == "succeeded"


def test_slack_killed_after_its_post_is_found_by_lookup_and_never_posted_again(
    local: LocalStackRuntime,
    api: ProductApiClient,
    slack: FakeSlack,
    kill_after_send: Callable[[type], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agentwake.delivery.slack import SlackChannel

    # GIVEN a Slack session whose wake is killed right after Slack answered the post
    api.put_session(
        "ch-slack-kill", providers=provider(TELLS_THEN_FAILS), delivery={"type": "slack", "channel": "C0KILL"}
    )
    run_id = wake(api, "ch-slack-kill")
    kill_after_send(SlackChannel)
    killed_then_retried(local, "ch-slack-kill", monkeypatch)
    assert slack_ids(slack, run_id) == [f"{run_id}#0#0"]
    posts = slack.calls("chat.postMessage")
    # WHEN the queue retries the run (its step 1 then fails for good: the provider errs) THEN the
    # retry found the message by lookup and did not post it again
    row = dead_letter(local, run_id)
    assert row["run_id"] == run_id
    [message] = [m for m in slack.messages if m["channel"] == "C0KILL"]
    assert receipts(run_id) == [
        {"channel": "slack", "target": "slack", "where": "C0KILL", "ids": [message["ts"]], "found_by": "lookup"}
    ]
    assert slack.calls("conversations.history") >= 1
    # WHEN the operator replays it, fixes the provider and redrives it THEN Slack still has it once
    replay_fix_redrive(local, api, "ch-slack-kill", run_id)
    assert slack_ids(slack, run_id) == [f"{run_id}#0#0"] and slack.calls("chat.postMessage") == posts


def test_telegram_killed_after_its_send_is_dead_lettered_for_the_operator_and_never_sent_again(
    local: LocalStackRuntime,
    api: ProductApiClient,
    telegram: FakeTelegram,
    kill_after_send: Callable[[type], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agentwake.delivery.telegram import TelegramChannel

    # GIVEN a Telegram session (unconfirmed: dead_letter, the default) whose wake is killed right
    # after Telegram answered
    api.put_session("ch-tg-kill", providers=provider(TELLS_THEN_FAILS), delivery={"type": "telegram", "chat_id": 1002})
    run_id = wake(api, "ch-tg-kill")
    sent = f"{run_id}#0#0"
    kill_after_send(TelegramChannel)
    killed_then_retried(local, "ch-tg-kill", monkeypatch)

    def in_chat() -> list[dict[str, Any]]:
        return [m for m in telegram.messages if m["chat_id"] == 1002]

    assert [m["text"] for m in in_chat()] == [SAID]
    requests = telegram.requests
    # WHEN the queue retries the run THEN nothing is sent again: it is dead-lettered at once as
    # DeliveryUnconfirmed, naming the chat and the way out
    result = poll(local)
    assert result.deleted and not result.failed, result  # handled by dead-lettering, no receive spent
    row = dead_letter(local, run_id)
    shown = agentwake_json("dlq", "show", row["message_id"])
    assert shown["run_id"] == run_id and shown["error_type"] == "DeliveryUnconfirmed", shown
    assert "in 1002" in shown["error_detail"] and f"--delivered {sent}" in shown["error_detail"], shown
    assert [d["delivery_id"] for d in shown["in_doubt"]] == [sent] and telegram.requests == requests
    # WHEN the operator saw it in the chat and redrives with --delivered
    out = agentwake("dlq", "redrive", "--id", row["message_id"], "--delivered", sent).stdout
    assert "moved 1" in out, out
    # THEN the marker has the operator's receipt; the run goes on (and fails at step 1, the provider)
    assert receipts(run_id) == [{"channel": "telegram", "target": "telegram", "where": "1002", "found_by": "operator"}]
    # AND after a replay, the fix and a redrive the chat still has the message once
    replay_fix_redrive(local, api, "ch-tg-kill", run_id)
    assert [m["text"] for m in in_chat()] == [SAID] and telegram.requests == requests


def test_a_page_gets_a_resent_frame_after_a_kill_and_keeps_one_message_by_delivery_id(
    local: LocalStackRuntime,
    api: ProductApiClient,
    kill_after_send: Callable[[type], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agentwake.delivery.websocket import WebSocketChannel

    # GIVEN a page of a WebSocket session whose wake is killed right after the frame was posted
    api.put_session("ch-ws-kill", providers=provider(TELLS_THEN_FAILS), delivery={"type": "websocket"})
    ticket = api.push_ticket("ch-ws-kill")
    with WsClient.connect(f"{ticket['url']}?ticket={ticket['ticket']}") as page:
        [connection] = stack_store(local).connections.of_session("ch-ws-kill")
        run_id = wake(api, "ch-ws-kill")
        kill_after_send(WebSocketChannel)
        killed_then_retried(local, "ch-ws-kill", monkeypatch)
        assert [f["delivery_id"] for f in page.frames(1, within=30)] == [f"{run_id}#0#0"]
        # WHEN the queue retries (the receiver de-duplicates: the frame is posted again), the run
        # fails at step 1 (the provider), is replayed, fixed and redriven
        replay_fix_redrive(local, api, "ch-ws-kill", run_id)
        page.quiet_for(0.5)  # anything late is counted below
        frames = [json.loads(m) for m in page.received]
    page_gone(local, "ch-ws-kill")
    # THEN the page got the frame twice under one delivery id, and nothing more: it shows it once
    assert [f["delivery_id"] for f in frames] == [f"{run_id}#0#0"] * 2, frames
    assert {f["delivery_id"]: f["text"] for f in frames} == {f"{run_id}#0#0": SAID}
    assert receipts(run_id) == [{"channel": "websocket", "target": "websocket", "ids": [connection]}]


# --- 3. Slack's 429 ----------------------------------------------------------------------------


def test_slack_429_with_a_short_retry_after_is_retried_once_after_the_wait(
    local: LocalStackRuntime, api: ProductApiClient, slack: FakeSlack
) -> None:
    # GIVEN Slack answers the first post with 429 Retry-After: 1
    api.put_session("ch-429", providers=provider(TELLS), delivery={"type": "slack", "channel": "C0429"})
    run_id = wake(api, "ch-429")
    posts = slack.calls("chat.postMessage")
    slack.then("chat.postMessage", fake_slack.ratelimited(1))
    # WHEN the wake runs
    started = time.monotonic()
    result = poll(local)
    # THEN it waited the second and posted once: two requests, one message, one receipt
    assert result.deleted and not result.failed, result
    assert time.monotonic() - started >= 1.0
    assert slack.calls("chat.postMessage") - posts == 2 and slack_ids(slack, run_id) == [f"{run_id}#0#0"]
    assert [r["where"] for r in receipts(run_id)] == ["C0429"]


def test_slack_429_longer_than_the_time_left_fails_the_run_transiently_and_resumes_once(
    local: LocalStackRuntime, api: ProductApiClient, slack: FakeSlack
) -> None:
    # GIVEN Slack answers the first post with 429 Retry-After: 3600 (more than the wake has)
    api.put_session("ch-429-long", providers=provider(TELLS), delivery={"type": "slack", "channel": "C0WAIT"})
    run_id = wake(api, "ch-429-long")
    sent = f"{run_id}#0#0"
    slack.then("chat.postMessage", fake_slack.ratelimited(3600))
    # WHEN the wake runs THEN the run fails transiently (the queue keeps the record), nothing posted
    result = poll(local)
    assert result.failed and not result.deleted, result
    run = run_json(run_id)
    assert [f["error_type"] for f in run["failures"]] == ["ChannelThrottled"], run["failures"]
    assert slack_ids(slack, run_id) == [] and run["deliveries"] == []
    # AND the intent keeps when Slack may be asked again: the retry before it asks nothing
    table = stack_store(local).table
    intent = table.read_item(run_pk(run_id), sending_sk(sent, "slack"))
    assert intent is not None and intent["state"]["S"] == "not_sent" and "not_before" in intent, intent
    posts = slack.calls("chat.postMessage")
    # WHEN the wait is over (not_before moved to the past: no test waits an hour) and the queue retries
    table.db.update_item(
        TableName=table.name,
        Key=table.key(run_pk(run_id), sending_sk(sent, "slack")),
        UpdateExpression="SET not_before = :past",
        ExpressionAttributeValues={":past": {"S": "2026-01-01T00:00:00Z"}},
    )
    result = poll(local)
    # THEN it posts exactly once
    assert result.deleted and not result.failed, result
    assert slack_ids(slack, run_id) == [sent] and slack.calls("chat.postMessage") == posts + 1
    assert run_json(run_id)["run"]["status"] == "succeeded"


# --- 4. a permanent error: the DLQ with the platform's reason -------------------------------------


def test_slack_channel_not_found_is_dead_lettered_at_once_with_slack_s_reason(
    local: LocalStackRuntime, api: ProductApiClient, slack: FakeSlack
) -> None:
    api.put_session("ch-gone", providers=provider(TELLS), delivery={"type": "slack", "channel": "C0GONE"})
    run_id = wake(api, "ch-gone")
    slack.then("chat.postMessage", fake_slack.error("channel_not_found"))
    result = poll(local)
    # handled by dead-lettering it at its first receive: no retry is spent on it
    assert result.deleted and not result.failed, result
    row = dead_letter(local, run_id)
    shown = agentwake_json("dlq", "show", row["message_id"])
    assert shown["error_type"] == "ChannelRefused" and "channel_not_found" in shown["error_detail"], shown
    assert shown["attempts"] == 1, shown  # dead-lettered at its first receive
    assert slack_ids(slack, run_id) == []
    # WHEN the bot is invited (the fake answers again) and the operator redrives THEN it posts once
    agentwake("dlq", "redrive", "--id", row["message_id"])
    result = poll(local)
    assert result.deleted and not result.failed, result
    assert slack_ids(slack, run_id) == [f"{run_id}#0#0"]


def test_telegram_blocked_is_dead_lettered_at_once_with_telegram_s_reason(
    local: LocalStackRuntime, api: ProductApiClient, telegram: FakeTelegram
) -> None:
    api.put_session("ch-blocked", providers=provider(TELLS), delivery={"type": "telegram", "chat_id": 1003})
    run_id = wake(api, "ch-blocked")
    telegram.then(fake_telegram.error(403, "Forbidden: bot was blocked by the user"))
    result = poll(local)
    assert result.deleted and not result.failed, result
    row = dead_letter(local, run_id)
    shown = agentwake_json("dlq", "show", row["message_id"])
    assert shown["error_type"] == "ChannelRefused" and "blocked" in shown["error_detail"], shown
    assert shown["attempts"] == 1, shown
    assert [m for m in telegram.messages if m["chat_id"] == 1003] == []


# --- 4. deciding in the chat: a click comes back through the stack's own HTTP API -------------------


def post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    """An unsigned POST, as Slack and Telegram send (no SigV4)."""
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read()


def test_a_signed_slack_click_on_the_local_stack_approves_and_the_tool_runs_once(
    local: LocalStackRuntime, api: ProductApiClient, slack: FakeSlack
) -> None:
    # GIVEN a session on Slack whose run parks on a gated tool (a server on 127.0.0.1)
    tool = ToolServer()
    try:
        api.put_session(
            "ch-approve",
            providers=provider(FILES_A_TICKET),
            tools=[ticket_tool(tool.url)],
            delivery={"type": "slack", "channel": "C0CLICK"},
        )
        run_id = wake(api, "ch-approve")
        result = poll(local)
        assert result.deleted and not result.failed, result
        assert stack_store(local).records.get_run(run_id).status == "parked"  # type: ignore[union-attr]
        # THEN the request was posted with its buttons
        [message] = [m for m in slack.messages if m["channel"] == "C0CLICK"]
        [actions] = [b for b in message["blocks"] if b["type"] == "actions"]
        approve = next(e for e in actions["elements"] if e["action_id"] == "agentwake_approve")
        payload = {
            "type": "block_actions",
            "user": {"id": "U0LOCAL", "username": "dana"},
            "container": {"type": "message", "message_ts": message["ts"], "channel_id": "C0CLICK"},
            "channel": {"id": "C0CLICK"},
            "message": {"ts": message["ts"], "text": message["text"]},
            "actions": [{"type": "button", "action_id": "agentwake_approve", "value": approve["value"]}],
        }
        body = urllib.parse.urlencode({"payload": json.dumps(payload)}).encode()
        url = f"{local.api_url}/channels/slack/interactions"
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        # WHEN a click comes unsigned, or signed with another secret THEN 401, nothing decided
        stamp = str(int(time.time()))
        forged = hmac.new(b"guess", f"v0:{stamp}:".encode() + body, hashlib.sha256).hexdigest()
        for headers in (form, {**form, "X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": f"v0={forged}"}):
            status, answer = post(url, body, headers)
            assert status == 401 and SIGNING_SECRET.encode() not in answer
        assert stack_store(local).approvals.get(approve["value"]).state == "pending"  # type: ignore[union-attr]
        # AND the product API's own routes still want SigV4
        assert post(f"{local.api_url}/approvals/{approve['value']}/decision", b"{}", {})[0] == 403
        # WHEN Dana's click comes signed with the app's signing secret
        mac = hmac.new(SIGNING_SECRET.encode(), f"v0:{stamp}:".encode() + body, hashlib.sha256).hexdigest()
        status, _ = post(url, body, {**form, "X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": f"v0={mac}"})
        assert status == 200
        # THEN it is approved by her; the nudge re-queues the run, which resumes and calls the tool once
        decided = stack_store(local).approvals.get(approve["value"])
        assert decided is not None and (decided.state, decided.decided_by) == ("approved", "slack:U0LOCAL (@dana)")
        assert not local.poller("BackgroundWorkFunction").poll_once().failed
        result = poll(local)
        assert result.deleted and not result.failed, result
        assert stack_store(local).records.get_run(run_id).status == "succeeded"  # type: ignore[union-attr]
        assert tool.calls == Counter({f"{run_id}#0#0": 1})
        # AND the message shows the decision, its buttons gone
        [shown] = [m for m in slack.messages if m["channel"] == "C0CLICK" and m["ts"] == message["ts"]]
        assert [b["type"] for b in shown["blocks"]] == ["section", "context"]
    finally:
        tool.close()


def test_a_telegram_update_without_the_webhook_secret_is_refused_on_the_local_stack(
    local: LocalStackRuntime,
) -> None:
    update = json.dumps({"update_id": 1, "callback_query": {"id": "q", "data": "aw:a:apr-0"}}).encode()
    url = f"{local.api_url}/channels/telegram/updates"
    status, answer = post(url, update, {"Content-Type": "application/json", "X-Telegram-Bot-Api-Secret-Token": "x"})
    assert status == 401 and WEBHOOK_SECRET.encode() not in answer
