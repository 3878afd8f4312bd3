"""Surplus pods that wait for room (Volcano's minAvailable, peers.md §2.4): a workload
running on existing nodes below its count, admitted so or shrunk by preemption, whose
pod set says ``surplus: Wait``, gets its other pods as room appears. ``admission.grown``
adds them to the same attempt: more quota charged, a place for each new pod.

Order. Volcano orders jobs by priority, then (gang's ``jobOrderFn``) puts jobs that are not
ready before ready ones: a running gang's pending pods come after the pending gangs of
its priority or higher, before those of lower priority. So a grower takes its turn in
the admission rounds once its ClusterQueue's next live head has a lower priority than it
(or there is none); growers of one queue go by priority, then queue position. A
StrictFIFO queue whose head waits holds back its growers of no higher priority.

Surplus pods never preempt: a running gang is not starving (Volcano's ``jobStarving`` is
``Waiting + Ready < minAvailable``). They take only free quota (borrowing as admission
does) in the flavors the pod set already runs on, and free room on the nodes; as many
pods as fit (a bisection: fitting is monotone in the count).

A grower that found no room is remembered in the notebook with what it was judged
against (its cohort tree's quota changes, the room freed on the nodes, its namespace's
usage; a configuration change or an event of its own forgets it): until one of those
moves it would find none again, so it is not tried.
"""

from __future__ import annotations

from dataclasses import replace

from muster.core.model.workload import PodSet
from muster.core.placement.book import Placement
from muster.core.placement.engine import Demand, demands, place
from muster.core.placement.view import view
from muster.core.queueing import checks, placing
from muster.core.queueing.admit import charge_tenant, namespace_excess
from muster.core.queueing.flavors import FIT, Assignment, assign
from muster.core.queueing.snapshot import Snapshot
from muster.core.queueing.state import WorkloadEntry, waiting_surplus
from muster.core.queueing.verdicts import Verdict

Miss = tuple[int, int, int, int]  # config version, tree's quota changes, book freed, ns


class Growers:
    """The cycle's growers per ClusterQueue, in turn order."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        self.queues: dict[str, list[WorkloadEntry]] = {}
        if _pods_not_ready(snap):
            return  # waitForPodsReady's blockAdmission holds back growth too
        for wid in sorted(snap.state.growers):
            wl = snap.state.workloads[wid]
            cq = wl.run.cluster_queue
            if cq is not None and cq in snap.tree.queues:
                self.queues.setdefault(cq, []).append(wl)
        for queue in self.queues.values():
            queue.sort(key=lambda w: (-w.priority, w.order, w.id))

    def __bool__(self) -> bool:
        return bool(self.queues)

    def turn(self, heads: dict[str, int]) -> None:
        """Grow the workloads whose turn came: in each ClusterQueue, those of a higher
        priority than its next live head (``heads``: queue -> priority), or all."""
        for cq in sorted(self.queues):
            queue = self.queues[cq]
            head = heads.get(cq)
            while queue and (head is None or queue[0].priority > head):
                grow(self.snap, queue.pop(0))
            if not queue:
                del self.queues[cq]


def grow(snap: Snapshot, wl: WorkloadEntry) -> None:
    """Add as many of the workload's waiting pods as fit now, or remember that none do."""
    ps = waiting_surplus(wl)
    cq = snap.state.cluster_queues.get(wl.run.cluster_queue or "")
    if ps is None or cq is None or _held_back(snap, wl):
        return
    if not snap.evicted and _missed(snap, wl):
        return  # nothing it needs moved since it found no room (victims of this cycle did)
    running = wl.run.pod_counts.get(ps.name, ps.count)
    best: tuple[int, Assignment, Placement, list[Demand]] | None = None
    lo, hi = 1, ps.count - running
    while lo <= hi:
        mid = (lo + hi) // 2
        found = _fits(snap, wl, ps, running, mid)
        if found is not None:
            best, lo = (mid, *found), mid + 1
        else:
            hi = mid - 1
    if best is None:
        _remember_miss(snap, wl)
        return
    added, outcome, placement, want = best
    snap.tree.add(cq.name, outcome.usage)
    charge_tenant(snap, wl, outcome.usage, +1, _only(wl, ps, added))
    snap.book.add_pods(wl.id, placement, {p.name: p for d in want for p in d.pods})
    snap.grown.add(wl.id)
    counts = {**wl.run.pod_counts, ps.name: running + added}
    snap.verdicts.append(
        Verdict(wl, cq.name, outcome, pod_counts=counts, placement=placement, grow=True)
    )


