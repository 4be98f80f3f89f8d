"""How the operator CLI finds the stack's resources.

Resolution order, first match wins:

1. explicit environment: ``AGENTWAKE_TABLE`` and the other ``AGENTWAKE_*`` variables (``ENV_OUTPUTS``);
2. a running local stack: the state file the local stack plugin reads (``$AGENTWAKE_HOME/local.json``),
   with its endpoint and outputs — unless ``--stack-name`` or ``--profile`` names a real stack;
3. the CloudFormation outputs of ``--stack-name`` (default ``agentwake``) in ``--region`` with
   ``--profile``.

Plain Python (no typer/rich): tests and other tools build an ``OpsContext`` directly.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where used: every command imports this module, few build a context
    from agentwake.jobs.service import JobsService
    from agentwake.product.approvals import ApprovalsService
    from agentwake.product.tasks import TasksService
    from agentwake.store.dynamo import DynamoStore
    from agentwake_ops.plugins import InvokeAsync

DEFAULT_STACK_NAME = "agentwake"


@cache
def env_outputs() -> dict[str, str]:
    """Environment variable -> the stack output it stands for (``ENV_OUTPUTS``).

    The runtime's own variables are named by ``agentwake.settings`` (pydantic), imported on the
    first call: only the commands that discover the stack pay it."""
    from agentwake.settings import Settings

    return {
        Settings.env_name("table_name"): "AgentTableName",
        Settings.env_name("result_queue_url"): "BackgroundResultQueueUrl",
        Settings.env_name("result_dlq_url"): "BackgroundResultDLQUrl",
        Settings.env_name("work_queue_url"): "BackgroundWorkQueueUrl",
        Settings.env_name("work_dlq_url"): "BackgroundWorkDLQUrl",
        Settings.env_name("schedule_group"): "ScheduleGroupName",
        Settings.env_name("cron_failure_queue_url"): "CronFailureQueueUrl",
        "AGENTWAKE_SCHEDULER_DLQ_URL": "SchedulerDLQUrl",
        "AGENTWAKE_SCHEDULER_DLQ_ARN": "SchedulerDLQArn",
        "AGENTWAKE_SCHEDULER_ROLE_ARN": "SchedulerRoleArn",
        "AGENTWAKE_CRON_FUNCTION_ARN": "CronWakeFunctionAliasArn",
    }


def __getattr__(name: str) -> Any:
    """``ENV_OUTPUTS``, built on first access (see ``env_outputs``)."""
    if name == "ENV_OUTPUTS":
        return env_outputs()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: queue role -> the stack output holding its URL
QUEUE_OUTPUTS: dict[str, str] = {
    "results": "BackgroundResultQueueUrl",
    "results-dlq": "BackgroundResultDLQUrl",
    "work": "BackgroundWorkQueueUrl",
    "work-dlq": "BackgroundWorkDLQUrl",
    "cron-failures": "CronFailureQueueUrl",
    "scheduler-dlq": "SchedulerDLQUrl",
}
QUEUE_ROLES = tuple(QUEUE_OUTPUTS)


class OpsError(Exception):
    """A problem the operator can fix (missing resource, bad input): shown as one line, no traceback."""


@dataclass(frozen=True)
class OpsOptions:
    """The CLI's global options. ``stack_name`` None means "not given" (the default name applies)."""

    stack_name: str | None = None
    region: str | None = None
    profile: str | None = None

    @property
    def effective_stack_name(self) -> str:
        return self.stack_name or DEFAULT_STACK_NAME


@dataclass
class Discovery:
    """Where the resources were found, and their values as stack outputs."""

    source: str  # "env" | "local" | "cloudformation"
    description: str
    outputs: dict[str, str]
    region: str | None = None
    endpoint_url: str | None = None
    local_state: dict[str, Any] | None = None
    #: env discovery with an endpoint: how to find out, when needed, whether a local stack runs there
    read_local_state: Callable[[], dict[str, Any] | None] | None = None
    #: the functions' AGENTWAKE_* settings as far as discovery learns them (agentwake_ops.stack_settings)
    settings: dict[str, str] = field(default_factory=dict)


