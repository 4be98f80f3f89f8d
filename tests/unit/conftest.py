"""Runtime unit tests: no moto, no emulator (the ``local`` extra is not needed to run them)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.without_local import hidden


@pytest.fixture(autouse=True)
def without_the_local_extra() -> Iterator[None]:
    """Each unit test runs with ``agentwake_local`` and moto unimportable, whatever ran before it."""
    with hidden():
        yield