def _pods_not_ready(snap: Snapshot) -> bool:
    """waitForPodsReady with blockAdmission while a workload's pods are not all running."""
    state, config = snap.state, snap.state.wait_for_pods_ready
    if not (state.growers and config.enable and config.block_admission):
        return False
    return any(
        state.workloads[w].holds_quota and not state.workloads[w].run.pods_ready
        for w in state.active
    )


def _held_back(snap: Snapshot, wl: WorkloadEntry) -> bool:
    """Nothing grows while admission is blocked, in a stopped or inactive queue, a
    victim of this cycle, or behind a StrictFIFO head that waits."""
    state = snap.state
    cq = state.cluster_queues[wl.run.cluster_queue or ""]
    lq = state.local_queues.get(wl.local_queue)
    return (
        snap.admission_blocked
        or wl.id in snap.evicted
        or cq.stop_policy != "None"
        or (lq is not None and lq.stop_policy != "None")
        or checks.inactive(state, cq) is not None
        or (cq.queueing_strategy == "StrictFIFO" and _strict_waits(snap, cq.name, wl.priority))
    )


def _strict_waits(snap: Snapshot, cq: str, priority: int) -> bool:
    """A pending workload of the StrictFIFO queue, of this priority or higher, that this
    cycle did not admit: the queue's head waits, and what comes after it waits too."""
    admitted = {
        v.workload.id
        for v in snap.verdicts
        if isinstance(v.outcome, Assignment) and not v.victims and not v.grow
    }
    state = snap.state
    for key, spec in state.local_queues.items():
        if spec.cluster_queue != cq:
            continue
        for lane in state.lanes.of(key):
            if lane.priority >= priority and any(w not in admitted for _, w in lane.members):
                return True
    return False


def _fits(
    snap: Snapshot, wl: WorkloadEntry, ps: PodSet, running: int, added: int
) -> tuple[Assignment, Placement, list[Demand]] | None:
    """The quota and the places ``added`` more pods would take now (and the pods), or
    None."""
    cq = snap.state.cluster_queues[wl.run.cluster_queue or ""]
    flavors = wl.run.flavors.get(ps.name, {})
    spec = replace(wl.spec, pod_sets=(replace(ps, count=added, min_count=None, surplus="Drop"),))
    outcome = assign(cq, snap.state.flavors, spec, snap.tree, False, pinned={ps.name: flavors})
    if not isinstance(outcome, Assignment) or outcome.mode != FIT:
        return None
    if outcome.flavors.get(ps.name) != flavors:
        return None  # its flavors changed since: the new pods would not be like the others
    if namespace_excess(snap, wl, _only(wl, ps, added)) is not None:
        return None
    want = _want(snap, wl, ps, running, added, outcome)
    got = place(
        view(snap.book), wl.id, spec, want, wl.spec.placement or cq.placement, explain=False
    )
    return (outcome, got, want) if isinstance(got, Placement) else None


def _want(
    snap: Snapshot, wl: WorkloadEntry, ps: PodSet, running: int, added: int, a: Assignment
) -> list[Demand]:
    """The added pods as placement sees them: the pod set's next indexes (its running
    pods are its first ones: preemption takes the highest)."""
    spec = replace(wl.spec, pod_sets=(replace(ps, count=added),))
    want = demands(spec, None, a.node_selectors, placing.injected_tolerations(snap.state, a))
    return [
        replace(
            d,
            pods=tuple(replace(p, name=f"{ps.name}-{running + i}") for i, p in enumerate(d.pods)),
        )
        for d in want
    ]


def _only(wl: WorkloadEntry, ps: PodSet, added: int) -> dict[str, int]:
    """Pod counts that name just the added pods (what a namespace quota counts of them)."""
    return {**{p.name: 0 for p in wl.spec.pod_sets}, ps.name: added}


def _stamp(snap: Snapshot, wl: WorkloadEntry) -> Miss:
    state = snap.state
    root = snap.root_name(wl.run.cluster_queue or "")
    return (
        state.config_version,
        state.quota_changed.get(root, 0),
        state.book.freed,
        state.ns_changed.get(wl.spec.namespace, 0),
    )


def _missed(snap: Snapshot, wl: WorkloadEntry) -> bool:
    return snap.state.notes.grow_misses.get(wl.id) == _stamp(snap, wl)


def _remember_miss(snap: Snapshot, wl: WorkloadEntry) -> None:
    """Only a miss found on the state as the log left it (nothing admitted, placed or
    evicted in this cycle before it) is kept: the stamp says what that state was."""
    if snap.every_verdict or snap.book.changed() or snap.evicted:
        return
    if any(isinstance(v.outcome, Assignment) for v in snap.verdicts):
        return
    snap.state.notes.grow_misses[wl.id] = _stamp(snap, wl)
