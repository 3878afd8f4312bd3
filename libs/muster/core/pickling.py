"""Fast pickling for the slotted dataclasses snapshots are made of.

A slotted dataclass pickles through ``dataclasses``' own ``__getstate__`` and
``__setstate__``, which call ``dataclasses.fields`` for every object, twice per object
and per snapshot. Restoring the queue's state with ~28,000 workloads waiting (six such
objects each) took ~2 s, most of it there, and ``explain --at`` restores one per
question. ``compact`` gives a class a state that is its fields' values as a tuple, read
by ``operator.attrgetter`` (in C) and written back by straight-line code made once per
class (as ``dataclasses`` makes ``__init__``): about 4x faster to restore and 15 %
smaller. Frozen classes too: the values are set as their ``__init__`` sets them.

A snapshot is read back only in the format it was written in (a decider's
``snapshot_format``), so a field added to a class changes that name, as before.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def compact(cls: type[T]) -> type[T]:
    """Decorate a slotted dataclass (outside ``@dataclass``): pickle it as a tuple."""
    names = tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]
    # setattr: mypy knows no such attributes on a type[T]
    setattr(cls, "__getstate__", _getter(names))  # noqa: B010
    setattr(cls, "__setstate__", _setter(cls.__name__, names))  # noqa: B010
    return cls


def _getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    if not names:
        return lambda self: ()
    if len(names) == 1:  # attrgetter of one name returns the value, not a tuple
        (name,) = names
        return lambda self: (getattr(self, name),)
    get = operator.attrgetter(*names)
    return lambda self: get(self)


def _setter(owner: str, names: tuple[str, ...]) -> Callable[[Any, Any], None]:
    lines = [f"    _set(self, {name!r}, state[{i}])" for i, name in enumerate(names)]
    source = f"def __setstate__(self, state):\n{chr(10).join(lines) or '    pass'}\n"
    scope: dict[str, Any] = {"_set": object.__setattr__}
    exec(compile(source, f"<compact {owner}>", "exec"), scope)  # our own field names only
    setter: Callable[[Any, Any], None] = scope["__setstate__"]
    return setter


def swapper(cls: type[T], swapped: tuple[str, ...]) -> Callable[..., T]:
    """``swap(obj, *values)``: a copy of ``obj`` (a slotted dataclass without
    ``__post_init__``, frozen or not) with the fields ``swapped`` set to ``values``, the
    others as they are: ``dataclasses.replace`` without its per-field walk and keyword
    ``__init__``, and without a state tuple built and read back, in straight-line code made
    once per class (as ``__setstate__`` above)."""
    names = tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]
    params = [f"v{i}" for i in range(len(swapped))]
    given = dict(zip(swapped, params, strict=True))
    lines = [f"    _set(new, {name!r}, {given.get(name, 'obj.' + name)})" for name in names]
    source = (
        f"def swap(obj, {', '.join(params)}):\n    new = _new(_cls)\n"
        f"{chr(10).join(lines)}\n    return new\n"
    )
    scope: dict[str, Any] = {"_set": object.__setattr__, "_new": object.__new__, "_cls": cls}
    exec(compile(source, f"<swapper {cls.__name__}>", "exec"), scope)  # our own field names
    swap: Callable[..., T] = scope["swap"]
    return swap
