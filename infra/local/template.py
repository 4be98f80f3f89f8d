"""Read a SAM/CloudFormation template, resolve its intrinsics, provision it into the local AWS.

Local equals deployed: the template is the only description of the stack. A resource added to it
appears locally with no code change as long as its type has a provisioner (``provisioners.py``);
other types are skipped (logged at debug) but still answer ``Ref``/``Fn::GetAtt`` with
deterministic fake values, so the resources and functions that refer to them still resolve.

Functions are not created in moto: they run in-process (``lambda_runtime``). Their names and ARNs
are computed, their SQS events and EventInvokeConfig are read into ``FunctionSpec``.
"""

from __future__ import annotations

import base64
import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agentwake_local.server import ACCOUNT_ID, DEFAULT_REGION

logger = logging.getLogger(__name__)

DEFAULT_STACK_NAME = "agentwake-local"
LATEST = "$LATEST"

SAM_FUNCTION = "AWS::Serverless::Function"
LAMBDA_FUNCTION = "AWS::Lambda::Function"
FUNCTION_TYPES = (SAM_FUNCTION, LAMBDA_FUNCTION)
EVENT_SOURCE_MAPPING = "AWS::Lambda::EventSourceMapping"
EVENT_INVOKE_CONFIG = "AWS::Lambda::EventInvokeConfig"


class TemplateError(Exception):
    """The template cannot be read, resolved or provisioned as written."""


class _NoValue:
    """``AWS::NoValue``: the property (or list element) it stands for is removed."""

    def __repr__(self) -> str:
        return "AWS::NoValue"


NO_VALUE: Any = _NoValue()


# --------------------------------------------------------------------------------------------
# YAML with CloudFormation short tags


class _CfnLoader(yaml.SafeLoader):
    """SafeLoader that turns ``!Ref x`` into ``{"Ref": x}``, ``!Sub s`` into ``{"Fn::Sub": s}``, ..."""


def _construct_short_tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    value: Any
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    if suffix in ("Ref", "Condition"):
        return {suffix: value}
    if suffix == "GetAtt" and isinstance(value, str):
        value = value.split(".", 1)
    return {f"Fn::{suffix}": value}


_CfnLoader.add_multi_constructor("!", _construct_short_tag)
# CloudFormation keeps dates as strings (e.g. AWSTemplateFormatVersion).
_CfnLoader.add_constructor("tag:yaml.org,2002:timestamp", yaml.SafeLoader.construct_yaml_str)


