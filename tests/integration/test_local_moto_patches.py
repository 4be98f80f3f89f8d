"""The embedded moto server's cost per request does not grow with what its tables hold.

Measured as work done, never as wall-clock time: the model objects moto creates while a request
runs (each one an allocation it may keep), and the items a Query lists before it keeps those of
its partition. The server runs in this process, so both are counted directly. Without
``agentwake_local.moto_patches`` a TransactWriteItems on a 10,000-item table deep-copies the whole table
(10,000+ objects) and a Query lists and sorts every item; with it, both are the same at 100 items
as at 10,000.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from agentwake_local import moto_patches
from agentwake_local.server import ACCOUNT_ID, DEFAULT_REGION, MotoServer, boto3_session

TABLE = "patches-table"
SMALL, LARGE = 100, 10_000


@pytest.fixture(scope="module")
def server() -> Iterator[MotoServer]:
    with MotoServer() as moto_server:
        yield moto_server


@pytest.fixture
def ddb(server: MotoServer) -> Any:
    server.reset()
    client = boto3_session().client("dynamodb", endpoint_url=server.endpoint_url, region_name=DEFAULT_REGION)
    client.create_table(
        TableName=TABLE,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
    )
    return client


def fill(count: int) -> None:
    """``count`` items in other partitions, written straight into the server's backend (fast)."""
    from moto.dynamodb.models import dynamodb_backends

    backend = dynamodb_backends[ACCOUNT_ID][DEFAULT_REGION]
    for i in range(count):
        backend.put_item(
            TABLE, {"pk": {"S": f"SESSION#other-{i % 500}"}, "sk": {"S": f"MSG#{i:08d}"}, "text": {"S": "x" * 200}}
        )


@dataclass
class Work:
    models_created: int = 0  # moto model objects (items, their copies) created
    items_listed: int = 0  # items a Query looked at before keeping its partition's


def work(call: Callable[[], Any], monkeypatch: pytest.MonkeyPatch) -> Work:
    """What the server did for ``call``: counted in moto itself, around the patched functions."""
    from moto.core.common_models import BaseModel
    from moto.dynamodb.models.table import Table

    counted = Work()
    new, all_items = BaseModel.__new__, Table.all_items

    def counting_new(cls: type, *args: Any, **kwargs: Any) -> Any:
        counted.models_created += 1
        return new(cls, *args, **kwargs)

    def counting_all_items(self: Any) -> list[Any]:
        items = all_items(self)
        counted.items_listed += len(items)
        return items

    with monkeypatch.context() as mp:
        mp.setattr(BaseModel, "__new__", counting_new)
        mp.setattr(Table, "all_items", counting_all_items)
        call()
    return counted


def wake_commit(ddb: Any, n: int) -> None:
    """What a wake's commit does: a transaction of puts and an update, plus one that is cancelled."""
    ddb.transact_write_items(
        TransactItems=[
            {"Put": {"TableName": TABLE, "Item": {"pk": {"S": "SESSION#me"}, "sk": {"S": f"MSG#{n}a"}}}},
            {"Put": {"TableName": TABLE, "Item": {"pk": {"S": "SESSION#me"}, "sk": {"S": f"MSG#{n}b"}}}},
            {
                "Update": {
                    "TableName": TABLE,
                    "Key": {"pk": {"S": "RUN#me"}, "sk": {"S": "RUN"}},
                    "UpdateExpression": "SET attempts = :n",
                    "ExpressionAttributeValues": {":n": {"N": str(n)}},
                }
            },
        ]
    )
    with pytest.raises(ddb.exceptions.TransactionCanceledException):
        ddb.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": TABLE, "Item": {"pk": {"S": "SESSION#me"}, "sk": {"S": f"MSG#{n}c"}}}},
                {
                    "ConditionCheck": {
                        "TableName": TABLE,
                        "Key": {"pk": {"S": "RUN#me"}, "sk": {"S": "RUN"}},
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                },
            ]
        )


def history_read(ddb: Any) -> None:
    ddb.query(
        TableName=TABLE,
        KeyConditionExpression="pk = :pk AND begins_with(sk, :p)",
        ExpressionAttributeValues={":pk": {"S": "SESSION#me"}, ":p": {"S": "MSG#"}},
        ScanIndexForward=False,
        Limit=20,
    )


