"""Reading untrusted JSON/YAML objects field by field, with errors that name the field.

Every problem raises ``InvalidInput(path, problem)``; unknown fields are refused,
never dropped silently.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from typing import Any

from muster.core.model.resources import QuantityError, parse_quantity

_DURATION = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)?$")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")  # RFC 1123 label
LABEL_KEY = re.compile(r"^([a-zA-Z0-9.-]+/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


class InvalidInput(ValueError):
    """Input refused; ``path`` names the field (``podSets[0].count``), ``problem`` says why."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}" if path else problem)
        self.path = path
        self.problem = problem


def parse_duration(raw: object, path: str) -> float:
    """Seconds from a number or a string such as ``90s``, ``10m``, ``2h``."""
    if isinstance(raw, bool):
        raise InvalidInput(path, "must be a duration such as 30, 90s, 10m or 2h")
    if isinstance(raw, int | float):
        try:
            value = float(raw)
        except OverflowError:  # an int beyond any float
            raise InvalidInput(path, f"{raw!r} is not a finite duration") from None
    elif isinstance(raw, str) and (m := _DURATION.match(raw.strip())):
        value = float(m.group(1)) * _UNIT[m.group(2)]
    else:
        raise InvalidInput(path, f"{raw!r} is not a duration such as 30, 90s, 10m or 2h")
    if not math.isfinite(value):
        raise InvalidInput(path, f"{raw!r} is not a finite duration")
    if value < 0:
        raise InvalidInput(path, "must not be negative")
    return value


