"""The embedded local AWS: a moto server on loopback, provisioned from ``template.yaml`` itself.

- ``server``: start/stop a moto server, the fake credentials/region/endpoint environment.
- ``template``: read a SAM/CloudFormation template: parameters, conditions, intrinsics (read only).
- ``functions``: the template's functions as ``FunctionSpec`` (SAM events, EventInvokeConfig, Globals).
- ``provision``: create the template's resources in moto in dependency order (``provisioners``
  per type), then its functions: the ``LocalStack``.
- ``moto_patches``: what the embedded server patches in moto (pinned to one moto version).
- ``scheduler``: EventBridge Scheduler: the stack's schedules fire. ``timing``: local vs faithful waits.
- ``seed``: what the sample events in ``events/`` name.
- ``lambda_runtime``: run a handler in-process as Lambda would (context, environment, error shape).
- ``poller``: Lambda's SQS event source mapping with partial batch responses.
- ``async_invoke``: Lambda's asynchronous invocation (retries, on-failure/on-success destinations).
- ``stack``: ``LocalStackRuntime`` ties them together and records the running endpoint.

Nothing here is imported by the Lambda bundle; moto is only needed by ``server``.
"""

from agentwake_local.functions import FunctionSpec
from agentwake_local.provision import LocalStack, provision
from agentwake_local.server import DEFAULT_REGION, MotoServer, aws_env
from agentwake_local.stack import LocalStackRuntime, read_state, state_path
from agentwake_local.template import Resource, Template, load_template

__all__ = [
    "DEFAULT_REGION",
    "FunctionSpec",
    "LocalStack",
    "LocalStackRuntime",
    "MotoServer",
    "Resource",
    "Template",
    "aws_env",
    "load_template",
    "provision",
    "read_state",
    "state_path",
]
