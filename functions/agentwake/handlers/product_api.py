"""ProductApiFunction: the HTTP API (IAM auth, payload format 2.0) over the runtime's sessions and
tasks API. The routes, their validation and their errors are in ``agentwake.product.api``."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from agentwake.handlers import init_done
from agentwake.observability import inject_lambda_context, metrics
from agentwake.product.api import app


@inject_lambda_context
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)


init_done()  # the collector runs again (agentwake.handlers)
