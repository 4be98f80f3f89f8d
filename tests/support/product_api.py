"""The product API's handler called with HTTP API (payload 2.0) events, in-process (on moto)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

from agentwake_local.http_api import http_api_event
from tests.support.aws import FakeLambdaContext


def call(
    method: str,
    path: str,
    body: Any = None,
    *,
    headers: dict[str, str] | None = None,
    query: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any]]:
    """(status, JSON body) of one request through ProductApiFunction's handler."""
    from agentwake.handlers.product_api import handler

    raw = None if body is None else (body if isinstance(body, str) else json.dumps(body))
    event = http_api_event(
        method, path, body=raw, headers={"content-type": "application/json", **(headers or {})}, query=query
    )
    out = handler(event, FakeLambdaContext())
    return out["statusCode"], json.loads(out["body"]) if out.get("body") else {}


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

    server = LocalHttpApi(routes, invoke).start()
    try:
        yield server.url
    finally:
        server.stop()
        fresh_services()
