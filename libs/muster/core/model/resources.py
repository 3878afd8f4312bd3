"""Kubernetes-style quantities and resource lists.

Quantities are held as integers: ``cpu`` in millicores, everything else in base
units (bytes, devices). Integers keep quota arithmetic exact and replay stable.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

ResourceList = Mapping[str, int]

_SUFFIX = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?|\.[0-9]+)(m|[kMGTPE]i?|)$")
MILLI_RESOURCES = frozenset({"cpu"})
# Beyond any real cluster: quantities above this are refused as absurd.
MAX_QUANTITY = 10**21


class QuantityError(ValueError):
    """A quantity string or number is not valid for its resource."""


def parse_quantity(resource: str, raw: object) -> int:
    """Parse ``raw`` ("500m", "16Gi", 4) into the integer unit of ``resource``."""
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise QuantityError("must be a number or a quantity string such as 500m or 16Gi")
    if type(raw) is int and raw >= 0:  # a plain count: what the text path gives, sooner
        value = raw * (1000 if resource in MILLI_RESOURCES else 1)
        if value <= MAX_QUANTITY:
            return value  # larger ones go the text path, for its refusal
    text = str(raw).strip()
    match = _QUANTITY.match(text)
    if not match:
        raise QuantityError(f"{text!r} is not a non-negative quantity (e.g. 2, 500m, 16Gi)")
    number, suffix = match.groups()
    scale = 1000 if resource in MILLI_RESOURCES else 1
    if suffix == "m":
        value = _exact(number, scale, 1000, text, resource)
    else:
        value = _exact(number, scale * _SUFFIX[suffix], 1, text, resource)
    if value > MAX_QUANTITY:
        raise QuantityError(f"{text!r} is absurdly large")
    return value


def _exact(number: str, multiplier: int, divisor: int, text: str, resource: str) -> int:
    whole, _, frac = number.partition(".")
    numerator = int(whole or "0") * 10 ** len(frac) + int(frac or "0")
    denominator = 10 ** len(frac) * divisor
    value, rest = divmod(numerator * multiplier, denominator)
    if rest:
        raise QuantityError(f"{text!r} is not a whole number of units for {resource}")
    return value


def format_quantity(resource: str, value: int) -> str:
    if resource in MILLI_RESOURCES:
        return str(value // 1000) if value % 1000 == 0 else f"{value}m"
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = _SUFFIX[suffix]
        if value >= unit and value % unit == 0 and "memory" in resource:
            return f"{value // unit}{suffix}"
    return str(value)


def add(a: ResourceList, b: ResourceList) -> dict[str, int]:
    out = dict(a)
    for name, value in b.items():
        out[name] = out.get(name, 0) + value
    return out


def subtract(a: ResourceList, b: ResourceList) -> dict[str, int]:
    out = dict(a)
    for name, value in b.items():
        out[name] = out.get(name, 0) - value
    return {k: v for k, v in out.items() if v != 0}


def scale(a: ResourceList, factor: int) -> dict[str, int]:
    return {name: value * factor for name, value in a.items()}


def total(lists: Iterable[ResourceList]) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in lists:
        out = add(out, item)
    return out