class Obj:
    """One JSON object being read; call ``done()`` last to refuse unknown fields."""

    def __init__(self, data: object, path: str = "") -> None:
        if not isinstance(data, Mapping):
            raise InvalidInput(path, f"must be an object, not {_kind(data)}")
        self.data: Mapping[str, Any] = data
        self.path = path
        self.seen: set[str] = set()

    def at(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def raw(self, key: str, required: bool = False) -> Any:
        self.seen.add(key)
        value = self.data.get(key)  # one lookup: every field of every submission comes here
        if value is None and required:
            raise InvalidInput(self.at(key), "is required")
        return value

    def text(
        self,
        key: str,
        *,
        required: bool = False,
        default: str | None = None,
        pattern: re.Pattern[str] | None = None,
        max_len: int = 253,
    ) -> str | None:
        value = self.raw(key, required)
        if value is None:
            return default
        if not isinstance(value, str):
            raise InvalidInput(self.at(key), f"must be a string, not {_kind(value)}")
        if not value or len(value) > max_len:
            raise InvalidInput(self.at(key), f"must be 1 to {max_len} characters")
        if pattern is not None and not pattern.fullmatch(value):  # "$" takes a trailing \n
            raise InvalidInput(
                self.at(key), f"{value!r} is not a valid name (lower-case letters, digits, '-')"
            )
        return value

    def req_text(
        self, key: str, *, pattern: re.Pattern[str] | None = None, max_len: int = 253
    ) -> str:
        value = self.text(key, required=True, pattern=pattern, max_len=max_len)
        assert value is not None
        return value

    def integer(
        self,
        key: str,
        *,
        default: int | None = None,
        lo: int | None = None,
        hi: int | None = None,
        required: bool = False,
    ) -> int | None:
        value = self.raw(key, required)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidInput(self.at(key), f"must be an integer, not {_kind(value)}")
        if lo is not None and value < lo:
            raise InvalidInput(self.at(key), f"must be at least {lo}, got {value}")
        if hi is not None and value > hi:
            raise InvalidInput(self.at(key), f"must be at most {hi}, got {value}")
        return value

    def req_integer(self, key: str, *, lo: int | None = None, hi: int | None = None) -> int:
        value = self.integer(key, lo=lo, hi=hi, required=True)
        assert value is not None
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.raw(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise InvalidInput(self.at(key), f"must be true or false, not {_kind(value)}")
        return value

    def duration(
        self, key: str, default: float | None = None, hi: float | None = None
    ) -> float | None:
        value = self.raw(key)
        if value is None:
            return default
        seconds = parse_duration(value, self.at(key))
        if hi is not None and seconds > hi:
            raise InvalidInput(self.at(key), f"must be at most {hi:g} seconds")
        return seconds

    def labels(self, key: str) -> dict[str, str]:
        value = self.raw(key)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise InvalidInput(self.at(key), f"must be an object of strings, not {_kind(value)}")
        out: dict[str, str] = {}
        for k, v in value.items():
            if not isinstance(k, str) or not LABEL_KEY.fullmatch(k) or len(k) > 253:
                raise InvalidInput(self.at(key), f"{k!r} is not a valid label key")
            if not isinstance(v, str) or len(v) > 63:
                raise InvalidInput(
                    f"{self.at(key)}.{k}", "must be a string of at most 63 characters"
                )
            out[k] = v
        return out

    def quantities(self, key: str, *, positive: bool = True) -> dict[str, int]:
        value = self.raw(key)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise InvalidInput(self.at(key), f"must be an object of quantities, not {_kind(value)}")
        out: dict[str, int] = {}
        for resource, raw in value.items():
            if not isinstance(resource, str) or not LABEL_KEY.fullmatch(resource):
                raise InvalidInput(self.at(key), f"{resource!r} is not a valid resource name")
            out[resource] = _quantity(f"{self.at(key)}.{resource}", resource, raw, positive)
        return out

    def quantity(self, key: str, resource: str, *, required: bool = False) -> int | None:
        """One quantity of ``resource`` (``nominalQuota: 16Gi``); zero allowed."""
        value = self.raw(key, required)
        if value is None:
            return None
        return _quantity(self.at(key), resource, value, positive=False)

    def choice(self, key: str, choices: tuple[str, ...], default: str) -> str:
        value = self.text(key, default=default) or default
        if value not in choices:
            raise InvalidInput(self.at(key), f"must be one of {', '.join(choices)}, not {value!r}")
        return value

    def number(self, key: str, *, default: float, lo: float = 0.0, hi: float = 1e9) -> float:
        value = self.raw(key)
        if value is None:
            return default
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                raise InvalidInput(self.at(key), f"must be a number, not {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidInput(self.at(key), f"must be a number, not {_kind(value)}")
        if not lo <= value <= hi:
            raise InvalidInput(self.at(key), f"must be between {lo:g} and {hi:g}, got {value}")
        return float(value)

    def obj(self, key: str) -> Obj | None:
        """A nested object, or None when absent; the caller calls ``done()`` on it."""
        value = self.raw(key)
        return None if value is None else Obj(value, self.at(key))

    def items(
        self, key: str, *, required: bool = False, max_items: int = 1000
    ) -> Iterator[tuple[Any, str]]:
        value = self.raw(key, required)
        if value is None:
            return iter(())
        if not isinstance(value, list):
            raise InvalidInput(self.at(key), f"must be a list, not {_kind(value)}")
        if required and not value:
            raise InvalidInput(self.at(key), "must not be empty")
        if len(value) > max_items:
            raise InvalidInput(self.at(key), f"has {len(value)} items; at most {max_items}")
        return ((item, f"{self.at(key)}[{i}]") for i, item in enumerate(value))

    def texts(self, key: str) -> tuple[str, ...]:
        out = []
        for item, path in self.items(key):
            if not isinstance(item, str) or not item:
                raise InvalidInput(path, "must be a non-empty string")
            out.append(item)
        return tuple(out)

    def done(self) -> None:
        if self.seen.issuperset(self.data):  # the usual case, without building a set to sort
            return
        unknown = sorted(set(self.data) - self.seen, key=str)  # YAML keys: str, int, null...
        if unknown:
            raise InvalidInput(self.at(str(unknown[0])), "unknown field")


def _quantity(path: str, resource: str, raw: object, positive: bool) -> int:
    if isinstance(raw, int | float) and not isinstance(raw, bool) and raw < 0:
        raise InvalidInput(path, f"must not be negative, got {raw}")
    try:
        amount = parse_quantity(resource, raw)
    except QuantityError as exc:
        raise InvalidInput(path, str(exc)) from None
    except ValueError:  # int() reads at most 4300 digits
        raise InvalidInput(path, "has too many digits for a quantity") from None
    if positive and amount == 0:
        raise InvalidInput(path, "must be greater than zero")
    return amount


def _kind(value: object) -> str:
    if value is None:
        return "null"
    return {
        bool: "a boolean",
        int: "a number",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "an object",
    }.get(type(value), type(value).__name__)
