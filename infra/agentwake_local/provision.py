"""Provision a read template into the local AWS: resources in dependency order, then the functions.

A resource added to the template appears locally with no code change as long as its type has a
provisioner (``provisioners.PROVISIONERS``); other types are skipped (logged at debug) but still
answer ``Ref``/``Fn::GetAtt`` with deterministic fake values, so what refers to them resolves.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentwake_local import provisioners
from agentwake_local.functions import (
    FUNCTION_TYPES,
    FunctionSpec,
    attach_raw_lambda_config,
    declare_function,
    function_spec,
)
from agentwake_local.template import Resolver, Resource, Template, TemplateError, physical_name, references

logger = logging.getLogger(__name__)

MANAGED_POLICY = "AWS::IAM::ManagedPolicy"


@dataclass
class LocalStack:
    """The provisioned stack: resources by logical id, functions by logical id, resolved outputs."""

    template: Template
    endpoint_url: str | None
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
            declare_function(template, resolver, logical_id, spec, resources, implicit)
        elif rtype not in provisioners.PROVISIONERS:
            props = spec.get("Properties") or {}
            name = None
            name_key = _guess_name_property(rtype)
            if name_key and isinstance(props.get(name_key), str):
                name = props[name_key]
            physical = physical_name(template, logical_id, name, 128)
            # what CloudFormation's Ref gives for the type: a managed policy's is its ARN
            ref = template.arn("iam", f"policy/{physical}", region=False) if rtype == MANAGED_POLICY else physical
            resources[logical_id] = Resource(logical_id, rtype, ref, provisioned=False)
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
        logical_id: function_spec(template, resolver, logical_id, spec, resources)
        for logical_id, spec in raw.items()
        if spec.get("Type") in FUNCTION_TYPES
    }
    attach_raw_lambda_config(template, resolver, raw, functions, resources)

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
