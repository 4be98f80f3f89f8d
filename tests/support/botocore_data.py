"""One botocore data loader for every session the tests make.

Each `agentwake` command a test runs in-process builds its own boto3 session, as a new process
would, and a new session parses the service models, endpoint rules and partitions again from
botocore's JSON files: about half of an operator-CLI test's time. With one loader per data path
they are parsed once per test process. The files read are the same, and botocore already shares
one loaded model between the clients of a session, so nothing a test observes changes.
The runtime's own loader (``agentwake.store.aws``) is registered on its session as before.
"""

from __future__ import annotations

from functools import cache
from typing import Any


def share_botocore_data() -> None:
    import botocore.loaders
    import botocore.session

    loader = cache(botocore.loaders.create_loader)

    def register_data_loader(self: Any) -> None:
        self._components.lazy_register_component("data_loader", lambda: loader(self.get_config_variable("data_path")))

    botocore.session.Session._register_data_loader = register_data_loader
