"""AWS clients, created once per process and service, on first use, from one botocore session.

botocore directly, not boto3: the runtime only needs low-level clients, and importing boto3 adds
its resource layer (and s3transfer) to every cold start. One shared session means the second
client reuses the first one's loaded endpoint data and credentials. botocore's standard retry mode
handles throttling of DynamoDB/SQS/Scheduler calls; we do not hand-roll retries for them.

The session's data loader answers "is this a service?" by looking at that service's directory
only (:class:`_ServiceNames`). botocore's own answer lists every service it ships (about 420
directories, twice per client: the model and its endpoint rules), about 15 ms of a cold start on
these machines (``bench/cold_init.py``), to check the one name the client was asked for.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from functools import cache
from typing import Any


class _ServiceNames:
    """The list ``Loader.list_available_services`` returns, built only if someone iterates it.

    botocore's ``load_service_model`` only asks ``name in services`` (and joins the list into its
    UnknownServiceError message); a membership test here is botocore's own per-service check
    (``list_api_versions``), so the answer is the same for every name.
    """

    def __init__(self, loader: Any, type_name: str) -> None:
        self._loader, self._type_name = loader, type_name
        self._all: list[str] | None = None

    def __contains__(self, service_name: object) -> bool:
        from botocore.exceptions import DataNotFoundError

        if not isinstance(service_name, str):
            return False
        try:
            return bool(self._loader.list_api_versions(service_name, self._type_name))
        except DataNotFoundError:
            return False

    def _list(self) -> list[str]:
        if self._all is None:
            from botocore.loaders import Loader

            self._all = Loader.list_available_services(self._loader, self._type_name)
        return self._all

    def __iter__(self) -> Iterator[str]:
        return iter(self._list())

    def __len__(self) -> int:
        return len(self._list())

    def __getitem__(self, index: Any) -> Any:
        return self._list()[index]


def _loader(session: Any) -> Any:
    """botocore's own loader for the session's data path, with the narrow service check."""
    from botocore.loaders import Loader, create_loader

    class ServiceLoader(Loader):  # type: ignore[misc]
        def list_available_services(self, type_name: str) -> _ServiceNames:  # type: ignore[override]
            return _ServiceNames(self, type_name)

    # the same search paths botocore would use (AWS_DATA_PATH, then ~/.aws/models, then its own data)
    paths = create_loader(session.get_config_variable("data_path")).search_paths
    return ServiceLoader(extra_search_paths=list(paths), include_default_search_paths=False)


#: connections a shared client keeps open at most: at least the records one invocation runs side by
#: side (``settings.MAX_RECORD_CONCURRENCY``), with room for the local runtime's invocations, which
#: share one process's clients. urllib3 opens them only when calls overlap.
MAX_POOL_CONNECTIONS = 32

#: botocore's clients are thread-safe, its session is not: clients are made one at a time (records of a
#: batch run on threads, ``wake.lanes``, and the first to need a client makes it)
_making = threading.RLock()
_clients: dict[tuple[str, str | None, str | None], Any] = {}


@cache
def _session() -> Any:
    import botocore.session

    session = botocore.session.get_session()
    session.register_component("data_loader", _loader(session))
    return session


def client(service: str, region: str | None = None, endpoint_url: str | None = None) -> Any:
    """The process's one client of ``service`` (per region and endpoint), made on first use."""
    key = (service, region, endpoint_url)
    made = _clients.get(key)
    if made is None:
        with _making:
            made = _clients.get(key)
            if made is None:
                made = _clients[key] = _session().create_client(
                    service, region_name=region, endpoint_url=endpoint_url, config=_config()
                )
    return made


def _config() -> Any:
    from botocore.config import Config

    return Config(
        retries={"mode": "standard", "max_attempts": 5},
        connect_timeout=5,
        read_timeout=20,
        max_pool_connections=MAX_POOL_CONNECTIONS,
    )


def new_client(service: str, *, region: str | None = None, config: Any = None) -> Any:
    """A client of its own (not shared), from the shared session: for a client whose configuration
    changes between calls (Bedrock's read timeout follows each call's deadline). It reuses the
    session's loaded models, endpoint data and credentials; boto3 is not imported."""
    with _making:
        return _session().create_client(service, region_name=region, config=config)


def reset_clients() -> None:
    _clients.clear()
    _session.cache_clear()
