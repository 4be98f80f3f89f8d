"""Run a handler in-process as the Lambda Python runtime would.

- the handler string ``package.module.func`` is imported with the function's CodeUri on sys.path
  (imported once, like a warm container; module-level code sees the function's environment);
- the event goes through JSON and so does the response (a non-serializable response is
  ``Runtime.MarshalError``, as on Lambda);
- the context carries the function's name, ARN, memory, request id, log group/stream and a
  ``get_remaining_time_in_millis()`` counting down from the template's Timeout;
- the function's environment (plus the local endpoint and fake credentials) is in os.environ for
  the duration of the invocation only; ``on_env_change`` runs after it is set and after it is
  restored, so cached settings and clients never outlive the environment they were built from;
- an exception becomes Lambda's error payload (errorMessage, errorType, requestId, stackTrace);
  an invocation that outlives Timeout is reported as timed out.

os.environ is process-global, so invocations are serialized by a lock: locally every function
runs with a concurrency of one.
"""

from __future__ import annotations

import datetime as dt
import importlib
import json
import logging
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from agentwake_local.server import apply_env, restore_env
from agentwake_local.template import LATEST, FunctionSpec

logger = logging.getLogger(__name__)

_INVOKE_LOCK = threading.RLock()
# Variables a Lambda sandbox never has: they would route boto3 to the developer's own account.
_REMOVED_FROM_SANDBOX = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE")


class LambdaContext:
    """The context object the Python runtime passes to a handler."""

    def __init__(
        self,
        function: FunctionSpec,
        request_id: str,
        *,
        invoked_function_arn: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.function_name = function.name
        self.function_version = LATEST
        self.invoked_function_arn = invoked_function_arn or function.arn
        self.memory_limit_in_mb = function.memory_size
        self.aws_request_id = request_id
        self.log_group_name = function.log_group_name
        self.log_stream_name = f"{dt.datetime.now(dt.UTC):%Y/%m/%d}/[{LATEST}]{uuid.uuid4().hex}"
        self.identity = None
        self.client_context = None
        self.tenant_id = None
        self._clock = clock
        self._deadline = clock() + function.timeout

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - self._clock()) * 1000))

    def __repr__(self) -> str:
        return f"LambdaContext(function_name={self.function_name!r}, aws_request_id={self.aws_request_id!r})"


@dataclass
class Invocation:
    """The outcome of one invocation. Unpacks as ``response, error = invoke(...)``."""

    function: str
    request_id: str
    response: Any = None
    error: dict[str, Any] | None = None
    duration_ms: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None

    def __iter__(self) -> Iterator[Any]:
        yield self.response
        yield self.error


def default_on_env_change() -> None:
    """Forget what was cached from the previous environment: boto3's default session, and the
    application's settings/clients through ``agentwake.bootstrap.reset_caches`` when it exists."""
    try:
        import boto3

        boto3.DEFAULT_SESSION = None
    except ImportError:  # pragma: no cover - boto3 is always there
        pass
    try:
        from agentwake.bootstrap import reset_caches
    except ImportError:
        return
    reset_caches()


