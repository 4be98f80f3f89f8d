"""``LocalStackRuntime``: the whole local AWS for one template, in this process.

    with LocalStackRuntime().start("template.yaml", visibility_timeout_override=0) as local:
        local.client("sqs").send_message(QueueUrl=local.stack.queue_url("ResultQueue"), MessageBody="{}")
        local.drain()                                   # Lambda's SQS poller, batch by batch
        local.invoke("CronWakeFunction", event)         # RequestResponse
        local.invoke_async("CronWakeFunction", event)   # Event: retries + on-failure destination

``start(..., background=True)`` (the "up" mode) also runs every poller (as many at once as the
event source's MaximumConcurrency), the async queue and the scheduler (every schedule of the stack
fires) on background threads. The running endpoint is recorded in ``$AGENTWAKE_HOME/local.json``
(default ``~/.agentwake/local.json``) so that another process finds it: ``LocalStackRuntime.attach()``.

Local stacks are named (``local_name``; default ``default``): each name has its own state file
(``local.json`` for the default one, ``local-NAME.json`` for others) and env file, a second stack
on a name whose stack still runs is refused (``LocalStackRunning``), and a stack removes only its
own file when it stops. ``AGENTWAKE_LOCAL=NAME`` picks one for every command; with several running
and none picked, ``read_state`` refuses to guess (``SeveralLocalStacks``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from agentwake_local import lambda_runtime
from agentwake_local import timing as timing_defaults
from agentwake_local.async_invoke import AsyncInvocation, AsyncInvoker, AsyncOutcome
from agentwake_local.functions import Destination, FunctionSpec
from agentwake_local.http_api import LocalHttpApi, Route
from agentwake_local.lambda_runtime import Invocation
from agentwake_local.poller import PollResult, SqsPoller
from agentwake_local.provision import LocalStack, provision
from agentwake_local.scheduler import Clock, LocalScheduler, TargetInvocationError, utcnow
from agentwake_local.server import DEFAULT_REGION, MotoServer, aws_env, boto3_session, is_reachable
from agentwake_local.sigv4 import SigV4Verifier
from agentwake_local.template import DEFAULT_STACK_NAME, load_template, references
from agentwake_local.timing import Timing
from agentwake_local.websocket_api import LocalWebSocketApi

logger = logging.getLogger(__name__)

STATE_FILE = "local.json"
#: the template's WebSocket API type (served by websocket_api.LocalWebSocketApi; not provisioned)
WEBSOCKET_API = "AWS::Serverless::WebSocketApi"
ENV_FILE = "env.json"
#: the name of a local stack started without --name
DEFAULT_LOCAL_NAME = "default"
#: the variable that picks a local stack by name, for every command
LOCAL_NAME_ENV = "AGENTWAKE_LOCAL"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,39}")


class LocalStackRunning(RuntimeError):
    """A local stack of that name already runs (another ``local up`` would take over its state)."""


class SeveralLocalStacks(RuntimeError):
    """Several local stacks run and none was picked by name."""


#: seconds between two looks of the scheduler at the schedules (Scheduler fires within a minute;
#: locally within a second, and an idle stack does not spend a core listing schedules)
SCHEDULER_INTERVAL = 1.0

#: the local stack's outbound policy: loopback and plain http allowed (never in the deployed template).
#: Applied over the template's values, unless the stack runs with ``deployed_outbound`` or an
#: invocation's own environment (``override_env``, from ``--env-vars``) names the variables.
LOCAL_OUTBOUND_ENV = {"AGENTWAKE_OUTBOUND_ALLOW_LOOPBACK": "1", "AGENTWAKE_OUTBOUND_ALLOW_HTTP": "1"}

#: variables the template sets on some functions only, because Globals cannot name them (the cron
#: function's alias: a circular reference in its own environment). Locally every function gets them
#: (one value across the template): os.environ is one per process, and functions whose environments
#: differ take turns (``lambda_runtime.EnvironmentGate``), so a wake holding its session would keep
#: the cron function, or a live turn, from even starting while it runs.
STACK_WIDE_VARIABLES = ("AGENTWAKE_CRON_FUNCTION_ARN",)


def agentwake_home(home: str | Path | None = None) -> Path:
    if home is not None:
        return Path(home)
    return Path(os.environ.get("AGENTWAKE_HOME") or Path.home() / ".agentwake")


def check_local_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise ValueError(
            f"invalid local stack name {name!r}: 1-40 letters, digits, _ or -, starting with a letter or digit"
        )
    return name


def chosen_name(name: str | None = None) -> str | None:
    """The local stack picked by name: ``name``, else ``$AGENTWAKE_LOCAL``, else None (any)."""
    picked = name or os.environ.get(LOCAL_NAME_ENV) or None
    return check_local_name(picked) if picked else None


def state_path(home: str | Path | None = None, name: str | None = None) -> Path:
    """The state file of the local stack ``name`` (``local.json`` for the default one)."""
    name = chosen_name(name) or DEFAULT_LOCAL_NAME
    return agentwake_home(home) / (STATE_FILE if name == DEFAULT_LOCAL_NAME else f"local-{name}.json")


def log_path(home: str | Path | None = None, name: str | None = None) -> Path:
    """Where ``agentwake local up`` writes the functions' logs (``local.log``, ``local-NAME.log``)."""
    return state_path(home, name).with_suffix(".log")


