"""The admission cycle's snapshot: the state it reads, its working copies (quota on a
copy-on-read of the cohort trees, placement on a view of the node book, tenant and
namespace usage), what it keeps for the rest of the cycle ("does not fit" per shape,
placement misses, tenant shares) and its verdicts, recorded lane by lane. The phases
(cycle.py, admit.py) take it as their first argument; nothing in it reaches the state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from muster.core.model.queues import ClusterQueueSpec
from muster.core.placement.view import view
from muster.core.queueing import preemption as pre
from muster.core.queueing import quota as qt
from muster.core.queueing.flavors import Unassignable
from muster.core.queueing.parking import Counters, LaneId, Stamp
from muster.core.queueing.pending import Lane
from muster.core.queueing.state import QueueState, Usage, WorkloadEntry, protecting
from muster.core.queueing.verdicts import Verdict

if TYPE_CHECKING:
    from muster.core.queueing.reservations import Reservation


class Snapshot:
    """One cycle's working copies of the state and what it concluded so far."""

    def __init__(
        self,
        state: QueueState,
        *,
        every_verdict: bool = False,
        subject: str | None = None,
        defer_preemptions: bool = True,
    ) -> None:
        """``every_verdict``: keep a verdict for every pending workload (visibility);
        otherwise verdicts that would change nothing in the log are dropped early.
        ``subject``: of a lane's members, record only this one's (explain asks for one).
        ``defer_preemptions``: a preemption in a cohort tree where this cycle reserved
        quota waits for the next cycle (``admit.preempt``); False: as decided before."""
        self.state = state
        self.every_verdict = every_verdict
        self.subject = subject
        notes = state.notes
        if notes.tree is None:
            notes.tree = qt.build(state.cluster_queues, state.cohorts, state.usage)
        self.tree = qt.copy_on_read(notes.tree)
        self.lq_usage = {k: {f: dict(r) for f, r in v.items()} for k, v in state.lq_usage.items()}
        self.ns_usage = {k: dict(v) for k, v in state.ns_usage.items()}
        self.fair_sharing = state.fair_sharing.enable
        # Per cohort tree: admit.no_fit_key (queue, shape, rank) -> "does not fit".
        self.no_fit: dict[int, dict[tuple[object, ...], Unassignable]] = {}
        self.evicted: set[str] = set()
        # Cohort trees (by root) where this cycle reserved quota: their new holders are no
        # preemption candidates before their reservations are folded (admit.preempt).
        self.reserved_in: set[str] = set()
        self.defer_preemptions = defer_preemptions
        # Grown in this cycle (growth.py): no victim until its growth is folded.
        self.grown: set[str] = set()
        # Preemption candidates ranked by attained service, per (preemptor's queue, id, its
        # tenant where maxCrossTenantPreemptions makes the rank depend on it, else "").
        self.ranked: dict[tuple[str, str, str], pre.Holder] = {}
        self.rules: dict[str, tuple[bool, bool]] = {}
        # (holder, only its surplus pods) -> the nodes its pods are on (admit._nodes_of).
        self.nodes: dict[tuple[str, bool], frozenset[str]] = {}
        self.protecting = protecting(state)  # any minAdmitDuration: candidates are filtered
        self.verdicts: list[Verdict] = []
        config = state.wait_for_pods_ready
        # blockAdmission: one admission per cycle at most while pods are not ready.
        self.block_after_admit = config.enable and config.block_admission
        self.admission_blocked = False
        # Placements made in this cycle go on a view of the book: the book itself holds
        # them once their QuotaReserved is folded.
        self.book = view(state.book)
        # "Does not place" per placement shape: room only shrinks within a cycle.
        self.unplaced: dict[tuple[object, ...], Unassignable] = {}
        self.routes: dict[tuple[object, ...], bool] = {}  # shape -> to existing nodes?
        self.shares: dict[str, float] = {}  # local queue -> tenant_share, until charged
        self.nominal: dict[str, float] = {}  # cluster queue -> nominal_share
        # Verdicts remembered from earlier cycles (by identity) -> how to work them out now.
        self.recall: dict[int, Callable[[], Unassignable]] = {}
        # Parking (parking.py): the lanes to judge (None: every one), what the judged
        # ones are parked under, and the lanes that recorded something in this cycle.
        self.counters = Counters(
            dict(state.quota_changed),
            dict(state.ns_changed),
            state.book.version,
            state.now,
        )
        self.judge: set[LaneId] | None = None
        self.strict_judged: set[str] = set()  # StrictFIFO queues judged whole (cursors)
        # Reservations (reservations.py) are worked out afresh each cycle and change what
        # a lane's verdict depends on (the time, the holder's wait): every lane is judged.
        self.backfill = any(cq.backfill is not None for cq in state.cluster_queues.values())
        self.reservations: list[Reservation] = []
        if not every_verdict and notes.lanes is not None and not self.backfill:
            self.judge = notes.parking.to_judge(notes.lanes, self.counters)
        self.stamps: dict[LaneId, Stamp | None] = {}
        self.emitted: set[LaneId] = set()
        self.dry = False  # judging heads before the rounds: nothing is kept
        # How many verdicts ``process`` has worked out: one nominated before the last of
        # them may have lost its room to it (admit.py ``process``).
        self.processed = 0
        # The first end of a protection (minAdmitDuration) the last failed search met.
        self.protection_met = 0.0

    def share_after(self, cq: ClusterQueueSpec, lq: str, change: Usage, sign: int) -> float:
        """The LocalQueue's weighted share once ``change`` is added (+1) or taken (-1)."""
        return self._tenant_share(cq, lq, change, sign)

    def nominal_share(self, cq: ClusterQueueSpec) -> float:
        """A tenant's nominal share of the queue in weighted-share units: a LocalQueue of
        weight w is owed w / W of the quota (W the weights of the queue's LocalQueues), a
        weighted share of 1 / W (cached for the cycle)."""
        share = self.nominal.get(cq.name)
        if share is None:
            weights = sum(
                max(0.0, lq.fair_sharing_weight)
                for lq in self.state.local_queues.values()
                if lq.cluster_queue == cq.name
            )
            share = self.nominal[cq.name] = 1.0 / weights if weights > 0 else 0.0
        return share

    def tenant_share(self, cq: ClusterQueueSpec, lq: str) -> float:
        """The LocalQueue's weighted share of its ClusterQueue (cached until it is charged)."""
        share = self.shares.get(lq)
        if share is None:
            share = self.shares[lq] = self._tenant_share(cq, lq)
        return share

    def _tenant_share(
        self, cq: ClusterQueueSpec, lq: str, change: Usage | None = None, sign: int = 0
    ) -> float:
        """``change`` x ``sign``: the share with that usage added (+1) or taken (-1)."""
        node = self.tree.queues[cq.name]
        usage = self.lq_usage.get(lq, {})
        if change:
            usage = {f: dict(r) for f, r in usage.items()}
            for flavor, resources in change.items():
                per = usage.setdefault(flavor, {})
                for resource, qty in resources.items():
                    per[resource] = per.get(resource, 0) + sign * qty
        share = 0.0
        for flavor, resources in usage.items():
            for resource, qty in resources.items():
                base = node.subtree.get((flavor, resource), 0) or qt.potential(
                    node, (flavor, resource)
                )
                if qty > 0 and base > 0:
                    share = max(share, qty / base)
        spec = self.state.local_queues.get(lq)
        weight = spec.fair_sharing_weight if spec else 1.0
        if weight <= 0:
            return float("inf") if share > 0 else 0.0
        return share / weight

    def record(
        self, lane: Lane, start: int, cq: str | None, outcome: Unassignable, *, only: int = 0
    ) -> None:
        """The lane's members from ``start`` (``only`` of them, if given) get ``outcome``:
        a verdict each for those whose recorded reason differs (all, for visibility)."""
        if self.every_verdict and self.subject is not None:
            member = lane.entry.get(self.subject)
            stop = start + only if only else len(lane.members)
            at = lane.members.index(member) if member is not None else -1
            wids = [self.subject] if start <= at < stop else []
        elif self.every_verdict:
            stop = start + only if only else len(lane.members)
            wids = [wid for _, wid in lane.members[start:stop]]
        else:
            wids = lane.differing(outcome.reason, start)
            if only:
                last = lane.members[start + only - 1]
                wids = [w for w in wids if lane.entry[w] <= last]
        recall = self.recall.get(id(outcome))
        if wids and recall is not None:
            outcome = recall()  # a remembered verdict, recorded with today's numbers
        if wids:
            self.emitted.add((lane.local_queue, lane.key))
        self.verdicts += [Verdict(self.state.workloads[w], cq, outcome) for w in wids]

    def reservation_of(self, wid: str) -> Reservation | None:
        """The reservation this cycle made for the workload, if any."""
        return next((r for r in self.reservations if r.holder == wid), None)

    def workload(self, lane: Lane, at: int) -> WorkloadEntry:
        return self.state.workloads[lane.members[at][1]]

    def root_name(self, cq: str) -> str:
        """The cohort tree's name as ``state.root_of`` draws it (state.roots)."""
        node = self.tree.queues[cq]
        root = node.root()
        return ("queue/" if root is node else "cohort/") + root.name