@dataclass
class OpsContext:
    """Everything the CLI commands work with."""

    store: DynamoStore
    sqs: Any
    queues: dict[str, str]
    jobs: JobsService
    tasks: TasksService
    invoke_async: InvokeAsync
    #: approval requests: reads and the one decision path (``ApprovalsService``)
    approvals: ApprovalsService = None  # type: ignore[assignment]
    description: str = ""
    outputs: dict[str, str] = field(default_factory=dict)
    #: the functions' AGENTWAKE_* settings (secret prefixes, outbound policy): what configs are checked by
    settings: dict[str, str] = field(default_factory=dict)
    #: where the resources were found: "env", "local" or "cloudformation" (``Discovery.source``)
    source: str = ""
    #: seconds a DLQ scan holds each message it received (renewed as the scan goes; see sqs_scan)
    scan_hold_seconds: int = 60
    _arns: dict[str, str] = field(default_factory=dict, repr=False)

    def queue_url(self, role: str) -> str:
        url = self.queues.get(role)
        if not url:
            output = QUEUE_OUTPUTS.get(role, role)
            raise OpsError(
                f"the {role} queue is unknown ({description_hint(output)}); found resources via {self.description}"
            )
        return url

    def has_queue(self, role: str) -> bool:
        return bool(self.queues.get(role))

    def queue_arn(self, role: str) -> str:
        url = self.queue_url(role)
        if url not in self._arns:
            attrs = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]
            self._arns[url] = attrs["QueueArn"]
        return self._arns[url]


def description_hint(output: str) -> str:
    env = next((env for env, out in env_outputs().items() if out == output), None)
    return f"stack output {output} / {env}" if env else f"stack output {output}"


# --------------------------------------------------------------------------------------------
# discovery


def discover(
    options: OpsOptions,
    env: Mapping[str, str] | None = None,
    *,
    read_local_state: Callable[[], dict[str, Any] | None] | None = None,
    session_factory: Callable[..., Any] | None = None,
) -> Discovery:
    """Find the resources (see the module docstring). Raises OpsError saying what to do."""
    from agentwake_ops import stack_settings

    env = os.environ if env is None else env

    outputs = {output: env[name] for name, output in env_outputs().items() if env.get(name)}
    if "AgentTableName" in outputs:
        region = options.region or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
        endpoint = env.get("AWS_ENDPOINT_URL") or None
        # whether that endpoint is a running local stack matters only to a command that invokes a
        # function (redrive of a cron failure, jobs run-now): asked then, not on every command
        return Discovery(
            "env",
            "the AGENTWAKE_* environment variables",
            outputs,
            region,
            endpoint,
            None,
            read_local_state=read_local_state or _read_local_state,
            settings=stack_settings.from_env(env),
        )

    if options.stack_name is None and options.profile is None:
        state = (read_local_state or _read_local_state)()
        if state:
            local_outputs = {k: str(v) for k, v in (state.get("outputs") or {}).items() if v is not None}
            return Discovery(
                "local",
                f"the local stack at {state['endpoint_url']} (stack {state.get('stack_name', '?')})",
                local_outputs,
                options.region or state.get("region"),
                state["endpoint_url"],
                state,
                settings=stack_settings.from_local_state(state),
            )

    stack = options.effective_stack_name
    session = (session_factory or _boto3_session)(options.profile, options.region)
    region = options.region or getattr(session, "region_name", None) or env.get("AWS_REGION")
    reason = None
    stack_outputs: dict[str, str] = {}
    parameters: list[dict[str, Any]] = []
    stack_id: str | None = None
    if not region:
        reason = "no AWS region is configured"
    else:
        try:
            resp = session.client("cloudformation", region_name=region).describe_stacks(StackName=stack)
            for item in resp["Stacks"][0].get("Outputs", []):
                stack_outputs[item["OutputKey"]] = item["OutputValue"]
            parameters = resp["Stacks"][0].get("Parameters", [])
            stack_id = resp["Stacks"][0].get("StackId")
        except Exception as exc:  # no credentials, no such stack, no network: all mean "not found"
            reason = _one_line(exc)
    if stack_outputs and "AgentTableName" in stack_outputs:
        return Discovery(
            "cloudformation",
            f"CloudFormation stack '{stack}' in {region}",
            stack_outputs,
            region,
            None,
            None,
            settings=stack_settings.from_parameters(parameters, stack_id),
        )
    if stack_outputs and reason is None:
        reason = "the stack has no AgentTableName output (is it an agentwake stack?)"
    raise OpsError(
        f"no local stack is running (start one with `agentwake local up`) and no stack outputs were found "
        f"for stack '{stack}' in region {region or '(none)'}"
        + (f" ({reason})" if reason else "")
        + "; set AWS_PROFILE/--region or the AGENTWAKE_* variables"
    )


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _read_local_state() -> dict[str, Any] | None:
    """The running local stack, through the plugin that registered it (none: the `local` extra is
    not installed, so there can be no local stack)."""
    from agentwake_ops.plugins import local_stack

    hooks = local_stack()
    return hooks.read_state() if hooks is not None else None


