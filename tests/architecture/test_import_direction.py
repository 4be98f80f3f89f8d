"""Imports run one way: client, CLI and local emulator -> runtime, local emulator -> CLI; no cycles.

Read from the source with ``ast`` (every import counts, also one inside a function: a lazy import
is still a dependency), so the test needs nothing installed and cannot be fooled by import order.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: import name -> folder (mirrors setup.py)
PACKAGES = {
    "agentwake": ROOT / "functions" / "agentwake",
    "agentwake_client": ROOT / "agentwake_client",
    "agentwake_ops": ROOT / "agentwake_ops",
    "agentwake_local": ROOT / "infra" / "agentwake_local",
}
#: which package may import which (besides itself)
ALLOWED = {
    "agentwake": set(),
    "agentwake_client": {"agentwake"},
    "agentwake_ops": {"agentwake"},
    "agentwake_local": {"agentwake", "agentwake_ops"},
}


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for name, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            rel = path.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            found[".".join([name, *parts])] = path
    return found


def imports(module: str, path: Path, known: set[str], *, type_checking: bool = False) -> Iterator[str]:
    """The project modules ``module`` imports (``from a import b`` counts ``a.b`` when it is a module).

    ``type_checking``: also those under ``if TYPE_CHECKING:`` (never executed, but a reader and the
    type checker still follow them: the cycle check counts them)."""
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree) if type_checking else _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield from _resolve(alias.name, known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = module.split(".") if is_package else module.split(".")[:-1]
                parent = parent[: len(parent) - (node.level - 1)]
                base = ".".join([*parent, base] if base else parent)
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                yield from _resolve(candidate if candidate in known else base, known)


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node except what sits under ``if TYPE_CHECKING:`` (never executed, so no dependency)."""
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            todo.extend(node.orelse)
            continue
        yield node
        todo.extend(ast.iter_child_nodes(node))


def _resolve(name: str, known: set[str]) -> Iterator[str]:
    while name and name not in known:
        name = name.rpartition(".")[0]
    if name:
        yield name


def graph(*, type_checking: bool = False) -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {m: {i for i in imports(m, p, known, type_checking=type_checking) if i != m} for m, p in mods.items()}


#: a runtime module does one job: past this many lines it is doing several
MAX_MODULE_LINES = 500
#: a handler parses, calls one use case and maps its answer
MAX_HANDLER_LINES = 60


def test_runtime_never_imports_the_cli_or_the_emulator() -> None:
    # GIVEN every import in the four packages
    wrong = []
    for module, targets in graph().items():
        package = module.split(".")[0]
        for target in targets:
            other = target.split(".")[0]
            # THEN each crosses package lines only in the allowed direction
            if other != package and other not in ALLOWED[package]:
                wrong.append(f"{module} -> {target}")
    assert not wrong, "imports against the allowed direction:\n" + "\n".join(sorted(wrong))


def test_no_shipped_code_imports_the_test_suite() -> None:
    # GIVEN every import of the runtime, the CLI and the emulator (lazy and TYPE_CHECKING ones too)
    found = []
    for module, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            found += [f"{module} -> {name}" for name in names if name.split(".")[0] == "tests"]
    # THEN none reaches into tests/: test hooks (a fake clock, resets of process state) live there, never in a bundle
    assert not found, "\n".join(found)


def test_no_import_cycles() -> None:
    # GIVEN the module import graph, counting lazy imports and those under TYPE_CHECKING
    # WHEN its strongly connected components are found (Tarjan)
    g = graph(type_checking=True)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(g):
        if v not in index:
            visit(v)
    # THEN no two modules import each other, directly or through others (a package __init__ and
    # its own modules included)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def _runtime_files() -> dict[str, Path]:
    return {m: p for m, p in modules().items() if m.split(".")[0] == "agentwake"}


def test_no_runtime_module_is_over_the_size_limit() -> None:
    # GIVEN every module of the runtime (functions/agentwake)
    sizes = {m: len(p.read_text(encoding="utf-8").splitlines()) for m, p in _runtime_files().items()}
    # THEN none is over the limit (one job per module)
    long = {m: n for m, n in sizes.items() if n > MAX_MODULE_LINES}
    assert not long, f"runtime modules over {MAX_MODULE_LINES} lines: {long}"


def test_each_handler_is_thin() -> None:
    # GIVEN the Lambda entry points  THEN each fits the size of a Powertools example
    handlers = {m: p for m, p in _runtime_files().items() if m.startswith("agentwake.handlers.")}
    assert handlers, "no handler modules found"
    sizes = {m: len(p.read_text(encoding="utf-8").splitlines()) for m, p in handlers.items()}
    assert all(n <= MAX_HANDLER_LINES for n in sizes.values()), f"handlers over {MAX_HANDLER_LINES} lines: {sizes}"


def test_the_checker_sees_a_cycle_and_a_wrong_direction(tmp_path: Path) -> None:
    # GIVEN a module that imports back into the runtime's importer  THEN the parser reports it
    path = tmp_path / "m.py"
    path.write_text("def f():\n    from agentwake_ops.cli import app\n", encoding="utf-8")
    assert list(imports("agentwake.m", path, {"agentwake.m", "agentwake_ops.cli"})) == ["agentwake_ops.cli"]


def test_the_cycle_check_counts_imports_under_type_checking(tmp_path: Path) -> None:
    # GIVEN a module whose only import of another sits under TYPE_CHECKING
    path = tmp_path / "m.py"
    path.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from agentwake.n import X\n", encoding="utf-8"
    )
    known = {"agentwake.m", "agentwake.n"}
    # THEN the direction check skips it (never executed) and the cycle check counts it
    assert list(imports("agentwake.m", path, known)) == []
    assert list(imports("agentwake.m", path, known, type_checking=True)) == ["agentwake.n"]