def parse_template(text: str) -> dict[str, Any]:
    """Parse template text (YAML with short tags, or JSON) into the long-form dict."""
    try:
        body = yaml.load(text, Loader=_CfnLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.YAMLError as exc:
        raise TemplateError(f"template is not valid YAML/JSON: {exc}") from exc
    if not isinstance(body, dict) or not isinstance(body.get("Resources"), dict):
        raise TemplateError("template has no Resources mapping")
    return body


# --------------------------------------------------------------------------------------------
# The template, with parameters and conditions decided


@dataclass
class Template:
    body: dict[str, Any]
    path: Path | None = None
    stack_name: str = DEFAULT_STACK_NAME
    region: str = DEFAULT_REGION
    account_id: str = ACCOUNT_ID
    partition: str = "aws"
    parameters: dict[str, Any] = field(default_factory=dict)
    conditions: dict[str, bool] = field(default_factory=dict)

    @property
    def base_dir(self) -> Path:
        return self.path.parent if self.path else Path.cwd()

    @property
    def resources(self) -> dict[str, dict[str, Any]]:
        return self.body.get("Resources") or {}

    @property
    def globals_function(self) -> dict[str, Any]:
        return (self.body.get("Globals") or {}).get("Function") or {}

    @property
    def stack_id(self) -> str:
        return (
            f"arn:{self.partition}:cloudformation:{self.region}:{self.account_id}:"
            f"stack/{self.stack_name}/00000000-0000-0000-0000-000000000000"
        )

    def is_active(self, logical_id: str) -> bool:
        """False for a resource whose ``Condition`` is false: it does not exist in this stack."""
        condition = self.resources[logical_id].get("Condition")
        return True if condition is None else self.conditions[condition]

    def arn(self, service: str, resource: str, *, region: bool = True, account: bool = True) -> str:
        return (
            f"arn:{self.partition}:{service}:{self.region if region else ''}:"
            f"{self.account_id if account else ''}:{resource}"
        )


def load_template(
    source: str | Path,
    parameter_overrides: Mapping[str, Any] | None = None,
    *,
    stack_name: str = DEFAULT_STACK_NAME,
    region: str = DEFAULT_REGION,
    account_id: str = ACCOUNT_ID,
) -> Template:
    """Read ``source`` (a path), take parameter defaults (overridable) and evaluate Conditions."""
    path = Path(source)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TemplateError(f"cannot read template {path}: {exc}") from exc
    template = Template(
        body=parse_template(text),
        path=path.resolve(),
        stack_name=stack_name,
        region=region,
        account_id=account_id,
        partition=_partition(region),
    )
    template.parameters = _decide_parameters(template, dict(parameter_overrides or {}))
    template.conditions = _decide_conditions(template)
    return template


def _partition(region: str) -> str:
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


def _scalar_str(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _decide_parameters(template: Template, overrides: dict[str, Any]) -> dict[str, Any]:
    declared: dict[str, Any] = template.body.get("Parameters") or {}
    unknown = sorted(set(overrides) - set(declared))
    if unknown:
        raise TemplateError(f"parameter overrides for undeclared parameters: {', '.join(unknown)}")
    values: dict[str, Any] = {}
    for name, spec in declared.items():
        spec = spec or {}
        if name in overrides:
            raw = overrides[name]
        elif "Default" in spec:
            raw = spec["Default"]
        else:
            raise TemplateError(f"parameter {name} has no Default and no override")
        ptype = str(spec.get("Type", "String"))
        if ptype == "CommaDelimitedList" or ptype.startswith("List<"):
            items = raw if isinstance(raw, list) else str(raw).split(",")
            value: Any = [_scalar_str(item).strip() for item in items]
            if raw == "":
                value = []
        else:
            value = _scalar_str(raw)
            allowed = spec.get("AllowedValues")
            if allowed and value not in [_scalar_str(a) for a in allowed]:
                raise TemplateError(f"parameter {name}={value!r} is not one of {allowed}")
            if ptype.startswith("AWS::SSM::Parameter::Value"):
                logger.warning("parameter %s reads SSM locally as its literal value %r", name, value)
        values[name] = value
    return values


def _decide_conditions(template: Template) -> dict[str, bool]:
    declared: dict[str, Any] = template.body.get("Conditions") or {}
    resolver = Resolver(template, lookup=None)
    decided: dict[str, bool] = {}
    visiting: set[str] = set()

    def condition(name: str) -> bool:
        if name in decided:
            return decided[name]
        if name not in declared:
            raise TemplateError(f"unknown condition {name}")
        if name in visiting:
            raise TemplateError(f"condition {name} refers to itself")
        visiting.add(name)
        decided[name] = evaluate(declared[name])
        visiting.discard(name)
        return decided[name]

    def evaluate(expr: Any) -> bool:
        if isinstance(expr, bool):
            return expr
        if isinstance(expr, dict) and len(expr) == 1:
            ((key, arg),) = expr.items()
            if key == "Condition":
                return condition(arg)
            if key == "Fn::Equals":
                left, right = (resolver.resolve(side) for side in arg)
                return _scalar_str(left) == _scalar_str(right)
            if key == "Fn::And":
                return all(evaluate(item) for item in arg)
            if key == "Fn::Or":
                return any(evaluate(item) for item in arg)
            if key == "Fn::Not":
                return not evaluate(arg[0])
        if isinstance(expr, str) and expr in declared:
            return condition(expr)
        raise TemplateError(f"cannot evaluate condition expression {expr!r}")

    resolver.condition = condition
    for name in declared:
        condition(name)
    return decided


# --------------------------------------------------------------------------------------------
# Resources, functions and the provisioned stack


@dataclass
class Resource:
    """What CloudFormation would return for a resource: ``ref`` for Ref, ``attributes`` for GetAtt."""

    logical_id: str
    type: str
    ref: str
    attributes: dict[str, Any] = field(default_factory=dict)
    properties: dict[str, Any] = field(default_factory=dict)
    provisioned: bool = False

    @property
    def arn(self) -> str | None:
        return self.attributes.get("Arn")

    def get_att(self, name: str) -> Any:
        if name in self.attributes:
            return self.attributes[name]
        if not self.provisioned:
            # A type we do not provision: fabricate a stable value so references still resolve.
            if name.endswith("Arn"):
                service = self.type.split("::")[1].lower() if "::" in self.type else "local"
                return f"arn:aws:{service}:local::{self.ref}"
            return self.ref
        raise TemplateError(f"{self.logical_id} ({self.type}) has no attribute {name!r} locally")

    def __str__(self) -> str:
        return self.ref


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


@dataclass
class LocalStack:
    """The provisioned stack: resources by logical id, functions by logical id, resolved outputs."""

    template: Template
    endpoint_url: str
    resources: dict[str, Resource]
    functions: dict[str, FunctionSpec]
    outputs: dict[str, Any]
    skipped: dict[str, str] = field(default_factory=dict)  # logical id -> type, not provisioned

    @property
    def stack_name(self) -> str:
        return self.template.stack_name

    @property
    def region(self) -> str:
        return self.template.region

    def ref(self, logical_id: str) -> str:
        return self._resource(logical_id).ref

    def get_att(self, logical_id: str, attribute: str) -> Any:
        return self._resource(logical_id).get_att(attribute)

    def queue_url(self, logical_id: str) -> str:
        resource = self._resource(logical_id)
        if resource.type != "AWS::SQS::Queue":
            raise TemplateError(f"{logical_id} is a {resource.type}, not a queue")
        return resource.ref

    def function(self, key: str) -> FunctionSpec:
        """A function by logical id, name, or ARN (qualified or not)."""
        if key in self.functions:
            return self.functions[key]
        for spec in self.functions.values():
            if key == spec.name or key == spec.arn or key.startswith(spec.arn + ":"):
                return spec
        raise KeyError(f"no function {key!r} in the template (have: {', '.join(self.functions)})")

    def _resource(self, logical_id: str) -> Resource:
        try:
            return self.resources[logical_id]
        except KeyError:
            raise KeyError(f"no resource {logical_id!r} in the template") from None


# --------------------------------------------------------------------------------------------
# Intrinsic functions

_SUB_VARIABLE = re.compile(r"\$\{([^}]*)\}")
_PSEUDO_PARAMETERS = (
    "AWS::AccountId",
    "AWS::NotificationARNs",
    "AWS::NoValue",
    "AWS::Partition",
    "AWS::Region",
    "AWS::StackId",
    "AWS::StackName",
    "AWS::URLSuffix",
)

Lookup = Callable[[str], Resource]


class Resolver:
    """Resolve Ref/GetAtt/Sub/If/Join/Select/Split/FindInMap/... against the stack built so far."""

    def __init__(self, template: Template, lookup: Lookup | None) -> None:
        self.template = template
        self.lookup = lookup
        self.condition: Callable[[str], bool] = lambda name: self._condition(name)
        self._functions: dict[str, Callable[[Any], Any]] = {
            "Fn::GetAtt": self._get_att,
            "Fn::Sub": self._sub,
            "Fn::Join": self._join,
            "Fn::Select": self._select,
            "Fn::Split": self._split,
            "Fn::If": self._if,
            "Fn::FindInMap": self._find_in_map,
            "Fn::GetAZs": self._get_azs,
            "Fn::Base64": lambda arg: base64.b64encode(str(self.resolve(arg)).encode()).decode(),
            "Fn::ToJsonString": lambda arg: json.dumps(self.resolve(arg), separators=(",", ":")),
            "Fn::Length": lambda arg: len(self.resolve(arg)),
            "Fn::Equals": lambda arg: _scalar_str(self.resolve(arg[0])) == _scalar_str(self.resolve(arg[1])),
            "Fn::Not": lambda arg: not self.resolve(arg[0]),
            "Fn::And": lambda arg: all(self.resolve(item) for item in arg),
            "Fn::Or": lambda arg: any(self.resolve(item) for item in arg),
            "Fn::ImportValue": self._unsupported("Fn::ImportValue (no other stacks exist locally)"),
            "Fn::Cidr": self._unsupported("Fn::Cidr"),
            "Fn::Transform": self._unsupported("Fn::Transform"),
        }

    def _condition(self, name: str) -> bool:
        try:
            return self.template.conditions[name]
        except KeyError:
            raise TemplateError(f"unknown condition {name}") from None

    @staticmethod
    def _unsupported(what: str) -> Callable[[Any], Any]:
        def fail(_arg: Any) -> Any:
            raise TemplateError(f"{what} is not supported by the local stack")

        return fail

    def resolve(self, value: Any) -> Any:
        if isinstance(value, dict):
            if len(value) == 1:
                ((key, arg),) = value.items()
                if key == "Ref" and isinstance(arg, str):
                    return self.ref(arg)
                if key == "Condition" and isinstance(arg, str) and arg in self.template.conditions:
                    return self.condition(arg)
                if key in self._functions:
                    return self._functions[key](arg)
            resolved = {}
            for key, item in value.items():
                item = self.resolve(item)
                if item is not NO_VALUE:
                    resolved[key] = item
            return resolved
        if isinstance(value, list):
            return [item for item in (self.resolve(x) for x in value) if item is not NO_VALUE]
        return value

    def ref(self, name: str) -> Any:
        t = self.template
        pseudo = {
            "AWS::AccountId": t.account_id,
            "AWS::NotificationARNs": [],
            "AWS::NoValue": NO_VALUE,
            "AWS::Partition": t.partition,
            "AWS::Region": t.region,
            "AWS::StackId": t.stack_id,
            "AWS::StackName": t.stack_name,
            "AWS::URLSuffix": "amazonaws.com.cn" if t.partition == "aws-cn" else "amazonaws.com",
        }
        if name in pseudo:
            return pseudo[name]
        if name in t.parameters:
            return t.parameters[name]
        return self._resource(name).ref

    def _resource(self, logical_id: str) -> Resource:
        if self.lookup is None:
            raise TemplateError(f"{logical_id}: only parameters and pseudo parameters can be used here")
        return self.lookup(logical_id)

    def _get_att(self, arg: Any) -> Any:
        if isinstance(arg, str):
            arg = arg.split(".", 1)
        logical_id, attribute = arg[0], self.resolve(arg[1])
        return self._resource(logical_id).get_att(str(attribute))

    def _sub(self, arg: Any) -> str:
        if isinstance(arg, list):
            text, variables = arg[0], self.resolve(arg[1] if len(arg) > 1 else {})
        else:
            text, variables = arg, {}
        if not isinstance(text, str):
            raise TemplateError(f"Fn::Sub needs a string, got {text!r}")

        def replace(match: re.Match[str]) -> str:
            name = match.group(1).strip()
            if name.startswith("!"):
                return "${" + name[1:] + "}"
            if name in variables:
                value = variables[name]
            elif name in _PSEUDO_PARAMETERS or name in self.template.parameters or "." not in name:
                value = self.ref(name)
            else:
                logical_id, attribute = name.split(".", 1)
                value = self._resource(logical_id).get_att(attribute)
            if isinstance(value, list | dict) or value is NO_VALUE:
                raise TemplateError(f"Fn::Sub variable ${{{name}}} is not a scalar: {value!r}")
            return _scalar_str(value)

        return _SUB_VARIABLE.sub(replace, text)

    def _join(self, arg: Any) -> str:
        delimiter, items = arg[0], self.resolve(arg[1])
        if not isinstance(items, list):
            raise TemplateError(f"Fn::Join needs a list, got {items!r}")
        return str(delimiter).join(_scalar_str(item) for item in items)

    def _select(self, arg: Any) -> Any:
        index, items = int(self.resolve(arg[0])), self.resolve(arg[1])
        if not isinstance(items, list) or not 0 <= index < len(items):
            raise TemplateError(f"Fn::Select index {index} out of range for {items!r}")
        return items[index]

    def _split(self, arg: Any) -> list[str]:
        delimiter, source = arg[0], self.resolve(arg[1])
        return str(source).split(str(delimiter))

    def _if(self, arg: Any) -> Any:
        name, when_true, when_false = arg
        return self.resolve(when_true if self.condition(name) else when_false)

    def _find_in_map(self, arg: Any) -> Any:
        map_name, top, second = (self.resolve(item) for item in arg[:3])
        try:
            return self.template.body["Mappings"][map_name][top][second]
        except (KeyError, TypeError):
            if len(arg) > 3 and isinstance(arg[3], dict) and "DefaultValue" in arg[3]:
                return self.resolve(arg[3]["DefaultValue"])
            raise TemplateError(f"Fn::FindInMap {map_name}/{top}/{second} not found") from None

    def _get_azs(self, arg: Any) -> list[str]:
        region = self.resolve(arg) or self.template.region
        return [f"{region}{zone}" for zone in "abc"]


def references(value: Any) -> set[str]:
    """Logical ids a (raw) value refers to through Ref, Fn::GetAtt or Fn::Sub."""
    found: set[str] = set()
    if isinstance(value, dict):
        for key, arg in value.items():
            if key == "Ref" and isinstance(arg, str):
                found.add(arg.split(".", 1)[0])
            elif key == "Fn::GetAtt":
                target = arg.split(".", 1)[0] if isinstance(arg, str) else arg[0]
                found.add(target)
            elif key == "Fn::Sub":
                text = arg[0] if isinstance(arg, list) else arg
                local_vars = arg[1] if isinstance(arg, list) and len(arg) > 1 else {}
                if isinstance(text, str):
                    for name in _SUB_VARIABLE.findall(text):
                        name = name.strip()
                        if not name.startswith("!") and name not in local_vars:
                            found.add(name.split(".", 1)[0])
                found |= references(local_vars)
            else:
                found |= references(arg)
    elif isinstance(value, list):
        for item in value:
            found |= references(item)
    return found


# --------------------------------------------------------------------------------------------
# Provisioning


def physical_name(template: Template, logical_id: str, explicit: Any, max_length: int, suffix: str = "") -> str:
    """The resource's own name property if set, else ``{StackName}-{LogicalId}`` (within the limit)."""
    if explicit not in (None, "", NO_VALUE):
        return str(explicit)
    base = f"{template.stack_name}-{logical_id}"
    return base[: max_length - len(suffix)] + suffix


def provision(
    template: Template,
    endpoint_url: str | None,
    *,
    session: Any = None,
) -> LocalStack:
    """Create the template's resources in the local AWS at ``endpoint_url`` (None: the default AWS
    endpoints, as inside moto's ``mock_aws()`` in tests); idempotent.

    Provisioning an already provisioned stack again (another process attaching to a running local
    stack) finds the existing resources and creates only what the template gained since.
    """
    from agentwake_local import provisioners
    from agentwake_local.server import boto3_session

    context = provisioners.ProvisionContext(
        template=template,
        endpoint_url=endpoint_url,
        session=session or boto3_session(template.region),
    )
    raw = {lid: spec for lid, spec in template.resources.items() if template.is_active(lid)}
    resources: dict[str, Resource] = {}
    implicit: dict[str, Resource] = {}  # SAM-generated ids: FooRole, Foo.Alias, FooAliaslive, ...
    skipped: dict[str, str] = {}

    def lookup(logical_id: str) -> Resource:
        if logical_id in resources:
            return resources[logical_id]
        if logical_id in implicit:
            return implicit[logical_id]
        if logical_id in template.resources and logical_id not in raw:
            raise TemplateError(f"{logical_id} is referenced but its Condition is false")
        if logical_id in raw:
            raise TemplateError(f"{logical_id} is referenced before it is provisioned (dependency cycle?)")
        raise TemplateError(f"unknown logical id {logical_id!r}")

    resolver = Resolver(template, lookup)

    # 1. Resources that are not created in moto get their deterministic names first.
    for logical_id, spec in raw.items():
        rtype = spec.get("Type", "")
        if rtype in FUNCTION_TYPES:
            _declare_function(template, resolver, logical_id, spec, resources, implicit)
        elif rtype not in provisioners.PROVISIONERS:
            props = spec.get("Properties") or {}
            name = None
            name_key = _guess_name_property(rtype)
            if name_key and isinstance(props.get(name_key), str):
                name = props[name_key]
            resources[logical_id] = Resource(
                logical_id, rtype, physical_name(template, logical_id, name, 128), provisioned=False
            )
            skipped[logical_id] = rtype
            logger.debug("local stack: skipping %s (%s): no local provisioner", logical_id, rtype)

    # 2. Provisioned types, in dependency order.
    pending = [lid for lid, spec in raw.items() if spec.get("Type") in provisioners.PROVISIONERS]
    for logical_id in _dependency_order(raw, pending):
        spec = raw[logical_id]
        rtype = spec["Type"]
        properties = resolver.resolve(spec.get("Properties") or {})
        try:
            resources[logical_id] = provisioners.PROVISIONERS[rtype](context, logical_id, properties)
        except TemplateError:
            raise
        except Exception as exc:  # botocore errors, bad property shapes
            raise TemplateError(f"provisioning {logical_id} ({rtype}) failed: {exc}") from exc
        logger.debug("local stack: %s (%s) -> %s", logical_id, rtype, resources[logical_id].ref)

    # 3. Functions: handler, timeout, memory, environment, SQS events, EventInvokeConfig.
    functions = {
        logical_id: _function_spec(template, resolver, logical_id, spec, resources)
        for logical_id, spec in raw.items()
        if spec.get("Type") in FUNCTION_TYPES
    }
    _attach_raw_lambda_config(template, resolver, raw, functions, resources)

    # 4. Outputs.
    outputs: dict[str, Any] = {}
    for name, output in (template.body.get("Outputs") or {}).items():
        condition = output.get("Condition")
        if condition is not None and not template.conditions.get(condition, False):
            continue
        try:
            outputs[name] = resolver.resolve(output.get("Value"))
        except TemplateError as exc:
            logger.warning("local stack: output %s not resolved: %s", name, exc)

    return LocalStack(
        template=template,
        endpoint_url=endpoint_url,
        resources=resources,
        functions=functions,
        outputs=outputs,
        skipped=skipped,
    )


def _guess_name_property(rtype: str) -> str | None:
    """Most AWS types name themselves ``<Noun>Name`` (LogGroupName, AlarmName, ...)."""
    noun = rtype.rsplit("::", 1)[-1]
    return f"{noun}Name"


def _dependency_order(raw: Mapping[str, dict[str, Any]], pending: list[str]) -> list[str]:
    wanted = set(pending)
    deps: dict[str, set[str]] = {}
    for logical_id in pending:
        spec = raw[logical_id]
        depends_on = spec.get("DependsOn") or []
        if isinstance(depends_on, str):
            depends_on = [depends_on]
        found = references(spec.get("Properties") or {}) | set(depends_on)
        deps[logical_id] = (found & wanted) - {logical_id}
    ordered: list[str] = []
    done: set[str] = set()
    while len(ordered) < len(pending):
        ready = [lid for lid in pending if lid not in done and deps[lid] <= done]
        if not ready:
            cycle = sorted(set(pending) - done)
            raise TemplateError(f"dependency cycle between {', '.join(cycle)}")
        for logical_id in ready:
            ordered.append(logical_id)
            done.add(logical_id)
    return ordered


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


def _declare_function(
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


def _int(value: Any, default: int | None = None) -> int | None:
    if value in (None, "", NO_VALUE):
        return default
    return int(value)


def _bool(value: Any, default: bool = False) -> bool:
    if value in (None, "", NO_VALUE):
        return default
    if isinstance(value, str):
        return value.strip().lower() == "true"
    return bool(value)


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


def _function_spec(
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
        timeout=_int(get("Timeout"), 3) or 3,
        memory_size=_int(get("MemorySize"), 128) or 128,
        environment={str(k): _scalar_str(v) for k, v in variables.items()},
        alias=get("AutoPublishAlias") if spec["Type"] == SAM_FUNCTION else None,
        region=template.region,
    )
    if spec["Type"] == SAM_FUNCTION:
        for event_name, event in (props.get("Events") or {}).items():
            if (event or {}).get("Type") != "SQS":
                continue
            event_props = resolver.resolve(event.get("Properties") or {})
            function.sqs_events.append(_sqs_event(event_name, event_props, resources, logical_id))
        config = props.get("EventInvokeConfig")
        if config:
            function.event_invoke_config = _event_invoke_config(resolver.resolve(config), resources)
    return function


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
        batch_size=_int(props.get("BatchSize"), 10) or 10,
        function_response_types=tuple(props.get("FunctionResponseTypes") or ()),
        maximum_concurrency=_int(scaling.get("MaximumConcurrency")),
        maximum_batching_window_seconds=_int(props.get("MaximumBatchingWindowInSeconds"), 0) or 0,
        enabled=_bool(props.get("Enabled"), True),
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
        maximum_retry_attempts=_int(props.get("MaximumRetryAttempts"), 2),  # type: ignore[arg-type]
        maximum_event_age_seconds=_int(props.get("MaximumEventAgeInSeconds"), 21600),  # type: ignore[arg-type]
        on_failure=_destination(destinations.get("OnFailure"), resources),
        on_success=_destination(destinations.get("OnSuccess"), resources),
    )


def _attach_raw_lambda_config(
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
