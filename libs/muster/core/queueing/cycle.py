"""The admission cycle: an explicit pipeline over the pending lanes.

    lanes to judge -> held back whole -> heads judged against the log's state (parked
    or live) -> rounds over the live lanes: nominate, order, admit or preempt -> events

The lanes to judge are every lane (a fresh notebook, a configuration change) or those
the notebook says: touched by an event, not parked, or parked under a cause that moved
(parking.py). A head is judged by a dry run of its admission against the state as the
log left it: a lane that cannot be admitted is parked whole and takes no turn in the
rounds, whether judged now or earlier. Kueue pops one head per ClusterQueue per cycle;
muster runs that round again and again inside one cycle, against what the earlier
rounds admitted, until every live lane is decided: a deep BestEffortFIFO queue admits
everything that fits in one cycle. A StrictFIFO queue stops at its first workload that
does not fit. Within one cycle a verdict of "does not fit" for a workload shape is
reused for the same shape (Kueue's equivalence hashing). Placement is tried on a view
of the node book and quota on a copy of the cohort trees looked at: the state is read,
never written.

Deterministic for a given state: queues are visited in name order and every ordering
ends in the submission order; a fresh notebook decides the same.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from muster.core.events import Event, NewEvent
from muster.core.events import queue as qev
from muster.core.model.queues import ClusterQueueSpec
from muster.core.model.resources import format_quantity
from muster.core.placement.book import NodeBook, Placement
from muster.core.placement.view import view
from muster.core.queueing import checks, placing
from muster.core.queueing import preemption as pre
from muster.core.queueing import quota as qt
from muster.core.queueing.flavors import FIT, Assignment, Unassignable, assign
from muster.core.queueing.parking import CONFIG, QUOTA, STATE, TIME, Counters, LaneId, Stamp
from muster.core.queueing.pending import Lane
from muster.core.queueing.state import (
    QueueState,
    WorkloadEntry,
    namespace_charge,
    protected_until,
)

# Placement misses remembered across cycles (the notebook's): more are forgotten at once.
MAX_MISSES = 10_000
# Verdicts that end the workload instead of leaving it waiting: verdict -> rejection reason.
REJECTIONS = {
    "NamespaceQuotaRejected": "NamespaceQuotaExceeded",
    "RequeuingLimitExceeded": "RequeuingLimitExceeded",
}


def admission_cycle(state: QueueState) -> list[NewEvent]:
    """The queue's admissions, evictions and pending reasons for this state."""
    return to_events(state, Cycle(state).run())


@dataclass(slots=True)
class Verdict:
    """What the cycle concluded for one pending workload."""

    workload: WorkloadEntry
    cluster_queue: str | None
    outcome: Assignment | Unassignable
    victims: list[pre.Victim] = field(default_factory=list)
    pod_counts: dict[str, int] = field(default_factory=dict)  # partial admission
    placement: Placement | None = None  # on existing nodes


class QueueCursor:
    """One ClusterQueue's pending workloads in admission order, lane by lane.

    Order: workloads that preempted first, then priority (descending), then the
    submission order. With usage-based admission fair sharing the next tenant
    (LocalQueue) is the one with the smallest weighted share of the queue's quota
    at that moment; priority orders work within a tenant. The head of the queue is the
    first of its lanes' heads; a lane whose head does not fit is parked whole (its
    other members get the same verdict), so the walk costs lanes and admissions, not
    pending workloads.
    """

    def __init__(self, cycle: Cycle, cq: ClusterQueueSpec, lanes: list[Lane]) -> None:
        self.cycle = cycle
        self.cq = cq
        self.fair = cq.admission_mode == "UsageBasedAdmissionFairSharing"
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
                k = (heap[0][0][0], self.cycle.tenant_share(self.cq, lq), heap[0][0])
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
        return self.cycle.state.workloads[lane.members[self.at[id(lane)]][1]]

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


