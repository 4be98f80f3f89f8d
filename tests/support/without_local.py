"""Runtime unit tests run without the ``local`` extra: neither ``agentwake_local`` nor moto.

``hidden()`` makes both unimportable for a while (already imported modules are set aside and put
back after), so a unit test that reaches for the emulator fails with ``ModuleNotFoundError`` as it
would where the extra is not installed. ``tests/unit/conftest.py`` runs every unit test inside
it; ``pytest -p tests.support.without_local_plugin`` blocks both for a whole session, conftests
and collection included."""

from __future__ import annotations

import contextlib
import importlib.abc
import sys
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any

#: what the `local` extra brings (moto[server]) and the package that needs it
BLOCKED = ("agentwake_local", "moto")


def is_blocked(name: str) -> bool:
    return any(name == top or name.startswith(top + ".") for top in BLOCKED)


class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Sequence[str] | None = None, target: Any = None) -> None:
        if is_blocked(fullname):
            raise ModuleNotFoundError(
                f"No module named {fullname!r} (runtime unit tests run without the local extra)", name=fullname
            )
        return None


@contextlib.contextmanager
def hidden() -> Iterator[None]:
    """``agentwake_local`` and moto unimportable inside the block, as if not installed."""
    blocker = Blocker()
    set_aside: dict[str, ModuleType] = {n: m for n, m in sys.modules.items() if is_blocked(n)}
    for name in set_aside:
        del sys.modules[name]
    sys.meta_path.insert(0, blocker)
    try:
        yield
    finally:
        sys.meta_path.remove(blocker)
        sys.modules.update(set_aside)
