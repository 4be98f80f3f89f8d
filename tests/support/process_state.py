"""What the runtime keeps for the life of its process, reset between tests.

A Lambda process never forgets a resolved secret (the redactor keeps removing it) nor unloads a
Python tool (loaded once per process): only a test needs to, so the resets live here, not in the
function bundle.
"""

from __future__ import annotations


def forget_secrets() -> None:
    """Forget every secret registered with the redactor (agentwake.trust.redact.register_secret)."""
    from agentwake.trust import redact

    with redact._lock:
        redact._secrets.clear()


def forget_python_tools() -> None:
    """Drop the entry-point Python tools loaded so far (agentwake.agent.tools.entry_points)."""
    from agentwake.agent.tools import entry_points

    with entry_points._lock:
        entry_points._loaded.clear()
