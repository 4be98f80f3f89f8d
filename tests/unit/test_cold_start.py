"""Cold start: importing a handler must not pull in HTTP clients, provider SDK adapters or CLI libraries.

Measured for the record with ``python -X importtime -c "import agentwake.handlers.background_result"``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

FORBIDDEN_TOP = {"typer", "rich", "click", "requests", "httpx", "moto", "urllib3"}
FORBIDDEN_MODULES = {
    "agentwake.agent.providers.openai_compat",
    "agentwake.agent.providers.bedrock",
    "agentwake.delivery.webhook",
    "agentwake.outbound",
    "agentwake_ops.cli",
    "urllib.request",
    "http.client",
}


@pytest.mark.parametrize("handler", ["agentwake.handlers.background_result", "agentwake.handlers.cron_wake"])
def test_handler_import_stays_light(handler: str) -> None:
    # GIVEN a fresh interpreter WHEN it imports the handler as Lambda's cold start does
    code = f"import sys, json, {handler}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout))
    # THEN nothing heavy that a session might not use is loaded
    assert {m.split(".")[0] for m in loaded} & FORBIDDEN_TOP == set()
    assert loaded & FORBIDDEN_MODULES == set()