def cost_at(ddb: Any, items: int, already: int, monkeypatch: pytest.MonkeyPatch) -> tuple[Work, Work]:
    fill(items - already)
    return work(lambda: wake_commit(ddb, items), monkeypatch), work(lambda: history_read(ddb), monkeypatch)


def test_per_transaction_and_per_query_work_does_not_grow_with_the_table(
    ddb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the embedded server with 100 items in the table, then with 10,000
    small_commit, small_read = cost_at(ddb, SMALL, 0, monkeypatch)
    large_commit, large_read = cost_at(ddb, LARGE, SMALL, monkeypatch)

    # THEN a wake's transactions (one committed, one cancelled and rolled back) create as many
    # model objects at 10,000 items as at 100 (an unpatched moto copies the whole table: 10,000+)
    assert small_commit.models_created > 0
    assert large_commit.models_created <= 2 * small_commit.models_created + 10, (small_commit, large_commit)
    # AND its history read looks at its own partition only (unpatched: every item of the table)
    assert small_read.items_listed <= 10 and large_read.items_listed <= 10, (small_read, large_read)


def test_a_cancelled_transaction_puts_back_exactly_the_items_it_touched(ddb: Any) -> None:
    # GIVEN an item another transaction will update in place, and a neighbour it never touches
    ddb.put_item(TableName=TABLE, Item={"pk": {"S": "RUN#r"}, "sk": {"S": "RUN"}, "attempts": {"N": "1"}})
    ddb.put_item(TableName=TABLE, Item={"pk": {"S": "RUN#r"}, "sk": {"S": "OTHER"}, "v": {"S": "kept"}})

    # WHEN a transaction updates it, deletes the neighbour's twin, puts a new item, then fails a check
    with pytest.raises(ddb.exceptions.TransactionCanceledException) as cancelled:
        ddb.transact_write_items(
            TransactItems=[
                {
                    "Update": {
                        "TableName": TABLE,
                        "Key": {"pk": {"S": "RUN#r"}, "sk": {"S": "RUN"}},
                        "UpdateExpression": "SET attempts = :n, extra = :x",
                        "ExpressionAttributeValues": {":n": {"N": "2"}, ":x": {"S": "written"}},
                    }
                },
                {"Put": {"TableName": TABLE, "Item": {"pk": {"S": "RUN#r"}, "sk": {"S": "NEW"}}}},
                {"Delete": {"TableName": TABLE, "Key": {"pk": {"S": "RUN#r"}, "sk": {"S": "OTHER"}}}},
                {
                    "ConditionCheck": {
                        "TableName": TABLE,
                        "Key": {"pk": {"S": "RUN#r"}, "sk": {"S": "MISSING"}},
                        "ConditionExpression": "attribute_exists(pk)",
                    }
                },
            ]
        )

    # THEN DynamoDB's answer is unchanged: the last operation's condition failed
    codes = [r["Code"] for r in cancelled.value.response["CancellationReasons"]]
    assert codes == ["None", "None", "None", "ConditionalCheckFailed"]
    # AND the partition is exactly as before: the update undone, the put gone, the delete undone
    items = ddb.query(
        TableName=TABLE,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": "RUN#r"}},
        ConsistentRead=True,
    )["Items"]
    assert sorted((i["sk"]["S"], i.get("attempts", i.get("v"))) for i in items) == [
        ("OTHER", {"S": "kept"}),
        ("RUN", {"N": "1"}),
    ]
    assert all("extra" not in i for i in items)


def test_a_primary_key_query_still_pages_and_sorts_within_its_partition(ddb: Any) -> None:
    # GIVEN 25 items of one partition written out of order, among other partitions
    for i in (7, 3, 24, 0, 12, *range(25)):
        ddb.put_item(TableName=TABLE, Item={"pk": {"S": "P#1"}, "sk": {"S": f"K#{i:03d}"}})
        ddb.put_item(TableName=TABLE, Item={"pk": {"S": f"P#{i + 2}"}, "sk": {"S": "K#000"}})

    # WHEN it is read newest first in pages of 10
    seen: list[str] = []
    kwargs: dict[str, Any] = {
        "TableName": TABLE,
        "KeyConditionExpression": "pk = :pk AND begins_with(sk, :p)",
        "ExpressionAttributeValues": {":pk": {"S": "P#1"}, ":p": {"S": "K#"}},
        "ScanIndexForward": False,
        "Limit": 10,
    }
    while True:
        page = ddb.query(**kwargs)
        seen += [i["sk"]["S"] for i in page["Items"]]
        if "LastEvaluatedKey" not in page:
            break
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    # THEN every item of the partition came back once, in order, and nothing of the others
    assert seen == [f"K#{i:03d}" for i in reversed(range(25))]
    assert (
        ddb.query(
            TableName=TABLE, KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": {"S": "P#nothing"}}
        )["Items"]
        == []
    )


def test_the_server_keeps_no_model_instances(ddb: Any) -> None:
    # GIVEN items written through the server
    from moto.dynamodb.models.dynamo_type import Item

    for i in range(50):
        ddb.put_item(TableName=TABLE, Item={"pk": {"S": "P"}, "sk": {"S": str(i)}})
    # THEN moto's instance tracker holds none of them (it would hold each one forever)
    assert Item.instances_tracked == []  # type: ignore[attr-defined]


def test_the_installed_moto_is_the_one_the_patches_were_written_for() -> None:
    # GIVEN the moto this project installs  THEN every patched function has its pinned source
    # (this test fails first when a moto upgrade changes what the local stack patches)
    assert moto_patches.installed_moto_version() == moto_patches.MOTO_VERSION
    moto_patches.check()
    assert moto_patches.applied()


def test_a_moto_whose_patched_function_changed_stops_the_local_stack_with_what_to_do() -> None:
    # GIVEN a pin that does not match the installed function (as after a moto upgrade)
    pins = {**moto_patches.PINNED, "moto.dynamodb.models.DynamoDBBackend.transact_write_items": "0" * 64}

    # WHEN the patches are checked  THEN the error names the function, the versions and the way out
    with pytest.raises(moto_patches.MotoPatchError) as raised:
        moto_patches.check(pins)
    message = str(raised.value)
    assert "DynamoDBBackend.transact_write_items" in message
    assert moto_patches.MOTO_VERSION in message and "pip install" in message
    assert "Table.query" not in message  # only what changed


def test_a_function_moto_no_longer_has_is_reported_too() -> None:
    with pytest.raises(moto_patches.MotoPatchError, match="not found"):
        moto_patches.check({"moto.dynamodb.models.table.Table.no_such_function": "0" * 64})


def test_an_sqs_receive_does_not_rescan_the_queue_per_message(
    server: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unpatched, each received message recomputed every attribute of the queue (three scans of all its
    messages) to read the retention period: one receive of 10 on 2,500 messages took seconds."""
    from moto.sqs.models import Queue

    server.reset()
    sqs = boto3_session().client("sqs", endpoint_url=server.endpoint_url, region_name=DEFAULT_REGION)
    url = sqs.create_queue(QueueName="patches-queue")["QueueUrl"]
    computed = [0]
    attributes = Queue.attributes

    def counting(self: Any) -> Any:
        computed[0] += 1
        return attributes.fget(self)  # type: ignore[attr-defined]

    def attribute_computations_per_receive(queued: int) -> int:
        while (
            int(
                sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"][
                    "ApproximateNumberOfMessages"
                ]
            )
            < queued
        ):
            sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": "x"} for i in range(10)])
        computed[0] = 0
        with monkeypatch.context() as mp:
            mp.setattr(Queue, "attributes", property(counting))
            received = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0)["Messages"]
        assert len(received) == 10
        return computed[0]

    # GIVEN a queue of 100 messages, then of 1,000  WHEN 10 are received
    # THEN the queue's attributes are not recomputed for each (unpatched: twice per message)
    assert attribute_computations_per_receive(100) == attribute_computations_per_receive(1_000) == 0


def test_a_messages_attribute_digest_is_computed_once_not_on_every_receive(
    server: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unpatched, every receive validated, packed and hashed each attribute of each message it returned."""
    from moto.sqs.models import Message

    server.reset()
    sqs = boto3_session().client("sqs", endpoint_url=server.endpoint_url, region_name=DEFAULT_REGION)
    url = sqs.create_queue(QueueName="digest-queue")["QueueUrl"]
    attributes = {
        "b": {"DataType": "String", "StringValue": "reason é"},
        "a": {"DataType": "Number", "StringValue": "7"},
    }
    sent = sqs.send_message(QueueUrl=url, MessageBody="x", MessageAttributes=attributes)["MD5OfMessageAttributes"]
    only_a = sqs.send_message(QueueUrl=url, MessageBody="y", MessageAttributes={"a": attributes["a"]})
    sqs.delete_message(
        QueueUrl=url,
        ReceiptHandle=next(
            m["ReceiptHandle"]
            for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0)["Messages"]
            if m["Body"] == "y"
        ),
    )
    packed = [0]
    pack = Message.update_binary_length_and_value

    def counting(md5: Any, value: bytes) -> None:
        packed[0] += 1
        pack(md5, value)

    monkeypatch.setattr(Message, "update_binary_length_and_value", staticmethod(counting))
    # WHEN the message is received three times with all its attributes
    digests = []
    for _ in range(3):
        [got] = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"], VisibilityTimeout=0)["Messages"]
        digests.append(got["MD5OfMessageAttributes"])
    # THEN each answer carries the digest SendMessage gave, computed no more
    assert digests == [sent] * 3
    assert packed[0] == 0
    # AND a receive of some of its attributes has their own digest (computed for them)
    [got] = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["a"], VisibilityTimeout=0)["Messages"]
    assert got["MD5OfMessageAttributes"] == only_a["MD5OfMessageAttributes"] != sent
    assert packed[0] > 0
    [got] = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"], VisibilityTimeout=0)["Messages"]
    assert got["MD5OfMessageAttributes"] == sent


