"""The journal owns its key grammar: step keys are built and read in ``domain/steps.py`` alone.

The DynamoDB adapter stores and reads them; the wake, the store and the operator CLI ask
``domain/steps.py`` (``reply_key``, ``parse_step_key``, ``is_model_reply``, ``kept_for_commit``, ...)
instead of spelling ``"final.delivery"`` or matching ``".reply"`` / ``".tool."`` themselves.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.literals import string_literals

ROOT = Path(__file__).resolve().parents[2]
GRAMMAR = ROOT / "functions" / "agentwake" / "domain" / "steps.py"
#: a string that spells part of a step key: deliver_final's key or delivery id, a reply's or a tool
#: result's suffix (``000.reply``, ``000.tool.01``), alone or inside a longer string or an f-string
STEP_KEY_LITERAL = re.compile(r"final\.delivery|#final\b|\.reply\b|\.tool\.")


def _step_key_literals(source: str, name: str) -> list[str]:
    """Strings (f-string parts too) that spell part of a step key, docstrings left out."""
    return [f"{name}:{line}: {text!r}" for line, text in string_literals(source) if STEP_KEY_LITERAL.search(text)]


def test_only_the_journal_module_spells_a_step_key() -> None:
    # GIVEN the runtime, the operator CLI and the local emulator
    files = [
        *(ROOT / "functions" / "agentwake").rglob("*.py"),
        *(ROOT / "agentwake_ops").rglob("*.py"),
        *(ROOT / "infra" / "agentwake_local").rglob("*.py"),
    ]
    # WHEN their string literals are read (docstrings aside)
    found = [hit for f in files if f != GRAMMAR for hit in _step_key_literals(f.read_text(), str(f.relative_to(ROOT)))]
    # THEN none spells a step key: domain/steps.py builds and parses every one
    assert not found, "\n".join(found)


def test_the_grammar_module_is_where_the_keys_are_spelled() -> None:
    # GIVEN the grammar's own module WHEN checked THEN it does spell them (the check looks at the right file)
    assert _step_key_literals(GRAMMAR.read_text(), "domain/steps.py")


def test_the_step_key_check_sees_a_step_key_literal() -> None:
    # GIVEN a module that spells step keys itself WHEN checked THEN each is caught (the check can fail)
    source = (
        'A = key.endswith(".reply")\n'
        'B = ".tool." in key\n'
        'C = key == "final.delivery"\n'
        'D = f"{run_id}#final"\n'
        'E = f"{step:03d}.reply"\n'
        'OK = "agentwake.agent.tools"\n'
        'OK2 = "reply_to"\n'
        "\n\ndef f():\n"
        '    """000.reply and final.delivery in a docstring."""\n'
    )
    assert len(_step_key_literals(source, "probe.py")) == 5