class Cycle:
    def __init__(self, state: QueueState, *, every_verdict: bool = False) -> None:
        """``every_verdict``: keep a verdict for every pending workload (visibility);
        otherwise verdicts that would change nothing in the log are dropped early."""
        self.state = state
        self.every_verdict = every_verdict
        notes = state.notes
        if notes.tree is None:
            notes.tree = qt.build(state.cluster_queues, state.cohorts, state.usage)
        self.tree = qt.copy_on_read(notes.tree)
        self.lq_usage = {k: {f: dict(r) for f, r in v.items()} for k, v in state.lq_usage.items()}
        self.ns_usage = {k: dict(v) for k, v in state.ns_usage.items()}
        self.fair_sharing = state.fair_sharing.enable
        # Per cohort tree: (queue, shape, priority) -> a verdict of "does not fit".
        self.no_fit: dict[int, dict[tuple[object, ...], Unassignable]] = {}
        self.evicted: set[str] = set()
        self._rules: dict[str, tuple[bool, bool]] = {}
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
        if not every_verdict and notes.lanes is not None:
            self.judge = notes.parking.to_judge(notes.lanes, self.counters)
        self.stamps: dict[LaneId, Stamp | None] = {}
        self.emitted: set[LaneId] = set()
        self.dry = False  # judging heads before the rounds: nothing is kept
        # The first end of a protection (minAdmitDuration) the last failed search met.
        self.protection_met = 0.0

    def queue_key(self, wl: WorkloadEntry) -> tuple[int, int, int]:
        return (0 if wl.id in self.state.preemptors else 1, -wl.priority, wl.order)

    def tenant_share(self, cq: ClusterQueueSpec, lq: str) -> float:
        """The LocalQueue's weighted share of its ClusterQueue (cached until it is charged)."""
        share = self.shares.get(lq)
        if share is None:
            share = self.shares[lq] = self._tenant_share(cq, lq)
        return share

    def _tenant_share(self, cq: ClusterQueueSpec, lq: str) -> float:
        node = self.tree.queues[cq.name]
        usage = self.lq_usage.get(lq, {})
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

    # -- heads -------------------------------------------------------------------------

    def cursors(self) -> list[QueueCursor]:
        """The ClusterQueues' lanes to judge (every one, or those the notebook says), after
        what holds whole lanes back: a missing or stopped queue, admission blocked, a
        workload's own backoff."""
        blocked = self._blocked_by_pods_ready()
        by_queue: dict[str | None, list[Lane]] = {}
        for lq_key in self._local_queues():
            lq = self.state.local_queues.get(lq_key)
            by_queue.setdefault(lq.cluster_queue if lq is not None else None, []).extend(
                self.state.lanes.of(lq_key)
            )
        cursors: list[QueueCursor] = []
        for name in sorted(by_queue, key=lambda n: n or ""):
            lanes = self._to_judge(name, by_queue[name])
            cq = self.state.cluster_queues.get(name) if name else None
            live = []
            for lane in lanes:
                held, kind = self._held(lane, name, cq, blocked)
                if held is not None:
                    self.lane_verdict(lane, 0, name, held)
                    self._judged(lane, kind, cq, held)
                else:
                    live.append(lane)
            if live:
                assert cq is not None
                cursors.append(QueueCursor(self, cq, live))
        return cursors

    def _local_queues(self) -> list[str]:
        """The LocalQueues with lanes to judge: all, or those of the notebook's lanes and,
        for a StrictFIFO ClusterQueue among them, the queue's others too."""
        every = self.state.lanes.lanes
        if self.judge is None:
            return sorted(every)
        picked = {lq for lq, _ in self.judge if lq in every}
        strict = self.strict_judged
        for lq in {lq for lq, _ in self.judge}:  # a lane that left counts too: a new head
            spec = self.state.local_queues.get(lq)
            cq = self.state.cluster_queues.get(spec.cluster_queue) if spec is not None else None
            if cq is not None and cq.queueing_strategy == "StrictFIFO":
                strict.add(cq.name)
        if strict:
            picked |= {
                key
                for key, spec in self.state.local_queues.items()
                if spec.cluster_queue in strict and key in every
            }
        return sorted(picked)

    def _to_judge(self, name: str | None, lanes: list[Lane]) -> list[Lane]:
        """All of them, or those the notebook says (a StrictFIFO queue's lanes go together:
        one head decides them all)."""
        if self.judge is None or name in self.strict_judged:
            return lanes
        return [lane for lane in lanes if (lane.local_queue, lane.key) in self.judge]

    def _held(
        self, lane: Lane, name: str | None, cq: ClusterQueueSpec | None, blocked: bool
    ) -> tuple[Unassignable | None, str | None]:
        """What holds the whole lane back, and what can change it (a parking kind)."""
        if cq is None:
            return _missing_queue(name, lane.local_queue), CONFIG
        stopped = _lq_stopped(self.state, lane.local_queue) or _stopped(self.state, cq)
        stopped = stopped or _inactive(self.state, cq)
        if stopped is not None:
            return stopped, CONFIG
        if blocked:
            return self._pods_ready_block(), None
        if lane.key[0] == "workload":
            held = self._held_back(self._workload(lane, 0))
            if held is not None:
                return held, TIME
        return None, None

    def _judged(
        self,
        lane: Lane,
        kind: str | None,
        cq: ClusterQueueSpec | None,
        why: Unassignable | None,
        until: float = 0.0,
    ) -> None:
        """What a judged lane is parked under (None: judged again next cycle); ``until``:
        when a protection its verdict met ends."""
        lane_id = (lane.local_queue, lane.key)
        # A workload's own lane parks like any other: what its history holds (victims it
        # may not take again, flavors it preempted for) changes only with events that
        # re-file it, and so touch its lane.
        if kind is None or why is None or why.reason in REJECTIONS:
            self.stamps[lane_id] = None
            return
        root = self._root_name(cq.name) if cq is not None else ""
        if kind == TIME:
            wl = self._workload(lane, 0)
            until = wl.requeue_at if wl.requeue_at is not None else 0.0
        self.stamps[lane_id] = self.counters.stamp(
            kind, root, lane.local_queue.split("/", 1)[0], until
        )

    def _root_name(self, cq: str) -> str:
        """The cohort tree's name as ``state.root_of`` draws it (state.roots)."""
        node = self.tree.queues[cq]
        root = node.root()
        return ("queue/" if root is node else "cohort/") + root.name

    def _workload(self, lane: Lane, at: int) -> WorkloadEntry:
        return self.state.workloads[lane.members[at][1]]

    def lane_verdict(
        self, lane: Lane, start: int, cq: str | None, outcome: Unassignable, *, only: int = 0
    ) -> None:
        """The lane's members from ``start`` (``only`` of them, if given) get ``outcome``:
        a verdict each for those whose recorded reason differs (all, for visibility)."""
        if self.every_verdict:
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

    def _blocked_by_pods_ready(self) -> bool:
        config = self.state.wait_for_pods_ready
        if not (config.enable and config.block_admission):
            return False
        return any(
            self.state.workloads[w].holds_quota and not self.state.workloads[w].run.pods_ready
            for w in self.state.active
        )

    @staticmethod
    def _pods_ready_block() -> Unassignable:
        return Unassignable(
            "WaitingForPodsReady",
            "admission blocked until every admitted workload has all its pods running "
            "(waitForPodsReady.blockAdmission)",
        )

    def _held_back(self, wl: WorkloadEntry) -> Unassignable | None:
        """Its admission check's retry backoff; waitForPodsReady: past the backoff limit,
        or in backoff."""
        if wl.check_retries and wl.requeue_at is not None and self.state.now < wl.requeue_at:
            return Unassignable(
                "WaitingForBackoff",
                f"{wl.backoff_reason}; eligible again {wl.requeue_at - self.state.now:g}s from now",
            )
        config = self.state.wait_for_pods_ready
        if not config.enable:
            return None
        limit = config.backoff_limit_count
        if limit is not None and wl.requeue_count > limit:
            return Unassignable(
                "RequeuingLimitExceeded",
                f"evicted {wl.requeue_count} times for PodsReadyTimeout; backoffLimitCount "
                f"is {limit}",
            )
        if wl.requeue_at is not None and self.state.now < wl.requeue_at:
            return Unassignable(
                "WaitingForBackoff",
                f"requeued after PodsReadyTimeout ({wl.requeue_count} so far); eligible "
                f"again {wl.requeue_at - self.state.now:g}s from now",
            )
        return None

    # -- nominate ----------------------------------------------------------------------

    def preempt_rules(self, cq: ClusterQueueSpec) -> tuple[bool, bool]:
        """(may preempt at all, may preempt in order to borrow)."""
        rules = self._rules.get(cq.name)
        if rules is None:
            rules = self._rules[cq.name] = self._preempt_rules(cq)
        return rules

    def _preempt_rules(self, cq: ClusterQueueSpec) -> tuple[bool, bool]:
        in_cohort = self.tree.queues[cq.name].parent is not None
        fs_reclaim = (
            self.fair_sharing and in_cohort and cq.preemption.reclaim_within_cohort != "Never"
        )
        beyond = fs_reclaim or (in_cohort and cq.preemption.borrow_within_cohort.policy != "Never")
        return pre.possible(cq.preemption, in_cohort) or fs_reclaim, beyond

    def nominate(
        self, cq: ClusterQueueSpec, wl: WorkloadEntry, exclude: frozenset[str] = frozenset()
    ) -> Verdict:
        can_preempt, beyond = self.preempt_rules(cq)
        if wl.preempted_for and not exclude:
            # It evicted for these flavors: take them now that the victims are gone.
            pinned = assign(
                cq, self.state.flavors, wl.spec, self.tree, False, pinned=wl.preempted_for
            )
            if isinstance(pinned, Assignment):
                return Verdict(wl, cq.name, pinned)
        key = (cq.name, wl.shape, wl.priority if can_preempt else None)
        cache = self.no_fit.setdefault(id(self.tree.queues[cq.name].root()), {})
        cached = cache.get(key)
        if cached is not None:
            return Verdict(wl, cq.name, cached)
        outcome = assign(
            cq,
            self.state.flavors,
            wl.spec,
            self.tree,
            can_preempt,
            beyond_nominal=beyond,
            exclude=exclude,
        )
        if isinstance(outcome, Unassignable) and not exclude:
            cache[key] = outcome
        return Verdict(wl, cq.name, outcome)

    # -- order -------------------------------------------------------------------------

    def order_key(self, v: Verdict) -> tuple[object, ...]:
        wl = v.workload
        if not isinstance(v.outcome, Assignment):
            return (0,)
        sticky = 0 if wl.id in self.state.preemptors else 1
        if self.fair_sharing and v.cluster_queue is not None:
            node = self.tree.queues[v.cluster_queue]
            share = qt.dominant_share(node, v.outcome.frs())[0]
            return (1, sticky, 1 if v.outcome.borrow else 0, share, -wl.priority, wl.order)
        return (1, sticky, v.outcome.borrow, -wl.priority, wl.order)

    # -- admit or preempt --------------------------------------------------------------

    def process(self, cursor: QueueCursor, v: Verdict) -> Verdict:
        cq, wl = cursor.cq, v.workload
        if self.admission_blocked:
            return Verdict(wl, cq.name, self._pods_ready_block())
        if isinstance(v.outcome, Assignment):
            # Earlier entries of this round may have taken the room: assign again.
            v = self.nominate(cq, wl)
        outcome = v.outcome
        if isinstance(outcome, Unassignable):
            if outcome.reason == "WaitingForQuota":
                return self._partial(cq, wl) or v
            return v
        over = self.namespace_excess(wl)
        if over is not None:
            return Verdict(wl, cq.name, over)
        if outcome.mode == FIT:
            v = self._place_and_admit(cq, wl, outcome, {})
            if isinstance(v.outcome, Unassignable):
                return self._partial(cq, wl) or v
            return v
        return self._preempt(cq, wl, outcome)

    def _preempt(self, cq: ClusterQueueSpec, wl: WorkloadEntry, outcome: Assignment) -> Verdict:
        """Evict the fewest workloads that make room, in quota and on the nodes, or say why
        none do. The room goes to the preemptor: later entries of this cycle cannot take it."""
        spared = self.state.evicted_for.get(wl.id, set())  # it evicted them once already
        gone = self.evicted | spared
        holders = [h for h in self.holders(cq.name) if h.id not in gone]
        holders, protected = self._unprotected(holders, outcome)
        excluded: frozenset[str] = frozenset()
        while True:
            victims = pre.victims(
                self.tree,
                pre.Preemptor(wl.id, cq, wl.priority, wl.order, outcome),
                holders,
                self.state.fair_sharing.preemption_strategies if self.fair_sharing else None,
                placeable=self._placeable_without(cq, wl, outcome),
                nodes_of=self._nodes_of,
            )
            if victims:
                break
            # No candidates in these flavors: Kueue ranks that below every viable mode,
            # so the next flavor (fit, or preemption with candidates) gets its turn.
            excluded |= {flavor for flavor, _ in outcome.contested}
            retry = self.nominate(cq, wl, excluded).outcome
            if isinstance(retry, Assignment) and retry.mode == FIT:
                if self.namespace_excess(wl) is not None:
                    break
                return self._place_and_admit(cq, wl, retry, {})
            if not isinstance(retry, Assignment):
                break
            outcome = retry
        if not victims:
            message = (
                f"couldn't assign flavors: {outcome.message}; no preemption candidates "
                "whose eviction makes room for it"
            )
            if protected:
                ends = min(protected.values())
                self.protection_met = ends
                message += (
                    f"; {len(protected)} that could are protected by minAdmitDuration, the "
                    f"first for another {ends - self.state.now:g}s"
                )
            verdict = Unassignable("WaitingForQuota", message, outcome.shortfall)
            # Its lane-mates have the same candidates; a verdict that met protections is
            # not shared, so each lane it parks learns when they end.
            if not spared and not protected:
                root = id(self.tree.queues[cq.name].root())
                self.no_fit.setdefault(root, {})[(cq.name, wl.shape, wl.priority)] = verdict
            return self._partial(cq, wl) or Verdict(wl, cq.name, verdict)
        if self.dry:
            return Verdict(wl, cq.name, outcome, victims)
        for victim in victims:
            self.evicted.add(victim.holder.id)
            self.tree.add(victim.holder.cluster_queue, victim.holder.usage, -1)
            gives = self.state.workloads[victim.holder.id]
            self._charge_tenant(gives, victim.holder.usage, -1, gives.run.pod_counts)
            if victim.holder.shrink is not None:  # it keeps its other pods in its namespace
                self._charge_tenant(gives, {}, +1, victim.holder.shrink.pod_counts)
            self._take_pods(self.book, victim.holder)
        self.tree.add(cq.name, outcome.usage)
        self._charge_tenant(wl, outcome.usage, +1)
        planned = placing.try_place(self.state, self.book, wl, cq.name, outcome, {}, self.routes)
        # "Does not fit" verdicts of this cycle are kept although quota moved: a workload
        # that the evictions made room for gets in next cycle, right after they are folded.
        return Verdict(
            wl,
            cq.name,
            outcome,
            victims,
            placement=planned if isinstance(planned, Placement) else None,
        )

    def _unprotected(
        self, holders: list[pre.Holder], outcome: Assignment
    ) -> tuple[list[pre.Holder], dict[str, float]]:
        """The candidates that may be taken now, and those that hold the preemptor's pairs
        but are protected (minAdmitDuration) -> when that ends."""
        if not any(c.preemption.min_admit_duration for c in self.state.cluster_queues.values()):
            return holders, {}
        now, free, protected = self.state.now, [], {}
        for h in holders:
            until = protected_until(self.state, self.state.workloads[h.id])
            if until <= now:
                free.append(h)
            elif h.frs() & outcome.contested:
                protected[h.id] = until
        return free, protected

    def _placeable_without(
        self, cq: ClusterQueueSpec, wl: WorkloadEntry, outcome: Assignment
    ) -> Callable[[Sequence[pre.Holder]], bool]:
        """Whether the preemptor finds a place on existing nodes once these are gone (always,
        when the provisioner makes its nodes). The sets asked about grow and shrink by one
        holder at a time: one trial view follows them, a placement is tried on a view of it."""
        if not placing.routed(self.state, wl, outcome, self.routes):
            return lambda gone: True
        seen: dict[frozenset[str], bool] = {}
        trial = view(self.book)
        released: set[str] = set()

        def placeable(gone: Sequence[pre.Holder]) -> bool:
            key = frozenset(h.id for h in gone)
            found = seen.get(key)
            if found is None:
                for wid in sorted(released - key):
                    held = self.book.held[wid]
                    trial.hold(wid, held.placement, held.pods)
                    released.discard(wid)
                for h in gone:
                    if h.id not in released:
                        self._take_pods(trial, h)
                        released.add(h.id)
                got = placing.try_place(
                    self.state, view(trial), wl, cq.name, outcome, {}, self.routes, explain=False
                )
                found = seen[key] = not isinstance(got, Unassignable)
            return found

        return placeable

    def _nodes_of(self, holder: pre.Holder) -> frozenset[str]:
        held = self.book.held.get(holder.id)
        if held is None:
            return frozenset()
        pods = holder.shrink.pods if holder.shrink is not None else held.placement.nodes
        return frozenset(held.placement.nodes[p] for p in pods if p in held.placement.nodes)

    def _take_pods(self, book: NodeBook, holder: pre.Holder) -> None:
        """A victim's pods leave ``book`` (a view): all of them, or its surplus pods."""
        if holder.shrink is None:
            book.release(holder.id)
        else:
            book.take_pods(holder.id, holder.shrink.pods)

    def _place_and_admit(
        self, cq: ClusterQueueSpec, wl: WorkloadEntry, outcome: Assignment, counts: dict[str, int]
    ) -> Verdict:
        """Admit a fitting assignment once its gang has a place on existing nodes (if it
        goes there), or say why it has none."""
        placed = self._place(cq, wl, outcome, counts)
        if isinstance(placed, Unassignable):
            return Verdict(wl, cq.name, placed)
        if not self.dry:
            self._admit(cq, wl, outcome, counts)
        return Verdict(wl, cq.name, outcome, pod_counts=counts, placement=placed)

    def _admit(
        self,
        cq: ClusterQueueSpec,
        wl: WorkloadEntry,
        outcome: Assignment,
        counts: dict[str, int],
    ) -> None:
        self.tree.add(cq.name, outcome.usage)
        self._charge_tenant(wl, outcome.usage, +1, counts)
        self.admission_blocked = self.block_after_admit

    def _partial(self, cq: ClusterQueueSpec, wl: WorkloadEntry) -> Verdict | None:
        """Kueue's partial admission: the largest count >= minCount that fits now, in
        quota and, on existing nodes, in placement (Volcano's minAvailable).

        Only one pod set may have a ``minCount``; the search is a bisection because
        fitting is monotone in the count.
        """
        ps = next(
            (p for p in wl.spec.pod_sets if p.min_count is not None and p.min_count < p.count),
            None,
        )
        if ps is None or ps.min_count is None:
            return None
        lo, hi = ps.min_count, ps.count - 1
        best: tuple[int, Assignment] | None = None
        while lo <= hi:
            mid = (lo + hi) // 2
            a = assign(cq, self.state.flavors, wl.spec, self.tree, False, {ps.name: mid})
            if isinstance(a, Assignment) and a.mode == FIT and self._placeable(cq, wl, a, mid):
                best, lo = (mid, a), mid + 1
            else:
                hi = mid - 1
        if best is None:
            return None
        counts = {ps.name: best[0]}
        if self.namespace_excess(wl, counts) is not None:
            return None
        return self._place_and_admit(cq, wl, best[1], counts)

    def _placeable(self, cq: ClusterQueueSpec, wl: WorkloadEntry, a: Assignment, n: int) -> bool:
        ps = next(p for p in wl.spec.pod_sets if p.min_count is not None)
        trial = view(self.book)
        got = placing.try_place(
            self.state, trial, wl, cq.name, a, {ps.name: n}, self.routes, explain=False
        )
        return not isinstance(got, Unassignable)

    def _place(
        self, cq: ClusterQueueSpec, wl: WorkloadEntry, outcome: Assignment, counts: dict[str, int]
    ) -> Placement | Unassignable | None:
        """Placement on existing nodes (None: the provisioner makes the nodes)."""
        # What placement depends on: the pods (not whose they are), the flavors' labels and
        # tolerations, the policy. Tenants and queues with lookalike heads share one search.
        key = (
            wl.spec.placement or cq.placement,
            wl.shape[2:],
            tuple(sorted(counts.items())),
            tuple(sorted((k, tuple(sorted(v.items()))) for k, v in outcome.node_selectors.items())),
            tuple(sorted((k, tuple(sorted(v.items()))) for k, v in outcome.flavors.items())),
        )
        if wl.preempted_on is not None:
            # Where its victims made room: there first, before anywhere a lookalike fails.
            within = frozenset(wl.preempted_on.nodes.values())
            there = placing.try_place(
                self.state,
                view(self.book) if self.dry else self.book,
                wl,
                cq.name,
                outcome,
                counts,
                self.routes,
                within=within,
            )
            if not isinstance(there, Unassignable):
                return there
        known = self.unplaced.get(key)
        if known is not None:
            return known
        misses = self.state.notes.misses
        freed = self.state.book.freed
        pristine = not self.book.changed()
        if pristine:  # the book as the log left it: what was found on it holds
            seen = misses.get(key)
            if seen is not None and seen[0] == freed:
                # No room was freed since it found none. Its reason's numbers are of then:
                # if they are to be recorded, they are worked out now (lane_verdict).
                self.recall[id(seen[1])] = lambda: self._fresh_miss(cq, wl, outcome, counts)
                return seen[1]
        book = view(self.book) if self.dry else self.book  # a dry run keeps nothing
        placed = placing.try_place(self.state, book, wl, cq.name, outcome, counts, self.routes)
        if isinstance(placed, Unassignable):
            self.unplaced[key] = placed
            if pristine:  # found on the book as the log left it
                if len(misses) > MAX_MISSES:
                    misses.clear()
                misses[key] = (freed, placed)
        return placed

    def _fresh_miss(
        self, cq: ClusterQueueSpec, wl: WorkloadEntry, outcome: Assignment, counts: dict[str, int]
    ) -> Unassignable:
        got = placing.try_place(
            self.state, view(self.book), wl, cq.name, outcome, counts, self.routes
        )
        assert isinstance(got, Unassignable), "a remembered miss found a place"
        return got

    def _charge_tenant(
        self,
        wl: WorkloadEntry,
        usage: dict[str, dict[str, int]],
        sign: int,
        counts: dict[str, int] | None = None,
    ) -> None:
        per_lq = self.lq_usage.setdefault(wl.local_queue, {})
        self.shares.pop(wl.local_queue, None)
        for flavor, resources in usage.items():
            per_flavor = per_lq.setdefault(flavor, {})
            for resource, qty in resources.items():
                per_flavor[resource] = per_flavor.get(resource, 0) + sign * qty
        per_ns = self.ns_usage.setdefault(wl.spec.namespace, {})
        for resource, qty in namespace_charge(wl.spec, counts or wl.run.pod_counts).items():
            per_ns[resource] = per_ns.get(resource, 0) + sign * qty

    def namespace_excess(
        self, wl: WorkloadEntry, counts: dict[str, int] | None = None
    ) -> Unassignable | None:
        """A ResourceQuota of the workload's namespace it would exceed, with numbers."""
        quotas = [
            q
            for k, q in sorted(self.state.namespace_quotas.items())
            if q.namespace == wl.spec.namespace
        ]
        if not quotas:
            return None
        want = namespace_charge(wl.spec, counts)
        used = self.ns_usage.get(wl.spec.namespace, {})
        for q in quotas:
            over = sorted(r for r, hard in q.hard.items() if used.get(r, 0) + want.get(r, 0) > hard)
            if over:

                def fmt(amounts: dict[str, int], over: list[str] = over) -> str:
                    return ",".join(f"{r}={format_quantity(r, amounts.get(r, 0))}" for r in over)

                message = (
                    f"exceeded quota: {q.name}, requested: {fmt(want)}, used: {fmt(used)}, "
                    f"limited: {fmt(dict(q.hard))}"
                )
                reason = (
                    "NamespaceQuotaRejected"
                    if q.enforcement == "Reject"
                    else ("NamespaceQuotaExceeded")
                )
                return Unassignable(reason, message)
        return None

    def holders(self, cq: str) -> list[pre.Holder]:
        """Workloads holding quota in ``cq``'s cohort tree: the only possible victims. Kept
        in the notebook per tree until quota moves in it (or the configuration changes)."""
        root = self._root_name(cq)
        stamp = (self.state.config_version, self.state.quota_changed.get(root, 0))
        kept = self.state.notes.holders
        found = kept.get(root)
        if found is None or found[0] != stamp:
            fresh: dict[str, list[pre.Holder]] = {}
            for wid in sorted(self.state.active):
                wl = self.state.workloads[wid]
                if wl.holds_quota and wl.run.cluster_queue in self.tree.queues:
                    holder = _holder(wl)
                    if holder is not None:
                        fresh.setdefault(self._root_name(wl.run.cluster_queue), []).append(holder)
            for name in {*fresh, *kept, root}:
                kept[name] = (
                    (self.state.config_version, self.state.quota_changed.get(name, 0)),
                    fresh.get(name, []),
                )
            found = kept[root]
        return found[1]

    # -- the pipeline ------------------------------------------------------------------

    def run(self) -> list[Verdict]:
        """Judge the heads (parking the lanes that cannot be admitted now), then admit or
        preempt round by round; the notebook keeps what was parked, and why."""
        cursors = [c for c in self.cursors() if self._judge_heads(c)]
        # The rounds find their own misses: what the heads' judgement found on the book
        # as the log left it is not said again with its numbers of then.
        self.unplaced.clear()
        self._rounds(cursors)
        if not self.every_verdict:
            self._keep_parking()
        return self.verdicts

    def _judge_heads(self, cursor: QueueCursor) -> bool:
        """Park the cursor's lanes whose head cannot be admitted against the state as the
        log left it (nothing of this cycle's admissions yet): more usage never admits them
        later in the cycle, so they take no turn in the rounds, whether judged now or
        parked earlier under a cause that has not moved. Whether any lane is left."""
        cq = cursor.cq
        if cq.queueing_strategy == "StrictFIFO":
            head = cursor.peek()
            assert head is not None
            why, kind, until = self._judge(cursor, head)
            if why is None:
                for lane, _ in cursor.lanes():
                    self.stamps[(lane.local_queue, lane.key)] = None
                return True
            lane, at = cursor.park(head)
            self.lane_verdict(lane, at, cq.name, why, only=1)
            rest = [(lane, at + 1), *cursor.rest()]
            self._block(cursor, head, rest)
            for other, _ in rest:
                self._judged(other, kind, cq, why, until)
            return False
        parked = []
        for lane, at in cursor.lanes():
            why, kind, until = self._judge(cursor, self._workload(lane, at))
            if why is not None:
                parked.append(lane)
                self.lane_verdict(lane, at, cq.name, why)
            self._judged(lane, kind, cq, why, until)
        cursor.drop(parked)
        return cursor.peek() is not None

    def _judge(
        self, cursor: QueueCursor, wl: WorkloadEntry
    ) -> tuple[Unassignable | None, str, float]:
        """Why the workload cannot be admitted now, what can change that (parking.py) and
        when a protection that held it back ends (0: none); None when it can be admitted
        (or can preempt). Nothing is kept (a dry run of ``process``)."""
        v = self.nominate(cursor.cq, wl)
        if isinstance(v.outcome, Unassignable) and not wl.has_min_count:
            return v.outcome, QUOTA, 0.0
        self.dry, self.protection_met = True, 0.0
        try:
            done = self.process(cursor, v)
        finally:
            self.dry = False
        if isinstance(done.outcome, Unassignable):
            return done.outcome, STATE, self.protection_met
        return None, STATE, 0.0

    def _keep_parking(self) -> None:
        notes = self.state.notes
        parking = notes.parking
        for lane_id, stamp in self.stamps.items():
            parking.judged(lane_id, stamp)
        known = self.state.lanes.lanes
        gone = self.judge if self.judge is not None else [*parking.parked, *parking.unparked]
        for lane_id in list(gone):  # a lane's last member leaving touched it: it is judged
            if lane_id[1] not in known.get(lane_id[0], {}):
                parking.gone(lane_id)
        parking.seen = self.counters
        # Lanes that recorded something are judged again (what they recorded comes back
        # with its fold; if it does not, the same is recorded again).
        notes.lanes = set(self.emitted)

    def _rounds(self, cursors: list[QueueCursor]) -> None:
        while cursors:
            round_: list[tuple[QueueCursor, Verdict]] = []
            heads = []
            for cursor in cursors:
                self._drain_known(cursor)
                wl = cursor.peek()
                if wl is not None:
                    heads.append((cursor, wl))
            # Preemptors first, every one of them before anyone else: the room their
            # victims free is theirs (the cohort's other queues would take it otherwise).
            if any(wl.id in self.state.preemptors for _, wl in heads):
                heads = [(c, wl) for c, wl in heads if wl.id in self.state.preemptors]
            for cursor, wl in heads:
                round_.append((cursor, self.nominate(cursor.cq, wl)))
            if not round_:
                break
            for cursor, v in self.ordered(round_):
                done = self.process(cursor, v)
                if isinstance(done.outcome, Assignment):
                    cursor.pop(done.workload)
                    self.verdicts.append(done)
                    continue
                lane, at = cursor.park(done.workload)
                if cursor.cq.queueing_strategy != "StrictFIFO":
                    # Its lane's other members would be judged the same now.
                    self.lane_verdict(lane, at, cursor.cq.name, done.outcome)
                    continue
                self.lane_verdict(lane, at, cursor.cq.name, done.outcome, only=1)
                self._block(cursor, done.workload, [(lane, at + 1), *cursor.rest()])
            cursors = [c for c in cursors if c.peek() is not None]

    def _drain_known(self, cursor: QueueCursor) -> None:
        """Heads whose shape already got "does not fit" in this cycle get it again at
        once, with the rest of their lane: they change nothing, so taking them outside
        the round order changes no outcome."""
        cq = cursor.cq
        if cq.queueing_strategy == "StrictFIFO" or self.admission_blocked:
            return
        cache = self.no_fit.get(id(self.tree.queues[cq.name].root()))
        if not cache:
            return
        can_preempt = self.preempt_rules(cq)[0]
        while (lane := cursor.peek_lane()) is not None:
            if lane.key[0] == "workload":
                return  # its own history (preempted for flavors, partial) decides
            wl = self._workload(lane, cursor.at[id(lane)])
            hit = cache.get((cq.name, wl.shape, wl.priority if can_preempt else None))
            if hit is None:
                return
            lane, at = cursor.park(wl)
            self.lane_verdict(lane, at, cq.name, hit)

    def ordered(
        self, round_: list[tuple[QueueCursor, Verdict]]
    ) -> Iterator[tuple[QueueCursor, Verdict]]:
        """Classic: one sort. Fair sharing: a tournament per cohort tree, one winner at a
        time, shares recomputed after each (the winner's admission changes them)."""
        round_.sort(key=lambda cv: self.order_key(cv[1]))
        if not self.fair_sharing:
            yield from round_
            return
        contenders = [cv for cv in round_ if isinstance(cv[1].outcome, Assignment)]
        yield from (cv for cv in round_ if not isinstance(cv[1].outcome, Assignment))
        while contenders:
            paths = {id(cv): self._path(cv[0].cq.name) for cv in contenders}
            # Trees share the nodes: a preemptor's tree goes first, so no other tree's
            # workload takes the room its victims freed; then trees by name.
            first_root = min(
                (cv[1].workload.id not in self.state.preemptors, paths[id(cv)][0].name)
                for cv in contenders
            )[1]
            pool = [cv for cv in contenders if paths[id(cv)][0].name == first_root]
            winner = self._tournament(pool, paths, 0)
            contenders.remove(winner)
            yield winner

    def _path(self, cq: str) -> list[qt.QuotaNode]:
        path = [self.tree.queues[cq]]
        while path[-1].parent is not None:
            path.append(path[-1].parent)
        return path[::-1]

    def _tournament(
        self,
        pool: list[tuple[QueueCursor, Verdict]],
        paths: dict[int, list[qt.QuotaNode]],
        depth: int,
    ) -> tuple[QueueCursor, Verdict]:
        """Kueue's fair-sharing iterator: at each cohort, compare its children's nominees
        by (not borrowing first, the child's share after admitting the nominee, priority,
        submission)."""
        if len(pool) == 1 and len(paths[id(pool[0])]) == depth + 1:
            return pool[0]
        groups: dict[str, list[tuple[QueueCursor, Verdict]]] = {}
        children: dict[str, qt.QuotaNode] = {}
        for cv in pool:
            child = paths[id(cv)][depth + 1]
            groups.setdefault(child.name, []).append(cv)
            children[child.name] = child
        best: tuple[tuple[object, ...], tuple[QueueCursor, Verdict]] | None = None
        for name in sorted(groups):
            cv = self._tournament(groups[name], paths, depth + 1)
            outcome = cv[1].outcome
            assert isinstance(outcome, Assignment)
            wl = cv[1].workload
            key = (
                0 if wl.id in self.state.preemptors else 1,
                1 if outcome.borrow else 0,
                qt.dominant_share(children[name], outcome.frs())[0],
                -wl.priority,
                wl.order,
            )
            if best is None or key < best[0]:
                best = (key, cv)
        assert best is not None
        return best[1]

    def _block(
        self, cursor: QueueCursor, head: WorkloadEntry, rest: list[tuple[Lane, int]]
    ) -> None:
        cq = cursor.cq.name
        message = f"waiting behind {head.spec.name} in StrictFIFO ClusterQueue {cq}"
        for lane, at in rest:
            self.lane_verdict(lane, at, cq, Unassignable("BlockedByStrictFIFO", message))


