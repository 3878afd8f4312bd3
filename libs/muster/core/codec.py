"""Dataclass <-> JSON-compatible dict conversion, driven by type hints.

Used for event payloads and snapshots, so the wire form is stable: field names
as declared, tuples as lists, mappings as objects, nested dataclasses as objects.
Decoding is msgspec's (typed conversion in C: replay and the simulator decode every
event); the reflective decoder below states the same rules, and takes over for a type
msgspec cannot convert to, and to name the field of a payload that does not match.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from functools import cache
from typing import Any, TypeVar

import msgspec

T = TypeVar("T")


class DecodeError(ValueError):
    """A payload does not match the dataclass it is decoded into."""


def to_plain(value: Any) -> Any:
    """Turn dataclasses, tuples and mappings into JSON-compatible values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_plain(getattr(value, f.name)) for f in _fields(type(value))}
    if isinstance(value, tuple | list):
        return [to_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): to_plain(v) for k, v in value.items()}
    return value


def from_plain(cls: type[T], data: Any) -> T:
    """Build `cls` (a dataclass) from what `to_plain` produced."""
    try:
        return msgspec.convert(data, cls)
    except (msgspec.ValidationError, TypeError):
        return typing.cast(T, _decode(cls, data, cls.__name__))


@cache
def _fields(cls: type) -> tuple[dataclasses.Field[Any], ...]:
    return tuple(f for f in dataclasses.fields(cls) if f.init)


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _decode(tp: Any, data: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    if tp is Any:
        return data
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if data is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _decode(arg, data, path)
            except DecodeError as exc:
                errors.append(str(exc))
        raise DecodeError("; ".join(errors) or f"{path}: no variant matched")
    if origin is typing.Literal:
        if data not in typing.get_args(tp):
            raise DecodeError(f"{path}: {data!r} not one of {typing.get_args(tp)}")
        return data
    if origin is tuple:
        if not isinstance(data, list | tuple):
            raise DecodeError(f"{path}: expected a list")
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_decode(args[0], v, f"{path}[{i}]") for i, v in enumerate(data))
        return tuple(
            _decode(a, v, f"{path}[{i}]") for i, (a, v) in enumerate(zip(args, data, strict=True))
        )
    if origin in (dict, Mapping, typing.Mapping) or tp is dict:
        if not isinstance(data, Mapping):
            raise DecodeError(f"{path}: expected an object")
        args = typing.get_args(tp) or (str, Any)
        return {
            _decode(args[0], k, path): _decode(args[1], v, f"{path}.{k}") for k, v in data.items()
        }
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(data, Mapping):
            raise DecodeError(f"{path}: expected an object")
        hints = _hints(tp)
        kwargs = {}
        for f in _fields(tp):
            if f.name in data:
                kwargs[f.name] = _decode(hints[f.name], data[f.name], f"{path}.{f.name}")
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise DecodeError(f"{path}.{f.name}: missing")
        return tp(**kwargs)
    if tp is float:
        if isinstance(data, bool) or not isinstance(data, int | float):
            raise DecodeError(f"{path}: expected a number")
        return float(data)
    if tp in (int, str, bool):
        if not isinstance(data, tp) or (tp is int and isinstance(data, bool)):
            raise DecodeError(f"{path}: expected {tp.__name__}")
        return data
    return data
