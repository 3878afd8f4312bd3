"""The pending workloads of every LocalQueue, in admission order, kept by ``evolve``.

A LocalQueue's pending workloads are grouped in lanes: workloads of one shape and
priority (``lane_key``) get the same verdict from one state, so the cycle judges a lane
by its head and gives the rest of it the same verdict without looking at them. A
workload whose own history changes its verdict (it preempted, waits out a backoff, may
be admitted partially) has a lane of its own.

Each lane also knows the reason each member last recorded, so the members whose record
differs from the lane's verdict (the only ones that need a new event) are found without
visiting the others: a cycle costs what changed, not what is pending.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sortedcontainers import SortedList

from muster.core.pickling import compact

LaneKey = tuple[object, ...]


@compact
@dataclass(slots=True)
class Lane:
    """Workloads of one verdict, by queue position (``order``, then id)."""

    key: LaneKey
    local_queue: str
    priority: int
    sticky: bool = False  # a workload that preempted: it goes first until admitted
    members: SortedList = field(default_factory=SortedList)  # (order, id)
    # reason code last recorded (None: nothing yet) -> members
    recorded: dict[str | None, set[str]] = field(default_factory=dict)
    entry: dict[str, tuple[int, str]] = field(default_factory=dict)  # id -> its member entry

    def head_key(self, at: int = 0) -> tuple[int, int, int, str]:
        """Admission order of the member at ``at``: preemptors, priority, position."""
        order, wid = self.members[at]
        return (0 if self.sticky else 1, -self.priority, order, wid)

    def differing(self, code: str, start: int = 0) -> list[str]:
        """Members from position ``start`` on whose recorded reason is not ``code``, in
        queue order: the ones a verdict ``code`` for the lane has to be recorded for."""
        if start >= len(self.members) or (len(self.recorded) == 1 and code in self.recorded):
            return []
        first = self.members[start]
        found = [
            self.entry[wid]
            for c, wids in self.recorded.items()
            if c != code
            for wid in wids
            if self.entry[wid] >= first
        ]
        return [wid for _, wid in sorted(found)]


@dataclass(slots=True)
class PendingQueues:
    """Lanes per LocalQueue ("namespace/name")."""

    lanes: dict[str, dict[LaneKey, Lane]] = field(default_factory=dict)
    lane_of: dict[str, tuple[str, LaneKey]] = field(default_factory=dict)  # id -> lane

    def add(
        self,
        wid: str,
        local_queue: str,
        key: LaneKey,
        *,
        order: int,
        priority: int,
        sticky: bool,
        code: str | None,
    ) -> None:
        self.remove(wid)
        lanes = self.lanes.setdefault(local_queue, {})
        lane = lanes.get(key)
        if lane is None:
            lane = lanes[key] = Lane(key, local_queue, priority, sticky)
        entry = (order, wid)
        lane.members.add(entry)
        lane.entry[wid] = entry
        lane.recorded.setdefault(code, set()).add(wid)
        self.lane_of[wid] = (local_queue, key)

    def remove(self, wid: str) -> None:
        where = self.lane_of.pop(wid, None)
        if where is None:
            return
        lq, key = where
        lanes = self.lanes[lq]  # the key hashed once a lookup: it holds the shape's tuples
        lane = lanes[key]
        entry, members = lane.entry.pop(wid), lane.members
        if members[0] is entry:  # the head, as a FIFO lane mostly loses them: no bisecting
            members.pop(0)
        else:
            members.remove(entry)
        recorded = lane.recorded
        for code, wids in recorded.items():
            if wid in wids:
                wids.discard(wid)
                if not wids:
                    del recorded[code]  # and the loop ends at once: no iteration after it
                break
        if not lane.members:
            del lanes[key]
            if not lanes:
                del self.lanes[lq]

    def record(self, wid: str, old: str | None, new: str | None) -> None:
        """A member's recorded reason changed from ``old`` to ``new``."""
        where = self.lane_of.get(wid)
        if where is None or old == new:
            return
        lane = self.lanes[where[0]][where[1]]
        wids = lane.recorded.get(old)
        if wids is not None:
            wids.discard(wid)
            if not wids:
                del lane.recorded[old]
        lane.recorded.setdefault(new, set()).add(wid)

    def of(self, local_queue: str) -> list[Lane]:
        """A LocalQueue's lanes, in a deterministic order."""
        lanes = self.lanes.get(local_queue)
        if not lanes:
            return []
        return sorted(lanes.values(), key=lambda lane: lane.head_key())