def _stopped(state: QueueState, cq: ClusterQueueSpec) -> Unassignable | None:
    if cq.stop_policy == "None":
        return None
    return Unassignable(
        "ClusterQueueStopped", f"ClusterQueue {cq.name} is stopped (stopPolicy {cq.stop_policy})"
    )


def _inactive(state: QueueState, cq: ClusterQueueSpec) -> Unassignable | None:
    found = checks.inactive(state, cq)
    return None if found is None else Unassignable(*found)


def _lq_stopped(state: QueueState, local_queue: str) -> Unassignable | None:
    lq = state.local_queues.get(local_queue)
    if lq is None or lq.stop_policy == "None":
        return None
    return Unassignable(
        "LocalQueueStopped",
        f"LocalQueue {lq.name} in namespace {lq.namespace} is stopped "
        f"(stopPolicy {lq.stop_policy})",
    )


def _missing_queue(cq_name: str | None, local_queue: str) -> Unassignable:
    if cq_name is None:
        namespace, name = local_queue.split("/", 1)
        message = f"LocalQueue {name} doesn't exist in namespace {namespace}"
        return Unassignable("LocalQueueNotFound", message)
    return Unassignable("ClusterQueueNotFound", f"ClusterQueue {cq_name} doesn't exist")


def _holder(wl: WorkloadEntry) -> pre.Holder | None:
    """The workload as a preemption candidate. One admitted partially (a ``minCount``) is
    never taken below its minimum (Volcano's gang rule): on existing nodes it offers the
    pods it runs above it, elsewhere nothing."""
    if wl.run.cluster_queue is None:
        return None
    shrink = None
    usage = wl.run.usage
    if wl.has_min_count:
        surplus = _surplus(wl) if wl.run.placed else None
        if surplus is None:
            return None
        shrink, usage = surplus
    return pre.Holder(
        id=wl.id,
        cluster_queue=wl.run.cluster_queue,
        priority=wl.priority,
        order=wl.order,
        reserved_seq=wl.run.reserved_seq,
        usage=usage,
        shrink=shrink,
    )


