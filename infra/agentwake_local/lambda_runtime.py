"""Run a handler in-process as the Lambda Python runtime would.

- the handler string ``package.module.func`` is imported with the function's CodeUri on sys.path
  (imported once, like a warm container; module-level code sees the function's environment);
- the event goes through JSON and so does the response (a non-serializable response is
  ``Runtime.MarshalError``, as on Lambda);
- the context carries the function's name, ARN, memory, request id, log group/stream and a
  ``get_remaining_time_in_millis()`` counting down from the template's Timeout;
- the function's environment (plus the local endpoint and fake credentials) is in os.environ while
  the invocation runs; ``on_env_change`` runs after it is set and after it is restored, so cached
  settings and clients never outlive the environment they were built from;
- an exception becomes Lambda's error payload (errorMessage, errorType, requestId, stackTrace);
  an invocation that outlives Timeout is reported as timed out.

Invocations run concurrently, as Lambda runs concurrent sandboxes. os.environ is process-global,
so ``EnvironmentGate`` lets invocations overlap exactly when they need the same environment: the
functions of one stack share it (the template's Globals, the local endpoint, fake credentials),
so they run side by side; an invocation that needs a different environment (another stack, a
test that changed a function's variables) waits until the running ones are done. The variables
that only name the function (``IDENTITY_VARIABLES``) are not compared: while invocations of two
functions overlap they name the first one (each handler's context object always names its own).
"""

from __future__ import annotations

import contextvars
import datetime as dt
import gc
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

from agentwake_local.functions import LATEST, FunctionSpec
from agentwake_local.server import apply_env, restore_env

logger = logging.getLogger(__name__)

#: variables that name the function, not configure it (see the module docstring)
IDENTITY_VARIABLES = frozenset(
    {"AWS_LAMBDA_FUNCTION_NAME", "AWS_LAMBDA_LOG_GROUP_NAME", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "_HANDLER"}
)
# Variables a Lambda sandbox never has: they would route boto3 to the developer's own account.
_REMOVED_FROM_SANDBOX = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE")


class EnvironmentGate:
    """Shared use of os.environ: invocations with the same environment overlap, others take turns.

    ``enter(env)`` applies ``env`` when nobody is inside (and calls ``on_change``), or joins the
    invocations inside when they use the same environment; otherwise it waits. ``leave()``
    restores the previous os.environ when the last one leaves. An invocation waiting for a
    different environment stops newcomers from joining, so it is never starved.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._inside = 0
        self._key: frozenset[tuple[str, str | None]] | None = None
        self._previous: dict[str, str | None] = {}
        self._on_change: Callable[[], None] | None = None
        self._waiting_other = 0

    @staticmethod
    def _compared(env: Mapping[str, str | None]) -> frozenset[tuple[str, str | None]]:
        return frozenset((k, v) for k, v in env.items() if k not in IDENTITY_VARIABLES)

    def enter(self, env: Mapping[str, str | None], on_change: Callable[[], None] | None) -> Exception | None:
        """Returns the exception of ``on_change`` if it failed (the caller reports it as an init error)."""
        key = self._compared(env)
        with self._cond:
            joinable = self._inside > 0 and self._key == key
            if not joinable:
                self._waiting_other += 1
                try:
                    self._cond.wait_for(lambda: self._inside == 0)
                finally:
                    self._waiting_other -= 1
            elif self._waiting_other:
                # someone waits for another environment: let it have its turn first
                self._cond.wait_for(lambda: self._inside == 0 or (self._key == key and not self._waiting_other))
            if self._inside == 0:
                self._previous = apply_env(env)
                self._key = key
                self._on_change = on_change
                self._inside = 1
                return self._notify_change(on_change)
            self._inside += 1
            return None

    def leave(self) -> None:
        with self._cond:
            self._inside -= 1
            if self._inside == 0:
                restore_env(self._previous)
                self._previous, self._key = {}, None
                if self._notify_change(self._on_change) is not None:
                    logger.error("on_env_change hook failed after restoring the environment")
                self._cond.notify_all()

    @staticmethod
    def _notify_change(hook: Callable[[], None] | None) -> Exception | None:
        if hook is None:
            return None
        try:
            hook()
        except Exception as exc:  # a broken hook must not wedge the gate
            logger.exception("on_env_change hook failed")
            return exc
        return None


_GATE = EnvironmentGate()

#: per context: how many invocations it is running now (``running_function``). A contextvar, not a
#: thread-local: the threads a handler runs its records on (``agentwake.wake.lanes``) run in copies of
#: its context, so what they print is the function's output too
_RUNNING: contextvars.ContextVar[int] = contextvars.ContextVar("agentwake_local_running", default=0)


def running_function() -> bool:
    """This thread is running a function's code now (what it prints is the function's output:
    ``function_output`` keeps that apart from what a person reads)."""
    return _RUNNING.get() > 0


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
        module = _import(module_name)
    except SyntaxError as exc:
        raise HandlerLoadError("Runtime.UserCodeSyntaxError", f"Syntax error in module '{module_name}': {exc}") from exc
    except ImportError as exc:
        raise HandlerLoadError("Runtime.ImportModuleError", f"Unable to import module '{module_name}': {exc}") from exc
    func = getattr(module, attribute, None)
    if not callable(func):
        raise HandlerLoadError("Runtime.HandlerNotFound", f"Handler '{attribute}' missing on module '{module_name}'")
    return func  # type: ignore[no-any-return]


def _import(module_name: str) -> Any:
    """Import a handler's module; one that fails leaves the collector as it found it. A handler's
    import runs with the collector paused (``agentwake.handlers``) and its last line starts it again:
    a failed import never reaches that line, and this process, unlike Lambda's after an init error,
    lives on serving the other functions."""
    enabled = gc.isenabled()
    try:
        return importlib.import_module(module_name)
    except BaseException:
        if enabled:
            gc.enable()
        raise


class HandlerLoadError(Exception):
    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type


def _call(
    function: FunctionSpec,
    payload: Any,
    request_id: str,
    invoked_function_arn: str | None,
) -> tuple[Any, dict[str, Any] | None]:
    try:
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
    hook_error = _GATE.enter(env, on_env_change)
    started = time.monotonic()
    try:
        if hook_error is not None:  # the init phase failed (a cache reset hook)
            result.error = _error(hook_error, request_id)
        else:
            token = _RUNNING.set(_RUNNING.get() + 1)
            try:
                result.response, result.error = _call(function, payload, request_id, invoked_function_arn)
            finally:
                _RUNNING.reset(token)
    finally:
        result.duration_ms = (time.monotonic() - started) * 1000
        _GATE.leave()

    if result.duration_ms > function.timeout * 1000:
        result.response = None
        result.error = {
            "errorMessage": f"RequestId: {request_id} Error: Task timed out after {function.timeout:.2f} seconds",
            "errorType": "Sandbox.Timedout",
            "requestId": request_id,
            "stackTrace": [],
        }
    return result