def test_a_queue_count_walks_the_queue_once_per_count_not_per_name_asked_for(server: MotoServer) -> None:
    """Unpatched, GetQueueAttributes computed every attribute of the queue (each count a walk of its
    messages) twice per name asked for, and once more: a scan's three counts walked the queue 27 times."""
    from unittest import mock

    from moto.sqs.models import Queue

    server.reset()
    sqs = boto3_session().client("sqs", endpoint_url=server.endpoint_url, region_name=DEFAULT_REGION)
    url = sqs.create_queue(QueueName="counted-queue")["QueueUrl"]
    sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": "x"} for i in range(4)])
    sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1, VisibilityTimeout=300)
    names = [
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
    ]
    delayed = Queue.approximate_number_of_messages_delayed
    with mock.patch.object(Queue, "approximate_number_of_messages_delayed", new_callable=mock.PropertyMock) as walk:
        walk.side_effect = lambda: 0
        # WHEN the scan's three counts are asked for
        counts = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
        # THEN the queue's messages were counted once (each count one walk)
        assert walk.call_count == 1
    assert isinstance(delayed, property)
    assert counts == dict(zip(names, ["3", "1", "0"], strict=True))
    # AND All, and names asked one by one, answer the same as before
    every = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert {name: every[name] for name in names} == counts
    for name in names:
        assert sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[name])["Attributes"] == {name: counts[name]}


