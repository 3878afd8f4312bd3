"""One ClusterQueue's live lanes in admission order, for the cycle's rounds."""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from muster.core.model.queues import ClusterQueueSpec
from muster.core.queueing.pending import Lane
from muster.core.queueing.state import WorkloadEntry

if TYPE_CHECKING:
    from muster.core.queueing.snapshot import Snapshot


class QueueCursor:
    """One ClusterQueue's pending workloads in admission order, lane by lane.

    Order: workloads that preempted first, then priority (descending), then the
    submission order. With usage-based admission fair sharing the next tenant
    (LocalQueue) is the one with the smallest weighted share of the queue's quota
    at that moment; priority orders work within a tenant. With attained service
    (attained.py) the rank (priority, then level) goes before the share: fair sharing
    picks the tenant among the heads of the best rank. The head of the queue is the
    first of its lanes' heads; a lane whose head does not fit is parked whole (its
    other members get the same verdict), so the walk costs lanes and admissions, not
    pending workloads.
    """

    def __init__(self, snap: Snapshot, cq: ClusterQueueSpec, lanes: list[Lane]) -> None:
        self.snap = snap
        self.cq = cq
        self.fair = cq.admission_mode == "UsageBasedAdmissionFairSharing"
        # With attained service, rank (priority class, then level) goes before the tenants'
        # shares: a short job of a heavy tenant passes a long one of a light tenant.
        self.rank_first = cq.attained_service is not None
        self.at: dict[int, int] = {}  # id(lane) -> position of its head
        # Heaps of (head key, lane): one per tenant with fair sharing, else one.
        self.heaps: dict[str, list[tuple[tuple[int, int, int, str], int, Lane]]] = {}
        for seq, lane in enumerate(lanes):
            self.at[id(lane)] = 0
            tenant = lane.local_queue if self.fair else ""
            self.heaps.setdefault(tenant, []).append((lane.head_key(), seq, lane))
        for heap in self.heaps.values():
            heapq.heapify(heap)
        self._seq = len(lanes)

    def _top(self) -> str | None:
        """The heap whose top is the queue's head."""
        if not self.fair:
            return "" if self.heaps.get("") else None
        best: tuple[object, ...] | None = None
        found: str | None = None
        for lq, heap in self.heaps.items():
            if heap:
                # A preemptor goes first, whatever its tenant's share: the room its
                # victims free is its own, not the lighter tenant's (the victims').
                head = heap[0][0]
                rank = head[1] if self.rank_first else 0
                k = (head[0], rank, self.snap.tenant_share(self.cq, lq), head)
                if best is None or k < best:
                    best, found = k, lq
        return found

    def peek_lane(self) -> Lane | None:
        top = self._top()
        return None if top is None else self.heaps[top][0][2]

    def peek(self) -> WorkloadEntry | None:
        lane = self.peek_lane()
        if lane is None:
            return None
        return self.snap.state.workloads[lane.members[self.at[id(lane)]][1]]

    def _take(self, wl: WorkloadEntry) -> Lane:
        """Take the lane ``wl`` heads off its heap (its tenant's, with fair sharing: the
        shares moved since it was peeked, so the queue's top may be another's now)."""
        heap = self.heaps[wl.local_queue if self.fair else ""]
        _, _, lane = heapq.heappop(heap)
        assert lane.members[self.at[id(lane)]][1] == wl.id, "took another lane than the head's"
        return lane

    def pop(self, wl: WorkloadEntry) -> None:
        """The head ``wl`` is decided: its lane's next member is that lane's head."""
        lane = self._take(wl)
        top = wl.local_queue if self.fair else ""
        at = self.at[id(lane)] = self.at[id(lane)] + 1
        if at < len(lane.members):
            self._seq += 1
            heapq.heappush(self.heaps[top], (lane.head_key(at), self._seq, lane))

    def park(self, wl: WorkloadEntry) -> tuple[Lane, int]:
        """The lane ``wl`` heads is decided whole: (the lane, its head's position)."""
        lane = self._take(wl)
        return lane, self.at[id(lane)]

    def lanes(self) -> list[tuple[Lane, int]]:
        """Every lane not decided yet with its head's position, in admission order."""
        entries = sorted(e for heap in self.heaps.values() for e in heap)
        return [(lane, self.at[id(lane)]) for _, _, lane in entries]

    def drop(self, lanes: list[Lane]) -> None:
        """These lanes are decided whole (judged before the rounds)."""
        if not lanes:
            return
        gone = {id(lane) for lane in lanes}
        for tenant, heap in list(self.heaps.items()):
            kept = [e for e in heap if id(e[2]) not in gone]
            heapq.heapify(kept)
            self.heaps[tenant] = kept

    def rest(self) -> list[tuple[Lane, int]]:
        """Every lane not decided yet, with its head's position; the queue is then empty."""
        out = [
            (lane, self.at[id(lane)]) for heap in self.heaps.values() for _, _, lane in sorted(heap)
        ]
        self.heaps.clear()
        return out