def _surplus(wl: WorkloadEntry) -> tuple[pre.Shrink, dict[str, dict[str, int]]] | None:
    """(what taking the pods above its minimum leaves, what those pods hold), or None."""
    for ps in wl.spec.pod_sets:
        if ps.min_count is None:
            continue
        running = wl.run.pod_counts.get(ps.name, ps.count)
        extra = running - ps.min_count
        if extra <= 0:
            return None
        taken: dict[str, dict[str, int]] = {}
        for resource, flavor in wl.run.flavors.get(ps.name, {}).items():
            per_pod = 1 if resource == "pods" else ps.requests.get(resource, 0)
            if per_pod:
                taken.setdefault(flavor, {})[resource] = per_pod * extra
        left = {
            f: {r: q - taken.get(f, {}).get(r, 0) for r, q in res.items()}
            for f, res in wl.run.usage.items()
        }
        pods = tuple(ps.pod_names(running)[ps.min_count :])
        counts = {**wl.run.pod_counts, ps.name: ps.min_count}
        return pre.Shrink(pods, counts, left), taken
    return None


def to_events(state: QueueState, verdicts: list[Verdict]) -> list[NewEvent]:
    """Evict victims, reserve quota for the assigned, record reasons that changed."""
    out: list[NewEvent] = []
    for v in verdicts:
        wl = v.workload
        if isinstance(v.outcome, Assignment) and v.victims:
            out += [_taken(state, wl, v, victim) for victim in v.victims]
            waiting = (
                "Preempting",
                f"preempting {len(v.victims)} workload(s) to fit in ClusterQueue "
                f"{v.cluster_queue}: {v.outcome.message}",
            )
            out.append(
                _new(
                    state,
                    wl.id,
                    qev.WorkloadPending(
                        workload_id=wl.id,
                        reason=waiting[0],
                        message=waiting[1],
                        flavors=v.outcome.flavors,
                        placement=v.placement,
                    ),
                )
            )
        elif isinstance(v.outcome, Assignment) and v.cluster_queue is not None:
            out.append(
                _new(
                    state,
                    wl.id,
                    qev.QuotaReserved(
                        workload_id=wl.id,
                        cluster_queue=v.cluster_queue,
                        flavors=v.outcome.flavors,
                        usage=v.outcome.usage,
                        node_selectors=v.outcome.node_selectors,
                        attempt=wl.run.attempt + 1,
                        message=_reserved_message(wl, v),
                        pod_counts=v.pod_counts,
                        tolerations=placing.injected_tolerations(state, v.outcome),
                        provisioning=None
                        if v.placement is not None
                        else checks.ask_for(state, state.cluster_queues[v.cluster_queue], wl.spec),
                        placement=v.placement,
                    ),
                )
            )
        elif isinstance(v.outcome, Unassignable):
            if v.outcome.reason in REJECTIONS:
                event: Event = qev.WorkloadRejected(
                    workload_id=wl.id,
                    reason=REJECTIONS[v.outcome.reason],
                    message=v.outcome.message,
                )
                out.append(_new(state, wl.id, event))
            elif _worth_recording(wl, v.outcome):
                event = qev.WorkloadPending(
                    workload_id=wl.id, reason=v.outcome.reason, message=v.outcome.message
                )
                out.append(_new(state, wl.id, event))
    return out


