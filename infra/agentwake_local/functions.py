"""The functions of a template, as the local Lambda runtime needs them (``FunctionSpec``).

Functions are not created in moto: they run in-process (``lambda_runtime``). Their names and ARNs
are computed (and SAM's implicit resources declared: ``FooRole``, ``Foo.Alias``, ``Foo.Version``),
their SQS events and EventInvokeConfig are read from SAM ``Events``/``EventInvokeConfig`` (with
``Globals``) or from plain ``AWS::Lambda::EventSourceMapping``/``EventInvokeConfig`` resources, and
their SAM ``Type: HttpApi`` events into ``http_routes`` (served by ``http_api.LocalHttpApi``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentwake_local.server import DEFAULT_REGION
from agentwake_local.template import (
    NO_VALUE,
    Resolver,
    Resource,
    Template,
    TemplateError,
    as_bool,
    as_int,
    physical_name,
    scalar_str,
)

logger = logging.getLogger(__name__)

LATEST = "$LATEST"
SAM_FUNCTION = "AWS::Serverless::Function"
LAMBDA_FUNCTION = "AWS::Lambda::Function"
FUNCTION_TYPES = (SAM_FUNCTION, LAMBDA_FUNCTION)
EVENT_SOURCE_MAPPING = "AWS::Lambda::EventSourceMapping"
EVENT_INVOKE_CONFIG = "AWS::Lambda::EventInvokeConfig"


@dataclass
class SqsEventSource:
    """One SQS event source mapping of a function (a SAM ``Type: SQS`` event or an ESM resource)."""

    name: str
    queue_arn: str
    queue_logical_id: str | None = None
    queue_url: str | None = None
    batch_size: int = 10
    function_response_types: tuple[str, ...] = ()
    maximum_concurrency: int | None = None
    maximum_batching_window_seconds: int = 0
    enabled: bool = True
    filter_criteria: dict[str, Any] | None = None

    @property
    def report_batch_item_failures(self) -> bool:
        return "ReportBatchItemFailures" in self.function_response_types


@dataclass(frozen=True)
class HttpApiRoute:
    """One SAM ``Type: HttpApi`` event: ``METHOD /path/{param}`` on the API ``api_id`` (a logical id)."""

    name: str
    method: str
    path: str
    api_id: str | None = None
    #: the route's own ``Auth: Authorizer`` (``NONE``: a route without the API's IAM authorizer)
    authorizer: str | None = None


@dataclass
class Destination:
    """An async invocation destination: ``type`` is SQS, SNS, Lambda, EventBridge or S3."""

    type: str
    arn: str
    logical_id: str | None = None
    url: str | None = None  # the queue URL for SQS destinations in this stack


@dataclass
class EventInvokeConfig:
    maximum_retry_attempts: int = 2
    maximum_event_age_seconds: int = 21600
    on_failure: Destination | None = None
    on_success: Destination | None = None


@dataclass
class FunctionSpec:
    """Everything the local Lambda runtime needs to run one function of the template."""

    logical_id: str
    name: str
    arn: str
    handler: str
    code_uri: Path
    runtime: str = "python3.12"
    timeout: int = 3
    memory_size: int = 128
    environment: dict[str, str] = field(default_factory=dict)
    sqs_events: list[SqsEventSource] = field(default_factory=list)
    http_routes: list[HttpApiRoute] = field(default_factory=list)
    event_invoke_config: EventInvokeConfig | None = None
    alias: str | None = None
    region: str = DEFAULT_REGION

    @property
    def memory(self) -> int:
        return self.memory_size

    @property
    def log_group_name(self) -> str:
        return f"/aws/lambda/{self.name}"

    @property
    def async_config(self) -> EventInvokeConfig:
        """EventInvokeConfig, or Lambda's defaults (2 retries, no destination) when none is set."""
        return self.event_invoke_config or EventInvokeConfig()


def _merge_globals(global_value: Any, own_value: Any) -> Any:
    """SAM Globals: maps merge, lists add up, scalars (and intrinsics) from the function win."""
    if _is_intrinsic(global_value) or _is_intrinsic(own_value):
        return own_value
    if isinstance(global_value, dict) and isinstance(own_value, dict):
        merged = dict(global_value)
        for key, value in own_value.items():
            merged[key] = _merge_globals(global_value[key], value) if key in global_value else value
        return merged
    if isinstance(global_value, list) and isinstance(own_value, list):
        return global_value + own_value
    return own_value


def _is_intrinsic(value: Any) -> bool:
    if not isinstance(value, dict) or len(value) != 1:
        return False
    key = str(next(iter(value)))
    return key in ("Ref", "Condition") or key.startswith("Fn::")