@pytest.fixture
def in_process_sqs(aws_credentials: None) -> Iterator[Any]:
    """In-process ``mock_aws`` (as the security and e2e tests run the CLI): no server lock in front."""
    import boto3
    from moto import mock_aws

    with mock_aws():
        yield boto3.client("sqs", region_name=DEFAULT_REGION)


def test_concurrent_receivers_each_get_every_message_once_from_in_process_moto(in_process_sqs: Any) -> None:
    """Unguarded, moto's SQS backend is walked by several threads at once: a receive copies the
    queue's pending set while another receive adds to it ("Set changed size during iteration",
    the CI failure of a ``dlq show``), and two receives can take the same message."""
    import threading

    sqs = in_process_sqs
    url = sqs.create_queue(QueueName="guarded-queue")["QueueUrl"]
    total = 1_500
    for start in range(0, total, 10):
        sqs.send_message_batch(
            QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": f"m{start + i}"} for i in range(10)]
        )
    received: list[str] = []
    failures: list[BaseException] = []

    def receiver() -> None:
        try:
            while True:
                batch = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=300).get(
                    "Messages", []
                )
                if not batch:
                    return
                received.extend(m["MessageId"] for m in batch)
                # renew what was just taken, as a scan renews its holds while others receive
                sqs.change_message_visibility_batch(
                    QueueUrl=url,
                    Entries=[
                        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 300}
                        for i, m in enumerate(batch)
                    ],
                )
        except BaseException as exc:  # noqa: BLE001 -- reported below, with the thread's exception
            failures.append(exc)

    # GIVEN a queue of 1,500 messages  WHEN eight threads receive and renew until it is empty
    threads = [threading.Thread(target=receiver) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # THEN no request failed, and every message was received by exactly one of them
    assert failures == []
    assert len(received) == len(set(received)) == total


def test_a_long_polling_receive_lets_other_requests_through_and_is_woken_by_a_send(in_process_sqs: Any) -> None:
    """The guard is let go while a receive long-polls: a send made meanwhile is answered and wakes it."""
    import threading

    sqs = in_process_sqs
    url = sqs.create_queue(QueueName="long-poll-queue")["QueueUrl"]
    got: list[Any] = []
    # GIVEN a receive waiting up to 20 s on an empty queue
    waiting = threading.Thread(
        target=lambda: got.append(sqs.receive_message(QueueUrl=url, WaitTimeSeconds=20).get("Messages", []))
    )
    waiting.start()
    # WHEN another thread sends (it would wait the 20 s out if the receive kept the guard)
    sqs.send_message(QueueUrl=url, MessageBody="hello")
    waiting.join()
    # THEN the receive returns that message
    assert [m["Body"] for m in got[0]] == ["hello"]


def test_a_long_poll_on_a_fifo_group_in_flight_lets_other_queues_through(in_process_sqs: Any) -> None:
    """Messages there but not receivable (their FIFO group in flight) do not make the long poll hold
    the guard: a send to another queue is answered while the poll still waits."""
    import threading

    from moto.sqs.models import Queue

    sqs = in_process_sqs
    fifo = sqs.create_queue(
        QueueName="held.fifo", Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"}
    )["QueueUrl"]
    other = sqs.create_queue(QueueName="other-queue")["QueueUrl"]
    for body in ("first", "second"):
        sqs.send_message(QueueUrl=fifo, MessageBody=body, MessageGroupId="g")
    assert [m["Body"] for m in sqs.receive_message(QueueUrl=fifo)["Messages"]] == ["first"]  # g in flight
    # GIVEN a receive long-polling the FIFO queue, whose visible message waits behind its group
    polling = threading.Event()
    patched = Queue.wait_for_messages

    def watched(self: Any, timeout: int) -> None:
        polling.set()
        patched(self, timeout)

    Queue.wait_for_messages = watched  # type: ignore[method-assign]
    try:
        waiting = threading.Thread(target=lambda: sqs.receive_message(QueueUrl=fifo, WaitTimeSeconds=10))
        waiting.start()
        assert polling.wait(60)
        # WHEN another queue is sent to
        sqs.send_message(QueueUrl=other, MessageBody="elsewhere")
        # THEN it was answered while the poll still waits (it held the guard for its 10 s before)
        assert waiting.is_alive()
        waiting.join(60)
    finally:
        Queue.wait_for_messages = patched  # type: ignore[method-assign]


def test_the_receive_past_messages_in_flight_keeps_what_sqs_promises(in_process_sqs: Any) -> None:
    """The patched receive starts past the messages in flight (a cursor): what becomes visible again
    (released, expired, its delay over) is received again, with its receive count, in order."""
    import time

    sqs = in_process_sqs
    url = sqs.create_queue(QueueName="cursor-queue")["QueueUrl"]
    for start in range(0, 40, 10):
        sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": str(start + i)} for i in range(10)])

    def receive(timeout: int = 300) -> list[dict[str, Any]]:
        return sqs.receive_message(  # type: ignore[no-any-return]
            QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=timeout, AttributeNames=["All"]
        ).get("Messages", [])

    # GIVEN every message received once (held for 300 s), oldest first
    first = [m for _ in range(4) for m in receive()]
    assert [m["Body"] for m in first] == [str(i) for i in range(40)]
    # WHEN three of them are released, one is deleted, and one more is sent with a delay
    sqs.send_message(QueueUrl=url, MessageBody="late", DelaySeconds=2)
    released = [first[5], first[17], first[33]]
    sqs.change_message_visibility_batch(
        QueueUrl=url,
        Entries=[
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0} for i, m in enumerate(released)
        ],
    )
    sqs.delete_message(QueueUrl=url, ReceiptHandle=first[6]["ReceiptHandle"])
    # THEN exactly those three come back, in order, each received a second time (and the delayed one once due)
    again: list[dict[str, Any]] = []
    deadline = time.monotonic() + 30
    while len(again) < 4 and time.monotonic() < deadline:
        again += receive()
    bodies = [m["Body"] for m in again]
    assert sorted(bodies) == sorted(["5", "17", "33", "late"])
    assert [b for b in bodies if b != "late"] == ["5", "17", "33"]
    counts = {m["Body"]: m["Attributes"]["ApproximateReceiveCount"] for m in again}
    assert counts == {"5": "2", "17": "2", "33": "2", "late": "1"}
    # AND a hold that runs out makes its message receivable again
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=again[0]["ReceiptHandle"], VisibilityTimeout=1)
    back: list[dict[str, Any]] = []
    while not back and time.monotonic() < deadline + 30:
        back = receive()
    assert [m["Body"] for m in back] == [again[0]["Body"]]
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (attributes["ApproximateNumberOfMessages"], attributes["ApproximateNumberOfMessagesNotVisible"]) == (
        "0",
        "40",
    )