def _reserved_message(wl: WorkloadEntry, v: Verdict) -> str:
    message = f"Quota reserved in ClusterQueue {v.cluster_queue}"
    if v.pod_counts:
        parts = ", ".join(
            f"{ps.name} {v.pod_counts[ps.name]} of {ps.count} pods"
            for ps in wl.spec.pod_sets
            if ps.name in v.pod_counts
        )
        message += f" (partial admission: {parts})"
    return message


def _worth_recording(wl: WorkloadEntry, outcome: Unassignable) -> bool:
    """A new reason is recorded; new numbers for the same reason are not (they are the
    visibility API's, computed on demand): what a lane's members recorded is then known
    without looking at them, and a waiting workload adds no events while it waits."""
    return wl.pending_reason is None or wl.pending_reason[0] != outcome.reason


def _taken(state: QueueState, preemptor: WorkloadEntry, v: Verdict, victim: pre.Victim) -> NewEvent:
    """A victim's eviction, or, for surplus pods, the workload shrunk to its minimum."""
    shrink = victim.holder.shrink
    if shrink is None:
        return _new(state, victim.holder.id, _eviction(state, preemptor, v, victim))
    holder = state.workloads[victim.holder.id]
    event = qev.WorkloadShrunk(
        workload_id=holder.id,
        attempt=holder.run.attempt,
        pods=shrink.pods,
        pod_counts=shrink.pod_counts,
        usage=shrink.left,
        message=(
            f"{len(shrink.pods)} pod(s) above its minimum preempted to accommodate a workload "
            f"(UID: {preemptor.id}, name: {preemptor.spec.namespace}/{preemptor.spec.name}, "
            f"priority {preemptor.priority}) due to {victim.reason}: {', '.join(shrink.pods)}"
        ),
        preemptor=preemptor.id,
        preemption_reason=victim.reason,
    )
    return _new(state, holder.id, event)


def _eviction(state: QueueState, preemptor: WorkloadEntry, v: Verdict, victim: pre.Victim) -> Event:
    holder = state.workloads[victim.holder.id]
    return qev.WorkloadEvicted(
        workload_id=victim.holder.id,
        reason="Preempted",
        message=(
            f"Preempted to accommodate a workload (UID: {preemptor.id}, "
            f"name: {preemptor.spec.namespace}/{preemptor.spec.name}, priority "
            f"{preemptor.priority}) due to {victim.reason}; preemptor path: "
            f"{v.cluster_queue}; preemptee path: {holder.run.cluster_queue} "
            f"(priority {holder.priority})"
        ),
        preemptor=preemptor.id,
        preemption_reason=victim.reason,
    )


def _new(state: QueueState, correlation: str, event: Event) -> NewEvent:
    return NewEvent(
        stream_id=qev.ADMISSION_STREAM,
        event=event,
        occurred_at=state.now,
        correlation_id=correlation,
    )
