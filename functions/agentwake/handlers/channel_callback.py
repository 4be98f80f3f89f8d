"""ChannelCallbackFunction: Slack's interactivity and Telegram's webhook, where a person's click on
an approval request's Approve/Reject comes back (two unsigned routes of the product API, each
request verified by its platform's secret). Small on purpose: no agent, no wake. The logic:
``agentwake.product.channel_callback``."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from agentwake import bootstrap
from agentwake.handlers import init_done
from agentwake.observability import inject_lambda_context, metrics
from agentwake.product.channel_callback import handle
from agentwake.settings import get_settings


@inject_lambda_context
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle(event, get_settings(), bootstrap.approvals)


init_done()  # the collector runs again (agentwake.handlers)