def _function_properties(template: Template, spec: dict[str, Any]) -> dict[str, Any]:
    own = spec.get("Properties") or {}
    if spec.get("Type") == SAM_FUNCTION:
        return _merge_globals(template.globals_function, own)
    return own


def declare_function(
    template: Template,
    resolver: Resolver,
    logical_id: str,
    spec: dict[str, Any],
    resources: dict[str, Resource],
    implicit: dict[str, Resource],
) -> None:
    props = _function_properties(template, spec)
    name = physical_name(template, logical_id, resolver.resolve(props.get("FunctionName")), 64)
    arn = template.arn("lambda", f"function:{name}")
    rtype = spec["Type"]
    resources[logical_id] = Resource(logical_id, rtype, name, {"Arn": arn}, provisioned=False)
    if rtype != SAM_FUNCTION:
        return
    alias = resolver.resolve(props.get("AutoPublishAlias"))
    if alias:
        alias_arn = f"{arn}:{alias}"
        version_arn = f"{arn}:1"
        implicit[f"{logical_id}.Alias"] = Resource(
            f"{logical_id}.Alias", "AWS::Lambda::Alias", alias_arn, {"Arn": alias_arn}
        )
        implicit[f"{logical_id}Alias{alias}"] = implicit[f"{logical_id}.Alias"]
        implicit[f"{logical_id}.Version"] = Resource(
            f"{logical_id}.Version", "AWS::Lambda::Version", version_arn, {"Version": "1"}
        )
    if not props.get("Role"):
        role_name = physical_name(template, f"{logical_id}Role", None, 64)
        implicit[f"{logical_id}Role"] = Resource(
            f"{logical_id}Role",
            "AWS::IAM::Role",
            role_name,
            {"Arn": template.arn("iam", f"role/{role_name}", region=False)},
        )


def _queue_by_arn(resources: Mapping[str, Resource], arn: str) -> Resource | None:
    for resource in resources.values():
        if resource.type == "AWS::SQS::Queue" and resource.attributes.get("Arn") == arn:
            return resource
    return None


def _resource_by_arn(resources: Mapping[str, Resource], arn: str) -> Resource | None:
    for resource in resources.values():
        if arn in (resource.attributes.get("Arn"), resource.ref):
            return resource
    return None


def function_spec(
    template: Template,
    resolver: Resolver,
    logical_id: str,
    spec: dict[str, Any],
    resources: dict[str, Resource],
) -> FunctionSpec:
    props = _function_properties(template, spec)

    def get(key: str, default: Any = None) -> Any:
        try:
            value = resolver.resolve(props.get(key, default))
        except TemplateError as exc:
            raise TemplateError(f"{logical_id}.{key}: {exc}") from exc
        return default if value is NO_VALUE else value

    resource = resources[logical_id]
    handler = get("Handler")
    if not handler:
        raise TemplateError(f"{logical_id} has no Handler")
    code_uri = get("CodeUri") if spec["Type"] == SAM_FUNCTION else None
    code_dir = template.base_dir / code_uri if isinstance(code_uri, str) else template.base_dir
    variables = (get("Environment") or {}).get("Variables") or {}
    function = FunctionSpec(
        logical_id=logical_id,
        name=resource.ref,
        arn=resource.attributes["Arn"],
        handler=str(handler),
        code_uri=code_dir.resolve(),
        runtime=str(get("Runtime") or "python3.12"),
        timeout=as_int(get("Timeout"), 3) or 3,
        memory_size=as_int(get("MemorySize"), 128) or 128,
        environment={str(k): scalar_str(v) for k, v in variables.items()},
        alias=get("AutoPublishAlias") if spec["Type"] == SAM_FUNCTION else None,
        region=template.region,
    )
    if spec["Type"] == SAM_FUNCTION:
        for event_name, event in (props.get("Events") or {}).items():
            if (event or {}).get("Type") == "HttpApi":
                function.http_routes.append(_http_route(event_name, event.get("Properties") or {}))
                continue
            if (event or {}).get("Type") != "SQS":
                continue
            event_props = resolver.resolve(event.get("Properties") or {})
            function.sqs_events.append(_sqs_event(event_name, event_props, resources, logical_id))
        config = props.get("EventInvokeConfig")
        if config:
            function.event_invoke_config = _event_invoke_config(resolver.resolve(config), resources)
    return function


