"""Thin Lambda entry points: parse the event, call one use case, map the result or raise.

A cold start imports one of these modules, and the garbage collector does not run while it does:
importing this package pauses it, and each handler module's last line (``init_done()``) freezes what
the import made (``gc.freeze``: modules, classes, clients — kept for the process's life, never
scanned again) and starts it again. The collections an import triggers walk those long-lived objects
over and over for nothing: about 80 M of a background wake's 1.9 G instructions of init (callgrind,
docs/architecture.md "Cold start"). Frozen, they are not moved to the first invocation either.
"""

import gc

gc.disable()


def init_done() -> None:
    """The end of a handler module's import: what it made is frozen, the collector runs again."""
    gc.freeze()
    gc.enable()
