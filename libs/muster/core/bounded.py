"""A map kept to its latest entries: what a long-running service remembers of its history
must not grow with it."""

from __future__ import annotations

import itertools
from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


def keep_latest(entries: dict[K, V], kept: int) -> None:
    """Drop all but the ``kept`` entries inserted last, once there are twice as many: the
    cost is a deletion an entry, amortised. Not one at a time (``next(iter(...))`` per
    entry): an iteration from the front steps over every entry deleted since the dict
    last resized, ~5,000 instructions an entry at 1,024 kept."""
    excess = len(entries) - kept
    if excess > kept:
        for key in list(itertools.islice(entries, excess)):
            del entries[key]