def _http_route(name: str, raw: Mapping[str, Any]) -> HttpApiRoute:
    api = raw.get("ApiId")
    api_id = api.get("Ref") if isinstance(api, dict) else None  # the logical id (None: the implicit API)
    method, path = str(raw.get("Method") or "ANY").upper(), raw.get("Path") or "/{proxy+}"
    if method == "X-AMAZON-APIGATEWAY-ANY-METHOD":
        method = "ANY"
    auth = raw.get("Auth")
    authorizer = auth.get("Authorizer") if isinstance(auth, dict) else None
    return HttpApiRoute(
        name=name,
        method=method,
        path=str(path),
        api_id=api_id,
        authorizer=str(authorizer) if isinstance(authorizer, str) else None,
    )


def _sqs_event(
    name: str, props: Mapping[str, Any], resources: Mapping[str, Resource], function_id: str
) -> SqsEventSource:
    arn = props.get("Queue") or props.get("EventSourceArn")
    if not isinstance(arn, str):
        raise TemplateError(f"{function_id} event {name}: no queue ARN")
    queue = _queue_by_arn(resources, arn)
    if queue is None:
        logger.warning("%s event %s: queue %s is not in this template; it is not polled", function_id, name, arn)
    if props.get("FilterCriteria"):
        logger.warning("%s event %s: FilterCriteria is not applied locally", function_id, name)
    scaling = props.get("ScalingConfig") or {}
    return SqsEventSource(
        name=name,
        queue_arn=arn,
        queue_logical_id=queue.logical_id if queue else None,
        queue_url=queue.ref if queue else None,
        batch_size=as_int(props.get("BatchSize"), 10) or 10,
        function_response_types=tuple(props.get("FunctionResponseTypes") or ()),
        maximum_concurrency=as_int(scaling.get("MaximumConcurrency")),
        maximum_batching_window_seconds=as_int(props.get("MaximumBatchingWindowInSeconds"), 0) or 0,
        enabled=as_bool(props.get("Enabled"), True),
        filter_criteria=props.get("FilterCriteria"),
    )


_ARN_SERVICE_TO_DESTINATION = {"sqs": "SQS", "sns": "SNS", "lambda": "Lambda", "events": "EventBridge", "s3": "S3"}


def _destination(raw: Any, resources: Mapping[str, Resource]) -> Destination | None:
    if not raw:
        return None
    arn = raw.get("Destination")
    if not isinstance(arn, str):
        logger.warning("EventInvokeConfig destination without an ARN is not supported locally: %r", raw)
        return None
    parts = arn.split(":")
    dtype = raw.get("Type") or (_ARN_SERVICE_TO_DESTINATION.get(parts[2]) if len(parts) > 2 else None)
    target = _resource_by_arn(resources, arn)
    url = target.ref if target is not None and target.type == "AWS::SQS::Queue" else None
    return Destination(type=str(dtype), arn=arn, logical_id=target.logical_id if target else None, url=url)


def _event_invoke_config(props: Mapping[str, Any], resources: Mapping[str, Resource]) -> EventInvokeConfig:
    destinations = props.get("DestinationConfig") or {}
    return EventInvokeConfig(
        maximum_retry_attempts=as_int(props.get("MaximumRetryAttempts"), 2),  # type: ignore[arg-type]
        maximum_event_age_seconds=as_int(props.get("MaximumEventAgeInSeconds"), 21600),  # type: ignore[arg-type]
        on_failure=_destination(destinations.get("OnFailure"), resources),
        on_success=_destination(destinations.get("OnSuccess"), resources),
    )


def attach_raw_lambda_config(
    template: Template,
    resolver: Resolver,
    raw: Mapping[str, dict[str, Any]],
    functions: dict[str, FunctionSpec],
    resources: dict[str, Resource],
) -> None:
    """Plain CloudFormation ``AWS::Lambda::EventSourceMapping`` / ``EventInvokeConfig`` resources."""

    def target(reference: Any) -> FunctionSpec | None:
        for spec in functions.values():
            if reference in (spec.name, spec.arn, spec.logical_id) or str(reference).startswith(spec.arn + ":"):
                return spec
        return None

    for logical_id, spec in raw.items():
        rtype = spec.get("Type")
        if rtype not in (EVENT_SOURCE_MAPPING, EVENT_INVOKE_CONFIG):
            continue
        props = resolver.resolve(spec.get("Properties") or {})
        function = target(props.get("FunctionName"))
        if function is None:
            logger.warning("%s: function %r is not in this template", logical_id, props.get("FunctionName"))
            continue
        if rtype == EVENT_INVOKE_CONFIG:
            function.event_invoke_config = _event_invoke_config(props, resources)
        elif str(props.get("EventSourceArn", "")).startswith(f"arn:{template.partition}:sqs:"):
            function.sqs_events.append(_sqs_event(logical_id, props, resources, function.logical_id))
