"""Registers the embedded local AWS with the operator CLI (entry point ``agentwake.cli: local``).

The CLI never imports this package; it loads this function through its entry point group and gets
``agentwake local …``, ``agentwake invoke`` and a way to find and invoke on a running local stack.
"""

from __future__ import annotations

import sys
from typing import Any

from agentwake_ops.plugins import LocalStackHooks, Registry


def register(registry: Registry) -> None:
    from agentwake_local import cli

    registry.add_group(cli.app, "local")
    registry.add_command(cli.invoke, "invoke")
    registry.set_local_stack(LocalStackHooks(read_state=_read_state, invoker=LocalInvoker))


def _read_state() -> dict[str, Any] | None:
    """The local stack ``$AGENTWAKE_LOCAL`` names, or the one that runs; several running and none
    named is the operator's choice to make (OpsError naming them), never a guess."""
    from agentwake_local.stack import SeveralLocalStacks, read_state

    try:
        return read_state()
    except (SeveralLocalStacks, ValueError) as exc:
        from agentwake_ops.context import OpsError

        raise OpsError(str(exc)) from None
    except Exception:
        return None


class LocalInvoker:
    """Lambda's asynchronous invocation on the running local stack, emulated in this process.

    The local stack's async queue lives in the process that runs it; from another process the
    invocation runs here (retries, then the on-failure destination on the same local queues).
    Each invocation prints ``local up``'s one line (``activity.WakeLines``) on stderr; the
    function's JSON logs go to ``$AGENTWAKE_HOME/functions.log`` (named once), so that stdout
    stays the CLI's own output (--json must stay parseable) and stderr stays readable.
    """

    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state
        self._runtime: Any = None
        self._named_log = False

    def __call__(self, logical_id: str, payload: dict[str, Any]) -> str:
        from agentwake_local import activity, function_output

        if self._runtime is None:
            from agentwake_local.stack import LocalStackRuntime
            from agentwake_ops.context import OpsError  # here: `agentwake --help` need not load the store

            try:
                self._runtime = LocalStackRuntime.attach(state=self.state)
            except Exception as exc:
                raise OpsError(f"cannot invoke on the local stack: {exc}") from exc
            self._runtime.on_invocation = lines = activity.WakeLines(self._runtime, sys.stderr)
            if self._runtime.async_invoker is not None:
                self._runtime.async_invoker.on_outcome = lines.outcome
        log = function_output.default_log()
        if not self._named_log:
            print(
                f"running here on the local stack (its `local up` terminal does not show these runs); "
                f"the functions' JSON logs: {log}",
                file=sys.stderr,
                flush=True,
            )
            self._named_log = True
        with function_output.to_log(log):
            pending = self._runtime.invoke_async(logical_id, payload, wait=True)
            outcome = pending.wait() if hasattr(pending, "wait") else pending
        attempts = len(getattr(outcome, "attempts", []) or [])
        return f"ran on the local stack: {getattr(outcome, 'condition', '?')} after {attempts} attempt(s)"
