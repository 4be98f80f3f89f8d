"""How many parameters of the wake's code are annotated bare ``Any``: the figure issue 31 asks to bring to 0.

    .venv/bin/python bench/any_params.py [FOLDER ...]     (default: functions/agentwake/wake)

Read from the source with ``ast``: a parameter (positional, keyword-only, ``*args``, ``**kwargs``)
whose annotation is ``Any``, ``typing.Any`` or the string ``"Any"``. ``Any | None`` or
``dict[str, Any]`` are not bare and are not counted. A parameter is counted as a *port* (a store,
queue, journal or channel passed in) when its name says so (``PORT_WORDS``; ``dead_letters`` is a queue). ``-v`` lists each one.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "functions" / "agentwake" / "wake"
#: a parameter whose name has one of these is a port passed in
PORT_WORDS = ("store", "queue", "dead_letter", "journal", "channel", "recorder")


def _is_bare_any(annotation: ast.expr | None) -> bool:
    if isinstance(annotation, ast.Name):
        return annotation.id == "Any"
    if isinstance(annotation, ast.Attribute):
        return annotation.attr == "Any" and isinstance(annotation.value, ast.Name) and annotation.value.id == "typing"
    if isinstance(annotation, ast.Constant):
        return annotation.value == "Any"
    return False


def bare_any_params(path: Path) -> Iterator[tuple[int, str, str]]:
    """(line, function, parameter) of each parameter annotated bare ``Any`` in ``path``."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        a = node.args
        params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(p for p in (a.vararg, a.kwarg) if p is not None)]
        for p in params:
            if _is_bare_any(p.annotation):
                yield p.lineno, node.name, p.arg


def is_port(name: str) -> bool:
    return any(word in name.lower() for word in PORT_WORDS)


def count(folders: list[Path]) -> tuple[int, int, list[str]]:
    """(bare-Any parameters, of which ports, one line per parameter)."""
    total = ports = 0
    lines: list[str] = []
    for folder in folders:
        files = sorted(folder.rglob("*.py")) if folder.is_dir() else [folder]
        for path in files:
            for line, function, name in bare_any_params(path):
                total += 1
                ports += is_port(name)
                port = "  (port)" if is_port(name) else ""
                lines.append(f"{path.relative_to(ROOT)}:{line}: {function}({name}: Any){port}")
    return total, ports, lines


def main(argv: list[str]) -> None:
    verbose = "-v" in argv
    folders = [Path(a).resolve() for a in argv if a != "-v"] or [DEFAULT]
    total, ports, lines = count(folders)
    if verbose:
        print("\n".join(lines))
    where = ", ".join(str(f.relative_to(ROOT)) for f in folders)
    print(f"{total} parameters annotated bare Any in {where}; {ports} of them a store, queue, journal or channel")


if __name__ == "__main__":
    main(sys.argv[1:])
