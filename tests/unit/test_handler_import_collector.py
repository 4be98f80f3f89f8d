"""The collector paused for a handler's import (``agentwake.handlers``) runs again when that import
fails: the local stack's Lambda runtime imports handlers in its own long-lived process and keeps
serving the other functions after one fails to load."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_handler_whose_import_fails_leaves_the_collector_running_in_the_local_runtime(tmp_path: Path) -> None:
    # GIVEN a handler module that fails after agentwake.handlers paused the collector
    (tmp_path / "broken_handler.py").write_text("import agentwake.handlers\nraise ImportError('no such thing')\n")
    code = (
        "import gc, json\n"
        "from pathlib import Path\n"
        "from agentwake_local.functions import FunctionSpec\n"
        "from agentwake_local.lambda_runtime import HandlerLoadError, load_handler\n"
        f"spec = FunctionSpec(logical_id='F', name='f', arn='arn:aws:lambda:us-east-1:1:function:f',\n"
        f"                    handler='broken_handler.handler', code_uri=Path({str(tmp_path)!r}))\n"
        "try:\n"
        "    load_handler(spec)\n"
        "except HandlerLoadError as exc:\n"
        "    print(json.dumps([exc.error_type, gc.isenabled()]))\n"
    )
    # WHEN the local runtime loads it
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=dict(os.environ))
    # THEN the load fails as Lambda's does, and the process's collector runs again
    assert json.loads(out.stdout) == ["Runtime.ImportModuleError", True]
