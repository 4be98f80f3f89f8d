"""Every write of a whole task or job item links it to the run that started it.

``runs show`` and ``runs list --tree`` find what a run started with one Query of the ``TREE#`` keys on
``gsi2`` (docs/table-design.md, "A run's tree without a scan"); an item written without them is
missing from its run's tree. So each item built under ``task_key``/``job_key`` (``Table.item`` or
``dump_item``) must pass ``**started_keys(record)``, whichever path writes it (register, the
background start path, the agent's own wakes, an update that puts the whole item).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "functions" / "agentwake"


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def unlinked_item_writes(source: str, name: str) -> list[str]:
    """``item(...)`` / ``dump_item(...)`` calls keyed by ``*task_key(...)`` or ``*job_key(...)``
    without ``**started_keys(...)``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or _name(node.func) not in ("item", "dump_item"):
            continue
        keyed = any(
            isinstance(a, ast.Starred)
            and isinstance(a.value, ast.Call)
            and _name(a.value.func) in ("task_key", "job_key")
            for a in node.args
        )
        linked = any(
            k.arg is None and isinstance(k.value, ast.Call) and _name(k.value.func) == "started_keys"
            for k in node.keywords
        )
        if keyed and not linked:
            found.append(f"{name}:{node.lineno}")
    return found


def test_every_task_or_job_item_written_carries_its_tree_keys() -> None:
    # GIVEN the runtime's modules WHEN their item builds are read
    found = [
        hit for f in RUNTIME.rglob("*.py") for hit in unlinked_item_writes(f.read_text(), str(f.relative_to(ROOT)))
    ]
    # THEN each task or job item passes **started_keys(record)
    assert not found, "task/job items written without **started_keys(record): " + ", ".join(found)


def test_the_check_sees_an_unlinked_write() -> None:
    # GIVEN a module that puts a task and a job without the keys, and one with them
    source = (
        "a = self.table.item(task, *task_key(task.task_id))\n"
        "b = dump_item(job, *job_key(job.job_id), gsi1pk=P)\n"
        "c = self.table.item(task, *task_key(task.task_id), **started_keys(task))\n"
        "d = self.table.item(config, *config_key(s))\n"
    )
    # WHEN checked THEN the two unlinked writes are caught, and only they
    assert unlinked_item_writes(source, "probe.py") == ["probe.py:1", "probe.py:2"]
