"""Probes tests and benchmarks use to look inside the store (never used by the product)."""

from __future__ import annotations

from agentwake.store.dynamo import DynamoStore
from agentwake.store.keys import session_pk


def count_history_reads(store: DynamoStore, session_id: str, limit: int) -> int:
    """Items a history-window read touches (the Query's ScannedCount): the window's cost does not
    grow with the conversation when this stays at ``limit``."""
    resp = store.db.query(
        TableName=store.table,
        KeyConditionExpression="pk = :pk AND begins_with(sk, :p)",
        ExpressionAttributeValues={":pk": {"S": session_pk(session_id)}, ":p": {"S": "MSG#"}},
        ScanIndexForward=False,
        Limit=limit,
    )
    return int(resp["ScannedCount"])
