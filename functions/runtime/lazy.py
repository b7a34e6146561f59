"""Lazy imports and SDK clients made on first use.

:func:`lazy_import` is the standard-library recipe around :class:`importlib.util.LazyLoader`:
the module object exists at once, its code runs on first attribute access. :class:`ClientCache`
creates boto3 clients on first use (boto3 itself is imported then) and keeps them for the life of
the execution environment; SnapStart hooks close and drop them.

Imports only the standard library.

References
----------
https://docs.python.org/3/library/importlib.html#implementing-lazy-imports
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from collections.abc import Callable, Hashable
from types import ModuleType
from typing import Any

__all__ = ["ClientCache", "close_clients", "lazy_import"]


def lazy_import(name: str) -> ModuleType:
    """Import a module whose code runs only when an attribute is first used.

    Parameters
    ----------
    name : str
        Absolute module name, e.g. ``"boto3"``.

    Returns
    -------
    ModuleType
        The module (already imported ones are returned as they are).

    Raises
    ------
    ModuleNotFoundError
        The module cannot be found (raised now, not on first use).
    """
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


def _boto3_client(service: str, **kwargs: Any) -> Any:
    import boto3  # lazily: ~190 ms, paid on first use only

    return boto3.session.Session().client(service, **kwargs)


ClientFactory = Callable[..., object]


class ClientCache:
    """SDK clients of one execution environment, created on first use.

    Parameters
    ----------
    factory : Callable[..., Any]
        ``factory(service, **kwargs) -> client``; default: a boto3 client from a new
        ``boto3.session.Session`` (sessions are not shared, so a restore gets new credentials).

    Examples
    --------
    >>> clients = ClientCache()
    >>> ssm = clients.get("ssm", region_name="us-east-1")   # boto3 imported here  # doctest: +SKIP
    """

    def __init__(self, factory: ClientFactory = _boto3_client) -> None:
        self._factory = factory
        self._clients: dict[Hashable, Any] = {}
        self._lock = threading.Lock()
        self.created = 0

    def get(self, service: str, **kwargs: Any) -> Any:
        """The cached client for ``service`` and these keyword arguments, made if missing.

        Parameters
        ----------
        service : str
            boto3 service name, e.g. ``"ssm"``, ``"sagemaker-runtime"``.
        **kwargs
            Passed to the factory (``region_name``, ``endpoint_url``, ``config``...); part of
            the cache key, so they must be hashable.
        """
        key = (service, tuple(sorted(kwargs.items())))
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                client = self._factory(service, **kwargs)
                self._clients[key] = client
                self.created += 1
            return client

    def __len__(self) -> int:
        return len(self._clients)

    def close_all(self) -> None:
        """Close every cached client's connections and drop them (next use makes new ones)."""
        close_clients(self._clients, self._lock)


def close_clients(clients: dict[Any, Any], lock: threading.Lock) -> None:
    """Drop every client of a per-environment cache and close its connections (before a
    SnapStart snapshot no connection may survive a restore; next use makes new ones).

    Parameters
    ----------
    clients : dict[Any, Any]
        The cache (any key -> a client with an optional ``close()``), emptied in place.
    lock : threading.Lock
        The cache's lock, held while it is emptied (not while the clients close).
    """
    with lock:
        dropped = list(clients.values())
        clients.clear()
    for client in dropped:
        close = getattr(client, "close", None)
        if close is not None:
            close()
