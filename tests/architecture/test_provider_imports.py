"""The providers package and its adapters import one way: ``__init__`` -> ``spec``/adapters, never
an adapter -> ``__init__``. Every import counts, also under ``TYPE_CHECKING`` and inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

PROVIDERS = Path(__file__).resolve().parents[2] / "functions" / "agentwake" / "agent" / "providers"
PACKAGE = "agentwake.agent.providers"


def imported(path: Path) -> set[str]:
    """What ``path`` imports: module names, and ``package:name`` for ``from package import name``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the providers package
                base = ".".join([*PACKAGE.split(".")[: len(PACKAGE.split(".")) - (node.level - 1)], base]).rstrip(".")
            found |= {f"{base}:{alias.name}" for alias in node.names}
    return found


def imports_the_package(names: set[str]) -> list[str]:
    modules = {p.stem for p in PROVIDERS.glob("*.py")}
    return sorted(
        n for n in names if n == PACKAGE or (n.startswith(PACKAGE + ":") and n.partition(":")[2] not in modules)
    )


def test_no_provider_module_imports_the_providers_package() -> None:
    # GIVEN every import of every module beside the package's __init__
    offenders = {
        path.name: imports_the_package(imported(path))
        for path in sorted(PROVIDERS.glob("*.py"))
        if path.name != "__init__.py"
    }
    # THEN none takes anything from the package itself (specs come from providers.spec)
    assert not {k: v for k, v in offenders.items() if v}, offenders


def test_the_check_sees_a_type_checking_and_a_lazy_import_of_the_package(tmp_path: Path) -> None:
    # GIVEN a module that imports the package only under TYPE_CHECKING and inside a function
    module = tmp_path / "adapter.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from agentwake.agent.providers import OpenAISpec\n"
        "def f():\n    from agentwake.agent.providers import build_provider\n"
        "    from agentwake.agent.providers import spec\n",
        encoding="utf-8",
    )
    # THEN both imports of the package are seen, and the submodule import is not one of them
    assert imports_the_package(imported(module)) == [f"{PACKAGE}:OpenAISpec", f"{PACKAGE}:build_provider"]
