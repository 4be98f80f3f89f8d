"""Cold start: importing a handler must not pull in HTTP clients, provider SDK adapters or CLI libraries.

Measured for the record with ``python -X importtime -c "import agentwake.handlers.background_result"``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

FORBIDDEN_TOP = {"typer", "rich", "click", "requests", "httpx", "moto", "urllib3"}
FORBIDDEN_MODULES = {
    "agentwake.agent.providers.openai_compat",
    "agentwake.agent.providers.bedrock",
    "agentwake.delivery.webhook",
    "agentwake.delivery.intents",
    "agentwake.delivery.route",
    "agentwake.delivery.retry",
    "agentwake.delivery.websocket",
    "agentwake.delivery.slack",
    "agentwake.delivery.telegram",
    "agentwake.delivery.sns",
    "agentwake.store.push",
    "agentwake.product.push",
    "agentwake.trust.outbound",
    "agentwake.agent.tools.config",
    "agentwake.agent.tools.http",
    "agentwake.agent.tools.entry_points",
    "fastjsonschema",
    "agentwake_ops.cli",
    "urllib.request",
    "http.client",
}


@pytest.mark.parametrize(
    "handler",
    ["agentwake.handlers.background_result", "agentwake.handlers.cron_wake", "agentwake.handlers.background_work"],
)
def test_handler_import_stays_light(handler: str) -> None:
    # GIVEN a fresh interpreter WHEN it imports the handler as Lambda's cold start does
    code = f"import sys, json, {handler}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout))
    # THEN nothing heavy that a session might not use is loaded
    assert {m.split(".")[0] for m in loaded} & FORBIDDEN_TOP == set()
    assert loaded & FORBIDDEN_MODULES == set()


#: every Lambda entry point: the modules of agentwake/handlers (a new one without ``init_done()``
#: would run with the collector off, and fails the test below)
HANDLERS = sorted(
    f"agentwake.handlers.{path.stem}"
    for path in (Path(__file__).resolve().parents[2] / "functions" / "agentwake" / "handlers").glob("*.py")
    if path.stem != "__init__"
)


@pytest.mark.parametrize("handler", HANDLERS)
def test_no_collection_runs_during_a_handler_s_import_and_the_collector_runs_after_it(handler: str) -> None:
    # GIVEN a fresh interpreter that counts the collector's runs WHEN it imports the handler
    code = (
        "import gc, json\n"
        "runs = []\n"
        "gc.callbacks.append(lambda phase, info: phase == 'start' and runs.append(info['generation']))\n"
        f"import {handler}\n"
        "print(json.dumps([len(runs), gc.isenabled(), gc.get_freeze_count()]))"
    )
    env = {**os.environ, "AWS_DEFAULT_REGION": "us-east-1", "AGENTWAKE_TABLE": "t", "AGENTWAKE_SCHEDULE_GROUP": "g"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    collections, enabled, frozen = json.loads(out.stdout)
    # THEN no collection walked the objects the import made (agentwake.handlers pauses the collector;
    # the package's own import may start one young collection before its first line: 82 without it)
    assert collections <= 1
    # AND the collector runs again, past what the import made (frozen: the process keeps it for good)
    assert enabled and frozen > 10_000


def test_a_webhook_or_log_channel_loads_neither_routes_nor_intents() -> None:
    # GIVEN a fresh interpreter that builds a webhook and a log channel as a run does: with the
    # run's journal at hand as the intent log
    code = (
        "import sys, json, agentwake.handlers.background_result\n"
        "from agentwake.delivery.factory import build_channel\n"
        "from agentwake.delivery.kit import ChannelKit\n"
        "kit = ChannelKit(settings=None, intents=object())\n"
        "built = [build_channel({'type': 'webhook', 'url': 'https://example.com/hook'}, kit),\n"
        "         build_channel({'type': 'log'}, kit)]\n"
        "delivery = sorted(vars(sys.modules['agentwake.delivery']))\n"
        "print(json.dumps({'modules': sorted(sys.modules), 'built': [type(c).__name__ for c in built], 'delivery': delivery}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    result = json.loads(out.stdout)
    # THEN the channels are the adapters themselves, and neither the route nor the intent code was
    # loaded, nor any other channel's
    assert result["built"] == ["WebhookChannel", "LogChannel"]
    assert {"agentwake.delivery.intents", "agentwake.delivery.route"} & set(result["modules"]) == set()
    assert CHANNEL_MODULES & set(result["modules"]) == set()
    # AND the in-doubt send's intent (Slack's and Telegram's) is not built with the delivery package:
    # it comes with the intents' module (issue 37: cold init not worse than before)
    assert "Intent" not in result["delivery"]


#: the channels' modules a session loads only when it names them (docs/channels.md, design 34 §12)
CHANNEL_MODULES = {
    "agentwake.delivery.websocket",
    "agentwake.delivery.slack",
    "agentwake.delivery.telegram",
    "agentwake.delivery.sns",
    "agentwake.delivery.route",
    "agentwake.delivery.intents",
    "agentwake.delivery.retry",
    "agentwake.store.push",
    "agentwake.product.push",
}

#: a webhook wake, then a log wake, end to end on moto in a fresh interpreter: the webhook's receiver
#: on 127.0.0.1; prints the modules loaded, the clients made and what the receiver got
_WEBHOOK_AND_LOG_WAKES = """
import json, sys
from moto import mock_aws
from agentwake.store import aws
made = []
real = aws._session().create_client
aws._session().create_client = lambda service, **kw: made.append(service) or real(service, **kw)
import boto3
from agentwake.bootstrap import reset_caches
from agentwake.settings import Settings
from agentwake.store.dynamo import DynamoStore
from agentwake.wake.background import wake_for_background_result
from agentwake.wake.spec import WakeDeps
from tests.support.aws import create_resources
from tests.support.builders import message, seed_session, seed_task
from tests.support.receiver import CountingReceiver
channels = sorted(m for m in sys.modules if m in CHANNELS)
with mock_aws(), CountingReceiver() as receiver:
    res = create_resources()
    import os
    os.environ.update(res.env())
    reset_caches()
    store = DynamoStore(res.table, client=boto3.client("dynamodb", region_name="us-east-1"))
    deps = WakeDeps(store=store, settings=Settings.from_env())
    seed_session(store, "s1", delivery={"type": "webhook", "url": receiver.url})
    seed_session(store, "s2", delivery={"type": "log"})
    seed_task(store, "t1", "s1")
    seed_task(store, "t2", "s2")
    # the seeding (and the local stack) may have loaded the jobs' and runs' models: the wakes may not
    for package, name in (("agentwake.domain", "run_models"), ("agentwake.agent", "gate")):
        sys.modules.pop(f"{package}.{name}", None)
        vars(sys.modules[package]).pop(name, None)
    wake_for_background_result(message("t1", "s1"), deps)
    wake_for_background_result(message("t2", "s2"), deps)
    got = [r["delivery_id"] for r in receiver.received]
