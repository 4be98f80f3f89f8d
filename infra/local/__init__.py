"""The embedded local AWS: a moto server on loopback, provisioned from ``template.yaml`` itself.

- ``server``: start/stop a moto server, the fake credentials/region/endpoint environment.
- ``template``: read a SAM/CloudFormation template, resolve intrinsics, provision it into moto.
- ``lambda_runtime``: run a handler in-process as Lambda would (context, environment, error shape).
- ``poller``: Lambda's SQS event source mapping with partial batch responses.
- ``async_invoke``: Lambda's asynchronous invocation (retries, on-failure/on-success destinations).
- ``stack``: ``LocalStackRuntime`` ties them together and records the running endpoint.

Nothing here is imported by the Lambda bundle; moto is only needed by ``server``.
"""

from agentwake_local.server import DEFAULT_REGION, MotoServer, aws_env
from agentwake_local.stack import LocalStackRuntime, read_state, state_path
from agentwake_local.template import FunctionSpec, LocalStack, Resource, Template, load_template, provision

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
