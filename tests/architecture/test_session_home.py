"""The cellar's shape: the store is composed of aggregates (none inherits another), and who holds a
session has one home (``agentwake/session/`` for the values and the hand-off, and
``store/session_lease.py``, the only module that spells the lease's attributes and conditions).

Read from the source with ``ast`` where a rule is about spelling, and from the classes themselves
where it is about structure, so a change that breaks either fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

from agentwake.store import session_lease
from agentwake.store.dynamo import DynamoStore
from tests.support.literals import string_literals

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "functions" / "agentwake"
LEASE_HOME = RUNTIME / "store" / "session_lease.py"
COPIES = RUNTIME / "session" / "copies.py"

#: the lease item's attribute names, as the home's constants spell them (not ``HOLDER`` nor ``TOKEN``: "holder" is
#: also the public name of who holds a session, in SessionBusy, a 409 and log lines; "token" names task tokens too)
LEASE_ATTRIBUTES = {session_lease.UNTIL, session_lease.RESERVED_FOR, session_lease.PARKED, session_lease.HOLD_UNTIL}
#: the keys only a conversion between the attribute shapes spells (the event's, the stored binary,
#: the API's binary): only the codec converts. The queue adapters still build their own string
#: attributes in the API shape (``StringValue``) for what agentwake itself attaches.
ATTRIBUTE_SHAPE_KEYS = {"stringValue", "binaryValue", "BinaryValue", "BinaryValue64"}


def spells_the_lease(source: str) -> list[str]:
    """Where ``source`` names a lease attribute in a string (an item key, a condition, an update)."""
    words = {w for w in LEASE_ATTRIBUTES}
    hits = []
    for line, text in string_literals(source):
        tokens = set(text.replace("(", " ").replace(")", " ").replace(",", " ").replace("=", " ").split())
        if tokens & words:
            hits.append(f"{line}: {text!r}")
    return hits


def converts_attributes(source: str) -> list[str]:
    """Where ``source`` spells a message attribute shape's keys (a conversion of its own)."""
    return [f"{line}: {text!r}" for line, text in string_literals(source) if text in ATTRIBUTE_SHAPE_KEYS]


def _runtime_files() -> list[Path]:
    return sorted(RUNTIME.rglob("*.py"))


def test_the_store_is_at_most_two_classes_deep() -> None:
    # GIVEN the store class WHEN its method resolution order is read (object aside)
    mro = [c for c in DynamoStore.__mro__ if c is not object]
    # THEN it is itself and at most one base
    assert len(mro) <= 2, [c.__name__ for c in mro]


def test_no_store_aggregate_inherits_another() -> None:
    # GIVEN the aggregates a store holds
    store = DynamoStore("t", client=object())
    aggregates = {name: type(value) for name, value in vars(store).items() if name != "table"}
    assert {"records", "history", "journals", "leases", "runs", "ends", "jobs", "daily"} <= set(aggregates)
    classes = set(aggregates.values()) | {type(store.table)}
    # THEN none of them has another aggregate (or the table) among its bases
    for name, cls in aggregates.items():
        inherited = [c.__name__ for c in cls.__mro__[1:] if c in classes]
        assert not inherited, f"store.{name} ({cls.__name__}) inherits {inherited}"
        assert len([c for c in cls.__mro__ if c is not object]) <= 2, f"{cls.__name__}: {cls.__mro__}"


def test_only_the_session_lease_home_spells_the_lease() -> None:
    # GIVEN every runtime module but the lease's home
    found = []
    for path in _runtime_files():
        if path == LEASE_HOME:
            continue
        found += [f"{path.relative_to(ROOT)}:{hit}" for hit in spells_the_lease(path.read_text(encoding="utf-8"))]
    # THEN none names the lease item's attributes (its conditions are spelled there too)
    assert not found, "\n".join(found)


def test_the_lease_home_is_where_the_attributes_are_spelled() -> None:
    # GIVEN the home WHEN checked THEN it does spell them (the check above is not vacuous)
    assert spells_the_lease(LEASE_HOME.read_text(encoding="utf-8"))


def test_the_spelling_check_sees_a_lease_condition() -> None:
    # GIVEN a module that writes a lease condition of its own
    source = 'C = "attribute_not_exists(pk) OR lease_until < :now"\nD = {"reserved_for": {"S": "x"}}\nE = "tokens"\n'
    # THEN both are caught, and a longer word that contains one is not
    assert len(spells_the_lease(source)) == 2


def test_message_attributes_are_converted_only_by_the_codec() -> None:
    # GIVEN every runtime module but the codec (session/copies.py)
    found = []
    for path in _runtime_files():
        if path == COPIES:
            continue
        found += [f"{path.relative_to(ROOT)}:{hit}" for hit in converts_attributes(path.read_text(encoding="utf-8"))]
    # THEN none spells the keys of the attribute shapes: every conversion goes through MessageAttributes
    assert not found, "\n".join(found)


def sets_handed_at(source: str) -> list[str]:
    """Where ``source`` writes ``ATTR_HANDED_AT`` (a dict literal's key or an item assignment): what
    building a handed copy does. Reading it (``in``, ``.get``) is not building one."""
    hits = []
    for node in ast.walk(ast.parse(source)):
        keys: list[ast.expr | None] = []
        if isinstance(node, ast.Dict):
            keys = list(node.keys)
        elif isinstance(node, ast.Assign):
            keys = [t.slice for t in node.targets if isinstance(t, ast.Subscript)]
        hits += [f"{node.lineno}" for k in keys if isinstance(k, ast.Name) and k.id == "ATTR_HANDED_AT"]
    return hits


def test_a_handed_copy_is_built_in_one_function() -> None:
    # GIVEN every runtime module but the copies' (session/copies.py: handed_copy)
    found = []
    for path in _runtime_files():
        if path == COPIES:
            continue
        found += [f"{path.relative_to(ROOT)}:{line}" for line in sets_handed_at(path.read_text(encoding="utf-8"))]
    # THEN none stamps a copy as handed: the re-send and the run here both take handed_copy()'s
    assert not found, found
    assert sets_handed_at(COPIES.read_text(encoding="utf-8")), "handed_copy no longer stamps its copy"


def test_the_handed_copy_check_sees_a_second_builder() -> None:
    source = "def resend(w):\n    wait = {**w.wait, ATTR_HANDED_AT: '1'}\n    out = {}\n    out[ATTR_HANDED_AT] = '2'\n"
    assert len(sets_handed_at(source)) == 2


def test_the_attribute_check_sees_a_conversion() -> None:
    # GIVEN a module that converts an attribute itself  THEN it is caught
    source = 'def f(v):\n    return {"DataType": "Binary", "BinaryValue": v["binaryValue"]}\n'
    assert len(converts_attributes(source)) == 2
