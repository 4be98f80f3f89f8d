"""The product API's handler called with HTTP API (payload 2.0) events, in-process (on moto)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

from agentwake_local.http_api import http_api_event
from agentwake_local.sigv4 import SigV4Verifier, iam_identity
from tests.support.aws import FakeLambdaContext
from tests.support.builders import PRODUCT_CALLER


def call(
    method: str,
    path: str,
    body: Any = None,
    *,
    headers: dict[str, str] | None = None,
    query: dict[str, str] | None = None,
    caller: str | None = PRODUCT_CALLER,
) -> tuple[int, dict[str, Any]]:
    """(status, JSON body) of one request through ProductApiFunction's handler, as signed by
    ``caller`` (the principal API Gateway verified; None: a request with no identity)."""
    from agentwake.handlers.product_api import handler

    raw = None if body is None else (body if isinstance(body, str) else json.dumps(body))
    event = http_api_event(
        method,
        path,
        body=raw,
        headers={"content-type": "application/json", **(headers or {})},
        query=query,
        iam=None if caller is None else iam_identity(caller),
    )
    out = handler(event, FakeLambdaContext())
    return out["statusCode"], json.loads(out["body"]) if out.get("body") else {}


def verifier() -> SigV4Verifier:
    """The local authorizer holding this process's credentials (under ``mock_aws``, moto's fake
    keys; their principal is moto's STS answer), besides the keys moto's IAM and STS issue."""
    import botocore.session

    creds = botocore.session.get_session().get_credentials().get_frozen_credentials()
    return SigV4Verifier(region="us-east-1", own={creds.access_key: (creds.secret_key, creds.token)})


def fresh_services() -> None:
    """Forget the adapters and services the composition root built (a new moto account per test)."""
    from agentwake import bootstrap

    bootstrap.reset()


@contextmanager
def served(resources: Any, seen: list[dict[str, Any]] | None = None) -> Iterator[str]:
    """The product API on 127.0.0.1 (the template's HttpApi routes, http_api.LocalHttpApi), each
    request run through ProductApiFunction's handler in this process; yields its URL. ``seen``
    collects the events."""
    from agentwake.handlers.product_api import handler
    from agentwake_local.http_api import LocalHttpApi, Route

    fresh_services()
    function = resources.stack.functions["ProductApiFunction"]
    routes = [Route(r.method, r.path, function.logical_id) for r in function.http_routes]

    def invoke(_function_id: str, event: dict[str, Any]) -> Any:
        if seen is not None:
            seen.append(event)
        return SimpleNamespace(response=handler(event, FakeLambdaContext()), error=None)

    server = LocalHttpApi(routes, invoke, verifier=verifier()).start()
    try:
        yield server.url
    finally:
        server.stop()
        fresh_services()
