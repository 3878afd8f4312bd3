"""What ``settle`` still has to look at, and what the cycle found that still holds.

Settle looks at the workloads touched since it last looked. The cycle remembers which
placement shapes found no place on the book, with the book's ``freed`` count then: while
nothing has given any node more room, they still find none.

``evolve`` notes every workload an event touches (and a configuration change marks
everything); ``settle`` looks only at those, and forgets the ones it found nothing to
do for. The notebook is a cache, never a source of decisions: a settle over a fresh
notebook looks at every workload holding quota and decides exactly the same, so it is
not pickled (a snapshot restores a fresh one) and two states compare equal whatever
their notebooks hold.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class Notebook:
    __slots__ = ("full", "misses", "touched")

    def __init__(self) -> None:
        self.full = True  # look at everything (fresh, or the configuration changed)
        self.touched: set[str] = set()
        self.misses: dict[tuple[object, ...], tuple[int, Any]] = {}  # shape -> (freed, why)

    def touch(self, workload_id: str) -> None:
        self.touched.add(workload_id)

    def touch_all(self) -> None:
        self.full = True

    def looked(self, quiet: Iterable[str], busy: Iterable[str]) -> None:
        """After a settle: ``quiet`` had nothing to do, ``busy`` produced events (whose
        fold touches them again, or, if they are not appended, they are looked at again)."""
        if self.full:
            self.full = False
            self.touched = set(busy)
        else:
            self.touched.difference_update(quiet)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Notebook, ())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Notebook)

    __hash__ = None  # type: ignore[assignment]
