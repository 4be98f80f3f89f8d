"""``pytest -p tests.support.without_local_plugin``: ``agentwake_local`` and moto cannot be imported
in this session (loaded before any conftest), as where the ``local`` extra is not installed."""

from __future__ import annotations

import sys

from tests.support.without_local import Blocker, is_blocked

assert not [name for name in sys.modules if is_blocked(name)], "load this plugin before anything imports them"
sys.meta_path.insert(0, Blocker())
