"""The string literals of a module, docstrings left out: what the architecture tests read when a
rule is about spelling (a table key, a step key, a lease attribute)."""

from __future__ import annotations

import ast


def string_literals(source: str) -> list[tuple[int, str]]:
    """(line, text) of every string literal (f-string parts too), docstrings left out."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]