def compare_with_motos_serializer(monkeypatch: pytest.MonkeyPatch) -> tuple[list[tuple[str, str]], list[int], Any]:
    """Every SQS answer, as the patch writes it and as moto's serializer writes the same result (both
    recorded); how many times moto's serializer ran; the patched ``serialized``."""
    from moto.core.responses import BaseResponse
    from moto.core.serialize import ResponseSerializer
    from moto.sqs.responses import SQSResponse

    answers: list[tuple[str, str]] = []
    patched = SQSResponse.serialized

    def both(self: Any, action_result: Any) -> Any:
        # what the patch answers, and what moto's own serializer makes of the same result
        status, headers, body = patched(self, action_result)
        moto_status, moto_headers, moto_body = BaseResponse.serialized(self, action_result)
        assert (status, headers["Content-Type"]) == (moto_status, moto_headers["Content-Type"])
        answers.append((body, moto_body))
        return status, headers, body

    runs = [0]
    serialize = ResponseSerializer.serialize

    def counting(self: Any, result: Any) -> Any:
        runs[0] += 1
        return serialize(self, result)

    monkeypatch.setattr(SQSResponse, "serialized", both)
    monkeypatch.setattr(ResponseSerializer, "serialize", counting)
    return answers, runs, patched


def test_a_receive_is_answered_as_motos_serializer_would_without_running_it(
    server: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """moto's serializer tried each member's aliases on each message (7 ms for a receive of ten);
    the patch writes the JSON itself when the messages hold only text, moto's serializer otherwise."""
    from moto.sqs.responses import SQSResponse

    server.reset()
    sqs = boto3_session().client("sqs", endpoint_url=server.endpoint_url, region_name=DEFAULT_REGION)
    url = sqs.create_queue(QueueName="serialized-queue")["QueueUrl"]
    fifo = sqs.create_queue(
        QueueName="serialized.fifo", Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"}
    )["QueueUrl"]
    text = {"DataType": "String", "StringValue": 'é "quoted" \u2028 </x>'}
    sqs.send_message(QueueUrl=url, MessageBody='plain é \u2028 "quoted"')
    sqs.send_message(
        QueueUrl=url,
        MessageBody="{}",
        MessageAttributes={
            "t": text,
            "n": {"DataType": "Number", "StringValue": "12"},
            "c": {**text, "DataType": "String.x"},
        },
    )
    sqs.send_message(QueueUrl=fifo, MessageBody="grouped", MessageGroupId="g")
    answers, runs, patched = compare_with_motos_serializer(monkeypatch)
    # GIVEN text messages (with and without attributes, on a FIFO queue), some attributes asked for
    receives = [
        {"QueueUrl": url, "MaxNumberOfMessages": 10, "AttributeNames": ["All"], "MessageAttributeNames": ["All"]},
        {"QueueUrl": fifo, "MessageSystemAttributeNames": ["MessageGroupId", "SentTimestamp"]},
        {"QueueUrl": url, "MaxNumberOfMessages": 10},  # nothing visible: an empty answer
    ]
    for receive in receives:
        sqs.receive_message(**receive, VisibilityTimeout=0 if receive["QueueUrl"] == url else 30)
    # THEN each answer is exactly moto's, and moto's serializer ran only to compare (once per receive)
    assert len(answers) == len(receives) == runs[0]
    for body, moto_body in answers:
        assert body == moto_body
    assert '"MessageAttributes"' in answers[0][0]
    assert '"MessageGroupId": "g"' in answers[1][0]
    # AND a binary attribute goes to moto's serializer
    monkeypatch.setattr(SQSResponse, "serialized", patched)
    sqs.send_message(
        QueueUrl=url, MessageBody="b", MessageAttributes={"b": {"DataType": "Binary", "BinaryValue": b"\0"}}
    )
    runs[0] = 0
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"])["Messages"]
    assert runs[0] == 1
    assert [m["MessageAttributes"]["b"]["BinaryValue"] for m in got if m["Body"] == "b"] == [b"\0"]
    # AND the patch alone does not run it for text (unpatched: once per receive)
    runs[0] = 0
    sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"], MessageAttributeNames=["All"])
    assert runs[0] == 0


def test_receipt_handles_are_185_distinct_letters_drawn_from_motos_seedable_random(
    in_process_sqs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from moto.moto_api._internal import mock_random

    sqs = in_process_sqs
    url = sqs.create_queue(QueueName="handles-queue")["QueueUrl"]
    sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": str(i)} for i in range(10)])

    def handles() -> list[str]:
        got = [
            m["ReceiptHandle"]
            for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0)["Messages"]
        ]
        assert len(got) == 10
        return got

    # GIVEN moto's random seeded, receives; WHEN seeded the same again, the same receives
    mock_random.seed(37)
    first = handles() + handles()
    mock_random.seed(37)
    again = handles() + handles()
    # THEN each handle is 185 lowercase letters, all distinct, and the seed gives the same ones
    assert all(len(h) == 185 and h.isascii() and h.isalpha() and h.islower() for h in first)
    assert len(set(first)) == len(first)
    assert again == first
    # AND a handle is one draw, not 185 (unpatched: 1,850 draws for a receive of ten)
    draws = [0]
    draw = mock_random.random

    def counting() -> float:
        draws[0] += 1
        return draw()

    monkeypatch.setattr(mock_random, "random", counting, raising=False)
    handles()
    assert draws[0] == 0


def test_a_request_does_not_list_its_response_class(server: MotoServer, monkeypatch: pytest.MonkeyPatch) -> None:
    import inspect

    sqs = boto3_session().client("sqs", endpoint_url=server.endpoint_url, region_name=DEFAULT_REGION)
    sqs.list_queues()  # the class is listed once
    listed = [0]
    getmembers = inspect.getmembers

    def counting(*args: Any, **kwargs: Any) -> Any:
        listed[0] += 1
        return getmembers(*args, **kwargs)

    monkeypatch.setattr(inspect, "getmembers", counting)
    # WHEN 20 requests are answered  THEN moto did not list its response class's members for each
    for _ in range(20):
        sqs.list_queues()
    assert listed[0] == 0


def test_a_batch_whose_entries_all_succeed_is_answered_as_motos_serializer_would(
    server: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.reset()
    sqs = boto3_session().client("sqs", endpoint_url=server.endpoint_url, region_name=DEFAULT_REGION)
    url = sqs.create_queue(QueueName="batch-queue")["QueueUrl"]
    sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": str(i)} for i in range(4)])
    held = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=300)["Messages"]
    assert len(held) == 4
    answers, runs, _ = compare_with_motos_serializer(monkeypatch)
    entries = [{"Id": f"e{i}", "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(held)]
    # GIVEN a visibility batch and a delete batch whose entries all succeed
    changed = sqs.change_message_visibility_batch(
        QueueUrl=url, Entries=[{**e, "VisibilityTimeout": 300} for e in entries[:3]]
    )
    deleted = sqs.delete_message_batch(QueueUrl=url, Entries=entries[3:])
    # THEN each answer is exactly moto's, moto's serializer running only to compare
    assert [e["Id"] for e in changed["Successful"]] == ["e0", "e1", "e2"]
    assert [e["Id"] for e in deleted["Successful"]] == ["e3"]
    assert len(answers) == 2 == runs[0]
    assert all(body == moto_body for body, moto_body in answers)
    # AND a batch with a failed entry is moto's serializer's alone
    runs[0] = 0
    failed = sqs.change_message_visibility_batch(
        QueueUrl=url, Entries=[{**entries[0], "VisibilityTimeout": 0}, {**entries[3], "VisibilityTimeout": 0}]
    )
    assert [e["Id"] for e in failed["Successful"]] == ["e0"]
    assert [e["Id"] for e in failed["Failed"]] == ["e3"]
    assert runs[0] == 2  # the patch's fallback and the comparison
    assert answers[-1][0] == answers[-1][1]


def test_a_request_id_is_52_letters_or_digits_from_one_draw(
    server: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from moto.moto_api._internal import mock_random

    sqs = boto3_session().client("sqs", endpoint_url=server.endpoint_url, region_name=DEFAULT_REGION)
    draws = [0]
    choice = mock_random.choice

    def counting(sequence: Any) -> Any:
        draws[0] += 1
        return choice(sequence)

    monkeypatch.setattr(mock_random, "choice", counting, raising=False)
    # WHEN requests are answered
    ids = [sqs.list_queues()["ResponseMetadata"]["RequestId"] for _ in range(20)]
    # THEN each has moto's request id shape, all differ, and none cost a draw per character (unpatched: 52)
    assert all(len(i) == 52 and i.isascii() and i.isalnum() for i in ids)
    assert len(set(ids)) == len(ids)
    assert draws[0] == 0


def test_a_table_with_sse_makes_no_private_key_and_an_asymmetric_key_still_signs(
    aws_credentials: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import boto3
    from moto import mock_aws
    from moto.kms import utils

    made: list[int] = []
    generate = utils.rsa.generate_private_key
    monkeypatch.setattr(utils.rsa, "generate_private_key", lambda **kw: made.append(kw["key_size"]) or generate(**kw))
    with mock_aws():
        # GIVEN in-process moto, patched WHEN template.yaml's resources are provisioned (its table has
        # SSE on: moto creates the account's alias/aws/dynamodb key with it)
        from tests.support.aws import create_resources

        create_resources()
        kms = boto3.client("kms", region_name=DEFAULT_REGION)
        dynamodb_key = kms.describe_key(KeyId="alias/aws/dynamodb")["KeyMetadata"]
        # THEN the symmetric key is there, and no RSA private key was made for it
        assert dynamodb_key["KeySpec"] == "SYMMETRIC_DEFAULT" and dynamodb_key["Enabled"], dynamodb_key
        assert made == []
        # AND an RSA key made on its first use signs and verifies, with one public key throughout
        key_id = kms.create_key(KeyUsage="SIGN_VERIFY", KeySpec="RSA_2048")["KeyMetadata"]["KeyId"]
        assert made == []
        public = kms.get_public_key(KeyId=key_id)["PublicKey"]
        signed = kms.sign(KeyId=key_id, Message=b"wake", SigningAlgorithm="RSASSA_PSS_SHA_256")["Signature"]
        assert kms.verify(KeyId=key_id, Message=b"wake", Signature=signed, SigningAlgorithm="RSASSA_PSS_SHA_256")[
            "SignatureValid"
        ]
        assert kms.get_public_key(KeyId=key_id)["PublicKey"] == public
        assert made == [2048]
