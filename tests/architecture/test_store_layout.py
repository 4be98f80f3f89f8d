"""The store's shape: the port is plain Python, every table key is built in ``store/keys.py``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support.literals import string_literals

ROOT = Path(__file__).resolve().parents[2]
STORE = ROOT / "functions" / "agentwake" / "store"
#: a string that starts like a key of the single table (``SESSION#…``, ``RUN#…``, ``MSG#…``, ...)
KEY_LITERAL = re.compile(r"^(SESSION|RUN|RUNS|RUNDAY|TASK|JOB|MSG|USAGE|STEP|DELIVERY|SENDING|FAILURE)#")


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


#: the port's modules: ``port.py`` (the table's aggregates and ``Store``) and the concerns split from it
PORTS = ("port.py", "port_approvals.py", "port_queues.py")
#: what a port may import of agentwake: the plain models and values it speaks, and the other ports
PLAIN = {
    "agentwake.domain.models",
    "agentwake.domain.run_models",
    "agentwake.domain.approvals",
    "agentwake.session.lease",
}


def test_the_store_port_imports_no_dynamodb_code() -> None:
    assert sorted(p.name for p in STORE.glob("port*.py")) == sorted(PORTS)
    for name in PORTS:
        # GIVEN a port module the wake depends on WHEN its imports are read (TYPE_CHECKING ones too)
        imports = _imports(STORE / name)
        # THEN it names only the standard library, the plain models and values it speaks and the other ports
        agentwake = {m for m in imports if m.startswith("agentwake")}
        ports = {f"agentwake.store.{p.removesuffix('.py')}" for p in PORTS}
        assert agentwake <= PLAIN | ports, (name, agentwake)
        assert not {m for m in imports if m.split(".")[0] in {"boto3", "botocore", "moto"}}, name


def _key_literals(source: str, name: str) -> list[str]:
    """Strings (f-string parts too) that start like a table key, docstrings left out."""
    return [f"{name}:{line}: {text!r}" for line, text in string_literals(source) if KEY_LITERAL.match(text)]


def test_every_table_key_is_built_in_store_keys() -> None:
    # GIVEN the runtime, the operator CLI and the local emulator
    files = [
        *(ROOT / "functions" / "agentwake").rglob("*.py"),
        *(ROOT / "agentwake_ops").rglob("*.py"),
        *(ROOT / "infra" / "agentwake_local").rglob("*.py"),
    ]
    # WHEN their string literals are read (docstrings aside)
    found = [
        hit for f in files if f != STORE / "keys.py" for hit in _key_literals(f.read_text(), str(f.relative_to(ROOT)))
    ]
    # THEN none spells a key of the table: store/keys.py builds every one
    assert not found, "\n".join(found)


def test_the_key_check_sees_a_key_literal() -> None:
    # GIVEN a module that spells a key itself WHEN checked THEN it is caught (the check can fail)
    source = 'PK = f"RUN#{1}"\nSK = "STEP#x"\nOK = "#x"\n\n\ndef f():\n    """RUN# in a docstring."""\n'
    assert len(_key_literals(source, "probe.py")) == 2
