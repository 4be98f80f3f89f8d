"""``OnFirstUse``: stands for an object made on its first attribute, and only then."""

from __future__ import annotations

import copy
import pickle

import pytest

from agentwake.on_first_use import OnFirstUse


class Service:
    def __init__(self) -> None:
        self.url = "u"


def test_it_makes_the_object_once_on_first_use() -> None:
    made: list[Service] = []
    lazy = OnFirstUse(lambda: made.append(Service()) or made[-1])
    assert made == []
    assert lazy.url == "u" and lazy.url == "u"
    assert len(made) == 1


def test_a_copy_or_a_pickle_is_made_without_recursing() -> None:
    # before: __getattr__ read self._made on an instance copy made without __init__ (RecursionError)
    lazy = OnFirstUse(Service)
    assert copy.copy(lazy).url == "u"
    assert copy.deepcopy(lazy).url == "u"
    assert pickle.loads(pickle.dumps(lazy)).url == "u"
    with pytest.raises(AttributeError):
        lazy.__missing_dunder__  # noqa: B018
