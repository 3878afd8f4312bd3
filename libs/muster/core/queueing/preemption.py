"""Choosing preemption victims: Kueue's classic and fair-sharing algorithms (reference §1.6).

Candidates are admitted workloads that use a pair the preemptor is short of: in
its own ClusterQueue those the ``withinClusterQueue`` policy allows, elsewhere in
its cohort tree those of queues that are borrowing, as ``reclaimWithinCohort``
(or, with fair sharing, the share strategies) allow. They are taken in order
(other queues first, lowest priority, most recently admitted, id) until the
preemptor fits, then every victim but the last is offered back ("fill-back") and
kept if the preemptor still fits: no victim in the result could be spared.

"Fits" is quota and, for a preemptor placed on existing nodes, placement: a set whose
eviction frees the quota but leaves the preemptor nowhere to go (two 1-GPU victims on
two nodes for a 2-GPU pod) is not issued. Once the quota is there but the place is not,
the candidates on the nodes the chosen victims free are taken next, so the room
gathers where the preemptor can use it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from muster.core.model.queues import ClusterQueueSpec, PreemptionPolicy
from muster.core.queueing import quota as qt
from muster.core.queueing.flavors import Assignment


@dataclass(frozen=True, slots=True)
class Shrink:
    """Surplus pods a workload running above its minimum can give without stopping."""

    pods: tuple[str, ...]
    pod_counts: dict[str, int]  # pod set -> count once they are gone
    left: dict[str, dict[str, int]]  # flavor -> resource -> what it holds then


@dataclass(frozen=True, slots=True, eq=False)
class Holder:
    """An admitted workload as preemption sees it (compared by identity: one per cycle).
    With ``shrink``, only its surplus pods: ``usage`` is theirs."""

    id: str
    cluster_queue: str
    priority: int
    order: int  # queue position (submission order)
    reserved_seq: int  # when it got quota: later = more recently admitted
    usage: dict[str, dict[str, int]]
    shrink: Shrink | None = None
    _frs: frozenset[qt.FR] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        pairs = frozenset((f, r) for f, res in self.usage.items() for r, q in res.items() if q)
        object.__setattr__(self, "_frs", pairs)

    def frs(self) -> frozenset[qt.FR]:
        return self._frs

    def ranked(self, priority: int) -> Holder:
        """The same holder at another priority (a rank, attained.py), its pairs not worked
        out again: a queue under attained service ranks every holder afresh each cycle."""
        out = object.__new__(Holder)
        for name in Holder.__slots__:
            object.__setattr__(out, name, getattr(self, name))
        object.__setattr__(out, "priority", priority)
        return out


class _Sim:
    """Evictions tried on the tree in place, undone before returning: no copies."""

    def __init__(self, tree: qt.QuotaTree) -> None:
        self.tree = tree
        self.removed: list[Holder] = []

    def remove(self, h: Holder) -> None:
        self.tree.add(h.cluster_queue, h.usage, -1)
        self.removed.append(h)

    def put_back(self, h: Holder) -> None:
        self.tree.add(h.cluster_queue, h.usage, +1)
        self.removed.remove(h)

    def undo(self) -> None:
        for h in reversed(self.removed):
            self.tree.add(h.cluster_queue, h.usage, +1)
        self.removed.clear()


@dataclass(frozen=True, slots=True)
class Victim:
    holder: Holder
    reason: str  # InClusterQueue | InCohortReclamation | InCohortReclaimWhileBorrowing | ...


@dataclass(frozen=True, slots=True)
class Preemptor:
    id: str
    cluster_queue: ClusterQueueSpec
    priority: int
    order: int
    assignment: Assignment


def within_allowed(policy: str, preemptor: Preemptor, h: Holder) -> bool:
    if policy == "LowerPriority":
        return h.priority < preemptor.priority
    if policy == "LowerOrNewerEqualPriority":
        return h.priority < preemptor.priority or (
            h.priority == preemptor.priority and preemptor.order < h.order
        )
    return False


def reclaim_allowed(policy: str, preemptor: Preemptor, h: Holder) -> bool:
    if policy == "Any":
        return True
    if policy == "LowerPriority":
        return h.priority < preemptor.priority
    return False


def possible(policy: PreemptionPolicy, in_cohort: bool) -> bool:
    """Whether this queue may preempt at all: decides if a shortfall is worth a search."""
    if policy.within_cluster_queue != "Never":
        return True
    return in_cohort and (
        policy.reclaim_within_cohort != "Never" or policy.borrow_within_cohort.policy != "Never"
    )


Placeable = Callable[[Sequence[Holder]], bool]  # the preemptor has a place once these go
NodesOf = Callable[[Holder], frozenset[str]]  # the nodes a holder's pods are on


def _anywhere(gone: Sequence[Holder]) -> bool:
    return True


def _nowhere(h: Holder) -> frozenset[str]:
    return frozenset()


def victims(
    tree: qt.QuotaTree,
    preemptor: Preemptor,
    holders: Sequence[Holder],
    fair_sharing: tuple[str, ...] | None = None,
    *,
    placeable: Placeable = _anywhere,
    nodes_of: NodesOf = _nowhere,
    monotone: bool = False,
) -> list[Victim] | None:
    """The minimal set to evict so the preemptor fits, or None when no set does.
    ``monotone``: ``placeable`` only grows as more holders go (see ``_room_with_all``)."""
    cq = preemptor.cluster_queue
    node = tree.queues[cq.name]
    need = preemptor.assignment.frs()
    contested = preemptor.assignment.contested
    root = node.root()
    # Only a queue borrowing on a contested pair can give quota back, and evictions only
    # lower borrowing: queues not borrowing now are never candidates in this search.
    lending: dict[str, bool] = {}
    candidates: list[tuple[Holder, bool]] = []  # (holder, same queue)
    for h in holders:
        if not (h.frs() & contested):
            continue
        if h.cluster_queue == cq.name:
            if within_allowed(cq.preemption.within_cluster_queue, preemptor, h):
                candidates.append((h, True))
            continue
        if root is node or h.cluster_queue not in tree.queues:
            continue
        borrowing = lending.get(h.cluster_queue)
        if borrowing is None:
            other = tree.queues[h.cluster_queue]
            borrowing = other.root() is root and any(other.borrowing(fr) > 0 for fr in contested)
            lending[h.cluster_queue] = borrowing
        if borrowing:
            candidates.append((h, False))
    if not candidates:
        return None
    if not _room_with_all(tree, preemptor, candidates, placeable if monotone else _anywhere):
        return None
    # Surplus pods before whole workloads of the same priority: the workload runs on.
    candidates.sort(
        key=lambda c: (c[1], c[0].priority, c[0].shrink is None, -c[0].reserved_seq, c[0].id)
    )
    # A workload that fits its queue's own quota first tries to reclaim without borrowing;
    # with only its own queue's workloads to take, it borrows what the cohort lends (Kueue's
    # NoCandidateFromOtherQueues), else it would evict more than it needs.
    within_nominal = all(q <= node.subtree.get(fr, 0) for fr, q in need.items() if fr in contested)
    if fair_sharing is not None:
        return _fair(tree, preemptor, candidates, fair_sharing, placeable, nodes_of)
    from_others = any(not same for _, same in candidates)
    attempts = [False, True] if within_nominal and from_others else [True]
    for allow_borrowing in attempts:
        for order in _orders(candidates, nodes_of):
            chosen = _classic(tree, preemptor, order, allow_borrowing, placeable, nodes_of)
            if chosen is not None:
                return chosen
    return None


def _room_with_all(
    tree: qt.QuotaTree,
    preemptor: Preemptor,
    candidates: list[tuple[Holder, bool]],
    placeable: Placeable,
) -> bool:
    """Whether evicting every candidate at once would make room: if not, no subset does
    and the search (up to 1 + MAX_NODE_FIRST orders, a placement trial per victim tried)
    is not worth running. Exact: quota only grows as holders go (fits is monotone, with
    borrowing allowed the weakest test any order makes), and the caller passes a
    ``placeable`` only where placement is too (else ``_anywhere``). A gang that has no
    place however much lower-ranked work goes is the common case on a crowded cluster:
    it asked again after every change of the book (bench/README.md, wip-vm)."""
    sim = _Sim(tree)
    try:
        for h, _ in candidates:
            sim.remove(h)
        return fits(tree, preemptor, True) and placeable(sim.removed)
    finally:
        sim.undo()


MAX_NODE_FIRST = 16  # nodes tried first in turn, when the policy's order places nothing


def _orders(
    candidates: list[tuple[Holder, bool]], nodes_of: NodesOf
) -> Iterator[list[tuple[Holder, bool]]]:
    """The policy's order, then, for each node its candidates are on (in that order, at
    most MAX_NODE_FIRST), the same order with that node's candidates first: reclaiming
    stops where the lender is back at its quota, so which victims go first decides
    whether the room they free is in one place."""
    yield candidates
    seen: list[str] = []
    for h, _ in candidates:
        for node in sorted(nodes_of(h)):
            if node not in seen:
                seen.append(node)
    for node in seen[:MAX_NODE_FIRST]:
        yield sorted(candidates, key=lambda c: node not in nodes_of(c[0]))


def fits(tree: qt.QuotaTree, preemptor: Preemptor, allow_borrowing: bool) -> bool:
    node = tree.queues[preemptor.cluster_queue.name]
    for fr, q in preemptor.assignment.frs().items():
        if q > qt.available(node, fr):
            return False
        if not allow_borrowing and node.usage.get(fr, 0) + q > node.subtree.get(fr, 0):
            return False
    return True


def _classic(
    tree: qt.QuotaTree,
    preemptor: Preemptor,
    candidates: list[tuple[Holder, bool]],
    allow_borrowing: bool,
    placeable: Placeable,
    nodes_of: NodesOf,
) -> list[Victim] | None:
    sim = _Sim(tree)
    chosen: list[Victim] = []

    def ok() -> bool:
        return fits(tree, preemptor, allow_borrowing) and placeable(sim.removed)

    try:
        return _classic_take(
            tree, sim, preemptor, list(candidates), allow_borrowing, chosen, ok, nodes_of
        )
    finally:
        sim.undo()


def _classic_take(
    tree: qt.QuotaTree,
    sim: _Sim,
    preemptor: Preemptor,
    candidates: list[tuple[Holder, bool]],
    allow_borrowing: bool,
    chosen: list[Victim],
    ok: Callable[[], bool],
    nodes_of: NodesOf,
) -> list[Victim] | None:
    policy = preemptor.cluster_queue.preemption
    contested = preemptor.assignment.contested
    # Whether the preemptor's queue still borrows once admitted: then, beyond reclaiming,
    # only what borrowWithinCohort allows may go. Other queues' candidates come first
    # (see the sort), so its own usage is what the tree holds now.
    node = tree.queues[preemptor.cluster_queue.name]
    borrows_anyway = any(
        node.usage.get(fr, 0) + q > node.subtree.get(fr, 0)
        for fr, q in preemptor.assignment.frs().items()
    )

    while candidates:
        h, same = candidates.pop(0)
        if same:
            reason = "InClusterQueue"
        else:
            # Only a queue still borrowing on a contested pair gives quota back.
            other = tree.queues[h.cluster_queue]
            if not any(other.borrowing(fr) > 0 for fr in contested & h.frs()):
                continue
            if allow_borrowing:
                bwc = policy.borrow_within_cohort
                threshold = bwc.max_priority_threshold
                if bwc.policy != "LowerPriority" or h.priority >= preemptor.priority:
                    if not reclaim_allowed(policy.reclaim_within_cohort, preemptor, h):
                        continue
                    if borrows_anyway:
                        continue
                    reason = "InCohortReclamation"
                elif threshold is not None and h.priority > threshold:
                    continue
                else:
                    reason = "InCohortReclaimWhileBorrowing"
            else:
                if not reclaim_allowed(policy.reclaim_within_cohort, preemptor, h):
                    continue
                reason = "InCohortReclamation"
        sim.remove(h)
        chosen.append(Victim(h, reason))
        if ok():
            return _fill_back(sim, chosen, ok)
        if fits(tree, preemptor, allow_borrowing):
            # The quota is there, the place is not: next, the candidates on the nodes
            # the chosen ones free (a stable sort keeps the policy's order within each).
            near = frozenset().union(*(nodes_of(v.holder) for v in chosen))
            candidates.sort(key=lambda c: not (nodes_of(c[0]) & near))
    return None


def _fill_back(sim: _Sim, chosen: list[Victim], ok: Callable[[], bool]) -> list[Victim]:
    for v in reversed(chosen[:-1]):
        sim.put_back(v.holder)
        if ok():
            chosen.remove(v)
        else:
            sim.remove(v.holder)
    return chosen


def _by_queue(holders: Iterable[Holder]) -> dict[str, list[Holder]]:
    """Candidates per ClusterQueue, each list in the order that queue gives them: lowest
    priority, most recently admitted, id (last first, to pop)."""
    out: dict[str, list[Holder]] = {}
    for h in holders:
        out.setdefault(h.cluster_queue, []).append(h)
    for queue in out.values():
        queue.sort(
            key=lambda h: (h.priority, h.shrink is None, -h.reserved_seq, h.id), reverse=True
        )
    return out


def _next_fair(
    tree: qt.QuotaTree, remaining: dict[str, list[Holder]], shares: dict[str, float]
) -> Holder:
    """The next candidate: the queue with the highest share gives first (its share is the
    same for all its candidates, so one per queue is compared, not every candidate).
    ``shares``: each queue's share, kept until one of its candidates is taken."""
    for cq in remaining:
        if cq not in shares:
            shares[cq] = qt.dominant_share(tree.queues[cq])[0]
    best = min(
        remaining,
        key=lambda cq: (
            -shares[cq],
            remaining[cq][-1].priority,
            remaining[cq][-1].shrink is None,
            -remaining[cq][-1].reserved_seq,
            remaining[cq][-1].id,
        ),
    )
    h = remaining[best].pop()
    if not remaining[best]:
        del remaining[best]
    return h


