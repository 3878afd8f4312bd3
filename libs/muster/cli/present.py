"""Objects as users write them: camelCase fields as in manifests, quantities as Kubernetes
prints them (``700``, ``500m``, ``6Ti``, ``80Gi``), times in RFC 3339, unset fields left
out. ``get -o yaml|json`` and ``describe`` show objects through this."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from muster.core.model.resources import format_quantity
from muster.core.model.times import rfc3339

# Maps whose keys are names users chose (resources, labels, flavors): kept as they are.
_NAMED_KEYS = frozenset(
    {
        "labels",
        "node_labels",
        "nodeLabels",
        "node_selector",
        "nodeSelector",
        "annotations",
        "parameters",
        "check_flavors",
    }
)
# Maps of resource name -> quantity.
_QUANTITY_MAPS = frozenset({"allocatable", "requests", "hard", "limits"})
# Fields of a quota entry (its ``name`` is the resource).
_QUOTA_FIELDS = frozenset({"nominal_quota", "borrowing_limit", "lending_limit"})
_SNAKE = re.compile(r"_([a-z0-9])")
_SNAKE_KEY = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)+$")  # not a label key (dots, slashes)
_EPOCH = 1e9  # numbers above this in a time field are seconds since the epoch


def camel(key: str) -> str:
    return _SNAKE.sub(lambda m: m.group(1).upper(), key) if _SNAKE_KEY.match(key) else key


def shown(obj: Any) -> Any:
    """The object as ``get -o yaml`` prints it."""
    return _value(obj, "")


def _value(value: Any, key: str) -> Any:
    if isinstance(value, Mapping):
        if key in _QUANTITY_MAPS:
            return {str(r): _quantity(str(r), q) for r, q in value.items()}
        if key == "usage":  # flavor -> resource -> amount
            return {f: _value(v, "requests") for f, v in value.items()}
        if key in _NAMED_KEYS:
            return {k: _value(v, "") for k, v in value.items()}
        return _fields(value)
    if isinstance(value, list | tuple):
        return [_value(v, key) for v in value]
    if _is_time(key) and isinstance(value, int | float) and value > _EPOCH:
        return rfc3339(value)
    return value


def _fields(obj: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    resource = obj.get("name") if any(k in obj for k in _QUOTA_FIELDS) else None
    for k, v in obj.items():
        if v is None:
            continue
        if resource is not None and k in _QUOTA_FIELDS:
            out[camel(k)] = _quantity(str(resource), v)
        else:
            out[camel(k)] = _value(v, k)
    return out


def _quantity(resource: str, value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        return format_quantity(resource, value)
    return value


def _is_time(key: str) -> bool:
    return key.endswith(("At", "Time", "_at", "_time")) or key in ("since", "created")


def quantities(resources: Mapping[str, int]) -> str:
    """``cpu=700,memory=6Ti``: a resource list on one line."""
    return ",".join(f"{r}={format_quantity(r, q)}" for r, q in sorted(resources.items()))
