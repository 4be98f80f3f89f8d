"""An object made when one of its attributes is first asked for: what a cold start does not need
(a wake that parks no run never loads the approvals' store, one that starts no task never loads the
tasks service) stays out of the first invocation's init."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class OnFirstUse:
    """Stands for ``make()``, called when one of its attributes is first asked for."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._made: Any = None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_make", "_made"):
            # a copy or pickle asks before __init__ ran: not the made object's to answer
            raise AttributeError(name)
        if self._made is None:
            self._made = self._make()
        return getattr(self._made, name)