def _boto3_session(profile: str | None, region: str | None) -> Any:
    import boto3

    try:
        return boto3.session.Session(profile_name=profile, region_name=region)
    except Exception as exc:  # ProfileNotFound
        raise OpsError(f"cannot use AWS profile {profile!r}: {_one_line(exc)}") from exc


# --------------------------------------------------------------------------------------------
# building the context


def build_context(
    discovery: Discovery,
    options: OpsOptions | None = None,
    *,
    invoke_async: InvokeAsync | None = None,
    session: Any = None,
) -> OpsContext:
    """Clients, store and services for the discovered resources."""
    from agentwake.jobs.service import JobsService, JobTargets
    from agentwake.product.approvals import ApprovalsService
    from agentwake.product.tasks import TasksService
    from agentwake.store.dynamo import DynamoStore
    from agentwake.store.schedules import Schedules

    options = options or OpsOptions()
    outputs = discovery.outputs
    if session is None:
        if discovery.source == "local":
            session = _local_session(discovery.region)
        else:
            session = _boto3_session(options.profile, discovery.region)
    from botocore.config import Config

    config = Config(retries={"mode": "standard", "max_attempts": 3}, connect_timeout=5, read_timeout=20)
    # SQS: what this CLI sends is built by its own code (queue URLs, receipt handles, batches of at
    # most ten), so botocore's type check of every call's parameters is not repeated: it was about 9 % of
    # each call's CPU, and a DLQ scan of 10,000 messages is 2,000 calls (SQS still checks them)
    sqs_config = config.merge(Config(parameter_validation=False))
    clients: dict[str, Any] = {}

    def client(service: str) -> Any:
        if service not in clients:
            kwargs: dict[str, Any] = {"config": config if service != "sqs" else sqs_config}
            if discovery.region:
                kwargs["region_name"] = discovery.region
            if discovery.source == "local" and discovery.endpoint_url:
                kwargs["endpoint_url"] = discovery.endpoint_url
            clients[service] = session.client(service, **kwargs)
        return clients[service]

    table = outputs.get("AgentTableName")
    if not table:
        raise OpsError(f"the agent table is unknown ({description_hint('AgentTableName')})")
    # lazy: a command that never reads the table (most DLQ listings) never builds its client
    store = DynamoStore(table, client=_Lazy(lambda: client("dynamodb")))
    sqs = client("sqs")
    queues = {role: outputs[out] for role, out in QUEUE_OUTPUTS.items() if outputs.get(out)}

    if invoke_async is None:
        hooks = None
        if discovery.local_state is not None:
            from agentwake_ops.plugins import local_stack

            hooks = local_stack()
        if hooks is not None and discovery.local_state is not None:
            invoke_async = hooks.invoker(discovery.local_state)
        elif discovery.read_local_state is not None and discovery.endpoint_url:
            invoke_async = _InvokerForEndpoint(
                discovery.endpoint_url, discovery.read_local_state, LambdaInvoker(outputs, lambda: client("lambda"))
            )
        else:
            invoke_async = LambdaInvoker(outputs, lambda: client("lambda"))

    targets = None
    if outputs.get("CronWakeFunctionAliasArn") and outputs.get("SchedulerRoleArn"):
        targets = JobTargets(
            cron_function_arn=outputs["CronWakeFunctionAliasArn"],
            scheduler_role_arn=outputs["SchedulerRoleArn"],
            scheduler_dlq_arn=outputs.get("SchedulerDLQArn") or None,
        )
    chosen = invoke_async

    def run_now_invoker(_function_arn: str, payload: dict[str, Any]) -> None:
        # `jobs run-now` goes through the same async invocation as a redrive (local or Lambda)
        chosen("CronWakeFunction", payload)

    jobs = JobsService(
        store,
        Schedules(outputs.get("ScheduleGroupName"), client=_Lazy(lambda: client("scheduler"))),
        targets,
        invoker=run_now_invoker,
        # the CLI flushes no Powertools metrics: `jobs show` is where an operator reads the counts
        metric=lambda _name, _value: None,
    )
    from agentwake.store.queues import WorkQueue

    # a task registered here gets its deadline check on the work queue, like one the product API registers
    work_queue = WorkQueue(outputs.get("BackgroundWorkQueueUrl") or None, client=sqs)
    tasks = TasksService(store, queues.get("results"), sqs=sqs, work_queue=work_queue)

    # an operator's decision nudges the parked run through the work queue, as the product API's does
    approvals = ApprovalsService(store, work_queue=work_queue)
    return OpsContext(
        store=store,
        sqs=sqs,
        queues=queues,
        jobs=jobs,
        tasks=tasks,
        approvals=approvals,
        invoke_async=invoke_async,
        description=discovery.description,
        outputs=dict(outputs),
        settings=dict(discovery.settings),
        source=discovery.source,
    )