models = sorted(vars(sys.modules["agentwake.domain.models"]))
models += ["agentwake.agent.gate"] if "agentwake.agent.gate" in sys.modules else []
print(json.dumps({"before": channels, "modules": sorted(sys.modules), "clients": made, "received": got, "models": models}))
"""


def test_a_webhook_or_log_wake_loads_none_of_the_other_channels() -> None:
    # GIVEN a fresh interpreter in which nothing has loaded a channel module yet
    env = {
        **os.environ,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AGENTWAKE_OUTBOUND_ALLOW_LOOPBACK": "1",
        "AGENTWAKE_OUTBOUND_ALLOW_HTTP": "1",
        "POWERTOOLS_LOG_LEVEL": "CRITICAL",
    }
    env.pop("AWS_ENDPOINT_URL", None)
    code = f"CHANNELS = {sorted(CHANNEL_MODULES)!r}\n" + _WEBHOOK_AND_LOG_WAKES
    # WHEN a session with a webhook and one with the log channel are woken, each delivering once
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env, cwd=root)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    # THEN the webhook delivered (the wakes really ran their deliveries)
    assert result["received"] == ["bg:t1#0#0"]
    assert result["before"] == []
    # AND neither wake loaded the WebSocket, Slack, Telegram or SNS channel, routes, intents, the
    # platforms' retry policy or the push API's store, nor made an SNS or management-API client
    assert CHANNEL_MODULES & set(result["modules"]) == set()
    assert {"sns", "apigatewaymanagementapi"} & set(result["clients"]) == set()
    # AND neither one-step wake built the models of jobs, job fires, runs or failures: it found no
    # earlier attempt's run record and failed no attempt (issue 37: cold init not worse than before)
    assert "agentwake.domain.run_models" not in result["modules"]
    assert RUN_MODELS & set(result["models"]) == set()
    assert "agentwake.agent.gate" not in result["models"]  # nor a gate: no tool of theirs has an approval rule


def test_a_background_wake_that_does_not_wait_loads_no_wait_or_secret_machinery() -> None:
    # GIVEN a fresh interpreter WHEN it imports the background handler
    code = "import sys, json, agentwake.handlers.background_result; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout))
    # THEN the session-wait machinery and secret resolution wait for the records and sessions that use them
    assert "agentwake.session.waiting" not in loaded
    assert "agentwake.trust.secrets" not in loaded


@pytest.mark.parametrize(
    "handler",
    ["agentwake.handlers.background_result", "agentwake.handlers.cron_wake", "agentwake.handlers.background_work"],
)
def test_cold_start_builds_one_dynamodb_client_and_nothing_it_may_not_use(handler: str) -> None:
    # GIVEN a fresh interpreter with the function's environment
    code = (
        f"import sys, json, {handler}\n"
        "from agentwake import bootstrap\n"
        "from agentwake.store import aws\n"
        "made = []\n"
        "real = aws._session().create_client\n"
        "aws._session().create_client = lambda service, **kw: made.append(service) or real(service, **kw)\n"
        "bootstrap.wake_deps()\n"
        "models = sorted(vars(sys.modules['agentwake.domain.models']))\n"
        "tools = sorted(vars(sys.modules.get('agentwake.agent.tools', sys)))\n"
        "print(json.dumps({'modules': sorted(sys.modules), 'clients': made, 'models': models, 'tools': tools}))\n"
    )
    env = {
        **os.environ,
        "AGENTWAKE_TABLE": "t",
        "AGENTWAKE_SCHEDULE_GROUP": "g",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }
    env.pop("AWS_ENDPOINT_URL", None)
    # WHEN it imports the handler and builds what the first invocation builds (no AWS call is made)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    result = json.loads(out.stdout)
    loaded = set(result["modules"])
    # THEN exactly one client was made, for DynamoDB: SQS and Scheduler clients wait for their paths
    assert result["clients"] == ["dynamodb"]
    # AND neither boto3's resource layer, nor X-Ray, nor Powertools' parser models were loaded
    # (Powertools' batch module loads its pydantic models if pydantic is imported before it)
    tops = {m.split(".")[0] for m in loaded}
    assert "boto3" not in tops and "s3transfer" not in tops
    assert "aws_xray_sdk" not in tops
    assert "aws_lambda_powertools.utilities.parser" not in loaded
    # AND neither the approvals' store and models nor the tasks service: loaded by the first run
    # that parks or starts a task, not by every cold start (issue 37: cold init not worse than before)
    assert not loaded & {"agentwake.store.approvals", "agentwake.domain.approvals", "agentwake.product.tasks"}
    # AND not the models of jobs, job fires, runs and failures: a first attempt validates none of them
    assert "agentwake.domain.run_models" not in loaded
    assert RUN_MODELS & set(result["models"]) == set()
    # AND not a gated tool call's gate or park request: built by a session whose tools have approval rules
    assert "agentwake.agent.gate" not in loaded
    assert "Gate" not in result["tools"]


#: the models a one-step background wake never validates (``agentwake.domain.run_models``)
RUN_MODELS = {"Job", "JobFire", "RunRecord", "FailureRecord"}


def test_the_narrow_service_check_answers_as_botocore_does_for_every_name() -> None:
    # GIVEN botocore's own list of services, and the runtime's loader that checks one name at a time
    from botocore.loaders import Loader

    from agentwake.store import aws

    aws.reset_clients()
    loader = aws._session().get_component("data_loader")
    for type_name in ("service-2", "endpoint-rule-set-1"):
        every = Loader.list_available_services(loader, type_name)
        narrow = loader.list_available_services(type_name)
        # THEN every service botocore knows is known, and names it does not know are not
        assert len(every) > 300
        assert [name for name in every if name not in narrow] == []
        assert all(name not in narrow for name in ("nonesuch", "", "dynamodb/2012-08-10", "../dynamodb", 7))
        # AND a listing (botocore's error message joins it) is botocore's own
        assert list(narrow) == every
    aws.reset_clients()


def test_the_product_api_builds_its_services_without_the_wake_or_the_agent() -> None:
    # GIVEN a fresh interpreter with ProductApiFunction's environment
    code = (
        "import sys, json, agentwake.handlers.product_api\n"
        "from agentwake import bootstrap\n"
        "bootstrap.sessions(), bootstrap.tasks()\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    env = {
        **os.environ,
        "AGENTWAKE_TABLE": "t",
        "AGENTWAKE_RESULT_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/results",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }
    # WHEN it imports the handler and builds the services its routes use (no AWS call is made)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    loaded = set(json.loads(out.stdout))
    # THEN of the wake it loads only the result message's contract, and nothing of the agent, its
    # providers or tools (a turn's end imports the hand-off when it happens)
    assert {m for m in loaded if m.startswith("agentwake.wake.")} <= {"agentwake.wake.messages"}
    assert not {m for m in loaded if m.startswith("agentwake.agent")}
    assert {m.split(".")[0] for m in loaded} & {"typer", "rich", "click", "moto", "agentwake_ops"} == set()


def test_the_channel_callback_loads_neither_the_wake_nor_the_agent_nor_a_channel() -> None:
    # GIVEN a fresh interpreter with ChannelCallbackFunction's environment
    code = (
        "import sys, json, agentwake.handlers.channel_callback\n"
        "from agentwake import bootstrap\n"
        "bootstrap.approvals()\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    env = {
        **os.environ,
        "AGENTWAKE_TABLE": "t",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }
    # WHEN it imports the handler and builds the approvals service (no AWS call is made)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    loaded = set(json.loads(out.stdout))
    # THEN nothing of the wake, the agent or the channels' adapters is loaded: a click is verified and
    # decided on a small cold path (the HTTP exchange for the chat's answer is imported when it is made)
    assert not {m for m in loaded if m.startswith(("agentwake.wake.", "agentwake.agent"))}
    assert loaded & (FORBIDDEN_MODULES - {"urllib.request", "http.client"}) == set()  # botocore's own
    assert {m.split(".")[0] for m in loaded} & {"typer", "rich", "click", "moto", "agentwake_ops"} == set()
