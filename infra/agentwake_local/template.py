"""Read a SAM/CloudFormation template: parse it, decide its parameters and conditions, resolve intrinsics.

Local equals deployed: the template is the only description of the stack. This module only reads;
``provision`` creates the resources in the local AWS (``provisioners`` per type) and ``functions``
reads the functions into ``FunctionSpec``. What it resolves: ``Ref`` (parameters, pseudo
parameters, resources), ``Fn::GetAtt``, ``Fn::Sub``, ``Fn::If``, ``Fn::Join``, ``Fn::Select``,
``Fn::Split``, and in ``Conditions`` ``Fn::Equals``/``And``/``Or``/``Not``. Any other ``Fn::`` is
refused with a ``TemplateError`` naming it.
"""

from __future__ import annotations

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
#: the local stack emulates the commercial partition
PARTITION = "aws"


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
    partition: str = PARTITION
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
    )
    template.parameters = _decide_parameters(template, dict(parameter_overrides or {}))
    template.conditions = _decide_conditions(template)
    return template


def scalar_str(value: Any) -> str:
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
            value: Any = [scalar_str(item).strip() for item in items]
            if raw == "":
                value = []
        else:
            value = scalar_str(raw)
            allowed = spec.get("AllowedValues")
            if allowed and value not in [scalar_str(a) for a in allowed]:
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
                return scalar_str(left) == scalar_str(right)
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
# What Ref and Fn::GetAtt return


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


def physical_name(template: Template, logical_id: str, explicit: Any, max_length: int, suffix: str = "") -> str:
    """The resource's own name property if set, else ``{StackName}-{LogicalId}`` (within the limit)."""
    if explicit not in (None, "", NO_VALUE):
        return str(explicit)
    base = f"{template.stack_name}-{logical_id}"
    return base[: max_length - len(suffix)] + suffix


def as_int(value: Any, default: int | None = None) -> int | None:
    if value in (None, "", NO_VALUE):
        return default
    return int(value)


def as_bool(value: Any, default: bool = False) -> bool:
    if value in (None, "", NO_VALUE):
        return default
    if isinstance(value, str):
        return value.strip().lower() == "true"
    return bool(value)


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
    """Resolve Ref/GetAtt/Sub/If/Join/Select/Split against the stack built so far."""

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
        }

    def _condition(self, name: str) -> bool:
        try:
            return self.template.conditions[name]
        except KeyError:
            raise TemplateError(f"unknown condition {name}") from None

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
                if isinstance(key, str) and key.startswith("Fn::"):
                    raise TemplateError(f"{key} is not supported by the local stack")
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
            "AWS::URLSuffix": "amazonaws.com",
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
            return scalar_str(value)

        return _SUB_VARIABLE.sub(replace, text)

    def _join(self, arg: Any) -> str:
        delimiter, items = arg[0], self.resolve(arg[1])
        if not isinstance(items, list):
            raise TemplateError(f"Fn::Join needs a list, got {items!r}")
        return str(delimiter).join(scalar_str(item) for item in items)

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