def lambda_environment(function: FunctionSpec, base_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment variables a sandbox of ``function`` has (the local endpoint env wins)."""
    env = {
        "AWS_LAMBDA_FUNCTION_NAME": function.name,
        "AWS_LAMBDA_FUNCTION_VERSION": LATEST,
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(function.memory_size),
        "AWS_LAMBDA_LOG_GROUP_NAME": function.log_group_name,
        "AWS_EXECUTION_ENV": f"AWS_Lambda_{function.runtime}",
        "AWS_REGION": function.region,
        "AWS_DEFAULT_REGION": function.region,
        "LAMBDA_TASK_ROOT": str(function.code_uri),
        "_HANDLER": function.handler,
    }
    env.update(function.environment)
    env.update(base_env or {})
    return env


def _error(
    exc: BaseException,
    request_id: str,
    *,
    error_type: str | None = None,
    message: str | None = None,
    skip_frames: int = 0,
) -> dict[str, Any]:
    """Lambda's error payload; the stack trace starts at the handler, as the runtime reports it."""
    tb = exc.__traceback__
    for _ in range(skip_frames):
        if tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
    frames = traceback.extract_tb(tb)
    return {
        "errorMessage": message if message is not None else str(exc),
        "errorType": error_type or type(exc).__name__,
        "requestId": request_id,
        "stackTrace": traceback.format_list(frames),
    }


def load_handler(function: FunctionSpec) -> Callable[[Any, Any], Any]:
    """Import ``module.func`` from the function's code directory (raises ``HandlerLoadError``)."""
    handler = function.handler.replace("/", ".")
    module_name, _, attribute = handler.rpartition(".")
    if not module_name or not attribute:
        raise HandlerLoadError("Runtime.MalformedHandlerName", f"Bad handler '{function.handler}'")
    code_dir = str(function.code_uri)
    if code_dir not in sys.path:
        sys.path.insert(0, code_dir)
    try:
        module = importlib.import_module(module_name)
    except SyntaxError as exc:
        raise HandlerLoadError("Runtime.UserCodeSyntaxError", f"Syntax error in module '{module_name}': {exc}") from exc
    except ImportError as exc:
        raise HandlerLoadError("Runtime.ImportModuleError", f"Unable to import module '{module_name}': {exc}") from exc
    func = getattr(module, attribute, None)
    if not callable(func):
        raise HandlerLoadError("Runtime.HandlerNotFound", f"Handler '{attribute}' missing on module '{module_name}'")
    return func  # type: ignore[no-any-return]


class HandlerLoadError(Exception):
    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type


def _call(
    function: FunctionSpec,
    payload: Any,
    request_id: str,
    invoked_function_arn: str | None,
    on_env_change: Callable[[], None] | None,
) -> tuple[Any, dict[str, Any] | None]:
    try:
        if on_env_change:
            on_env_change()
        handler = load_handler(function)
    except HandlerLoadError as exc:
        return None, _error(exc, request_id, error_type=exc.error_type)
    except Exception as exc:  # the init phase failed (module-level code, a cache reset hook)
        return None, _error(exc, request_id)
    context = LambdaContext(function, request_id, invoked_function_arn=invoked_function_arn)
    try:
        response = handler(payload, context)
    except Exception as exc:  # the handler raised: Lambda reports an Unhandled function error
        return None, _error(exc, request_id, skip_frames=1)
    try:
        return json.loads(json.dumps(response)), None
    except (TypeError, ValueError) as exc:
        return None, _error(
            exc, request_id, error_type="Runtime.MarshalError", message=f"Unable to marshal response: {exc}"
        )


def invoke(
    function: FunctionSpec,
    event: Any,
    *,
    base_env: Mapping[str, str] | None = None,
    request_id: str | None = None,
    invoked_function_arn: str | None = None,
    on_env_change: Callable[[], None] | None = default_on_env_change,
    enforce_timeout: bool = True,
) -> Invocation:
    """Invoke ``function`` with ``event`` synchronously (RequestResponse), in this process."""
    request_id = request_id or str(uuid.uuid4())
    result = Invocation(function=function.logical_id, request_id=request_id)
    try:
        payload = json.loads(json.dumps(event))
    except (TypeError, ValueError) as exc:
        result.error = _error(exc, request_id, error_type="InvalidRequestContentException")
        return result

    env: dict[str, str | None] = dict(lambda_environment(function, base_env))
    env.update({name: None for name in _REMOVED_FROM_SANDBOX})
    with _INVOKE_LOCK:
        previous = apply_env(env)
        started = time.monotonic()
        try:
            result.response, result.error = _call(function, payload, request_id, invoked_function_arn, on_env_change)
        finally:
            result.duration_ms = (time.monotonic() - started) * 1000
            restore_env(previous)
            if on_env_change:
                try:
                    on_env_change()
                except Exception:  # pragma: no cover - a broken hook must not hide the invocation
                    logger.exception("on_env_change hook failed after %s", function.logical_id)

    if enforce_timeout and result.duration_ms > function.timeout * 1000:
        result.response = None
        result.error = {
            "errorMessage": f"RequestId: {request_id} Error: Task timed out after {function.timeout:.2f} seconds",
            "errorType": "Sandbox.Timedout",
            "requestId": request_id,
            "stackTrace": [],
        }
    return result
