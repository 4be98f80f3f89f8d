"""Probes tests and benchmarks use to look inside the store (never used by the product)."""

from __future__ import annotations

from collections.abc import Callable

from agentwake.store.dynamo import DynamoStore
from agentwake.store.keys import HISTORY_PREFIX, session_pk


def count_history_reads(store: DynamoStore, session_id: str, limit: int) -> int:
    """Items a history-window read touches (the Query's ScannedCount): the window's cost does not
    grow with the conversation when this stays at ``limit``."""
    resp = store.table.db.query(
        TableName=store.table.name,
        KeyConditionExpression="pk = :pk AND begins_with(sk, :p)",
        ExpressionAttributeValues={":pk": {"S": session_pk(session_id)}, ":p": {"S": HISTORY_PREFIX}},
        ScanIndexForward=False,
        Limit=limit,
    )
    return int(resp["ScannedCount"])


class AwsCalls:
    """Every API call a client of ``service`` makes, by operation name, in order."""

    def __init__(self, client: object, service: str) -> None:
        self.calls: list[str] = []
        client.meta.events.register(f"before-call.{service}", self._count)  # type: ignore[attr-defined]

    def _count(self, model: object, **_: object) -> None:
        self.calls.append(model.name)  # type: ignore[attr-defined]

    def during(self, fn: Callable[[], object]) -> list[str]:
        start = len(self.calls)
        fn()
        return self.calls[start:]


class DynamoCalls:
    """Every DynamoDB API call a client makes, by operation name, in order (botocore's
    ``before-call`` event): what a wake costs in round trips."""

    def __init__(self, client: object) -> None:
        self.calls: list[str] = []
        client.meta.events.register("before-call.dynamodb", self._count)  # type: ignore[attr-defined]

    def _count(self, model: object, **_: object) -> None:
        self.calls.append(model.name)  # type: ignore[attr-defined]

    def during(self, fn: Callable[[], object]) -> list[str]:
        start = len(self.calls)
        fn()
        return self.calls[start:]


def seed_history(store: DynamoStore, session_id: str, n: int, *, padding: int = 0) -> None:
    """``n`` history messages for a session, written 25 a call (BatchWriteItem), each ``padding``
    characters longer than its bare text."""
    import boto3

    table = boto3.resource("dynamodb", region_name=store.table.db.meta.region_name).Table(store.table.name)
    with table.batch_writer() as batch:
        for i in range(n):
            batch.put_item(
                Item={
                    "pk": session_pk(session_id),
                    "sk": f"{HISTORY_PREFIX}{i:020d}#x",
                    "session_id": session_id,
                    "role": "user" if i % 2 == 0 else "assistant",
                    "content": f"message {i}" + (" " + "x" * padding if padding else ""),
                    "kind": "message",
                    "created_at": "2026-01-01T00:00:00Z",
                }
            )


class DynamoTraffic(DynamoCalls):
    """``DynamoCalls`` and the bytes of every answer the client received (botocore's
    ``after-call`` event: the HTTP response's body as it came over the wire)."""

    def __init__(self, client: object) -> None:
        super().__init__(client)
        self.received: list[int] = []
        client.meta.events.register("after-call.dynamodb", self._measure)  # type: ignore[attr-defined]

    def _measure(self, http_response: object = None, **_: object) -> None:
        self.received.append(len(getattr(http_response, "content", b"") or b""))

    def measure(self, fn: Callable[[], object]) -> tuple[list[str], int]:
        """The calls ``fn`` made and the bytes their answers carried."""
        start, got = len(self.calls), len(self.received)
        fn()
        return self.calls[start:], sum(self.received[got:])
