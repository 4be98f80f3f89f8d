"""Powertools Idempotency, keyed on the run id: exactly one outcome per run.

- a copy of a message whose run already succeeded gets the stored outcome and does nothing;
- a copy arriving while the run is in progress raises IdempotencyAlreadyInProgressError, so that
  record is retried later (the in-progress record expires with the Lambda's remaining time);
- a run that raises (ERROR, crash, busy session) deletes its record, so a retry can run it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: how long a succeeded run's outcome is remembered by Powertools; after that the conditional
#: commit (run status <> succeeded) still keeps a late duplicate from writing a second note
EXPIRES_AFTER_S = 24 * 3600


@dataclass
class RunIdempotency:
    config: Any
    persistence: Any


def run_idempotency(table_name: str, *, client: Any = None) -> RunIdempotency:
    from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer, IdempotencyConfig

    if client is None:
        from agentwake.store.aws import client as make_client

        client = make_client("dynamodb")

    def mark_duplicate(response: Any, idempotent_data: Any) -> Any:
        if isinstance(response, dict) and response.get("status") == "succeeded":
            return {**response, "status": "already_succeeded"}
        return response

    config = IdempotencyConfig(
        event_key_jmespath="run_id",
        raise_on_no_idempotency_key=True,
        expires_after_seconds=EXPIRES_AFTER_S,
        response_hook=mark_duplicate,
    )
    return RunIdempotency(
        config=config, persistence=DynamoDBPersistenceLayer(table_name=table_name, boto3_client=client)
    )
