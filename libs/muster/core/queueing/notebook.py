"""What ``settle`` still has to look at, and what the cycle found that still holds.

Settle looks at the workloads touched since it last looked. The cycle judges the lanes
touched since it last judged them, and those whose parking cause moved. It remembers which
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

from collections.abc import Iterable, Mapping
from typing import Any

from muster.core.queueing.parking import LaneId, Parking
from muster.core.queueing.quota import QuotaTree


class Notebook:
    __slots__ = (
        "full",
        "grow_misses",
        "holders",
        "lanes",
        "misses",
        "parking",
        "reserved",
        "shared",
        "touched",
        "tree",
    )

    def __init__(self) -> None:
        self.full = True  # look at everything (fresh, or the configuration changed)
        self.touched: set[str] = set()
        self.misses: dict[tuple[object, ...], tuple[int, Any]] = {}  # shape -> (freed, why)
        # The cycle's: lanes an event touched since it last judged them, and the lanes it
        # parked (parking.py). None: judge every lane (fresh, or the configuration changed).
        self.lanes: set[LaneId] | None = None
        self.parking = Parking()
        # Per cohort tree: (config version, its quota changes) -> its workloads holding
        # quota, as preemption sees them.
        self.holders: dict[str, tuple[tuple[int, int], list[Any]]] = {}
        # The quota tree with the state's usage, kept in step by evolve (None: built by the
        # next cycle); each cycle charges a copy of it (quota.copy_on_read).
        self.tree: QuotaTree | None = None
        # Growers (growth.py) that found no room -> what that was judged against: while it
        # holds, they find none again.
        self.grow_misses: dict[str, Any] = {}
        # Reservation holders -> what their reservation was worked out from and what it
        # found (reservations.py): the same state finds the same, a moved one starts there.
        self.reserved: dict[str, Any] = {}
        # Equal immutable parts of workloads (pod sets, run and failure policies, shapes,
        # pending reasons), one object each: a snapshot pickles and restores each once
        # (pickle's memo), not once per workload of a backlog (state.share).
        self.shared: dict[object, object] = {}

    def touch(self, workload_id: str) -> None:
        if not self.full:  # else settle looks at every active workload (a rebuild's case)
            self.touched.add(workload_id)

    def touch_all(self) -> None:
        self.full = True

    def lane_changed(self, lane: LaneId | None) -> None:
        if lane is not None and self.lanes is not None:
            self.lanes.add(lane)

    def rejudge_all(self) -> None:
        self.lanes = None
        self.parking.clear()
        self.tree = None
        self.grow_misses.clear()
        self.reserved.clear()

    def regrow(self, workload_id: str) -> None:
        """An event touched the workload: whether it grows is judged afresh."""
        self.grow_misses.pop(workload_id, None)

    def charged(self, queue: str, usage: Mapping[str, Mapping[str, int]], sign: int) -> None:
        """A workload took (+1) or gave back (-1) quota: the kept tree follows."""
        if self.tree is not None:
            self.tree.add(queue, usage, sign)

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
