"""Imports run one way: CLI and local emulator -> runtime, local emulator -> CLI; no cycles.

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
    "agentwake_ops": ROOT / "agentwake_ops",
    "agentwake_local": ROOT / "infra" / "agentwake_local",
}
#: which package may import which (besides itself)
ALLOWED = {
    "agentwake": set(),
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


def imports(module: str, path: Path, known: set[str]) -> Iterator[str]:
    """The project modules ``module`` imports (``from a import b`` counts ``a.b`` when it is a module)."""
    is_package = path.name == "__init__.py"
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
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


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {m: {i for i in imports(m, p, known) if i != m} for m, p in mods.items()}


def test_runtime_never_imports_the_cli_or_the_emulator() -> None:
    # GIVEN every import in the three packages
    wrong = []
    for module, targets in graph().items():
        package = module.split(".")[0]
        for target in targets:
            other = target.split(".")[0]
            # THEN each crosses package lines only in the allowed direction
            if other != package and other not in ALLOWED[package]:
                wrong.append(f"{module} -> {target}")
    assert not wrong, "imports against the allowed direction:\n" + "\n".join(sorted(wrong))


def test_no_import_cycles() -> None:
    # GIVEN the module import graph  WHEN its strongly connected components are found (Tarjan)
    g = graph()
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
    # THEN no two modules import each other, directly or through others (a package __init__ that
    # re-exports its modules is the one exception Python itself makes: skip parent<->child pairs)
    real = [c for c in cycles if not _package_reexport(c)]
    assert not real, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in real)


def _package_reexport(component: list[str]) -> bool:
    return len(component) == 2 and (
        component[1].startswith(component[0] + ".") or component[0].startswith(component[1] + ".")
    )


def test_the_checker_sees_a_cycle_and_a_wrong_direction(tmp_path: Path) -> None:
    # GIVEN a module that imports back into the runtime's importer  THEN the parser reports it
    path = tmp_path / "m.py"
    path.write_text("def f():\n    from agentwake_ops.cli import app\n", encoding="utf-8")
    assert list(imports("agentwake.m", path, {"agentwake.m", "agentwake_ops.cli"})) == ["agentwake_ops.cli"]