def resolve_context(
    options: OpsOptions | None = None,
    env: Mapping[str, str] | None = None,
    *,
    invoke_async: InvokeAsync | None = None,
) -> OpsContext:
    options = options or OpsOptions()
    return build_context(discover(options, env), options, invoke_async=invoke_async)


def _local_session(region: str | None) -> Any:
    """Fake credentials for the local moto endpoint (never the developer's ~/.aws)."""
    import boto3

    return boto3.session.Session(
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        aws_session_token="testing",
        region_name=region or "us-east-1",
    )


class _Lazy:
    """Create a client on first use: commands that never schedule need no scheduler client."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        self._factory = factory
        self._obj: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._obj is None:
            self._obj = self._factory()
        return getattr(self._obj, name)


# --------------------------------------------------------------------------------------------
# asynchronous invocation


class _InvokerForEndpoint:
    """Invokes on the local stack running at ``endpoint`` if there is one, else through Lambda;
    decided on the first invocation (reading the local stack's state costs a command nothing
    until it invokes)."""

    def __init__(
        self, endpoint: str, read_local_state: Callable[[], dict[str, Any] | None], fallback: InvokeAsync
    ) -> None:
        self.endpoint = endpoint
        self.read_local_state = read_local_state
        self.fallback = fallback
        self._chosen: InvokeAsync | None = None

    def __call__(self, logical_id: str, payload: dict[str, Any]) -> Any:
        if self._chosen is None:
            self._chosen = self.fallback
            state = self.read_local_state()
            if state and state.get("endpoint_url") == self.endpoint:
                from agentwake_ops.plugins import local_stack

                hooks = local_stack()
                if hooks is not None:
                    self._chosen = hooks.invoker(state)
        return self._chosen(logical_id, payload)


class LambdaInvoker:
    """``lambda:Invoke`` with InvocationType=Event on the function's alias (or its ARN)."""

    def __init__(self, outputs: Mapping[str, str], client: Callable[[], Any]) -> None:
        self.outputs = outputs
        self.client = client

    def target(self, logical_id: str) -> str:
        for key in (f"{logical_id}AliasArn", f"{logical_id}Arn"):
            if self.outputs.get(key):
                return self.outputs[key]
        hint = " / AGENTWAKE_CRON_FUNCTION_ARN" if logical_id == "CronWakeFunction" else ""
        raise OpsError(f"the ARN of {logical_id} is unknown (stack output {logical_id}AliasArn{hint})")

    def __call__(self, logical_id: str, payload: dict[str, Any]) -> str:
        arn = self.target(logical_id)
        resp = self.client().invoke(FunctionName=arn, InvocationType="Event", Payload=json.dumps(payload).encode())
        return f"queued on {arn} (HTTP {resp.get('StatusCode', '?')})"
