"""Lanes parked under the cause that can change their verdict: Kueue's inadmissible set,
done the replayable way.

A lane whose head cannot be admitted now (judged against the state as the log left it,
before the cycle admits anything) is parked with what its verdict depends on:

* ``quota``: any change of its cohort tree's usage (a verdict of flavor assignment:
  more usage never makes it fit, but may change why: a second pod set over the maximum
  is only reached once the first one fits);
* ``state``: any change of its tree's usage, of the node book, or of its namespace's
  usage (placement, preemption and namespace-quota verdicts);
* ``config``: only a configuration change (a missing or stopped queue);
* ``time``: the end of its backoff.

A preemption verdict that met protected victims (``minAdmitDuration``) is also judged
again when the first of those protections ends (``until`` on a ``state`` stamp).

A cycle judges the lanes an event touched, the parked lanes whose cause moved, and the
lanes it did not park; the others get the verdict they had, and have recorded it
already. Parking is a cache: it is not pickled, a cycle over a fresh one judges every
lane and decides the same (tests/property: decisions from a fresh notebook equal the
incremental ones; replay re-derives every decision).
"""

from __future__ import annotations

from dataclasses import dataclass, field

LaneId = tuple[str, tuple[object, ...]]  # (local queue, lane key)

QUOTA, STATE, CONFIG, TIME = "quota", "state", "config", "time"


@dataclass(frozen=True, slots=True)
class Stamp:
    """What a parked lane's verdict was judged against."""

    kind: str
    root: str = ""
    namespace: str = ""
    changed: int = 0  # quota taken or given back in the tree (quota, state)
    book: int = 0  # the node book's version (state)
    ns: int = 0  # the namespace's usage changes (state)
    until: float = 0.0  # time; for state, when a protection it met ends (0: none)


@dataclass(frozen=True, slots=True)
class Counters:
    """The state's counts that stamps are compared with."""

    changed: dict[str, int]
    ns: dict[str, int]
    book: int
    now: float

    def stamp(self, kind: str, root: str = "", namespace: str = "", until: float = 0.0) -> Stamp:
        return Stamp(
            kind,
            root,
            namespace,
            self.changed.get(root, 0),
            self.book,
            self.ns.get(namespace, 0),
            until,
        )

    def holds(self, s: Stamp) -> bool:
        if s.kind == QUOTA:
            return self.changed.get(s.root, 0) == s.changed
        if s.kind == STATE:
            return (
                self.changed.get(s.root, 0) == s.changed
                and self.book == s.book
                and self.ns.get(s.namespace, 0) == s.ns
                and (not s.until or self.now < s.until)
            )
        if s.kind == TIME:
            return self.now < s.until
        return True  # CONFIG: a configuration change rejudges everything anyway


@dataclass(slots=True)
class Parking:
    parked: dict[LaneId, Stamp] = field(default_factory=dict)
    unparked: set[LaneId] = field(default_factory=set)  # judged every cycle
    seen: Counters | None = None  # the counts at the last cycle

    def clear(self) -> None:
        self.parked.clear()
        self.unparked.clear()
        self.seen = None

    def to_judge(self, touched: set[LaneId], now: Counters) -> set[LaneId]:
        """The lanes a cycle judges: touched, not parked, or parked on a cause that moved."""
        out = touched | self.unparked
        seen = self.seen
        if seen is not None and seen == now:
            return out
        moved_roots = {
            r
            for r in set(now.changed) | set(seen.changed if seen else {})
            if seen is None or seen.changed.get(r) != now.changed.get(r)
        }
        moved_ns = seen is None or seen.ns != now.ns
        book = seen is None or seen.book != now.book
        for lane, stamp in self.parked.items():
            if lane in out:
                continue
            maybe = stamp.kind == TIME or stamp.until or stamp.root in moved_roots
            maybe = maybe or moved_ns or book
            if maybe and not now.holds(stamp):
                out.add(lane)
        return out

    def judged(self, lane: LaneId, stamp: Stamp | None) -> None:
        """A lane was judged: parked under ``stamp``, or (None) to be judged again."""
        if stamp is None:
            self.parked.pop(lane, None)
            self.unparked.add(lane)
        else:
            self.parked[lane] = stamp
            self.unparked.discard(lane)

    def gone(self, lane: LaneId) -> None:
        self.parked.pop(lane, None)
        self.unparked.discard(lane)
