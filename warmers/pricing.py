"""The one price table of warmstart (``warmers/prices.json``), typed and validated.

Every price the project uses (Lambda, provisioned concurrency, SnapStart, API Gateway, SageMaker
instance hours, CloudWatch, EventBridge) is written once, in ``warmers/prices.json``, which is
package data of ``warmers`` (so it ships in the warmer Lambda's code asset and in a wheel). This
module reads it with the standard library only; :class:`warmers.cost.CostModel`,
:class:`warmers.simulator.constants.SimulatorPrices` and ``infra.config.PricingConfig`` take their numbers
from it. Changing a price is one edit of that file.

Item names ending in ``_x86_64`` or ``_arm64`` are per architecture; :meth:`PriceTable.price`
finds ``<name>_<architecture>`` before ``<name>``.

Example
-------
>>> table = load_prices()
>>> table.price("lambda_duration_gb_s", architecture="arm64").unit
'GB-s'

References
----------
tests/data/pricing.md (project copy of the shared source list; tests/unit/warmers/test_pricing.py
checks the table against it). AWS Price List API:
https://docs.aws.amazon.com/awsaccountbilling/latest/aboutv2/price-changes.html
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

#: Name of the table inside the ``warmers`` package.
PRICES_RESOURCE: Final = "prices.json"
#: How the table is named in messages (path relative to the repository root).
PRICES_ORIGIN: Final = "warmers/prices.json"
#: Keys an item may have; ``usd``, ``unit`` and ``source`` are required.
ITEM_KEYS: Final = ("usd", "unit", "source", "verified", "note")
#: Prefix of a source that is not an AWS page (a transcription, a third-party page).
SECONDARY_PREFIX: Final = "secondary: "


class PriceTableError(ValueError):
    """The price table (file or override) is malformed; the message names the file and item."""


class MissingPriceError(KeyError):
    """No such price; the message names the item, the architecture and the table's file.

    A :class:`KeyError` subclass, so ``except KeyError`` callers keep working, with a readable
    ``str()`` (``KeyError`` would quote the message).
    """

    def __init__(self, name: str, architecture: str | None, origin: str, known: tuple[str, ...]) -> None:
        self.name = name
        self.architecture = architecture
        self.origin = origin
        arch = f" (architecture {architecture})" if architecture else ""
        self.message = (
            f"no price {name!r}{arch} in {origin}; known items: {', '.join(known)}. "
            f"Add it to {PRICES_ORIGIN} with usd, unit and source"
        )
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class Price:
    """One price with its unit and source.

    Attributes
    ----------
    usd : float
        Price in US dollars per ``unit`` (>= 0).
    unit : str
        What ``usd`` buys, e.g. ``"GB-s"`` or ``"1M requests"``.
    source : str
        URL the value was taken from, or ``"secondary: ..."`` describing a secondary source.
    verified : bool
        Whether the value was checked against an AWS page (see ``tests/data/pricing.md``).
    note : str
        Tier, billing rule or caveat; may be empty.
    """

    usd: float
    unit: str
    source: str
    verified: bool
    note: str = ""


@dataclass(frozen=True)
class PriceTable:
    """Prices of one region and currency, by item name.

    Attributes
    ----------
    region : str
        AWS region the prices are for, e.g. ``"us-east-1"``.
    currency : str
        ``"USD"``.
    items : Mapping[str, Price]
        Read-only mapping from item name to price.
    origin : str
        Where the items came from, used in error messages (``warmers/prices.json``, plus the
        override source when :meth:`with_overrides` replaced some).
    """

    region: str
    currency: str
    items: Mapping[str, Price]
    origin: str = PRICES_ORIGIN
    overridden: tuple[str, ...] = field(default=())

    def price(self, name: str, *, architecture: str | None = None) -> Price:
        """The price ``name``, per architecture when the table has one.

        Parameters
        ----------
        name : str
            Item name without the architecture suffix, e.g. ``"pc_configured_gb_s"``.
        architecture : str, optional
            ``"x86_64"`` or ``"arm64"``; ``<name>_<architecture>`` wins over ``<name>``.

        Raises
        ------
        MissingPriceError
            (a ``KeyError``) if neither ``<name>_<architecture>`` nor ``<name>`` is in the table.
        """
        if architecture is not None and f"{name}_{architecture}" in self.items:
            return self.items[f"{name}_{architecture}"]
        if name in self.items:
            return self.items[name]
        raise MissingPriceError(name, architecture, self.origin, tuple(self.items))

    def __contains__(self, name: object) -> bool:
        return name in self.items

    def __iter__(self) -> Iterator[str]:
        return iter(self.items)

    def with_overrides(self, overrides: Mapping[str, Price], *, origin: str) -> PriceTable:
        """A copy in which ``overrides`` replace items of the same name.

        Raises
        ------
        MissingPriceError
            If an override names an item the table does not have (a typo must not add a price
            nobody reads; new prices go into ``warmers/prices.json``).
        """
        if not overrides:
            return self
        for name in overrides:
            if name not in self.items:
                raise MissingPriceError(name, None, self.origin, tuple(self.items))
        items = {**self.items, **overrides}
        return replace(self, items=MappingProxyType(items), origin=f"{self.origin} + {origin}",
                       overridden=tuple(sorted({*self.overridden, *overrides})))


def _fail(origin: str, where: str, what: str) -> PriceTableError:
    return PriceTableError(f"{origin}: {where}: {what}")


def parse_item(raw: Any, *, origin: str, where: str) -> Price:
    """Validate one item dict into a :class:`Price`.

    Parameters
    ----------
    raw : Any
        ``{"usd": float, "unit": str, "source": str, "verified": bool, "note": str}``.
    origin, where : str
        File and item path for messages.

    Raises
    ------
    PriceTableError
        On an unknown key, a missing ``usd``/``unit``/``source``, a negative or non-finite
        ``usd``, or a wrong type.
    """
    if not isinstance(raw, Mapping):
        raise _fail(origin, where, f"expected an object with {', '.join(ITEM_KEYS)}, got {raw!r}")
    unknown = sorted(k for k in raw if k not in ITEM_KEYS and not str(k).startswith("_"))
    if unknown:
        raise _fail(origin, where, f"unknown key(s) {', '.join(unknown)}; allowed: {', '.join(ITEM_KEYS)}")
    usd = raw.get("usd")
    if isinstance(usd, bool) or not isinstance(usd, int | float) or not math.isfinite(usd) or usd < 0:
        raise _fail(origin, where, f"usd must be a finite number >= 0, got {usd!r}")
    texts: dict[str, str] = {}
    for key in ("unit", "source", "note"):
        value = raw.get(key, "" if key == "note" else None)
        if not isinstance(value, str) or (key != "note" and not value.strip()):
            kind = "a string" if key == "note" else "a non-empty string"
            raise _fail(origin, where, f"{key} must be {kind}, got {value!r}")
        texts[key] = value
    verified = raw.get("verified", False)
    if not isinstance(verified, bool):
        raise _fail(origin, where, f"verified must be true or false, got {verified!r}")
    return Price(usd=float(usd), unit=texts["unit"], source=texts["source"], verified=verified,
                 note=texts["note"])


def parse_table(raw: Any, *, origin: str = PRICES_ORIGIN) -> PriceTable:
    """Validate the decoded JSON of a price table.

    Raises
    ------
    PriceTableError
        If ``region``, ``currency`` or ``items`` is missing or mistyped, or an item is invalid
        (see :func:`parse_item`).
    """
    if not isinstance(raw, Mapping):
        raise PriceTableError(f"{origin}: expected a JSON object with region, currency and items")
    unknown = sorted(k for k in raw if k not in ("region", "currency", "items") and not str(k).startswith("_"))
    if unknown:
        raise PriceTableError(f"{origin}: unknown key(s) {', '.join(unknown)}; allowed: region, currency, items")
    for key in ("region", "currency"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise PriceTableError(f"{origin}: {key} must be a non-empty string, got {raw.get(key)!r}")
    items_raw = raw.get("items")
    if not isinstance(items_raw, Mapping) or not items_raw:
        raise PriceTableError(f"{origin}: items must be a non-empty object of name -> price")
    items = {
        str(name): parse_item(item, origin=origin, where=f"items.{name}")
        for name, item in items_raw.items()
        if not str(name).startswith("_")
    }
    return PriceTable(region=raw["region"], currency=raw["currency"], items=MappingProxyType(items),
                      origin=origin)


def read_prices(resource: Traversable | Path, *, origin: str) -> PriceTable:
    """Read and validate a price table file.

    Parameters
    ----------
    resource : importlib.resources.abc.Traversable or pathlib.Path
        The JSON file (``{"region", "currency", "items": {name: item}}``).
    origin : str
        How to name it in messages.

    Raises
    ------
    PriceTableError
        If the file is missing, not JSON, or invalid (the message names ``origin``).
    """
    try:
        raw = json.loads(resource.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PriceTableError(f"{origin}: cannot read the price table: {exc}") from exc
    return parse_table(raw, origin=origin)


@functools.cache
def load_prices() -> PriceTable:
    """The table shipped as ``warmers/prices.json`` (read once per process).

    It is package data of ``warmers`` (pyproject.toml ``[tool.setuptools.package-data]``) and is
    copied into the warmer Lambda's code asset with the rest of ``warmers/``.

    Raises
    ------
    PriceTableError
        If the file is missing, not JSON, or invalid (the message names the file).
    """
    return read_prices(resources.files("warmers").joinpath(PRICES_RESOURCE), origin=PRICES_ORIGIN)
