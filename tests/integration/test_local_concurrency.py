"""The local stack runs like Lambda: concurrently (issue 11).

- moto's server stays correct under concurrent requests (its backends are serialized);
- invocations that need the same environment overlap, a different environment waits its turn;
- an SQS event source runs up to its MaximumConcurrency invocations at once, never more;
- one-time ``at(...)`` schedules fire once, when due, and delete themselves (the local scheduler, ticked
  with the time the test gives it).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agentwake_local import timing
from agentwake_local.functions import FunctionSpec, SqsEventSource
from agentwake_local.lambda_runtime import EnvironmentGate, Invocation
from agentwake_local.poller import SqsPoller
from agentwake_local.scheduler import LocalScheduler
from agentwake_local.server import MotoServer, boto3_session


@pytest.fixture(scope="module")
def server() -> Iterator[MotoServer]:
    with MotoServer() as s:
        yield s


def client(server: MotoServer, service: str, **config: Any) -> Any:
    from botocore.config import Config

    return boto3_session().client(
        service, endpoint_url=server.endpoint_url, region_name="us-east-1", config=Config(**config)
    )


def test_concurrent_transactions_on_the_local_server_all_land(server: MotoServer) -> None:
    # GIVEN a table on the local moto server
    ddb = client(server, "dynamodb")
    ddb.create_table(
        TableName="concurrent",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    # with enough items that moto's copy of the tables (its transaction rollback) takes a while
    for start in range(0, 500, 25):
        ddb.batch_write_item(
            RequestItems={
                "concurrent": [
                    {"PutRequest": {"Item": {"pk": {"S": "seed"}, "sk": {"S": f"{i:05d}"}, "pad": {"S": "x" * 200}}}}
                    for i in range(start, start + 25)
                ]
            }
        )
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        own = client(server, "dynamodb", retries={"total_max_attempts": 1})  # an HTTP 500 is not retried away
        for i in range(25):
            try:
                own.transact_write_items(
                    TransactItems=[
                        {
                            "Put": {
                                "TableName": "concurrent",
                                "Item": {"pk": {"S": f"w{n}"}, "sk": {"S": f"{i:03d}#{k}"}},
                                "ConditionExpression": "attribute_not_exists(pk)",
                            }
                        }
                        for k in range(2)
                    ]
                )
            except BaseException as exc:  # collected: the assertion below names it
                errors.append(exc)

    # WHEN eight writers run transactions at the same time (what five Lambda pollers do)
    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)

    # THEN every transaction landed: no HTTP 500 "dictionary changed size during iteration"
    assert errors == []
    count = ddb.scan(TableName="concurrent", Select="COUNT")["Count"]
    assert count == 500 + 8 * 25 * 2


def test_invocations_with_one_environment_overlap_and_another_waits_its_turn() -> None:
    # GIVEN the gate, and an invocation inside it with environment A
    gate = EnvironmentGate()
    env_a = {"I11_GATE": "a", "AWS_LAMBDA_FUNCTION_NAME": "first"}
    same_a = {"I11_GATE": "a", "AWS_LAMBDA_FUNCTION_NAME": "second"}  # another function, same config
    env_b = {"I11_GATE": "b"}
    changes: list[str | None] = []
    assert gate.enter(env_a, lambda: changes.append(os.environ.get("I11_GATE"))) is None

    # WHEN an invocation of another function with the same configuration arrives
    joined = threading.Event()
    threading.Thread(target=lambda: (gate.enter(same_a, None), joined.set())).start()
    # THEN it runs at once, alongside
    assert joined.wait(30)

    # WHEN an invocation needing environment B arrives
    entered_b = threading.Event()
    seen_b: list[str | None] = []

    def run_b() -> None:
        gate.enter(env_b, lambda: changes.append(os.environ.get("I11_GATE")))
        seen_b.append(os.environ.get("I11_GATE"))
        entered_b.set()
        gate.leave()

    threading.Thread(target=run_b).start()
    # THEN it waits while A's invocations run, and runs once both left, with its own environment
    assert not entered_b.wait(0.5)
    assert os.environ.get("I11_GATE") == "a"
    gate.leave()
    assert not entered_b.wait(0.5)
    gate.leave()
    assert entered_b.wait(30)
    assert seen_b == ["b"]
    # AND the environment was set and restored around each turn, the hook told every time
    assert "I11_GATE" not in os.environ
    assert changes == ["a", None, "b", None]


def test_an_sqs_event_source_runs_up_to_its_maximum_concurrency(server: MotoServer, tmp_path: Path) -> None:
    # GIVEN a queue with 12 messages, and an event source with MaximumConcurrency 3, batch size 1
    sqs = client(server, "sqs")
    url = sqs.create_queue(QueueName="i11-concurrency", Attributes={"VisibilityTimeout": "60"})["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    for n in range(12):
        sqs.send_message(QueueUrl=url, MessageBody=str(n))
    source = SqsEventSource(name="Work", queue_arn=arn, queue_url=url, batch_size=1, maximum_concurrency=3)
    function = FunctionSpec(
        "Worker", "worker", "arn:aws:lambda:us-east-1:123456789012:function:worker", "h.h", tmp_path
    )
    lock, inside, peak, handled = threading.Lock(), [0], [0], []
    three_at_once = threading.Barrier(3, timeout=30)

    def invoke(event: Any) -> Invocation:
        with lock:
            inside[0] += 1
            peak[0] = max(peak[0], inside[0])
        try:
            if len(handled) < 3:
                three_at_once.wait()  # the first three invocations only return together
            time.sleep(0.05)
        finally:
            with lock:
                inside[0] -= 1
                handled.extend(r["body"] for r in event["Records"])
        return Invocation(function="Worker", request_id="r", response={"batchItemFailures": []})

    poller = SqsPoller(function, source, sqs_client=sqs, invoke=invoke, idle_interval=0.1)

    # WHEN the mapping runs in the background ("local up")
    poller.start()
    try:
        deadline = time.monotonic() + 60
        # handled, and deleted: the poller deletes a record after its invocation returns, so the
        # last one's delete may still be on its way when the twelfth body is counted
        while (len(handled) < 12 or not poller.queue_is_empty()) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        poller.stop()

    # THEN every message was handled once, three invocations ran at once, and never more
    assert poller.concurrency == 3
    assert sorted(handled, key=int) == [str(n) for n in range(12)]
    assert peak[0] == 3
    assert poller.queue_is_empty()


def test_one_time_schedules_fire_once_when_due_and_delete_themselves(server: MotoServer) -> None:
    # GIVEN a schedule group with three one-time schedules: two due in a minute (one deletes itself
    # after completion, one is kept) and one due in six minutes
    scheduler = client(server, "scheduler")
    scheduler.create_schedule_group(Name="i11-group")
    start = datetime.now(UTC).replace(microsecond=0)
    soon, later = start + timedelta(minutes=1), start + timedelta(minutes=6)

    def create(name: str, moment: datetime, payload: str, **extra: Any) -> None:
        scheduler.create_schedule(
            Name=name,
            GroupName="i11-group",
            ScheduleExpression=f"at({moment:%Y-%m-%dT%H:%M:%S})",
            ScheduleExpressionTimezone="UTC",
            FlexibleTimeWindow={"Mode": "OFF"},
            Target={"Arn": f"arn:fn:{name}", "RoleArn": "arn:role", "Input": payload},
            **extra,
        )

    create("due", soon, '{"at": "<aws.scheduler.scheduled-time>"}', ActionAfterCompletion="DELETE")
    create("later", later, "{}", ActionAfterCompletion="DELETE")
    create("kept", soon, '{"k": 1}')
    fired: list[tuple[str, Any]] = []
    # the local stack's scheduler, ticked by the test with the time it wants (its injected clock)
    local_scheduler = LocalScheduler(
        scheduler, client(server, "sqs"), lambda arn, event: fired.append((arn, event)), timing=timing.local()
    )

    def tick(moment: datetime) -> list[str]:
        return sorted(f.name for f in local_scheduler.tick(moment) if f.outcome == "invoked")

    # WHEN the scheduler ticks before their time  THEN nothing fires
    assert tick(start) == [] and fired == []

    # WHEN it ticks when the first two are due, and once more
    first = tick(soon + timedelta(seconds=1))
    again = tick(soon + timedelta(seconds=2))

    # THEN the due ones fired once, with the scheduled time in the input; the DELETE one is gone
    assert first == ["due", "kept"] and again == []
    assert sorted(fired) == [("arn:fn:due", {"at": f"{soon:%Y-%m-%dT%H:%M:%SZ}"}), ("arn:fn:kept", {"k": 1})]
    names = {s["Name"] for s in scheduler.list_schedules(GroupName="i11-group")["Schedules"]}
    assert names == {"later", "kept"}

    # WHEN the later one's time comes  THEN it fires too, and only it
    assert tick(later + timedelta(seconds=1)) == ["later"]
    assert sorted(arn for arn, _ in fired) == ["arn:fn:due", "arn:fn:kept", "arn:fn:later"]