def env_path(home: str | Path | None = None, name: str | None = None) -> Path:
    name = chosen_name(name) or DEFAULT_LOCAL_NAME
    return agentwake_home(home) / (ENV_FILE if name == DEFAULT_LOCAL_NAME else f"env-{name}.json")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_state_file(path: Path, check: bool) -> dict[str, Any] | None:
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict) or "endpoint_url" not in state:
        return None
    if check and (not _pid_alive(int(state.get("pid", -1))) or not is_reachable(state["endpoint_url"])):
        logger.debug("stale local stack state %s (pid %s)", path, state.get("pid"))
        return None
    state.setdefault("name", DEFAULT_LOCAL_NAME)
    return state


def running_stacks(home: str | Path | None = None) -> list[dict[str, Any]]:
    """Every local stack running under ``$AGENTWAKE_HOME``, by name."""
    folder = agentwake_home(home)
    paths = sorted(folder.glob("local.json")) + sorted(folder.glob("local-*.json"))
    return [state for path in paths if (state := _read_state_file(path, True)) is not None]


def describe_stacks(states: Sequence[Mapping[str, Any]]) -> str:
    return ", ".join(f"{s.get('name')} at {s.get('endpoint_url')} (pid {s.get('pid')})" for s in states)


def read_state(home: str | Path | None = None, *, check: bool = True, name: str | None = None) -> dict[str, Any] | None:
    """The running local stack recorded by ``start``, or None (absent, or its process is gone).

    ``name`` (or ``$AGENTWAKE_LOCAL``) picks one; without, the one that runs, and when several
    run: ``SeveralLocalStacks`` naming them (the CLI never guesses which one is meant)."""
    picked = chosen_name(name)
    if picked is not None or not check:
        return _read_state_file(state_path(home, picked), check)
    running = running_stacks(home)
    if len(running) > 1:
        raise SeveralLocalStacks(
            f"{len(running)} local stacks are running: {describe_stacks(running)}; pick one with "
            f"{LOCAL_NAME_ENV}=NAME (or --name NAME on `agentwake local` and `agentwake invoke`)"
        )
    return running[0] if running else None


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


