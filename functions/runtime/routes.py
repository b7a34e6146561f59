"""Routes as admission and ``/capabilities`` see them: feature, method, path, tier, SLA.

Users declare routes with `functions.runtime.agent.Route`; the toolkit keeps them here as
`RouteSpec` (data only) in a `RouteRegistry` (lookup by method and path). Paths may hold
Starlette-style parameters: ``/orders/{order_id}`` matches one segment, ``{rest:path}`` the
rest of the path. Default SLAs per tier: `functions.runtime.admission.default_sla_ms`.

Imports only the standard library.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Literal, NamedTuple, Self

__all__ = ["TIERS", "RouteRegistry", "RouteSpec", "Tier"]

#: Route priority: P0 core (default SLA 2,000 ms), P1, P2 non-critical (DESIGN.md).
Tier = Literal["P0", "P1", "P2"]
TIERS: tuple[str, ...] = ("P0", "P1", "P2")


class _RouteFields(NamedTuple):
    feature: str
    method: str
    path: str
    tier: Tier = "P0"
    sla_ms: float | None = None
    degradable: bool = False
    needs_model: bool = False
    stream: bool = False
    first_token_ms: float | None = None


class RouteSpec(_RouteFields):
    """One route of an app (immutable; a ``NamedTuple``: no ``dataclasses`` import on the init
    path, where an agent's declaration builds these).

    Attributes
    ----------
    feature : str
        Feature name shown by ``/capabilities``.
    method : str
        HTTP method, upper case.
    path : str
        Request path (the app's own; Starlette ``{param}`` syntax allowed).
    tier : Tier
        Priority (``P0`` core .. ``P2`` non-critical).
    sla_ms : float | None
        SLA in milliseconds; None means the tier's default (``WARMSTART_SLA_MS`` for P0).
    degradable : bool
        The route has a cheaper answer (L2 / DEGRADE path).
    needs_model : bool
        Serving it locally requires the model to be loaded.
    stream : bool
        The route streams its answer (a ``StreamingResponse``, Server-Sent Events): its SLA
        is the first token, ``first_token_ms``; the whole stream is bounded by the
        function's timeout (`functions.runtime.streaming`).
    first_token_ms : float | None
        Streaming routes: the first-token SLA from the request's arrival, ms (None: the
        route's ``sla_ms``, else the tier's default). None for buffered routes.

    Raises
    ------
    ValueError
        Unknown tier or non-positive SLA.
    """

    __slots__ = ()

    def __new__(cls, feature: str, method: str, path: str, tier: Tier = "P0",
                sla_ms: float | None = None, degradable: bool = False,
                needs_model: bool = False, stream: bool = False,
                first_token_ms: float | None = None) -> Self:
        if tier not in TIERS:
            raise ValueError(f"unknown tier {tier!r}: use one of {', '.join(TIERS)}")
        if sla_ms is not None and not sla_ms > 0:
            raise ValueError(f"sla_ms must be > 0 ms, got {sla_ms}")
        if first_token_ms is not None and not stream:
            raise ValueError("first_token_ms is for streaming routes (stream=True)")
        if first_token_ms is not None and not first_token_ms > 0:
            raise ValueError(f"first_token_ms must be > 0 ms, got {first_token_ms}")
        return super().__new__(cls, feature, method, path, tier, sla_ms, degradable, needs_model,
                               bool(stream), first_token_ms)


def _key(method: str, path: str) -> tuple[str, str]:
    return method.upper(), path.rstrip("/") or "/"


_PARAM = re.compile(r"{([A-Za-z_][A-Za-z0-9_]*)(?::([a-z]+))?}")
#: Starlette's path convertors, as regular expressions of one path parameter.
_CONVERTORS = {None: "[^/]+", "str": "[^/]+", "path": ".*", "int": "[0-9]+",
               "float": r"[0-9]+(?:\.[0-9]+)?", "uuid": "[0-9a-fA-F-]{36}"}


def is_template(path: str) -> bool:
    """True when ``path`` holds a ``{parameter}``."""
    return "{" in path


def template_regex(path: str) -> re.Pattern[str]:
    """The regular expression a templated path matches (Starlette's syntax and convertors).

    Raises
    ------
    ValueError
        An unknown convertor (``{x:nope}``) or an unbalanced brace.
    """
    out, last = [], 0
    for m in _PARAM.finditer(path):
        convertor = m.group(2)
        if convertor not in _CONVERTORS:
            raise ValueError(f"unknown path convertor {convertor!r} in {path!r}; "
                             f"use one of {', '.join(k for k in _CONVERTORS if k)}")
        out.append(re.escape(path[last:m.start()]))
        out.append(f"(?P<{m.group(1)}>{_CONVERTORS[convertor]})")
        last = m.end()
    rest = path[last:]
    if "{" in rest or "}" in rest:
        raise ValueError(f"unbalanced '{{' or '}}' in path {path!r}")
    out.append(re.escape(rest.rstrip("/") if rest != "/" else rest))
    return re.compile("".join(out) + "/?")


def same_route_path(a: str, b: str) -> bool:
    """True when two declared paths are the same route (parameter names ignored)."""
    def norm(p: str) -> str:
        return _PARAM.sub(lambda m: "{" + (m.group(2) or "str") + "}", p.rstrip("/") or "/")
    return norm(a) == norm(b)


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
        self._templates: list[tuple[str, re.Pattern[str], RouteSpec]] = []
        for spec in self._specs:
            for other in self._specs:
                if other is spec:
                    break
                if other.method.upper() == spec.method.upper() and same_route_path(other.path, spec.path):
                    raise ValueError(f"duplicate route {spec.method} {spec.path}")
            if is_template(spec.path):
                self._templates.append((spec.method.upper(), template_regex(spec.path), spec))
            else:
                self._index[_key(spec.method, spec.path)] = spec

    def __iter__(self) -> Iterator[RouteSpec]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    def path_params(self, spec: RouteSpec, path: str) -> dict[str, str]:
        """The path parameters of ``path`` for the templated route ``spec`` (``{}`` for an
        exact route or no match); values as they appear in the path (not converted)."""
        for _, regex, candidate in self._templates:
            if candidate is spec:
                found = regex.fullmatch(path)
                return dict(found.groupdict()) if found else {}
        return {}

    def match(self, method: str, path: str) -> RouteSpec | None:
        """The spec for ``method path``, or None when the app has no such route.

        Exact paths first (one dict lookup: the warm path), then templated ones in declaration
        order; a trailing ``/`` is ignored.
        """
        spec = self._index.get((method.upper(), path.rstrip("/") or "/"))  # _key's, inline
        if spec is not None or not self._templates:
            return spec
        upper = method.upper()
        for route_method, regex, spec in self._templates:
            if route_method == upper and regex.fullmatch(path):
                return spec
        return None
