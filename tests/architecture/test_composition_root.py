"""One composition root: the adapters and services the three functions use are built in
``agentwake.bootstrap`` only (read from the source with ``ast``: a constructor called anywhere else in
the runtime, also inside a function, fails the test)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "functions" / "agentwake"
COMPOSITION_ROOT = RUNTIME / "bootstrap.py"
#: the runtime's store and queues, and the services of the product API over them
BUILT_BY_THE_ROOT = {
    "DynamoStore",
    "ResultQueue",
    "DeadLetters",
    "WorkQueue",
    "CronFailures",
    "Schedules",
    "SessionsService",
    "TasksService",
    "WakeDeps",
}


def constructed(path: Path) -> set[str]:
    """The names of ``BUILT_BY_THE_ROOT`` that ``path`` calls (``X(...)`` or ``module.X(...)``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name in BUILT_BY_THE_ROOT:
                found.add(name)
    return found


def test_only_the_composition_root_builds_the_store_the_queues_and_the_services() -> None:
    # GIVEN every module of the runtime
    elsewhere = {
        str(path.relative_to(ROOT)): sorted(names)
        for path in RUNTIME.rglob("*.py")
        if path != COMPOSITION_ROOT and (names := constructed(path))
    }
    # THEN none but the composition root builds them (a service receives what it works on)
    assert elsewhere == {}, elsewhere
    # AND the root builds each of them
    assert constructed(COMPOSITION_ROOT) == BUILT_BY_THE_ROOT


def test_the_check_sees_a_constructor_inside_a_function(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text("def f(url):\n    from x import queues\n    return queues.ResultQueue(url)\n", encoding="utf-8")
    assert constructed(path) == {"ResultQueue"}