def _fair(
    tree: qt.QuotaTree,
    preemptor: Preemptor,
    candidates: list[tuple[Holder, bool]],
    strategies: tuple[str, ...],
    placeable: Placeable,
    nodes_of: NodesOf,
) -> list[Victim] | None:
    """Fair-sharing preemption: take from the queue with the highest share while it stays fair."""
    sim = _Sim(tree)
    try:
        return _fair_take(tree, sim, preemptor, candidates, strategies, placeable, nodes_of)
    finally:
        sim.undo()


def _fair_take(
    tree: qt.QuotaTree,
    sim: _Sim,
    preemptor: Preemptor,
    candidates: list[tuple[Holder, bool]],
    strategies: tuple[str, ...],
    placeable: Placeable,
    nodes_of: NodesOf,
) -> list[Victim] | None:
    cq = preemptor.cluster_queue
    policy = cq.preemption
    need = preemptor.assignment.frs()
    node = tree.queues[cq.name]
    chosen: list[Victim] = []

    def ok() -> bool:
        return fits(tree, preemptor, True) and placeable(sim.removed)

    within_nominal = all(
        node.usage.get(fr, 0) + q <= node.subtree.get(fr, 0)
        for fr, q in need.items()
        if fr in preemptor.assignment.contested
    )
    own = [h for h, same in candidates if same]
    for h in own:
        sim.remove(h)
        chosen.append(Victim(h, "InClusterQueue"))
        if ok():
            return _fill_back(sim, chosen, ok)
    others = [h for h, same in candidates if not same]
    if policy.reclaim_within_cohort == "Never":
        others = []
    # Queues that gave a victim by LessThanOrEqualToFinalShare: that victim is fair only if
    # the queue's share stays at least the preemptor's to the end, so a later strategy may
    # not take it lower. Without this, a LessThanInitialShare victim taken after it left the
    # queue below the preemptor's share, and the two queues preempted each other forever
    # (tests/property/cases/reclaim_livelock.json; Kueue #14543 is the same loop).
    held_at_final: set[str] = set()
    # The preemptor's own share does not move while others' workloads are taken.
    mine = qt.dominant_share(node, need)[0]
    shares: dict[str, float] = {}  # queue -> its share now (dropped when it gives one)
    for strategy in strategies:
        taken = {v.holder.id for v in chosen}
        remaining = _by_queue(h for h in others if h.id not in taken)
        while remaining:
            h = _next_fair(tree, remaining, shares)
            target = tree.queues[h.cluster_queue]
            if not any(target.borrowing(fr) > 0 for fr in h.frs()):
                continue
            if not reclaim_allowed(policy.reclaim_within_cohort, preemptor, h):
                continue
            if within_nominal:
                reason = "InCohortReclamation"
            else:
                before = shares[h.cluster_queue]
                tree.add(h.cluster_queue, h.usage, -1)
                after = qt.dominant_share(target)[0]
                tree.add(h.cluster_queue, h.usage, +1)
                final_share = strategy == "LessThanOrEqualToFinalShare"
                if (final_share or h.cluster_queue in held_at_final) and not mine <= after:
                    continue
                if strategy == "LessThanInitialShare" and not mine < before:
                    continue
                if final_share:
                    held_at_final.add(h.cluster_queue)
                reason = "InCohortFairSharing"
            sim.remove(h)
            shares.pop(h.cluster_queue, None)
            chosen.append(Victim(h, reason))
            if ok():
                return _fill_back(sim, chosen, ok)
            if fits(tree, preemptor, True):
                _gather(remaining, chosen, nodes_of)
    return None


def _gather(remaining: dict[str, list[Holder]], chosen: list[Victim], nodes_of: NodesOf) -> None:
    """The quota is there, the place is not: each queue gives its candidates on the nodes
    the chosen ones free first (a stable sort keeps the queue's order within each)."""
    near = frozenset().union(*(nodes_of(v.holder) for v in chosen))
    for queue in remaining.values():
        queue.sort(key=lambda h: bool(nodes_of(h) & near))  # popped from the end
