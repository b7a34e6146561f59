"""Routes as admission and ``/capabilities`` see them: feature, method, path, tier, SLA.

Owned by the admission engineer; this API (``feature`` first, ``match`` returning None for an
unknown route, ``needs_model``) is what ``functions/agent/handler.py`` uses: keep it stable.
Default SLAs per tier: `functions.runtime.admission.default_sla_ms`.

Imports only the standard library.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

__all__ = ["TIERS", "RouteRegistry", "RouteSpec", "Tier"]

#: Route priority: P0 core (default SLA 2,000 ms), P1, P2 non-critical (DESIGN.md).
Tier = Literal["P0", "P1", "P2"]
TIERS: tuple[str, ...] = ("P0", "P1", "P2")


@dataclass(frozen=True)
class RouteSpec:
    """One route of an app.

    Attributes
    ----------
    feature : str
        Feature name shown by ``/capabilities``.
    method : str
        HTTP method, upper case.
    path : str
        Request path.
    tier : Tier
        Priority (``P0`` core .. ``P2`` non-critical).
    sla_ms : float | None
        SLA in milliseconds; None means the configured default (``WARMSTART_SLA_MS``).
    degradable : bool
        The route has a cheaper answer (L2 / DEGRADE path).
    needs_model : bool
        Serving it locally requires the model to be loaded.

    Raises
    ------
    ValueError
        Unknown tier or non-positive SLA.
    """

    feature: str
    method: str
    path: str
    tier: Tier = "P0"
    sla_ms: float | None = None
    degradable: bool = False
    needs_model: bool = False

    def __post_init__(self) -> None:
        if self.tier not in TIERS:
            raise ValueError(f"unknown tier {self.tier!r}: use one of {', '.join(TIERS)}")
        if self.sla_ms is not None and not self.sla_ms > 0:
            raise ValueError(f"sla_ms must be > 0 ms, got {self.sla_ms}")


def _key(method: str, path: str) -> tuple[str, str]:
    return method.upper(), path.rstrip("/") or "/"


class RouteRegistry:
    """The routes of an app, iterable in declaration order, with exact-match lookup.

    Parameters
    ----------
    specs : Iterable[RouteSpec]
        Routes; method + path must be unique.

    Raises
    ------
    ValueError
        Two specs share method and path.
    """

    def __init__(self, specs: Iterable[RouteSpec]) -> None:
        self._specs = tuple(specs)
        self._index: dict[tuple[str, str], RouteSpec] = {}
        for spec in self._specs:
            key = _key(spec.method, spec.path)
            if key in self._index:
                raise ValueError(f"duplicate route {spec.method} {spec.path}")
            self._index[key] = spec

    def __iter__(self) -> Iterator[RouteSpec]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    def match(self, method: str, path: str) -> RouteSpec | None:
        """The spec for ``method path``, or None when the app has no such route."""
        return self._index.get(_key(method, path))