class LocalStackRuntime:
    """A moto server provisioned from a template, with its functions runnable as on Lambda."""

    def __init__(
        self,
        *,
        stack_name: str = DEFAULT_STACK_NAME,
        region: str = DEFAULT_REGION,
        async_retry_delays: float | Sequence[float] | None = None,
        timing: Timing | None = None,
        clock: Clock = utcnow,
        write_state: bool = True,
        local_name: str | None = None,
        home: str | Path | None = None,
        on_env_change: Callable[[], None] | None = lambda_runtime.default_on_env_change,
        poll_interval: float = 0.2,
        server_host: str = "127.0.0.1",
        server_port: int = 0,
        deployed_outbound: bool = False,
        api_port: int = 0,
        push_port: int = 0,
    ) -> None:
        self.stack_name = stack_name
        #: the template's HTTP APIs, served on ``server_host:api_port`` in the "up" mode (http_api.py)
        self.api_port = api_port
        self.http_api: LocalHttpApi | None = None
        #: the template's WebSocket API (PushApi), on ``server_host:push_port`` in the "up" mode
        self.push_port = push_port
        self.push_api: LocalWebSocketApi | None = None
        #: what the served WebSocket API gives every function (its management endpoint, its URL)
        self.push_env: dict[str, str] = {}
        #: the functions keep the template's outbound policy (no local allowances)
        self.deployed_outbound = deployed_outbound
        #: per function logical id: variables given for it (``--env-vars``), applied last
        self.env_overrides: dict[str, dict[str, str]] = {}
        self.server_host = server_host
        self.server_port = server_port
        self.region = region
        # no waits unless asked: tests drive retries themselves; `local up` passes timing.local()
        self.timing = timing or timing_defaults.immediate(None)
        if async_retry_delays is not None:
            delays = [async_retry_delays] if isinstance(async_retry_delays, int | float) else async_retry_delays
            self.timing = dataclasses.replace(self.timing, async_retry_delays=tuple(float(d) for d in delays))
        self.clock = clock
        self.write_state = write_state
        #: this stack's name: its state file is ``state_path(home, local_name)``
        self.local_name = check_local_name(local_name or chosen_name() or DEFAULT_LOCAL_NAME)
        self.home = home
        self.on_env_change = on_env_change
        self.poll_interval = poll_interval

        self.server: MotoServer | None = None
        self._owns_server = False
        self._endpoint_url: str | None = None
        self._stack: LocalStack | None = None
        self.template_path: Path | None = None
        self.parameter_overrides: dict[str, Any] = {}
        self.visibility_timeout_override: int | None = None
        self.pollers: list[SqsPoller] = []
        self.async_invoker: AsyncInvoker | None = None
        self.scheduler: LocalScheduler | None = None
        self._session: Any = None
        self._clients: dict[str, Any] = {}
        self._state_written: Path | None = None
        #: called before each invocation with (function, event); what it returns is called with the
        #: ``Invocation`` after it (``agentwake local up``'s one line per wake: ``agentwake_local.activity``)
        self.on_invocation: Callable[[FunctionSpec, Any], Callable[[Invocation], None]] | None = None

    # -- lifecycle ------------------------------------------------------------------------

    def start(
        self,
        template_path: str | Path,
        parameter_overrides: Mapping[str, Any] | None = None,
        visibility_timeout_override: int | None = None,
        *,
        server: MotoServer | None = None,
        endpoint_url: str | None = None,
        background: bool = False,
    ) -> LocalStackRuntime:
        """Start (or reuse) a moto server, provision the template, build pollers and the async queue.

        ``server``/``endpoint_url``: use a running server instead of starting one (it is then not
        stopped by ``stop()``, nor reset). A server started here begins from an empty account.
        ``background``: run pollers and the async queue on threads.
        """
        if self._stack is not None:
            raise RuntimeError("already started")
        if self.write_state:
            self.refuse_if_running()
        if endpoint_url is None:
            if server is None:
                server = MotoServer(self.server_host, self.server_port)
                self._owns_server = True
            server.start()
            if self._owns_server:
                # moto's state is process-global: a server of our own starts from an empty account.
                server.reset()
            endpoint_url = server.endpoint_url
        self.server = server
        self._endpoint_url = endpoint_url
        try:
            self._provision(template_path, parameter_overrides, visibility_timeout_override)
            if background:
                self.start_background()
            if self.write_state:
                self._write_state()
        except BaseException:
            self.stop()
            raise
        return self

    def refuse_if_running(self) -> None:
        """``LocalStackRunning`` when a live stack already holds this name: a second one would
        take over its state file (and remove it when it stops) while the first still runs."""
        running = _read_state_file(state_path(self.home, self.local_name), True)
        if running is not None and running.get("pid") != os.getpid():
            others = {s["name"] for s in running_stacks(self.home)}
            free = next(f"stack{i}" for i in range(2, 100) if f"stack{i}" not in others)
            raise LocalStackRunning(
                f"a local stack named {self.local_name!r} already runs at {running['endpoint_url']} "
                f"(pid {running.get('pid')}, since {running.get('started_at', '?')}): use that one, stop it, "
                f"or start another beside it: agentwake local up --name {free}"
            )

    @classmethod
    def attach(
        cls, home: str | Path | None = None, *, state: Mapping[str, Any] | None = None, **options: Any
    ) -> LocalStackRuntime:
        """Connect to the local stack another process started (from its state file).

        Provisioning is idempotent, so this finds the existing resources (and creates any the
        template gained since). The other process keeps owning the server and the state file.
        """
        state = state or read_state(home)
        if state is None:
            raise RuntimeError(f"no local stack is running (no live {state_path(home)})")
        options.setdefault("stack_name", state.get("stack_name", DEFAULT_STACK_NAME))
        options.setdefault("local_name", state.get("name", DEFAULT_LOCAL_NAME))
        options.setdefault("region", state.get("region", DEFAULT_REGION))
        options.setdefault("deployed_outbound", bool(state.get("deployed_outbound", False)))
        if state.get("timing") and "timing" not in options and "async_retry_delays" not in options:
            recorded = dict(state["timing"])
            recorded["async_retry_delays"] = tuple(recorded.get("async_retry_delays") or ())
            options["timing"] = Timing(**recorded)
        runtime = cls(write_state=False, home=home, **options)
        runtime._endpoint_url = state["endpoint_url"]
        runtime._provision(
            state["template_path"], state.get("parameter_overrides"), state.get("visibility_timeout_override")
        )
        return runtime

    def _provision(
        self,
        template_path: str | Path,
        parameter_overrides: Mapping[str, Any] | None,
        visibility_timeout_override: int | None,
    ) -> None:
        self.template_path = Path(template_path).resolve()
        self.parameter_overrides = dict(parameter_overrides or {})
        if visibility_timeout_override is None:
            visibility_timeout_override = self.timing.visibility_timeout_override
        self.visibility_timeout_override = visibility_timeout_override
        self._session = boto3_session(self.region)
        template = load_template(
            self.template_path, self.parameter_overrides, stack_name=self.stack_name, region=self.region
        )
        self._stack = provision(template, self.endpoint_url, session=self._session)
        self.async_invoker = AsyncInvoker(
            self._invoke_for_async,
            self._deliver,
            retry_delays=self.timing.async_retry_delays,
        )
        # every schedule of the stack (one-time ones too: a cron wake waiting for its busy session)
        self.scheduler = LocalScheduler(
            self.client("scheduler"),
            self.client("sqs"),
            self._invoke_target,
            timing=self.timing,
            clock=self.clock,
            interval=SCHEDULER_INTERVAL,
        )
        self.pollers = [
            SqsPoller(
                function,
                source,
                sqs_client=self.client("sqs"),
                invoke=self._invoker_for(function),
                region=self.region,
                visibility_timeout_override=visibility_timeout_override,
                idle_interval=self.poll_interval,
            )
            for function in self._stack.functions.values()
            for source in function.sqs_events
            if source.enabled and source.queue_url
        ]
        logger.info(
            "local stack %s on %s: %d resources, %d functions, %d SQS pollers",
            self.stack_name,
            self.endpoint_url,
            len(self._stack.resources),
            len(self._stack.functions),
            len(self.pollers),
        )

    def stop(self) -> None:
        """Stop threads, remove the state file, stop the server if this runtime started it."""
        self.stop_background()
        if self._state_written is not None:
            # only this stack's own file: never one another process wrote since
            state = _read_state_file(self._state_written, False)
            if state and state.get("pid") == os.getpid() and state.get("endpoint_url") == self._endpoint_url:
                self._state_written.unlink(missing_ok=True)
                env_path(self.home, self.local_name).unlink(missing_ok=True)
            self._state_written = None
        if self.server is not None and self._owns_server:
            self.server.stop()
        self.server = None
        self._owns_server = False
        self._stack = None
        self._clients.clear()

    def __enter__(self) -> LocalStackRuntime:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start_background(self) -> None:
        """The "up" mode: every poller, the async invocation queue, the scheduler and the HTTP APIs
        on background threads."""
        self.start_http_api()
        self.start_push_api()
        for poller in self.pollers:
            poller.start()
        if self.async_invoker is not None:
            self.async_invoker.start()
        if self.scheduler is not None:
            self.scheduler.start()

    def start_http_api(self) -> str | None:
        """Serve the functions' HttpApi routes on 127.0.0.1, each request's SigV4 signature verified
        against the embedded IAM (sigv4.py) unless its route says ``Auth: Authorizer: NONE`` (the
        chats' callbacks, which verify their platform's secret themselves); their URL, or None."""
        routes = [
            Route(r.method, r.path, f.logical_id, unsigned=r.authorizer == "NONE")
            for f in self.functions.values()
            for r in f.http_routes
        ]
        apis = {r.api_id for f in self.functions.values() for r in f.http_routes}
        # one API (the template's ProductApi): its ARN, for the callers' execute-api:Invoke policies
        api = self.stack.resources.get(next(iter(apis))) if len(apis) == 1 and None not in apis else None
        if routes and self.http_api is None:
            self.http_api = LocalHttpApi(
                routes,
                self.invoke,
                host=self.server_host,
                port=self.api_port,
                verifier=SigV4Verifier(
                    region=self.region,
                    api_arn=self.stack.template.arn("execute-api", api.ref) if api is not None else None,
                ),
            ).start()
            if "ProductApiUrl" in self.stack.outputs:  # the deployed URL means nothing here
                self.stack.outputs["ProductApiUrl"] = self.http_api.url
        return self.api_url

    @property
    def api_url(self) -> str | None:
        """The local HTTP API's URL while it is served."""
        return self.http_api.url if self.http_api is not None else None

    def push_routes(self) -> dict[str, str]:
        """The template's WebSocket API routes: route key -> the logical id of its function."""
        out: dict[str, str] = {}
        for logical_id, spec in self.stack.template.resources.items():
            if spec.get("Type") != WEBSOCKET_API or not self.stack.template.is_active(logical_id):
                continue
            for route_key, route in ((spec.get("Properties") or {}).get("Routes") or {}).items():
                found = sorted(references((route or {}).get("FunctionArn")) & set(self.functions))
                if found:
                    out[str(route_key)] = found[0]
        return out

    def start_push_api(self) -> str | None:
        """Serve the template's WebSocket API (its ``$connect``/``$disconnect`` functions and the
        management endpoint, SigV4-verified) on 127.0.0.1; every function is given its endpoint and
        URL (``AGENTWAKE_PUSH_ENDPOINT``/``AGENTWAKE_PUSH_URL``) in place of the deployed ones. Its URL, or None."""
        routes = self.push_routes()
        if routes and self.push_api is None:
            self.push_api = LocalWebSocketApi(
                routes,
                self.invoke,
                host=self.server_host,
                port=self.push_port,
                verifier=SigV4Verifier(region=self.region),
            ).start()
            self.push_env = {"AGENTWAKE_PUSH_ENDPOINT": self.push_api.endpoint, "AGENTWAKE_PUSH_URL": self.push_api.url}
            if "PushApiUrl" in self.stack.outputs:  # the deployed URL means nothing here
                self.stack.outputs["PushApiUrl"] = self.push_api.url
        return self.push_url

    @property
    def push_url(self) -> str | None:
        """The local WebSocket API's URL (``ws://127.0.0.1:PORT/v1``) while it is served."""
        return self.push_api.url if self.push_api is not None else None

    def stop_background(self) -> None:
        if self.http_api is not None:
            self.http_api.stop()
            self.http_api = None
        if self.push_api is not None:
            self.push_api.stop()
            self.push_api = None
            self.push_env = {}
        if self.scheduler is not None:
            self.scheduler.stop()
        for poller in self.pollers:
            poller.stop()
        if self.async_invoker is not None:
            self.async_invoker.stop()

    @property
    def async_retry_delays(self) -> tuple[float, ...]:
        return self.timing.async_retry_delays

    # -- what is running ------------------------------------------------------------------

    @property
    def endpoint_url(self) -> str:
        if self._endpoint_url is None:
            raise RuntimeError("the local stack is not started")
        return self._endpoint_url

    @property
    def stack(self) -> LocalStack:
        if self._stack is None:
            raise RuntimeError("the local stack is not started")
        return self._stack

    @property
    def functions(self) -> dict[str, FunctionSpec]:
        return self.stack.functions

    @property
    def outputs(self) -> dict[str, Any]:
        return self.stack.outputs

    def env(self) -> dict[str, str]:
        """Fake credentials, region and ``AWS_ENDPOINT_URL`` for this stack (not applied), and the
        outbound policy of the local stack: providers and webhooks on this machine's loopback over
        plain http are allowed here (the deployed template leaves both off), unless the stack runs
        with ``deployed_outbound``."""
        return {**aws_env(self.endpoint_url, self.region), **self.outbound_env()}

    def outbound_env(self) -> dict[str, str]:
        """The local allowances this stack applies over the template (none with ``deployed_outbound``)."""
        return {} if self.deployed_outbound else dict(LOCAL_OUTBOUND_ENV)

    def override_env(self, logical_id: str, variables: Mapping[str, str]) -> None:
        """Give a function these variables on every later invocation, over the template's and the
        local stack's allowances, as ``sam local invoke --env-vars`` does: an env file that says
        ``AGENTWAKE_OUTBOUND_ALLOW_LOOPBACK=false`` gets the deployed policy. The stack's endpoint and
        fake credentials still win: the function runs against this stack."""
        function = self.stack.function(logical_id)
        self.env_overrides.setdefault(function.logical_id, {}).update({str(k): str(v) for k, v in variables.items()})

    def _base_env(self, function: FunctionSpec) -> dict[str, str]:
        """What is applied over the function's template environment: the local allowances, the
        function's overrides, then this stack's endpoint and credentials."""
        return {
            **self.stack_wide_env(),
            **self.outbound_env(),
            **self.push_env,
            **self.env_overrides.get(function.logical_id, {}),
            **aws_env(self.endpoint_url, self.region),
        }

    def stack_wide_env(self) -> dict[str, str]:
        """``STACK_WIDE_VARIABLES`` as the template's functions set them (a name set to two values
        stays each function's own)."""
        out: dict[str, str] = {}
        for name in STACK_WIDE_VARIABLES:
            values = {f.environment[name] for f in self.stack.functions.values() if name in f.environment}
            if len(values) == 1:
                out[name] = values.pop()
        return out

    def client(self, service: str) -> Any:
        """A boto3 client for the local endpoint (fake credentials, never ~/.aws)."""
        if service not in self._clients:
            session = self._session or boto3_session(self.region)
            self._clients[service] = session.client(service, endpoint_url=self.endpoint_url, region_name=self.region)
        return self._clients[service]

    def function_env(self, logical_id: str) -> dict[str, str]:
        """The environment one invocation of the function sees (template env + local endpoint)."""
        function = self.stack.function(logical_id)
        return lambda_runtime.lambda_environment(function, self._base_env(function))

    def env_json(self, path: str | Path | None = None, *, endpoint_url: str | None = None) -> dict[str, dict[str, str]]:
        """``sam local invoke --env-vars`` file: per function, its variables + ``AWS_ENDPOINT_URL``.

        ``endpoint_url``: the address a Docker container reaches the server at (e.g.
        ``http://host.docker.internal:PORT``, with the server bound beyond loopback). SAM only
        overrides variables the template declares, so the template must declare AWS_ENDPOINT_URL.
        """
        endpoint = endpoint_url or self.endpoint_url
        data = {
            logical_id: {
                **function.environment,
                **self.outbound_env(),
                **self.push_env,
                **self.env_overrides.get(logical_id, {}),
                "AWS_ENDPOINT_URL": endpoint,
            }
            for logical_id, function in self.stack.functions.items()
        }
        if path is not None:
            _write_json(Path(path), data)
        return data

    def _write_state(self) -> None:
        path = state_path(self.home, self.local_name)
        env_file = env_path(self.home, self.local_name)
        self.env_json(env_file)
        _write_json(
            path,
            {
                "name": self.local_name,
                "pid": os.getpid(),
                "endpoint_url": self.endpoint_url,
                "region": self.region,
                "stack_name": self.stack_name,
                "template_path": str(self.template_path),
                "parameter_overrides": self.parameter_overrides,
                "deployed_outbound": self.deployed_outbound,
                "visibility_timeout_override": self.visibility_timeout_override,
                "timing": dataclasses.asdict(self.timing),
                "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "env_file": str(env_file),
                "resources": {lid: r.ref for lid, r in self.stack.resources.items()},
                "outputs": self.stack.outputs,
                "api_url": self.api_url,
                "push_url": self.push_url,
                "functions": {lid: f.arn for lid, f in self.stack.functions.items()},
            },
        )
        self._state_written = path

    # -- invoking -------------------------------------------------------------------------

    def invoke(self, logical_id: str, event: Any, *, request_id: str | None = None) -> Invocation:
        """RequestResponse invocation of a function (by logical id, name or ARN)."""
        return self._invoke(self.stack.function(logical_id), event, request_id, None)

    def invoke_async(self, logical_id: str, event: Any, *, wait: bool | None = None) -> AsyncInvocation:
        """Event invocation: retries, then the EventInvokeConfig destination.

        In background mode the invocation is queued (``.wait()`` on the result); otherwise, or
        with ``wait=True``, it runs to completion before returning.
        """
        assert self.async_invoker is not None
        function = self.stack.function(logical_id)
        invoked_arn = logical_id if logical_id.startswith(function.arn + ":") else None
        pending = self.async_invoker.submit(function, event, invoked_function_arn=invoked_arn)
        if not self.async_invoker.running:
            self.async_invoker.run_pending()
        elif wait:
            pending.wait()
        return pending

    def run_async(self, logical_id: str, event: Any) -> AsyncOutcome:
        """An asynchronous invocation run to completion in this thread."""
        assert self.async_invoker is not None
        return self.async_invoker.invoke(self.stack.function(logical_id), json.loads(json.dumps(event)))

    def _invoke(
        self, function: FunctionSpec, event: Any, request_id: str | None, invoked_function_arn: str | None
    ) -> Invocation:
        done = self.on_invocation(function, event) if self.on_invocation is not None else None
        invocation = lambda_runtime.invoke(
            function,
            event,
            base_env=self._base_env(function),
            request_id=request_id,
            invoked_function_arn=invoked_function_arn,
            on_env_change=self.on_env_change,
        )
        if done is not None:
            done(invocation)
        return invocation

    def _invoke_for_async(
        self, function: FunctionSpec, event: Any, request_id: str, invoked_function_arn: str | None
    ) -> Invocation:
        return self._invoke(function, event, request_id, invoked_function_arn)

    def seed(self) -> list[str]:
        """Create what the sample events in events/ name (``agentwake_local.seed``); returns what was new."""
        from agentwake.store.dynamo import DynamoStore
        from agentwake_local.seed import seed

        table = self.outputs.get("AgentTableName")
        if not table:
            raise RuntimeError("this template has no AgentTableName output: nothing to seed")
        return seed(DynamoStore(str(table), client=self.client("dynamodb")))

    def _invoke_target(self, target_arn: str, event: Any) -> None:
        """EventBridge Scheduler's target invocation: Lambda (asynchronously) or an SQS queue."""
        service = target_arn.split(":")[2] if target_arn.count(":") >= 5 else ""
        if service == "sqs":
            try:
                url = self.client("sqs").get_queue_url(QueueName=target_arn.rsplit(":", 1)[-1])["QueueUrl"]
            except Exception as exc:
                raise TargetInvocationError("AWS.SQS.NonExistentQueue", f"queue not found: {target_arn}") from exc
            self.client("sqs").send_message(QueueUrl=url, MessageBody=json.dumps(event))
            return
        try:
            self.stack.function(target_arn)
        except KeyError:
            raise TargetInvocationError(
                "AWS.Lambda.ResourceNotFoundException", f"Function not found: {target_arn}"
            ) from None
        self.invoke_async(target_arn, event)

    def fire_due_schedules(self) -> list[str]:
        """Fire the schedules whose time has come (the background mode does this on its own); the
        names of those whose target was invoked."""
        assert self.scheduler is not None
        return [f.name for f in self.scheduler.tick() if f.outcome == "invoked"]

    def _invoker_for(self, function: FunctionSpec) -> Callable[[Any], Invocation]:
        return lambda event: self._invoke(function, event, None, None)

    def _deliver(self, destination: Destination, record: dict[str, Any], condition: str) -> None:
        body = json.dumps(record)
        if destination.type == "SQS":
            url = (
                destination.url
                or self.client("sqs").get_queue_url(QueueName=destination.arn.rsplit(":", 1)[-1])["QueueUrl"]
            )
            self.client("sqs").send_message(QueueUrl=url, MessageBody=body)
        elif destination.type == "SNS":
            self.client("sns").publish(TopicArn=destination.arn, Message=body)
        elif destination.type == "EventBridge":
            outcome = "Success" if condition == "Success" else "Failure"
            self.client("events").put_events(
                Entries=[
                    {
                        "Source": "lambda",
                        "DetailType": f"Lambda Function Invocation Result - {outcome}",
                        "Detail": body,
                        "EventBusName": destination.arn,
                        "Resources": [record["requestContext"]["functionArn"]],
                    }
                ]
            )
        elif destination.type == "Lambda":
            assert self.async_invoker is not None
            self.async_invoker.submit(self.stack.function(destination.arn), record)
        else:
            logger.warning("destination type %s (%s) is not emulated locally", destination.type, destination.arn)
            return
        logger.info("async destination %s %s <- %s", destination.type, destination.arn, condition)

    # -- SQS event source mappings --------------------------------------------------------

    def poller(self, function_id: str, event_name: str | None = None) -> SqsPoller:
        for poller in self.pollers:
            if poller.function.logical_id == function_id and event_name in (None, poller.source.name):
                return poller
        raise KeyError(f"no SQS event source for {function_id}{'/' + event_name if event_name else ''}")

    def poll_once(self) -> list[PollResult]:
        """One poll of every SQS event source mapping; the non-empty results."""
        return [result for poller in self.pollers if not (result := poller.poll_once()).empty]

    def drain(self, until_empty: bool = True, max_rounds: int = 100, timeout: float = 30.0) -> list[PollResult]:
        """Poll every mapping until their queues are empty (see ``SqsPoller.drain``)."""
        results: list[PollResult] = []
        deadline = time.monotonic() + timeout
        while True:
            round_results: list[PollResult] = []
            for poller in self.pollers:
                remaining = max(0.0, deadline - time.monotonic())
                round_results += poller.drain(until_empty, max_rounds - len(results), remaining)
            results += round_results
            # A Lambda destination or a handler may have fed another mapping's queue meanwhile.
            if not round_results or len(results) >= max_rounds or time.monotonic() >= deadline:
                return results
