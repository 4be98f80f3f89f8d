"""Runtime unit tests run without the ``local`` extra: ``tests/unit`` never imports the emulator
(``agentwake_local``) or moto. Each unit test runs with both unimportable (``tests/unit/conftest.py``);
here a fresh interpreter collects the folder with both blocked before the first conftest loads."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.without_local import hidden

ROOT = Path(__file__).resolve().parents[2]


def test_the_unit_tests_are_collected_with_the_emulator_and_moto_blocked() -> None:
    # GIVEN a session where agentwake_local and moto cannot be imported (as without the extra)
    # WHEN tests/unit is collected (every conftest, every test module, the tests.support they import)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "tests.support.without_local_plugin"]
        + ["--collect-only", "-q", "tests/unit"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    # THEN it collects without an error
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = done.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"\d+ tests collected in [\d.]+s", summary), summary


def test_hidden_makes_the_emulator_and_moto_unimportable_then_puts_them_back() -> None:
    importlib.import_module("agentwake_local.template")
    # WHEN inside the block THEN neither a loaded module nor a new one can be imported
    with hidden():
        for name in ("agentwake_local.template", "agentwake_local.moto_patches", "moto", "moto.sqs"):
            with pytest.raises(ModuleNotFoundError, match="without the local extra"):
                importlib.import_module(name)
    # AND after it, what was loaded is back (the same module object)
    assert importlib.import_module("agentwake_local.template") is sys.modules["agentwake_local.template"]
