"""The Lambda bundle (every function's CodeUri, as ``sam build`` copies it) carries runtime code only."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from agentwake_local.template import load_template

ROOT = Path(__file__).resolve().parents[2]
#: top-level names that belong to the operator CLI or the local emulator, never to a function
NOT_RUNTIME = {"agentwake_ops", "agentwake_local", "infra", "ops", "typer", "rich", "click", "moto", "yaml"}


def code_uris() -> set[Path]:
    template = load_template(ROOT / "template.yaml")
    uris = set()
    for spec in template.resources.values():
        if spec.get("Type") == "AWS::Serverless::Function":
            uri = (spec.get("Properties") or {}).get("CodeUri") or template.body["Globals"]["Function"].get("CodeUri")
            uris.add((ROOT / uri).resolve())
    return uris


def bundle(code_uri: Path) -> dict[str, bytes]:
    """What sam build copies from the CodeUri (our code; dependencies come from requirements.txt)."""
    return {
        str(p.relative_to(code_uri)): p.read_bytes()
        for p in sorted(code_uri.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_code_uri_holds_only_the_runtime_package() -> None:
    # GIVEN each function's CodeUri
    for uri in code_uris():
        files = bundle(uri)
        # THEN it holds the runtime package and its requirements, and no CLI or emulator code
        tops = {name.split("/")[0] for name in files}
        assert tops <= {"agentwake", "requirements.txt"}, tops
        for name, data in files.items():
            if name.endswith(".py"):
                tree = ast.parse(data.decode())
                imported = {
                    (n.module or "").split(".")[0] if isinstance(n, ast.ImportFrom) else a.name.split(".")[0]
                    for n in ast.walk(tree)
                    if isinstance(n, ast.Import | ast.ImportFrom)
                    for a in n.names
                }
                assert not imported & NOT_RUNTIME, f"{name} imports {imported & NOT_RUNTIME}"


def test_requirements_carry_no_cli_or_local_packages() -> None:
    for uri in code_uris():
        lines = (uri / "requirements.txt").read_text().splitlines()
        names = {
            re.split(r"[<>=\[ ;]", line.strip())[0].lower()
            for line in lines
            if line.strip() and not line.startswith("#")
        }
        assert names and not names & {"typer", "rich", "moto", "pyyaml", "click"}, names
