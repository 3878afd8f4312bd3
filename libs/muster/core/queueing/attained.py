"""Attained-service priority (Tiresias' discretised 2D-LAS, NSDI'19 §3-4), per ClusterQueue.

A workload's attained service is the accelerators it held x the seconds it held them, over
its admitted attempts: the fold keeps what ended attempts attained (``WorkloadEntry.service``)
and the running attempt's part grows with the state's ``now`` (no clock). Its level is the
number of the queue's thresholds it has passed.

The level enters the queue as a *rank* inside the workload's priority: ``priority x (L + 1)
+ (L - level)`` for a queue of L thresholds. A higher priority class always ranks above a
lower one whatever the levels; within a class a lower level ranks higher. Lanes, the no-fit
cache and preemption compare ranks, so ``withinClusterQueue: LowerPriority`` lets a pending
workload preempt a running one of its class at a higher level. A workload of another queue
ranks as level 0 of its class: comparisons across queues are by priority alone, as before.

Time moves levels in two places, both replayable: a running workload crosses a threshold
(its tree's quota counter is bumped, so lanes parked on "no candidates" are judged again),
and a pending one that has waited ``starvationFactor`` x the seconds it ran goes back to
level 0 (its attained service is reset, Tiresias' STARVELIMIT). Both are kept in a heap of
due times that ``evolve`` pops as ``now`` passes them and the decider wakes for.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import TYPE_CHECKING

from muster.core.model.queues import AttainedService
from muster.core.views.accounting import devices

if TYPE_CHECKING:
    from muster.core.queueing.state import QueueState, WorkloadEntry

STARVING = -1  # heap entry kind: a pending workload's promotion (else: the attempt number)


def spec_of(state: QueueState, cluster_queue: str | None) -> AttainedService | None:
    cq = state.cluster_queues.get(cluster_queue or "")
    return cq.attained_service if cq is not None else None


def queue_spec(state: QueueState, wl: WorkloadEntry) -> AttainedService | None:
    """The attained-service spec of the queue the workload waits in (its LocalQueue's)."""
    return spec_of(state, state.cluster_queue_of_local(wl.local_queue))


def running_for(wl: WorkloadEntry, now: float) -> float:
    """Seconds its current attempt has run (0 unless admitted)."""
    at = wl.run.admitted_at
    return max(0.0, now - at) if wl.holds_quota and at is not None else 0.0


def service(wl: WorkloadEntry, now: float) -> float:
    """Its attained service now, GPU-seconds."""
    return wl.service + devices(wl.run.usage) * running_for(wl, now)


def rank_of(las: AttainedService | None, priority: int, level: int) -> int:
    if las is None:
        return priority
    top = len(las.levels)
    return priority * (top + 1) + (top - level)


def rank(state: QueueState, wl: WorkloadEntry) -> int:
    """A pending workload's place among its queue's: priority, then level (see the module)."""
    las = queue_spec(state, wl)
    if las is None:
        return wl.priority
    return rank_of(las, wl.priority, las.level(service(wl, state.now)))


def holder_rank(
    state: QueueState, las: AttainedService, wl: WorkloadEntry, same: bool, tenant: str
) -> int:
    """A running workload's rank as a preemptor of a queue with ``las`` (and of LocalQueue
    ``tenant``) sees it: its level now in the same queue, level 0 of its class in another
    or once it has been evicted ``maxPreemptions`` times (holding at least
    ``maxPreemptionsMinDevices`` accelerators), or preempted
    ``maxCrossTenantPreemptions`` times by other tenants and the preemptor is another
    tenant's (no longer taken for its level)."""
    if not same or las.spent(
        wl.evictions,
        wl.cross_tenant_evictions,
        same_tenant=tenant == wl.local_queue,
        held=devices(wl.run.usage),
    ):
        return rank_of(las, wl.priority, 0)
    return rank_of(las, wl.priority, las.level(service(wl, state.now)))


def ended_attempt(state: QueueState, wl: WorkloadEntry) -> None:
    """An attempt ends (evicted): what it attained is kept; a queue with a starvation
    guard promotes the workload after it waited that many times the seconds it ran."""
    ran = running_for(wl, state.now)
    wl.service += devices(wl.run.usage) * ran
    wl.ran += ran
    state.las_running.discard(wl.id)
    las = queue_spec(state, wl)
    if las is not None and las.starvation_factor > 0 and wl.ran > 0 and wl.service > 0:
        wait = las.starvation_factor * wl.ran
        at = state.now + (min(wait, las.starvation_limit) if las.starvation_limit else wait)
        state.las_starving[wl.id] = at
        heapq.heappush(state.las_due, (at, wl.id, STARVING))


def admitted(state: QueueState, wl: WorkloadEntry) -> None:
    """An attempt starts: its level is watched while it runs."""
    state.las_starving.pop(wl.id, None)
    las = spec_of(state, wl.run.cluster_queue)
    if las is None:
        return
    state.las_running.add(wl.id)
    wl.las_level = las.level(wl.service)
    _watch(state, las, wl)


def _watch(state: QueueState, las: AttainedService, wl: WorkloadEntry) -> None:
    """Push when the running attempt passes its next threshold (never, holding no device)."""
    per_second = devices(wl.run.usage)
    if wl.las_level >= len(las.levels) or per_second <= 0 or wl.run.admitted_at is None:
        return
    at = wl.run.admitted_at + (las.levels[wl.las_level] - wl.service) / per_second
    # Strictly later than now: a crossing that rounding put at ``now`` is not popped again
    # in the same tick.
    heapq.heappush(state.las_due, (max(at, state.now + 1e-3), wl.id, wl.run.attempt))


def gone(state: QueueState, wid: str) -> None:
    state.las_running.discard(wid)
    state.las_starving.pop(wid, None)


def next_due(state: QueueState) -> float | None:
    return state.las_due[0][0] if state.las_due else None


Hook = Callable[["QueueState", "WorkloadEntry"], None]


def tick(state: QueueState, bump: Hook, enqueue: Hook) -> None:
    """Apply every level change due by ``now``: crossings bump the tree's quota counter
    (``bump(state, wl)``), promotions re-file the workload (``enqueue(state, wl)``)."""
    due = state.las_due
    while due and due[0][0] <= state.now:
        at, wid, kind = heapq.heappop(due)
        wl = state.workloads.get(wid)
        if wl is None:
            continue
        if kind == STARVING:
            if state.las_starving.get(wid) != at or wid not in state.pending:
                continue
            del state.las_starving[wid]
            wl.service = wl.ran = 0.0
            enqueue(state, wl)
            continue
        if wid not in state.las_running or wl.run.attempt != kind:
            continue
        las = spec_of(state, wl.run.cluster_queue)
        if las is None:
            continue
        level = las.level(service(wl, state.now))
        if level > wl.las_level:
            wl.las_level = level
            bump(state, wl)
        _watch(state, las, wl)
