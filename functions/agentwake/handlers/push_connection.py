"""PushConnectionFunction: the WebSocket API's ``$connect`` (redeem a push ticket, record the
connection) and ``$disconnect`` (forget it). Small on purpose: settings and one DynamoDB client, no
agent; it sits on a page's connect latency, never on a wake. The logic: ``agentwake.product.push``."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from agentwake import bootstrap
from agentwake.handlers import init_done
from agentwake.observability import inject_lambda_context
from agentwake.product.push import handle
from agentwake.settings import get_settings


@inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle(event, bootstrap.store(), get_settings())


init_done()  # the collector runs again (agentwake.handlers)
