"""AWS clients, created once per process and service, on first use, from one botocore session.

botocore directly, not boto3: the runtime only needs low-level clients, and importing boto3 adds
its resource layer (and s3transfer) to every cold start. One shared session means the second
client reuses the first one's loaded endpoint data and credentials. botocore's standard retry mode
handles throttling of DynamoDB/SQS/Scheduler calls; we do not hand-roll retries for them.
"""

from __future__ import annotations

from functools import cache
from typing import Any


@cache
def _session() -> Any:
    import botocore.session

    return botocore.session.get_session()


@cache
def client(service: str, region: str | None = None, endpoint_url: str | None = None) -> Any:
    from botocore.config import Config

    return _session().create_client(
        service,
        region_name=region,
        endpoint_url=endpoint_url,
        config=Config(retries={"mode": "standard", "max_attempts": 5}, connect_timeout=5, read_timeout=20),
    )


def reset_clients() -> None:
    client.cache_clear()
    _session.cache_clear()
