"""boto3 clients, created once per process and cached. botocore's standard retry mode handles
throttling of DynamoDB/SQS/Scheduler calls; we do not hand-roll retries for them."""

from __future__ import annotations

from functools import cache
from typing import Any


@cache
def client(service: str, region: str | None = None, endpoint_url: str | None = None) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.session.Session().client(
        service,
        region_name=region,
        endpoint_url=endpoint_url,
        config=Config(retries={"mode": "standard", "max_attempts": 5}, connect_timeout=5, read_timeout=20),
    )


def reset_clients() -> None:
    client.cache_clear()
