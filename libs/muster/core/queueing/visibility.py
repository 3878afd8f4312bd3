"""Pending-workloads visibility, as Kueue's on-demand API: position and current reason.

Positions follow the queue's admission order (workloads that preempted first,
then priority, then submission). The reason is computed now, by a dry run of the
admission cycle over the current state, so its numbers are current even when the
log only records a reason when it changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from muster.core.model.times import rfc3339
from muster.core.queueing.cycle import decide
from muster.core.queueing.flavors import Assignment
from muster.core.queueing.state import QueueState, WorkloadEntry
from muster.core.queueing.verdicts import Verdict

MAX_LIMIT = 100_000  # Kueue caps the on-demand API at the same number


@dataclass(frozen=True, slots=True)
class PendingItem:
    workload: WorkloadEntry
    cluster_queue: str | None
    position_in_cluster_queue: int
    position_in_local_queue: int
    reason: str
    message: str
    verdict: Verdict | None = None  # the dry run's, for explain: flavors, shortfall, victims

    def to_json(self) -> dict[str, Any]:
        wl = self.workload
        return {
            "id": wl.id,
            "name": wl.spec.name,
            "namespace": wl.spec.namespace,
            "localQueueName": wl.spec.queue_name,
            "clusterQueue": self.cluster_queue,
            "priority": wl.priority,
            "positionInClusterQueue": self.position_in_cluster_queue,
            "positionInLocalQueue": self.position_in_local_queue,
            "reason": self.reason,
            "message": self.message,
            "queuedAt": rfc3339(wl.queued_at),
            "evictions": wl.evictions,
        }


def pending(state: QueueState) -> list[PendingItem]:
    """Every pending workload with its positions and its reason right now."""
    verdicts = {v.workload.id: v for v in decide(state, every_verdict=True)}
    by_cq: dict[str | None, list[WorkloadEntry]] = {}
    for wid in state.pending:
        wl = state.workloads[wid]
        by_cq.setdefault(state.cluster_queue_of(wl.spec), []).append(wl)
    items: list[PendingItem] = []
    for cq in sorted(by_cq, key=lambda c: c or ""):
        entries = sorted(by_cq[cq], key=lambda wl: _rank(state, wl))
        in_lq: dict[str, int] = {}
        for position, wl in enumerate(entries):
            lq_position = in_lq.get(wl.local_queue, 0)
            in_lq[wl.local_queue] = lq_position + 1
            verdict = verdicts.get(wl.id)
            reason, message = _reason(verdict)
            items.append(PendingItem(wl, cq, position, lq_position, reason, message, verdict))
    return items


def pending_one(state: QueueState, wid: str) -> PendingItem | None:
    """The item ``pending`` gives ``wid`` (None if it is not pending), without the
    others': its verdict alone from the dry run, its positions by counting who goes
    before it (what ``explain`` asks, over a backlog of tens of thousands)."""
    if wid not in state.pending:
        return None
    wl = state.workloads[wid]
    cq = state.cluster_queue_of(wl.spec)
    rank = _rank(state, wl)
    queue_of: dict[str, str | None] = {}  # local queue -> its ClusterQueue, looked up once
    in_cq = in_lq = 0
    after = False  # ``pending``'s sort is stable: an equal rank goes first if seen first
    for other in state.pending:
        if other == wid:
            after = True
            continue
        o = state.workloads[other]
        lq = f"{o.spec.namespace}/{o.spec.queue_name}"
        if lq not in queue_of:
            queue_of[lq] = state.cluster_queue_of_local(lq)
        if queue_of[lq] != cq:
            continue
        r = _rank(state, o)
        if r < rank or (r == rank and not after):
            in_cq += 1
            in_lq += o.local_queue == wl.local_queue
    verdict = next(
        (v for v in reversed(decide(state, every_verdict=True, subject=wid))
         if v.workload.id == wid),
        None,
    )  # fmt: skip
    reason, message = _reason(verdict)
    return PendingItem(wl, cq, in_cq, in_lq, reason, message, verdict)


def _rank(state: QueueState, wl: WorkloadEntry) -> tuple[int, int, int]:
    """Admission order in a ClusterQueue: workloads that preempted, priority, submission."""
    return (0 if wl.id in state.preemptors else 1, -wl.priority, wl.order)


def _reason(v: Verdict | None) -> tuple[str, str]:
    if v is None:
        return "Pending", "not yet considered"
    if isinstance(v.outcome, Assignment):
        if v.victims:
            return "Preempting", f"preempting {len(v.victims)} workload(s): {v.outcome.message}"
        return "Admissible", f"fits in ClusterQueue {v.cluster_queue}; admitted in the next cycle"
    return v.outcome.reason, v.outcome.message


def page(
    items: list[PendingItem],
    *,
    cluster_queue: str | None = None,
    local_queue: tuple[str, str] | None = None,
    limit: int = 1000,
    offset: int = 0,
) -> list[dict[str, Any]]:
    """One page of a ClusterQueue's or a LocalQueue's pending workloads, in position order."""
    chosen = items
    if cluster_queue is not None:
        chosen = [i for i in chosen if i.cluster_queue == cluster_queue]
    if local_queue is not None:
        ns, name = local_queue
        chosen = [
            i
            for i in chosen
            if i.workload.spec.namespace == ns and i.workload.spec.queue_name == name
        ]
        chosen.sort(key=lambda i: i.position_in_local_queue)
    limit = max(0, min(limit, MAX_LIMIT))
    return [i.to_json() for i in chosen[offset : offset + limit]]
